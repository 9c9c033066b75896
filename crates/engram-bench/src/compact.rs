//! `engram-bench compact`: the store's part of a compaction (everything but
//! the LLM call: window, appends, archive, atomic rewrite, new epoch) for
//! windows of 100, 1,000 and 10,000 traces; and Ingest latency on the same
//! agent while a compaction waits for its summary.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args as ClapArgs;
use engram_core::compaction::NewFact;
use engram_core::compaction::Summary;
use engram_core::{AgentId, NewEvent};
use engram_files::{FileStore, StoreConfig};
use engram_store::Policy;
use engram_store::prelude::*;
use serde_json::json;

use crate::ingest::{histogram, us};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the store (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    /// Window sizes, in traces.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    traces: Vec<usize>,
    /// Ingest calls measured per phase.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
}

const POLICY: Policy = Policy {
    raw_tail_turns: 4,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

/// Four traces a turn: question, tool call, result, answer (~200 tokens of text).
async fn fill(store: &dyn Store, agent: &AgentId, turns: usize) -> anyhow::Result<()> {
    let text = "memory agent compaction budget token prompt transcript provider ".repeat(12);
    for t in 0..turns {
        store
            .ingest(
                agent,
                &[
                    NewEvent::user(format!("question {t} {text}")),
                    NewEvent::tool_call(format!("c{t}"), "search", json!({"q": t})),
                    NewEvent::tool_result(format!("c{t}"), json!(text)),
                    NewEvent::assistant(format!("answer {t} {text}")),
                ],
                None,
                None,
                None,
            )
            .await?;
    }
    Ok(())
}

fn summary() -> Summary {
    Summary {
        episodic_summary: "A long conversation about memory.".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: (0..10)
            .map(|i| NewFact {
                fact: format!("fact number {i} about the user"),
                tags: vec![],
                confidence: 0.8,
                salience: 0.5,
            })
            .collect(),
        ..Default::default()
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = args.data_dir.join("compact");
    let _ = std::fs::remove_dir_all(&dir);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = FileStore::open(StoreConfig::new(&dir)).await?;
        println!("compaction, store part (the LLM call excluded), fsync = always");
        println!("  window traces   begin ms   finish ms");
        for &n in &args.traces {
            let agent = AgentId::parse(&format!("w{n}"))?;
            // The window plus the kept tail and the current turn.
            fill(&store, &agent, n / 4 + POLICY.raw_tail_turns + 1).await?;
            let t = Instant::now();
            let job = store
                .begin_compaction(&agent, POLICY)
                .await?
                .job()
                .expect("a window");
            let begin = t.elapsed();
            let traces = job.traces.len();
            let t = Instant::now();
            store
                .finish_compaction(&agent, job, Some(summary()), POLICY)
                .await?;
            let finish = t.elapsed();
            println!(
                "  {:>13}   {:>8.2}   {:>9.2}",
                traces,
                begin.as_secs_f64() * 1e3,
                finish.as_secs_f64() * 1e3
            );
        }

        println!(
            "\nIngest on the same agent, one trace per call ({} calls per phase)",
            args.calls
        );
        let agent = AgentId::parse("busy")?;
        fill(&store, &agent, 250).await?;
        for phase in ["no compaction", "compaction waiting for its summary"] {
            let job = if phase == "no compaction" {
                None
            } else {
                store.begin_compaction(&agent, POLICY).await?.job()
            };
            let mut h = histogram();
            for i in 0..args.calls {
                let t = Instant::now();
                store
                    .ingest(
                        &agent,
                        &[NewEvent::user(format!("more {i}"))],
                        None,
                        None,
                        None,
                    )
                    .await?;
                h.record(t.elapsed().as_nanos() as u64)?;
            }
            println!(
                "  {phase:<36} p50 {:>6.0} us   p99 {:>6.0} us",
                us(h.value_at_quantile(0.5)),
                us(h.value_at_quantile(0.99))
            );
            if let Some(job) = job {
                store
                    .finish_compaction(&agent, job, Some(summary()), POLICY)
                    .await?;
            }
        }
        store.close().await;
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
