//! `engram-bench ingest`: how close durable Ingest comes to the hardware and
//! the framework. Measures, in one run on one machine:
//!
//! - (a) raw fdatasync'd 200-byte appends: one sync per line, one per 64;
//! - (b) the framework ceiling: a trivial tonic unary service with Engram's
//!   own messages and no storage, at 1, 16 and 64 clients;
//! - (c) Engram's durable Ingest (one trace per call, default fsync policy)
//!   at 1, 16 and 64 agents, one client each;
//!
//! and prints (c)/(b) per concurrency. See docs/BENCHMARKS.md.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args as ClapArgs;
use engram_proto::pb;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use engram_proto::pb::memory_service_server::MemoryServiceServer;
use hdrhistogram::Histogram;
use tonic::Status;
use tonic::transport::Channel;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory on the disk to measure (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    /// Seconds measured per concurrency level (after a short warm-up).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Appends per fdatasync measurement.
    #[arg(long, default_value_t = 5000)]
    appends: usize,
    /// Engram's store.fsync policy for (c): always (the default, the one the
    /// targets are about), interval or never (to see the cost without syncs).
    #[arg(long, default_value = "always")]
    fsync: String,
    /// Rounds per level (echo and Engram alternate; medians are reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Measure only one side (for profilers such as `perf stat`): echo or
    /// engram. Ratios need both.
    #[arg(long)]
    only: Option<String>,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<usize>,
    /// Serve Prometheus metrics (on a port-0 listener) while measuring, to
    /// see what recording costs.
    #[arg(long)]
    metrics: bool,
    /// embed.provider for (c): local (the default: the background indexer
    /// embeds what is ingested, with ./models/all-MiniLM-L6-v2 when present)
    /// or none (indexing off).
    #[arg(long, default_value = "local")]
    embed: String,
    /// store.backend for (c): files, postgres, or both (`files,postgres`:
    /// measured one after the other in this run). Postgres runs on a fresh
    /// schema of --pg-url.
    #[arg(long, value_delimiter = ',', default_value = "files")]
    backend: Vec<String>,
    /// Engram replicas for postgres (e.g. `1,2`), clients spread over them
    /// (the file store has one owner).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    replicas: Vec<usize>,
    /// The database for --backend postgres; default: ENGRAM_BENCH_PG_URL,
    /// else the one `scripts/pg.sh start` (make pg) runs.
    #[arg(long)]
    pg_url: Option<String>,
    /// Users the agents belong to (agent i: user i mod N), named on every
    /// Ingest; 0: agents with no user (issue 21 compares the two).
    #[arg(long, default_value_t = 0)]
    users: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    println!(
        "engram-bench: {} s per level, data dir {}",
        args.seconds,
        args.data_dir.display()
    );
    println!("\n(a) fdatasync'd 200-byte appends on the data disk");
    let per_line = fsync_appends(&args.data_dir, args.appends, 1)?;
    let per_64 = fsync_appends(&args.data_dir, args.appends * 4, 64)?;
    println!(
        "  sync every line : {:>9.0} lines/s  sync p50 {:>6.1} us  p99 {:>6.1} us",
        per_line.rate,
        us(per_line.sync.value_at_quantile(0.5)),
        us(per_line.sync.value_at_quantile(0.99))
    );
    println!(
        "  sync every 64   : {:>9.0} lines/s  sync p50 {:>6.1} us  p99 {:>6.1} us",
        per_64.rate,
        us(per_64.sync.value_at_quantile(0.5)),
        us(per_64.sync.value_at_quantile(0.99))
    );
    let fsync_p50 = us(per_line.sync.value_at_quantile(0.5));

    let duration = Duration::from_secs_f64(args.seconds);
    let engram_dir = args.data_dir.join("engram");
    let mut setups = vec![];
    for backend in &args.backend {
        match backend.as_str() {
            "postgres" => setups.extend(args.replicas.iter().map(|&r| (backend.clone(), r.max(1)))),
            _ => setups.push((backend.clone(), 1)),
        }
    }
    let mut all = vec![];
    for (backend, replicas) in &setups {
        let _ = std::fs::remove_dir_all(&engram_dir);
        let levels = runtime.block_on(compare(&args, backend, *replicas, duration, &engram_dir))?;
        let _ = std::fs::remove_dir_all(&engram_dir);
        report(
            &args,
            &levels,
            fsync_p50,
            &format!("{backend}, {replicas} replica(s)"),
        );
        all.push((format!("{backend} ×{replicas}"), levels));
    }
    if all.len() > 1 {
        println!("\nall setups of this run (traces/s; echo: the framework ceiling)");
        print!("  clients   {:>10}", "echo");
        for (name, _) in &all {
            print!("   {name:>14}");
        }
        println!();
        for (i, l) in all[0].1.iter().enumerate() {
            print!("  {:>7}   {:>10.0}", l.clients, l.echo.rate);
            for (_, levels) in &all {
                print!("   {:>14.0}", levels.get(i).map_or(0.0, |l| l.engram.rate));
            }
            println!();
        }
        let at64 = |name: &str| {
            all.iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, levels)| levels.iter().find(|l| l.clients == 64))
                .map(|l| l.engram.rate)
        };
        if let (Some(one), Some(two)) = (at64("postgres ×1"), at64("postgres ×2")) {
            println!(
                "\ntarget: two replicas / one at 64 agents {:.2} >= 1.5: {}",
                two / one,
                if two / one >= 1.5 { "met" } else { "MISSED" }
            );
        }
    }
    Ok(())
}

