//! `engram-bench soak`: a long run of mixed load against the real
//! `engramd`, to find what grows without bound — memory, file
//! descriptors, threads, index directories, latency.
//!
//! `--clients` clients each own `--agents / --clients` agents (so their
//! forks and deletes race nobody) and, for `--minutes`, pick at random
//! (seeded): Ingest of a turn (half the calls), PrepareRequest for a model
//! with a small window (compactions, with summaries from a local LLM over
//! HTTP, written ahead), SearchHistory, Retrieve with recall, a fork that
//! is searched and deleted, and now and then the deletion of an agent (it
//! starts again at its next Ingest). Every `--sample-secs` the server's
//! resident memory, open file descriptors and threads, the index
//! directories (and their files) under the data directory, the minute's
//! p99 and the calls made are printed as one row. Every call must
//! succeed.
//!
//! The verdict: over the second half of the samples (the first half warms
//! caches up and fills agents to their compaction trigger), each series'
//! least-squares trend, times the half's length, must stay within its
//! allowance (a share of its median or a floor, whichever is larger). The
//! run fails if any series grows past it, or if any call failed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use engram_proto::pb;
use hdrhistogram::Histogram;
use tokio::sync::Mutex;

use crate::server::{Server, connect};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the server's data (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    /// `files` or `postgres` (a fresh schema of --pg-url).
    #[arg(long, default_value = "files")]
    backend: String,
    #[arg(long)]
    pg_url: Option<String>,
    #[arg(long, default_value_t = 30)]
    minutes: u64,
    #[arg(long, default_value_t = 60)]
    sample_secs: u64,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    #[arg(long, default_value_t = 64)]
    agents: usize,
    /// embed.provider: local or none.
    #[arg(long, default_value = "local")]
    embed: String,
    #[arg(long, default_value_t = 26)]
    seed: u64,
    /// The server binary (build it with `cargo build --release -p engram-server`).
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
}

/// The model the clients name: a window small enough to compact often.
const MODEL: &str = "soak";

pub fn run(args: Args) -> anyhow::Result<()> {
    let data = args.data_dir.join(format!("soak-{}", args.backend));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let out = runtime.block_on(soak(&args, &data));
    let _ = std::fs::remove_dir_all(&data);
    out
}

/// What the clients did since the last sample.
#[derive(Default)]
struct Load {
    latency: Mutex<Option<Histogram<u64>>>,
    calls: AtomicU64,
    failures: AtomicU64,
    first_failure: Mutex<Option<String>>,
}

impl Load {
    async fn record(&self, started: Instant, outcome: Result<(), tonic::Status>, what: &str) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let micros = started.elapsed().as_micros().max(1) as u64;
        if let Some(h) = self.latency.lock().await.as_mut() {
            h.saturating_record(micros);
        }
        if let Err(s) = outcome {
            self.failures.fetch_add(1, Ordering::Relaxed);
            self.first_failure
                .lock()
                .await
                .get_or_insert_with(|| format!("{what}: {s}"));
        }
    }
}

async fn soak(args: &Args, data: &Path) -> anyhow::Result<()> {
    let calls = Arc::default();
    let llm = engram_chaos::slow_llm::serve(Duration::from_millis(100), calls).await?;
    let mut extra = format!(
        "[budget.models.\"{MODEL}\"]\ncontext_tokens = 4000\nmax_output_tokens = 500\n\
         [embed]\nprovider = \"{}\"\n[llm]\nbase_url = {llm:?}\nmodel = \"soak\"\n",
        args.embed
    );
    if args.backend == "postgres" {
        let url = crate::ingest::pg_url(args.pg_url.as_deref())?;
        let schema = crate::ingest::fresh_schema(&url).await?;
        extra.push_str(&format!(
            "[store]\nbackend = \"postgres\"\n[store.postgres]\nurl = {url:?}\nschema = {schema:?}\n"
        ));
    }
    let server = Server::start_with(&args.engramd, data, &extra)?;
    let pid = server.pid();
    println!(
        "soak: {} backend, {} min, {} clients over {} agents, embed {}, a sample every {} s",
        args.backend, args.minutes, args.clients, args.agents, args.embed, args.sample_secs
    );
    println!("    min   RSS MB   fds  threads  index dirs (files)   calls  p99 ms");
    let load = Arc::new(Load::default());
    *load.latency.lock().await = Some(crate::ingest::histogram());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = vec![];
    for client in 0..args.clients {
        let c = connect(&server.addr).await?;
        let owned: Vec<usize> = (client..args.agents).step_by(args.clients).collect();
        let (load, stop) = (Arc::clone(&load), Arc::clone(&stop));
        let seed = args
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(client as u64);
        clients.push(tokio::spawn(drive(c, owned, seed, load, stop)));
    }
    let started = Instant::now();
    let mut samples = vec![];
    let mut tick = tokio::time::interval(Duration::from_secs(args.sample_secs));
    tick.tick().await;
    while started.elapsed() < Duration::from_secs(args.minutes * 60) {
        tick.tick().await;
        let sample = Sample::take(pid, data, &load).await;
        println!(
            "  {:>5.1}  {:>7.1}  {:>4}  {:>7}  {:>10} ({:>6})  {:>6}  {:>6.1}",
            started.elapsed().as_secs_f64() / 60.0,
            sample.rss_mb,
            sample.fds,
            sample.threads,
            sample.index_dirs,
            sample.index_files,
            sample.calls,
            sample.p99_ms
        );
        samples.push(sample);
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await??;
    }
    let failures = load.failures.load(Ordering::Relaxed);
    let verdict = verdict(&samples, args.sample_secs as f64 / 60.0);
    for line in &verdict.lines {
        println!("{line}");
    }
    if failures > 0 {
        let first = load.first_failure.lock().await.clone().unwrap_or_default();
        anyhow::bail!("{failures} calls failed; the first: {first}");
    }
    anyhow::ensure!(verdict.passed, "soak: something grew without bound");
    println!("soak: nothing grew; every call succeeded");
    Ok(())
}

