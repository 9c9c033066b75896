//! The short versions of `make chaos`, against the real binary: kill -9
//! cycles under writers and compactions, and a seeded fuzz of every RPC.

use std::path::PathBuf;
use std::time::Duration;

use engram_chaos::{chaos, fuzz};

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_engramd"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_cycles_lose_duplicate_and_misplace_nothing() {
    let report = chaos::run(&chaos::ChaosConfig {
        binary: binary(),
        cycles: 4,
        writers: 6,
        agents: 3,
        run_ms: (300, 900),
        llm_delay: Duration::from_millis(150),
        seed: 7,
        strategy: String::new(),
    })
    .await
    .unwrap();
    println!("{report}");
    assert!(report.clean(), "{report}");
    assert!(report.events_acked > 100, "{report}");
    assert!(report.compactions > 0, "compactions ran: {report}");
}

/// The same with every agent trimming (no summary: turns archived whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_cycles_with_trim_lose_duplicate_and_misplace_nothing() {
    let report = chaos::run(&chaos::ChaosConfig {
        binary: binary(),
        cycles: 3,
        writers: 6,
        agents: 3,
        run_ms: (300, 900),
        llm_delay: Duration::from_millis(150),
        seed: 8,
        strategy: "trim".into(),
    })
    .await
    .unwrap();
    println!("{report}");
    assert!(report.clean(), "{report}");
    assert!(report.events_acked > 100, "{report}");
    assert_eq!(report.compactions, 0, "nothing summarized: {report}");
    assert!(report.trims > 0, "trims ran: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_fuzz_of_every_rpc_finds_no_crash_panic_hang_or_internal() {
    let report = fuzz::run(&fuzz::FuzzConfig {
        binary: binary(),
        seed: 11,
        cases: 1500,
        concurrency: 4,
        call_timeout: Duration::from_secs(60),
        verbose: false,
        env: vec![],
    })
    .await
    .unwrap();
    println!("{report}");
    assert!(report.clean(), "{report}");
    assert!(
        report.codes.get("Ok").copied().unwrap_or(0) > 200,
        "deep enough: {report}"
    );
    // The storm met its agents again and again (issue 20 item 7: reads
    // that met a delete answered UNAVAILABLE).
    assert!(report.storm.deletes > 50, "deletes enough: {report}");
}
