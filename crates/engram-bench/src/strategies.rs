//! `engram-bench strategies`: what a compaction costs the agent waiting for
//! its prompt, by compaction strategy. Agents talk to the real `engramd`
//! (embedded summarizer, no summaries written ahead, a model of an 8,000
//! token window) turn after turn: PrepareRequest with the user's message,
//! then Ingest of the answer. Prompts that compacted (at the trigger) and
//! the others are timed apart.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args as ClapArgs;
use engram_proto::pb;
use hdrhistogram::Histogram;

use crate::ingest::{histogram, us};
use crate::server::{Client, Server, connect};
use crate::words::text;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the store (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    /// The server binary (build it with `cargo build --release -p engram-server`).
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
    /// Strategies measured, each on a fresh server.
    #[arg(long, value_delimiter = ',', default_value = "summarize,trim")]
    strategies: Vec<String>,
    /// Agents, talking at once.
    #[arg(long, default_value_t = 8)]
    agents: usize,
    /// Turns per agent.
    #[arg(long, default_value_t = 120)]
    turns: usize,
}

/// The model the agents use: its window is small, so they reach the
/// trigger every few turns.
const MODEL: &str = "bench-8k";

/// Prompt latencies of one strategy: at the trigger and otherwise.
struct Timed {
    compacted: Histogram<u64>,
    other: Histogram<u64>,
    tokens: Histogram<u64>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    println!(
        "\nPrepareRequest by compaction strategy: {} agents at once, {} turns each, model window 8,000 tokens, embedded summarizer, no summaries ahead",
        args.agents, args.turns
    );
    println!(
        "  strategy     prompts  compacted   at trigger p50 / p99 ms   others p50 / p99 ms   prompt tokens p50 / max"
    );
    for strategy in &args.strategies {
        let data = args.data_dir.join(format!("strategy-{strategy}"));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        let extra = format!(
            "[embed]\nprovider = \"none\"\n[budget]\nprecompact_ratio = 0.0\n[budget.models.{MODEL:?}]\ncontext_tokens = 8000\nmax_output_tokens = 1000\n[policy]\nstrategy = {strategy:?}\nkeep_last_turns = 4\n"
        );
        let server = Server::start_with(&args.engramd, &data, &extra)?;
        let timed = runtime.block_on(talk(&server, &args))?;
        drop(server);
        let ms = |h: &Histogram<u64>, q: f64| us(h.value_at_quantile(q)) / 1000.0;
        println!(
            "  {strategy:<12} {:>7}  {:>9}   {:>10.1} / {:<10.1}   {:>8.1} / {:<8.1}    {:>6} / {}",
            timed.compacted.len() + timed.other.len(),
            timed.compacted.len(),
            ms(&timed.compacted, 0.5),
            ms(&timed.compacted, 0.99),
            ms(&timed.other, 0.5),
            ms(&timed.other, 0.99),
            timed.tokens.value_at_quantile(0.5),
            timed.tokens.max(),
        );
        let _ = std::fs::remove_dir_all(&data);
    }
    Ok(())
}

/// Every agent's turns, the agents at once; their prompts timed.
async fn talk(server: &Server, args: &Args) -> anyhow::Result<Timed> {
    let mut tasks = vec![];
    for a in 0..args.agents {
        let client = connect(&server.addr).await?;
        let turns = args.turns;
        tasks.push(tokio::spawn(async move {
            agent(client, &format!("agent-{a}"), a, turns).await
        }));
    }
    let mut all = Timed {
        compacted: histogram(),
        other: histogram(),
        tokens: histogram(),
    };
    for task in tasks {
        let one = task.await.context("an agent's task")??;
        all.compacted.add(&one.compacted)?;
        all.other.add(&one.other)?;
        all.tokens.add(&one.tokens)?;
    }
    Ok(all)
}

async fn agent(mut client: Client, id: &str, seed: usize, turns: usize) -> anyhow::Result<Timed> {
    let mut timed = Timed {
        compacted: histogram(),
        other: histogram(),
        tokens: histogram(),
    };
    let event = |kind: pb::TraceType, content: String| pb::TraceEvent {
        trace_type: kind.into(),
        content,
        ..Default::default()
    };
    for turn in 0..turns {
        let n = seed * 10_000 + turn * 2;
        let started = Instant::now();
        let prompt = client
            .prepare_request(pb::PrepareRequestRequest {
                agent_id: id.into(),
                user_input: Some(event(pb::TraceType::User, text(n))),
                model: MODEL.into(),
                render_format: pb::RenderFormat::OpenaiChat.into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let compacted = prompt.compaction.as_ref().is_some_and(|c| c.performed);
        if compacted {
            timed.compacted.record(took)?;
        } else {
            timed.other.record(took)?;
        }
        timed
            .tokens
            .record(u64::from(prompt.estimated_prompt_tokens).max(1))?;
        client
            .ingest(pb::IngestRequest {
                agent_id: id.into(),
                events: vec![event(pb::TraceType::Assistant, text(n + 1))],
                ..Default::default()
            })
            .await?;
    }
    Ok(timed)
}