/// One setup's side-by-side table and the file store's targets.
fn report(args: &Args, levels: &[Level], fsync_p50: f64, setup: &str) {
    println!(
        "\nside by side, {setup} (median of {} rounds; ratio = median of per-round ratios)",
        args.rounds
    );
    println!(
        "  clients   echo calls/s   ingest traces/s   ratio   echo p50/p99 us     ingest p50/p99 us"
    );
    for l in levels {
        println!(
            "  {:>7}   {:>12.0}   {:>15.0}   {:>5.2}   {:>7.0} / {:<7.0}   {:>7.0} / {:<7.0}",
            l.clients,
            l.echo.rate,
            l.engram.rate,
            l.ratio,
            us(l.echo.latency.value_at_quantile(0.5)),
            us(l.echo.latency.value_at_quantile(0.99)),
            us(l.engram.latency.value_at_quantile(0.5)),
            us(l.engram.latency.value_at_quantile(0.99)),
        );
    }
    if let Some(l) = levels.iter().find(|l| l.clients == 1) {
        let bound = us(l.echo.latency.value_at_quantile(0.5)) + fsync_p50 + 50.0;
        let got = us(l.engram.latency.value_at_quantile(0.5));
        println!(
            "\ntarget: 1-client ingest p50 {got:.0} us <= echo p50 + fdatasync p50 + 50 us = {bound:.0} us: {}",
            if got <= bound { "met" } else { "MISSED" }
        );
    }
    if let Some(l) = levels.iter().find(|l| l.clients == 64) {
        println!(
            "target: ratio at 64 agents {:.2} >= 0.70: {}",
            l.ratio,
            if l.ratio >= 0.7 { "met" } else { "MISSED" }
        );
    }
}

