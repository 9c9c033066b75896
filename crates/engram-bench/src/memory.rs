//! `engram-bench memory`: conversation text offered across many agents
//! within the idle window, and what the server holds in memory for it.
//!
//! `--agents` agents are written at once by `--clients` clients until
//! `--text-mb` of message text is stored (each Ingest carries
//! `--batch` messages of `--message-bytes`), against the real `engramd`
//! with `store.memory_budget_mb = --budget-mb` (0: none). Then every agent
//! is asked for its prompt (PrepareRequest, rendered for OpenAI) and must
//! answer with every message it was given; for most of them the server has
//! to load the agent again (it was unloaded to keep to the budget), so the
//! latency of that phase is the cost of a reload. Resident memory is
//! sampled every 50 ms throughout: before (the binary's own baseline,
//! the model included), the peak while writing, the peak while reading.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use engram_proto::pb;
use tokio::sync::Mutex;

use crate::ingest::histogram;
use crate::server::{Server, alternating, connect};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the server's data (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    #[arg(long, default_value_t = 2000)]
    agents: usize,
    /// Message text offered in all, in MB.
    #[arg(long, default_value_t = 1000)]
    text_mb: usize,
    #[arg(long, default_value_t = 1000)]
    message_bytes: usize,
    /// Messages per Ingest.
    #[arg(long, default_value_t = 20)]
    batch: usize,
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// store.memory_budget_mb (0: none).
    #[arg(long, default_value_t = 256)]
    budget_mb: u64,
    /// embed.provider: local or none.
    #[arg(long, default_value = "local")]
    embed: String,
    /// What the reading phase asks each agent: `prompt` (PrepareRequest
    /// rendered for OpenAI), `plain` (PrepareRequest, not rendered) or
    /// `stats` (GetContextStats: its size, no prompt built).
    #[arg(long, default_value = "prompt")]
    read: String,
    /// The server binary (build it with `cargo build --release -p engram-server`).
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let data = args.data_dir.join("memory");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let out = runtime.block_on(measure(&args, &data));
    let _ = std::fs::remove_dir_all(&data);
    out
}

/// One message into an agent of its own, searched for once indexed.
async fn warm_up(addr: &str) -> anyhow::Result<()> {
    let mut c = connect(addr).await?;
    let events = vec![alternating(
        0,
        "a first message to warm the model up".into(),
    )];
    c.ingest(pb::IngestRequest {
        agent_id: "warm-up".into(),
        events,
        ..Default::default()
    })
    .await?;
    c.search_history(pb::SearchHistoryRequest {
        agent_id: "warm-up".into(),
        query: "warming a model".into(),
        limit: 1,
        wait_for_index_ms: 30_000,
        ..Default::default()
    })
    .await?;
    Ok(())
}

/// Resident memory, sampled until stopped: the peak since the last take.
struct Sampler {
    peak: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (Arc::clone(&peak), Arc::clone(&stop));
        tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(crate::prepare::rss_kib(pid) as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { peak, stop }
    }

