//! kill -9 under load: every acknowledged trace survives, a torn line is
//! repaired, the server starts again.

use crate::common;

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use engram_proto::pb;
use tokio::sync::watch;

const CLIENTS: usize = 8;
const AGENTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_trace_survives_sigkill_and_a_torn_line() {
    let data = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(data.path(), &[]);
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let (count_tx, mut count_rx) = watch::channel(0usize);
    let count_tx = Arc::new(count_tx);

    let mut clients = vec![];
    for c in 0..CLIENTS {
        let mut client = daemon.client().await;
        let acked = Arc::clone(&acked);
        let count_tx = Arc::clone(&count_tx);
        clients.push(tokio::spawn(async move {
            // Two clients per agent: appends of one agent share group commits.
            let agent = format!("crash-{}", c % AGENTS);
            for i in 0.. {
                let req = ingest_req(
                    &agent,
                    vec![pb::TraceEvent {
                        event_id: format!("c{c}-{i}"),
                        ..user(&format!("client {c} message {i}"))
                    }],
                );
                match client.ingest(req).await {
                    Ok(resp) => {
                        let id = resp.into_inner().traces[0].id.clone();
                        acked.lock().unwrap().push((agent.clone(), id));
                        count_tx.send_modify(|n| *n += 1);
                    }
                    Err(_) => break, // the server is gone
                }
            }
        }));
    }
    // Kill once a good number of traces are acknowledged, while the clients
    // are still sending.
    count_rx.wait_for(|n| *n >= 400).await.unwrap();
    daemon.kill9();
    for c in clients {
        c.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 400);

    // A crash mid-append leaves half a line; add one to be sure.
    let torn = data.path().join("agents/crash-0/raw_traces.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&torn)
        .unwrap();
    f.write_all(b"{\"id\":\"half-writ").unwrap();
    drop(f);

    let daemon = Daemon::spawn(data.path(), &[]);
    let mut client = daemon.client().await;
    for a in 0..AGENTS {
        let agent = format!("crash-{a}");
        let stored: HashSet<String> = all_traces(&mut client, &agent)
            .await
            .into_iter()
            .map(|t| t.id)
            .collect();
        let missing: Vec<_> = acked
            .iter()
            .filter(|(ag, id)| *ag == agent && !stored.contains(id))
            .collect();
        assert!(
            missing.is_empty(),
            "{agent} lost acknowledged traces: {missing:?}"
        );
    }
    // The torn line was cut off and kept aside; new writes append cleanly.
    let quarantine =
        std::fs::read_to_string(torn.with_file_name("raw_traces.jsonl.quarantine")).unwrap();
    assert!(quarantine.contains("half-writ"));
    client
        .ingest(ingest_req("crash-0", vec![user("after restart")]))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&torn).unwrap();
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
}

// Multi-threaded: the client's connection task must keep answering the
// server's GOAWAY/PING while this thread blocks in `wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_flushes_and_exits_cleanly() {
    let data = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(data.path(), &[]);
    let mut client = daemon.client().await;
    client
        .ingest(ingest_req("term", vec![user("before shutdown")]))
        .await
        .unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &daemon.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = daemon.child.wait().unwrap();
    assert!(exit.success(), "engramd exited with {exit:?}");
    // The final checkpoint left only the fresh, empty log segment.
    let segments: Vec<_> = std::fs::read_dir(data.path().join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(segments.len(), 1, "{segments:?}");
    assert_eq!(std::fs::metadata(&segments[0]).unwrap().len(), 0);
    let daemon = Daemon::spawn(data.path(), &[]);
    let mut client = daemon.client().await;
    assert_eq!(
        all_traces(&mut client, "term").await[0].content,
        "before shutdown"
    );
}