/// Echo and Engram measured back to back per level and round, so that a
/// machine whose speed drifts (shared VMs do) affects both alike.
async fn compare(
    args: &Args,
    backend: &str,
    replicas: usize,
    duration: Duration,
    engram_dir: &Path,
) -> anyhow::Result<Vec<Level>> {
    let (echo_addr, stop_echo) = start_server(&Target::Echo).await?;
    let mut settings = vec![
        ("ENGRAM__STORE__FSYNC".to_string(), args.fsync.clone()),
        ("ENGRAM__EMBED__PROVIDER".to_string(), args.embed.clone()),
        ("ENGRAM__STORE__BACKEND".to_string(), backend.to_owned()),
    ];
    if backend == "postgres" {
        let url = pg_url(args.pg_url.as_deref())?;
        let schema = fresh_schema(&url).await?;
        settings.push(("ENGRAM__STORE__POSTGRES__URL".to_string(), url));
        settings.push(("ENGRAM__STORE__POSTGRES__SCHEMA".to_string(), schema));
    }
    let mut engram_addrs = vec![];
    let mut stops = vec![];
    for replica in 0..replicas {
        let (addr, stop) = start_server(&Target::Engram(
            engram_dir.join(format!("replica-{replica}")),
            args.metrics,
            settings.clone(),
        ))
        .await?;
        engram_addrs.push(addr);
        stops.push(stop);
    }
    println!(
        "\n(b) tonic echo, no storage  vs  (c) Engram durable Ingest, backend = {backend}, replicas = {replicas}, fsync = {}, embed = {}, users = {}",
        args.fsync, args.embed, args.users
    );
    let mut levels = vec![];
    for &clients in &args.clients {
        let mut echo = vec![];
        let mut engram = vec![];
        for round in 0..args.rounds {
            if let Some(only) = args.only.as_deref() {
                let (addrs, tag) = match only {
                    "echo" => (vec![echo_addr], "echo".to_owned()),
                    _ => (engram_addrs.clone(), format!("r{round}")),
                };
                let r = measure(&addrs, clients, duration, &tag, args.users).await?;
                println!(
                    "  {clients:>3} clients, round {}: {only} {:>8.0}/s p50 {:>6.0} us cpu {:>4.1} us/call{}",
                    round + 1,
                    r.rate,
                    us(r.latency.value_at_quantile(0.5)),
                    r.cpu_per_call_us,
                    db_cpu(&r, backend)
                );
                continue;
            }
            let e = measure(&[echo_addr], clients, duration, "echo", 0).await?;
            let tag = format!("r{round}");
            let g = measure(&engram_addrs, clients, duration, &tag, args.users).await?;
            println!(
                "  {clients:>3} clients, round {}: echo {:>8.0}/s p50 {:>6.0} us cpu {:>4.1} us/call | ingest {:>8.0}/s p50 {:>6.0} us cpu {:>4.1} us/call{} | ratio {:.2}",
                round + 1,
                e.rate,
                us(e.latency.value_at_quantile(0.5)),
                e.cpu_per_call_us,
                g.rate,
                us(g.latency.value_at_quantile(0.5)),
                g.cpu_per_call_us,
                db_cpu(&g, backend),
                g.rate / e.rate
            );
            echo.push(e);
            engram.push(g);
        }
        if echo.is_empty() || engram.is_empty() {
            continue; // --only: no side by side
        }
        let mut ratios: Vec<f64> = echo
            .iter()
            .zip(&engram)
            .map(|(e, g)| g.rate / e.rate)
            .collect();
        ratios.sort_by(f64::total_cmp);
        levels.push(Level {
            clients,
            ratio: ratios[ratios.len() / 2],
            echo: median(echo),
            engram: median(engram),
        });
    }
    let _ = stop_echo.send(());
    for stop in stops {
        let _ = stop.send(());
    }
    Ok(levels)
}

/// `, database cpu N us/call` for the PostgreSQL backend, when measured.
fn db_cpu(r: &LevelResult, backend: &str) -> String {
    match r.db_cpu_per_call_us {
        Some(us) if backend == "postgres" => format!(", database cpu {us:.0} us/call"),
        _ => String::new(),
    }
}

/// The benchmark's database.
pub(crate) fn pg_url(given: Option<&str>) -> anyhow::Result<String> {
    if let Some(url) = given {
        return Ok(url.to_owned());
    }
    std::env::var("ENGRAM_BENCH_PG_URL")
        .ok()
        .or_else(|| engram_postgres::testing::checkout_url(Path::new(".")))
        .context("no database: pass --pg-url, set ENGRAM_BENCH_PG_URL or run `make pg` first")
}

/// A new schema for one run's agents.
pub(crate) async fn fresh_schema(url: &str) -> anyhow::Result<String> {
    engram_postgres::testing::fresh_schema(url, "bench")
        .await
        .context("connecting to the database")
}

struct Level {
    clients: usize,
    ratio: f64,
    echo: LevelResult,
    engram: LevelResult,
}

fn median(mut runs: Vec<LevelResult>) -> LevelResult {
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    runs.swap_remove(runs.len() / 2)
}

/// User + system CPU seconds of this process, from /proc (Linux; 0 elsewhere).
fn process_cpu_secs() -> f64 {
    dbcpu::stat_of("/proc/self/stat").map_or(0.0, |f| (f.utime + f.stime) / 100.0)
}