    /// The peak so far in MB, and starts over.
    fn take_mb(&self) -> f64 {
        self.peak.swap(0, Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

async fn measure(args: &Args, data: &std::path::Path) -> anyhow::Result<()> {
    let metrics = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        probe.local_addr()?.to_string()
    };
    let mut extra = format!(
        "[server]\nmetrics_listen = \"{metrics}\"\n[embed]\nprovider = \"{}\"\n",
        args.embed
    );
    if args.budget_mb > 0 {
        extra.push_str(&format!("[store]\nmemory_budget_mb = {}\n", args.budget_mb));
    }
    let server = Server::start_with(&args.engramd, data, &extra)?;
    let pid = server.pid();
    // The baseline is the binary's own with the model (when there is one)
    // having run: one message embedded, found by meaning, then 2 s to
    // settle. A model that has not run yet has not touched all it needs.
    warm_up(&server.addr).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = crate::prepare::rss_kib(pid) as f64 / 1024.0;
    let sampler = Sampler::start(pid);
    let per_agent = (args.text_mb << 20) / args.agents / args.message_bytes;
    let calls_per_agent = per_agent.div_ceil(args.batch);
    println!(
        "{} agents × {per_agent} messages of {} bytes ({} MB of text), {} clients, budget {} MB, embed {}",
        args.agents, args.message_bytes, args.text_mb, args.clients, args.budget_mb, args.embed
    );
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let total = args.agents * calls_per_agent;
    let mut tasks = vec![];
    for _ in 0..args.clients {
        let mut c = connect(&server.addr).await?;
        let next = Arc::clone(&next);
        let (agents, batch, bytes) = (args.agents, args.batch, args.message_bytes);
        tasks.push(tokio::spawn(async move {
            loop {
                // Round-robin over the agents: all of them grow together,
                // as busy conversations do.
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, anyhow::Error>(());
                }
                let (agent, call) = (n % agents, n / agents);
                let first = call * batch;
                let last = (first + batch).min(per_agent);
                let events = (first..last)
                    .map(|m| alternating(m, message(agent, m, bytes)))
                    .collect();
                c.ingest(pb::IngestRequest {
                    agent_id: format!("mem-{agent}"),
                    events,
                    ..Default::default()
                })
                .await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let wrote = started.elapsed();
    let write_peak = sampler.take_mb();
    println!("  after writing: {}", gauges(&metrics).await);
    // Every agent answers with all its messages.
    let latency = Arc::new(Mutex::new(histogram()));
    let wrong = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = vec![];
    for _ in 0..args.clients {
        let mut c = connect(&server.addr).await?;
        let (next, latency, wrong) = (Arc::clone(&next), Arc::clone(&latency), Arc::clone(&wrong));
        let (agents, read) = (args.agents, args.read.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = histogram();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= agents {
                    break;
                }
                let t = Instant::now();
                let agent_id = format!("mem-{n}");
                let messages = if read == "stats" {
                    let stats = c
                        .get_context_stats(pb::GetContextStatsRequest {
                            agent_id,
                            model: "gpt-4o".into(),
                        })
                        .await?
                        .into_inner();
                    stats.messages as usize
                } else {
                    let format = if read == "plain" {
                        pb::RenderFormat::Unspecified
                    } else {
                        pb::RenderFormat::OpenaiChat
                    };
                    let answer = c
                        .prepare_request(pb::PrepareRequestRequest {
                            agent_id,
                            model: "gpt-4o".into(),
                            render_format: format.into(),
                            ..Default::default()
                        })
                        .await?
                        .into_inner();
                    answer.messages.len()
                };
                let _ = mine.record(t.elapsed().as_nanos() as u64);
                if messages != per_agent {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
            let _ = latency.lock().await.add(&mine);
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let read_peak = sampler.take_mb();
    println!("  after reading: {}", gauges(&metrics).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let settled = crate::prepare::rss_kib(pid) as f64 / 1024.0;
    let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_default();
    let latency = latency.lock().await;
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1e6;
    println!(
        "  wrote in {:.0} s; RSS MB: baseline {baseline:.0}, peak writing {write_peak:.0}, peak reading {read_peak:.0}, 5 s later {settled:.0} ({threads} threads)",
        wrote.as_secs_f64()
    );
    println!(
        "  every agent's prompt: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; agents missing messages: {}",
        ms(0.5),
        ms(0.99),
        latency.max() as f64 / 1e6,
        wrong.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Message `m` of agent `agent`, `bytes` long: words, so counting tokens
/// costs what real text costs.
fn message(agent: usize, m: usize, bytes: usize) -> String {
    let head = format!("Agent {agent} message {m}: ");
    let words = "we talked about the trip to Lisbon and the weather there was warm ";
    let mut text = head;
    while text.len() < bytes {
        text.push_str(words);
    }
    text.truncate(bytes);
    text
}

/// The server's memory gauges, from its metrics endpoint.
async fn gauges(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return "no metrics".into();
    };
    let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await;
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body).await;
    let value = |name: &str| {
        body.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    format!(
        "{:.0} agents loaded, {:.0} MB accounted, {:.0} unloads",
        value("engram_agents_loaded"),
        value("engram_memory_accounted_bytes") / 1048576.0,
        value("engram_memory_unloads_total")
    )
}
