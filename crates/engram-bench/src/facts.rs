//! `engram-bench facts`: facts that clients manage, at scale, against the
//! real `engramd`. One agent (or, with `--scope user`, one user) gets N
//! facts through AddMemories (100 a call, each its own words, so none
//! merges): facts added per second. Then, at N facts: the p50 and p99 of
//! ListMemories (the first page of 100), of ListMemories with a query that
//! few facts match, and of GetMemory.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args as ClapArgs;
use engram_proto::pb;

use crate::ingest::{histogram, us};
use crate::server::{Server, connect};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the server's data (emptied first).
    #[arg(long, default_value = "./bench-data/facts")]
    data_dir: PathBuf,
    /// Facts of the agent, one case each.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    facts: Vec<usize>,
    /// Calls timed per read.
    #[arg(long, default_value_t = 300)]
    calls: usize,
    /// The server binary.
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
    /// Whose facts: `agent` (one conversation's) or `user` (a user's own).
    #[arg(long, default_value = "agent")]
    scope: String,
}

/// Facts per AddMemories (the most a call takes).
const BATCH: usize = 100;

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    anyhow::ensure!(
        ["agent", "user"].contains(&args.scope.as_str()),
        "--scope is agent or user, not {:?}",
        args.scope
    );
    println!("scope: {}", args.scope);
    println!(
        "| facts | AddMemories (facts/s) | ListMemories p50 / p99 | with a query p50 / p99 | GetMemory p50 / p99 |\n|---|---|---|---|---|"
    );
    for &n in &args.facts {
        let data = args.data_dir.join(format!("facts-{n}"));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        let server = Server::start_with(&args.engramd, &data, "[embed]\nprovider = \"none\"\n")?;
        rt.block_on(case(&server.addr, n, &args))?;
    }
    Ok(())
}

async fn case(addr: &str, n: usize, args: &Args) -> anyhow::Result<()> {
    let whose = match args.scope.as_str() {
        "user" => pb::memory_scope::Scope::UserId("facts-bench".into()),
        _ => pb::memory_scope::Scope::AgentId("facts-bench".into()),
    };
    let scope = || {
        Some(pb::MemoryScope {
            scope: Some(whose.clone()),
        })
    };
    let mut c = connect(addr).await?;
    let started = Instant::now();
    let mut ids = Vec::with_capacity(n);
    for first in (0..n).step_by(BATCH) {
        let memories = (first..(first + BATCH).min(n))
            .map(|i| pb::NewMemory {
                text: format!(
                    "The user's item number {i} is kept in box {}",
                    i * 7919 % 100_003
                ),
                tags: vec![format!("shelf-{}", i % 50)],
                ..Default::default()
            })
            .collect();
        let added = c
            .add_memories(pb::AddMemoriesRequest {
                scope: scope(),
                memories,
            })
            .await?
            .into_inner();
        ids.extend(added.results.into_iter().map(|r| r.id));
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let mut times = [histogram(), histogram(), histogram()];
    for call in 0..args.calls {
        let at = Instant::now();
        c.list_memories(pb::ListMemoriesRequest {
            scope: scope(),
            page_size: 100,
            ..Default::default()
        })
        .await?;
        times[0].record(at.elapsed().as_nanos() as u64)?;
        let at = Instant::now();
        c.list_memories(pb::ListMemoriesRequest {
            scope: scope(),
            query: format!("number {}", call * 31 % n),
            page_size: 100,
            ..Default::default()
        })
        .await?;
        times[1].record(at.elapsed().as_nanos() as u64)?;
        let at = Instant::now();
        c.get_memory(pb::GetMemoryRequest {
            scope: scope(),
            id: ids[call * 97 % ids.len()].clone(),
        })
        .await?;
        times[2].record(at.elapsed().as_nanos() as u64)?;
    }
    let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| us(h.value_at_quantile(q)) / 1000.0;
    println!(
        "| {n} | {rate:.0} | {:.1} / {:.1} ms | {:.1} / {:.1} ms | {:.1} / {:.1} ms |",
        ms(&times[0], 0.5),
        ms(&times[0], 0.99),
        ms(&times[1], 0.5),
        ms(&times[1], 0.99),
        ms(&times[2], 0.5),
        ms(&times[2], 0.99),
    );
    Ok(())
}