pub(crate) fn us(nanos: u64) -> f64 {
    nanos as f64 / 1000.0
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

struct FsyncResult {
    rate: f64,
    sync: Histogram<u64>,
}

fn fsync_appends(dir: &Path, lines: usize, per_sync: usize) -> anyhow::Result<FsyncResult> {
    let path = dir.join(format!("fsync-{per_sync}.jsonl"));
    let _ = std::fs::remove_file(&path);
    let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
    let mut line = vec![b'x'; 199];
    line.push(b'\n');
    let mut sync = histogram();
    let start = Instant::now();
    for i in 1..=lines {
        file.write_all(&line)?;
        if i % per_sync == 0 || i == lines {
            let t = Instant::now();
            file.sync_data()?;
            sync.record(t.elapsed().as_nanos() as u64)?;
        }
    }
    let rate = lines as f64 / start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(FsyncResult { rate, sync })
}

#[derive(Clone)]
enum Target {
    Echo,
    /// Data dir, metrics on, further `ENGRAM__…` settings.
    Engram(PathBuf, bool, Vec<(String, String)>),
}

struct LevelResult {
    rate: f64,
    /// Process CPU time (server and clients) per call, over the whole run.
    cpu_per_call_us: f64,
    /// PostgreSQL's CPU time per call (`--backend postgres`, the cluster
    /// `make pg` runs on this machine).
    db_cpu_per_call_us: Option<f64>,
    latency: Histogram<u64>,
}

async fn start_server(
    target: &Target,
) -> anyhow::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    match target {
        Target::Echo => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(MemoryServiceServer::new(Echo))
                    .serve_with_incoming_shutdown(incoming, shutdown),
            );
        }
        Target::Engram(dir, metrics, settings) => {
            let metrics_listen = if *metrics { "127.0.0.1:0" } else { "" };
            let mut vars = vec![
                (
                    "ENGRAM__SERVER__METRICS_LISTEN".to_string(),
                    metrics_listen.to_string(),
                ),
                (
                    "ENGRAM__STORE__DATA_DIR".to_string(),
                    dir.display().to_string(),
                ),
                ("ENGRAM__LOG__LEVEL".to_string(), "warn".to_string()),
            ];
            vars.extend(settings.iter().cloned());
            let config = engram_server::Config::load_from(None, vars)?;
            tokio::spawn(engram_server::run(listener, config, shutdown));
        }
    }
    Ok((addr, stop))
}

/// Ingest at `clients` agents, one client each, the clients spread over
/// `addrs` (replicas of one store) in turn; with `users`, agent `c` belongs
/// to user `c mod users`.
async fn measure(
    addrs: &[SocketAddr],
    clients: usize,
    duration: Duration,
    tag: &str,
    users: usize,
) -> anyhow::Result<LevelResult> {
    let mut tasks = vec![];
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(clients));
    for c in 0..clients {
        let addr = addrs[c % addrs.len()];
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        let barrier = std::sync::Arc::clone(&barrier);
        let agent = format!("bench-{tag}-{clients}-{c}");
        let user_id = match users {
            0 => String::new(),
            n => format!("bench-user-{}", c % n),
        };
        tasks.push(tokio::spawn(async move {
            let mut client = MemoryServiceClient::new(channel);
            let mut latency = histogram();
            barrier.wait().await;
            let warmup_end = Instant::now() + Duration::from_millis(300);
            let mut calls = 0u64;
            let mut started = None;
            let mut i = 0u64;
            loop {
                let now = Instant::now();
                if started.is_none() && now >= warmup_end {
                    started = Some(now);
                }
                if let Some(s) = started
                    && now.duration_since(s) >= duration
                {
                    return Ok::<_, Status>((calls, latency));
                }
                i += 1;
                let req = pb::IngestRequest {
                    agent_id: agent.clone(),
                    user_id: user_id.clone(),
                    events: vec![pb::TraceEvent {
                        trace_type: pb::TraceType::User.into(),
                        content: format!("benchmark message number {i} from client {c}, about two hundred bytes in total once stored"),
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let t = Instant::now();
                client.ingest(req).await?;
                if started.is_some() {
                    latency.record(t.elapsed().as_nanos() as u64).expect("in bounds");
                    calls += 1;
                }
            }
        }));
    }
    let db = dbcpu::postmaster();
    let db_start = db.map(dbcpu::cpu_secs);
    let cpu_start = process_cpu_secs();
    let mut latency = histogram();
    let mut calls = 0;
    for t in tasks {
        let (n, h) = t.await??;
        calls += n;
        latency.add(h)?;
    }
    let cpu = process_cpu_secs() - cpu_start;
    let db_cpu = db
        .zip(db_start)
        .map(|(pid, start)| dbcpu::cpu_secs(pid) - start);
    Ok(LevelResult {
        cpu_per_call_us: cpu * 1e6 / calls.max(1) as f64,
        db_cpu_per_call_us: db_cpu.map(|cpu| cpu * 1e6 / calls.max(1) as f64),
        rate: calls as f64 / duration.as_secs_f64(),
        latency,
    })
}

mod dbcpu;
mod echo;
use echo::Echo;