/// One client's calls until `stop`.
async fn drive(
    mut c: crate::server::Client,
    owned: Vec<usize>,
    seed: u64,
    load: Arc<Load>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let mut rng = Rng(seed);
    let mut forks = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let agent = format!("soak-{}", owned[rng.below(owned.len())]);
        let roll = rng.below(1000);
        let started = Instant::now();
        let (what, outcome) = match roll {
            0..500 => {
                let events = vec![
                    event(pb::TraceType::User, rng.words(60)),
                    event(pb::TraceType::Assistant, rng.words(90)),
                ];
                ("Ingest", c.ingest(ingest(&agent, events)).await.map(drop))
            }
            500..700 => {
                let request = pb::PrepareRequestRequest {
                    agent_id: agent.clone(),
                    model: MODEL.into(),
                    ..Default::default()
                };
                let prepared = c.prepare_request(request).await;
                // An agent not written to since its deletion.
                ("PrepareRequest", not_found_is_fine(prepared))
            }
            700..850 => {
                let request = pb::SearchHistoryRequest {
                    agent_id: agent.clone(),
                    query: rng.words(2),
                    limit: 10,
                    ..Default::default()
                };
                let found = c.search_history(request).await;
                ("SearchHistory", not_found_is_fine(found))
            }
            850..950 => {
                let request = pb::RetrieveRequest {
                    agent_id: agent.clone(),
                    query: rng.words(6),
                    max_recalled: Some(5),
                    ..Default::default()
                };
                let found = c.retrieve(request).await;
                ("Retrieve", not_found_is_fine(found))
            }
            950..995 => {
                forks += 1;
                let fork = format!("{agent}-fork-{forks}");
                ("Fork", fork_search_delete(&mut c, &agent, &fork).await)
            }
            _ => {
                let request = pb::DeleteAgentRequest {
                    agent_id: agent.clone(),
                };
                let deleted = c.delete_agent(request).await;
                ("DeleteAgent", not_found_is_fine(deleted))
            }
        };
        load.record(started, outcome, what).await;
    }
    Ok(())
}

/// A fork of `agent`, searched, then deleted (the agent may have none to
/// fork: deleted and not written since).
async fn fork_search_delete(
    c: &mut crate::server::Client,
    agent: &str,
    fork: &str,
) -> Result<(), tonic::Status> {
    let request = pb::ForkAgentRequest {
        source_agent_id: agent.into(),
        target_agent_id: fork.into(),
    };
    match c.fork_agent(request).await {
        Ok(_) => {}
        Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
        Err(s) => return Err(s),
    }
    let request = pb::SearchHistoryRequest {
        agent_id: fork.into(),
        query: "the".into(),
        limit: 5,
        ..Default::default()
    };
    c.search_history(request).await?;
    let request = pb::DeleteAgentRequest {
        agent_id: fork.into(),
    };
    c.delete_agent(request).await.map(drop)
}

fn not_found_is_fine<T>(answer: Result<T, tonic::Status>) -> Result<(), tonic::Status> {
    match answer {
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        other => other.map(drop),
    }
}

fn event(trace_type: pb::TraceType, content: String) -> pb::TraceEvent {
    pb::TraceEvent {
        trace_type: trace_type.into(),
        content,
        ..Default::default()
    }
}

fn ingest(agent: &str, events: Vec<pb::TraceEvent>) -> pb::IngestRequest {
    pb::IngestRequest {
        agent_id: agent.into(),
        events,
        ..Default::default()
    }
}

/// A seeded generator (SplitMix64): the same calls for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `n` words of a 2,000-word vocabulary, skewed towards the common
    /// ones as speech is (so the index meets repeated and rare words).
    fn words(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n * 8);
        for i in 0..n {
            if i > 0 {
                out.push(' ');
            }
            let rank = self.below(2000).min(self.below(2000));
            out.push_str(&word(rank));
        }
        out
    }
}

