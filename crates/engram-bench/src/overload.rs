//! `engram-bench overload`: far more clients than the machine can serve.
//!
//! `--clients` agents loop at once against the real `engramd` for
//! `--secs`, each on its own agent: a user message (Ingest), its prompt
//! (PrepareRequest, rendered for OpenAI), the answer (Ingest). A call shed
//! by the server (UNAVAILABLE or RESOURCE_EXHAUSTED with a retry hint)
//! waits the hint and is sent again, as a gRPC retry policy would. Beside
//! them a prober checks health every 20 ms. Two runs on a fresh data
//! directory each: with the default limits, and with none
//! (`max_calls_per_method = 0`, `max_calls_per_agent = 0`).
//!
//! Reported per run: calls answered and shed, the answered calls' p50/p99,
//! health p50/p99/max, and the server's resident memory (before, peak).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use engram_proto::pb;
use hdrhistogram::Histogram;
use tokio::sync::Mutex;
use tonic::Code;

use crate::ingest::histogram;
use crate::server::Server;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the server's data (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    /// Clients looping at once, each on its own agent.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Connections they share (HTTP/2 carries many calls on one).
    #[arg(long, default_value_t = 250)]
    connections: usize,
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 30)]
    secs: u64,
    /// The server binary (build it with `cargo build --release -p engram-server`).
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
}

#[derive(Default)]
struct Tally {
    answered: AtomicU64,
    shed: AtomicU64,
    failed: AtomicU64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "{} clients on {} connections, {} s a run, {} cores",
        args.clients,
        args.connections,
        args.secs,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!(
        "  limits       answered/s   shed/s  failed   p50 ms   p99 ms | health p50   p99   max ms | RSS MB before  peak"
    );
    for (name, extra) in [
        ("default", ""),
        (
            "none",
            "[server]\nmax_calls_per_method = 0\nmax_calls_per_agent = 0\n",
        ),
    ] {
        let data = args.data_dir.join(format!("overload-{name}"));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        runtime.block_on(one_run(&args, &data, name, extra))?;
        let _ = std::fs::remove_dir_all(&data);
    }
    Ok(())
}

async fn one_run(args: &Args, data: &Path, name: &str, extra: &str) -> anyhow::Result<()> {
    let server = Server::start_with(&args.engramd, data, extra)?;
    let pid = server.pid();
    let before = crate::prepare::rss_kib(pid);
    let mut channels = vec![];
    for _ in 0..args.connections.max(1) {
        channels.push(
            tonic::transport::Channel::from_shared(format!("http://{}", server.addr))?
                .connect()
                .await?,
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let latency = Arc::new(Mutex::new(histogram()));
    let mut tasks = vec![];
    for n in 0..args.clients {
        let client = pb::memory_service_client::MemoryServiceClient::new(
            channels[n % channels.len()].clone(),
        );
        let (stop, tally, latency) = (Arc::clone(&stop), Arc::clone(&tally), Arc::clone(&latency));
        tasks.push(tokio::spawn(async move {
            client_loop(client, format!("overload-{n}"), stop, tally, latency).await;
        }));
    }
    let prober = {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))?
            .connect()
            .await?;
        let stop = Arc::clone(&stop);
        tokio::spawn(probe_health(channel, stop))
    };
    let peak = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(crate::prepare::rss_kib(pid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let health = prober.await?;
    let peak = peak.await?;
    let latency = latency.lock().await;
    let secs = args.secs as f64;
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e6;
    println!(
        "  {name:<10} {:>12.0} {:>8.0} {:>7} {:>8.1} {:>8.1} | {:>10.1} {:>5.1} {:>6.1} | {:>10.0} {:>5.0}",
        tally.answered.load(Ordering::Relaxed) as f64 / secs,
        tally.shed.load(Ordering::Relaxed) as f64 / secs,
        tally.failed.load(Ordering::Relaxed),
        ms(&latency, 0.5),
        ms(&latency, 0.99),
        ms(&health, 0.5),
        ms(&health, 0.99),
        health.max() as f64 / 1e6,
        before as f64 / 1024.0,
        peak as f64 / 1024.0,
    );
    Ok(())
}

use crate::server::Client;

/// One client's agent loop until `stop`; a shed call waits its hint and
/// is sent again.
async fn client_loop(
    mut c: Client,
    agent: String,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    latency: Arc<Mutex<Histogram<u64>>>,
) {
    let event = |t: pb::TraceType, text: String| pb::TraceEvent {
        trace_type: t.into(),
        content: text,
        ..Default::default()
    };
    let mut turn = 0u64;
    let mut mine = histogram();
    while !stop.load(Ordering::Relaxed) {
        turn += 1;
        let question = format!("Question {turn}: what did we say about the weather in Oslo?");
        let answer = format!("Answer {turn}: rain again, as the forecast said.");
        for step in 0..3 {
            loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let started = Instant::now();
                let result = match step {
                    0 | 2 => {
                        let (t, text) = if step == 0 {
                            (pb::TraceType::User, question.clone())
                        } else {
                            (pb::TraceType::Assistant, answer.clone())
                        };
                        c.ingest(pb::IngestRequest {
                            agent_id: agent.clone(),
                            events: vec![event(t, text)],
                            ..Default::default()
                        })
                        .await
                        .map(|_| ())
                    }
                    _ => c
                        .prepare_request(pb::PrepareRequestRequest {
                            agent_id: agent.clone(),
                            model: "gpt-4o".into(),
                            render_format: pb::RenderFormat::OpenaiChat.into(),
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                };
                match result {
                    Ok(()) => {
                        let _ = mine.record(started.elapsed().as_nanos() as u64);
                        tally.answered.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Err(s) if matches!(s.code(), Code::Unavailable | Code::ResourceExhausted) => {
                        tally.shed.fetch_add(1, Ordering::Relaxed);
                        let hint = s
                            .metadata()
                            .get("grpc-retry-pushback-ms")
                            .and_then(|v| v.to_str().ok()?.parse().ok())
                            .unwrap_or(200);
                        tokio::time::sleep(Duration::from_millis(hint)).await;
                    }
                    Err(_) => {
                        tally.failed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
    }
    let _ = latency.lock().await.add(&mine);
}

/// Health checks every 20 ms until `stop`; their latencies (a failed or
/// timed-out check counts as its time).
async fn probe_health(channel: tonic::transport::Channel, stop: Arc<AtomicBool>) -> Histogram<u64> {
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let mut h = histogram();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        });
        request.set_timeout(Duration::from_secs(2));
        let _ = health.check(request).await;
        let _ = h.record(started.elapsed().as_nanos() as u64);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h
}
