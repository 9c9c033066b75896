//! `engram-bench hostile`: what one hostile message costs.
//!
//! - Token counting of 10k, 100k and 1M characters of `A`, of random base64
//!   and of prose: time and nanoseconds per character (linear means the
//!   same per-character cost at every size).
//! - Ingest latency of one small event on its own agent, alone and while
//!   other clients keep preparing prompts with a fresh 1M-character user
//!   message each (counted and rendered on every call), against the real
//!   `engramd`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use engram_core::tokens::{Encoding, count_text};
use engram_proto::pb;

use crate::ingest::{histogram, us};
use crate::server::{Server, connect};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the server's data (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    /// Small Ingest calls measured per phase.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Clients preparing 1M-character prompts meanwhile.
    #[arg(long, default_value_t = 2)]
    hostile: usize,
    /// The server binary (build it with `cargo build --release -p engram-server`).
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
}

fn noise(len: usize) -> String {
    engram_chaos::hostile::base64_noise(0x2545_f491_4f6c_dd1d, len)
}

fn prose(len: usize) -> String {
    let words = "the agent asked for the weather in Oslo and the tool answered with rain ";
    words.repeat(len / words.len() + 1)[..len].to_owned()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    println!("token counting (cl100k), best of 3");
    println!("  input         chars      ms   ns/char   tokens");
    for (name, make) in [
        ("A run", (|n| "A".repeat(n)) as fn(usize) -> String),
        ("base64", noise),
        ("prose", prose),
    ] {
        for n in [10_000, 100_000, 1_000_000] {
            let text = make(n);
            let mut best = Duration::MAX;
            let mut tokens = 0;
            for _ in 0..3 {
                let t = Instant::now();
                tokens = count_text(Encoding::Cl100k, &text);
                best = best.min(t.elapsed());
            }
            println!(
                "  {name:<8} {n:>10} {:>7.1} {:>9.1} {tokens:>8}",
                best.as_secs_f64() * 1e3,
                best.as_nanos() as f64 / n as f64
            );
        }
    }
    let data = args.data_dir.join("hostile");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(ingest_under_load(&args, &data))?;
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}

async fn ingest_under_load(args: &Args, data: &std::path::Path) -> anyhow::Result<()> {
    let server = Server::start(&args.engramd, data)?;
    let mut client = connect(&server.addr).await?;
    println!(
        "\nsmall Ingest (one event, its own agent), {} calls per phase",
        args.calls
    );
    println!(
        "  phase                                  p50 us    p99 us    max us   1M prompts done"
    );
    for hostile in [0, args.hostile] {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let mut load = vec![];
        for h in 0..hostile {
            let (mut c, stop, done) = (connect(&server.addr).await?, stop.clone(), done.clone());
            let message = noise(1_000_000);
            load.push(tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    // A fresh agent each time: nothing of it is cached.
                    let request = pb::PrepareRequestRequest {
                        agent_id: format!("blob-{h}-{i}"),
                        user_input: Some(pb::TraceEvent {
                            content: message.clone(),
                            ..Default::default()
                        }),
                        model: "gpt-4o".into(),
                        render_format: pb::RenderFormat::OpenaiChat.into(),
                        ..Default::default()
                    };
                    if c.prepare_request(request).await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            }));
        }
        if hostile > 0 {
            // Measure only once the big prompts are under way.
            while done.load(Ordering::Relaxed) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let mut h = histogram();
        for i in 0..args.calls {
            let request = pb::IngestRequest {
                agent_id: format!("small-{hostile}"),
                events: vec![pb::TraceEvent {
                    trace_type: pb::TraceType::User.into(),
                    content: format!("a small question {i}"),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let t = Instant::now();
            client.ingest(request).await?;
            h.record(t.elapsed().as_nanos() as u64)?;
        }
        stop.store(true, Ordering::Relaxed);
        for task in load {
            task.await?;
        }
        let phase = if hostile == 0 {
            "alone".to_owned()
        } else {
            format!("while {hostile} clients prepare 1M-char prompts")
        };
        println!(
            "  {phase:<38} {:>7.0} {:>9.0} {:>9.0}   {:>6}",
            us(h.value_at_quantile(0.5)),
            us(h.value_at_quantile(0.99)),
            us(h.max()),
            done.load(Ordering::Relaxed)
        );
    }
    Ok(())
}