/// A made-up word for a rank: consonant-vowel syllables.
fn word(rank: usize) -> String {
    const C: &[u8] = b"bdfgklmnprstvz";
    const V: &[u8] = b"aeiou";
    let mut n = rank + 1;
    let mut w = String::new();
    while n > 0 {
        w.push(C[n % C.len()] as char);
        n /= C.len();
        w.push(V[n % V.len()] as char);
        n /= V.len();
    }
    w
}

/// One minute's readings.
struct Sample {
    rss_mb: f64,
    fds: u64,
    threads: u64,
    index_dirs: u64,
    index_files: u64,
    calls: u64,
    p99_ms: f64,
}

impl Sample {
    async fn take(pid: u32, data: &Path, load: &Load) -> Self {
        use crate::prepare::proc_status;
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
        let (index_dirs, index_files) = index_dirs(data);
        let latency = load
            .latency
            .lock()
            .await
            .replace(crate::ingest::histogram())
            .expect("a histogram");
        Self {
            rss_mb: proc_status(pid, "VmRSS:") as f64 / 1024.0,
            fds,
            threads: proc_status(pid, "Threads:"),
            index_dirs,
            index_files,
            calls: load.calls.swap(0, Ordering::Relaxed),
            p99_ms: latency.value_at_quantile(0.99) as f64 / 1000.0,
        }
    }
}

/// The `.index` directories under `dir` (an agent's or a user's search
/// index in the file store), and the files in them.
fn index_dirs(dir: &Path) -> (u64, u64) {
    let mut found = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name() == ".index" {
                found.0 += 1;
                found.1 += std::fs::read_dir(&path).map_or(0, |d| d.count() as u64);
            } else {
                stack.push(path);
            }
        }
    }
    found
}

struct Verdict {
    passed: bool,
    lines: Vec<String>,
}

/// Each series' trend over the second half of `samples` (taken every
/// `minutes_apart`) against its allowance.
fn verdict(samples: &[Sample], minutes_apart: f64) -> Verdict {
    type Series = (&'static str, fn(&Sample) -> f64, f64, f64);
    // (name, reading, share of the median, floor) allowed over the half.
    let series: [Series; 6] = [
        ("RSS MB", |s| s.rss_mb, 0.10, 16.0),
        ("open fds", |s| s.fds as f64, 0.10, 8.0),
        ("threads", |s| s.threads as f64, 0.10, 4.0),
        ("index dirs", |s| s.index_dirs as f64, 0.10, 8.0),
        ("index files", |s| s.index_files as f64, 0.20, 64.0),
        ("p99 ms", |s| s.p99_ms, 0.50, 20.0),
    ];
    let half = &samples[samples.len() / 2..];
    let mut out = Verdict {
        passed: true,
        lines: vec![format!(
            "trend over the second half ({} samples):",
            half.len()
        )],
    };
    if half.len() < 3 {
        out.lines
            .push("  too few samples for a trend: run longer".into());
        out.passed = false;
        return out;
    }
    let span = (half.len() - 1) as f64 * minutes_apart;
    for (name, read, share, floor) in series {
        let ys: Vec<f64> = half.iter().map(read).collect();
        let growth = slope(&ys) / minutes_apart * span;
        let allowed = (median(&ys) * share).max(floor);
        let ok = growth <= allowed;
        out.passed &= ok;
        out.lines.push(format!(
            "  {name:<12} {growth:>+9.1} over {span:.0} min (allowed {allowed:.1}): {}",
            if ok { "flat" } else { "GROWS" }
        ));
    }
    out
}

/// Least-squares slope of `ys` against 0, 1, 2, …
fn slope(ys: &[f64]) -> f64 {
    let n = ys.len() as f64;
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = ys.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in ys.iter().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (y - mean_y);
        den += dx * dx;
    }
    num / den
}

fn median(ys: &[f64]) -> f64 {
    let mut sorted = ys.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(rss: impl Fn(usize) -> f64) -> Vec<Sample> {
        (0..20)
            .map(|i| Sample {
                rss_mb: rss(i),
                fds: 40,
                threads: 20,
                index_dirs: 60,
                index_files: 600,
                calls: 1000,
                p99_ms: 30.0,
            })
            .collect()
    }

    #[test]
    fn a_leak_fails_and_a_plateau_passes() {
        // 4 MB a minute without end: 36 MB over the half's 9 minutes,
        // past a tenth of its median (~258 MB).
        assert!(!verdict(&samples(|i| 200.0 + 4.0 * i as f64), 1.0).passed);
        // Growth that levels off in the first half, then noise.
        let plateau = |i: usize| 100.0 + 10.0 * (i.min(8) as f64) + [0.0, 3.0, -2.0][i % 3];
        assert!(verdict(&samples(plateau), 1.0).passed);
        assert!(!verdict(&samples(|_| 100.0)[..4], 1.0).passed, "too short");
    }

    #[test]
    fn the_slope_is_least_squares() {
        assert!((slope(&[1.0, 3.0, 5.0, 7.0]) - 2.0).abs() < 1e-9);
        assert_eq!(slope(&[4.0, 4.0, 4.0]), 0.0);
    }
}
