//! `engramd`: the Engram server binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use engram_server::config::{BackendSetting, DEFAULT_TOML};
use engram_server::probe::{self, Probe};
use engram_server::{Config, telemetry};

// jemalloc: Engram allocates many short-lived buffers per call (protobuf,
// JSON lines, rendered bodies), on a changing set of threads (the blocking
// pool). glibc's malloc/free was the largest item in profiles; mimalloc was
// as fast but kept freed memory in each thread's heap, so resident memory
// grew with the threads that had ever rendered a prompt (2.5x glibc's for
// the same agents). jemalloc is as fast as mimalloc and holds about what
// glibc holds.
// See docs/BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts: a background thread gives
/// memory freed a while ago back to the system, instead of waiting for the
/// next allocations to do it, so an idle server's resident memory comes
/// down after a burst; and it does so after 1 s rather than jemalloc's
/// 10 s (with a memory budget, agents unloaded and loaded again many
/// times a second left 120 MB of freed pages resident at the peak, with
/// no change in latency: docs/BENCHMARKS.md).
// Unsafe only in name: a symbol jemalloc looks up, and its Sync below.
#[allow(unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr());

#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// Safety: it points at a static string jemalloc only reads.
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}

/// Engram: memory for LLM agents. Agents send every event (Ingest) and ask
/// for each prompt (PrepareRequest); Engram keeps the transcript inside
/// the model's window, compacts old turns, and recalls and searches what
/// was said. Serves gRPC; with no command, `serve`.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// TOML config file, layered over the defaults (env vars
    /// ENGRAM__SECTION__KEY override both).
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve gRPC (the default).
    Serve,
    /// Validate the configuration and exit.
    CheckConfig,
    /// Print the built-in default configuration.
    Defaults,
    /// Rebuild the search index from the agents' files (every agent, or
    /// one), embedding every item with the configured model; with the
    /// server stopped (the data directory is locked while either runs).
    Reindex {
        /// Only this agent.
        #[arg(long)]
        agent: Option<String>,
    },
    /// Apply the database schema's migrations (`store.backend =
    /// "postgres"`) and exit; replicas can then start with
    /// `store.postgres.migrate = false`.
    Migrate,
    /// Ask a running server's gRPC health service; exit 0 when SERVING
    /// (for container HEALTHCHECKs and exec probes).
    Health {
        /// host:port to ask; default: server.listen (0.0.0.0 asks 127.0.0.1).
        #[arg(long)]
        addr: Option<String>,
        /// Service to ask about; empty: the server as a whole.
        #[arg(long, default_value = "")]
        service: String,
        /// PEM CA to verify the server with; the call then uses TLS.
        #[arg(long)]
        tls_ca: Option<PathBuf>,
        /// Name to verify in the server's certificate (default: the host).
        #[arg(long, requires = "tls_ca")]
        tls_domain: Option<String>,
        /// Client certificate (PEM) for servers that require mTLS.
        #[arg(long, requires_all = ["tls_key", "tls_ca"])]
        tls_cert: Option<PathBuf>,
        /// The client certificate's key (PEM).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        #[arg(long, default_value_t = 5)]
        timeout_secs: u64,
    },
}

/// What jemalloc holds resident (live allocations, its metadata, the freed
/// pages it keeps), for the memory budget.
fn heap_resident() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    let bytes = tikv_jemalloc_ctl::stats::resident::read().ok()?;
    u64::try_from(bytes).ok()
}

/// Purges every arena's freed pages now (after the budget unloaded
/// agents), rather than after the decay time.
fn heap_release_freed() {
    // `arena.<MALLCTL_ARENAS_ALL>.purge` takes and gives nothing.
    // Safety: a NUL-terminated name, and null pointers with zero
    // lengths, as jemalloc's mallctl documents for this control.
    #[allow(unsafe_code)]
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

fn main() -> ExitCode {
    engram_engine::use_heap(engram_engine::Heap {
        resident: heap_resident,
        release_freed: heap_release_freed,
    });
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| {
            let result = runtime.block_on(serve());
            // The store is closed (or was never opened) by now; whatever
            // blocking work is still running holds nothing acknowledged, so
            // it must not keep the process alive after a failed start.
            runtime.shutdown_timeout(SHUTDOWN_WAIT);
            result
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engramd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How long the runtime waits for blocking tasks once serving has ended.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

async fn serve() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Defaults) = cli.command {
        print!("{DEFAULT_TOML}");
        return Ok(());
    }
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Some(Command::CheckConfig) => {
            println!("configuration ok");
            Ok(())
        }
        Some(Command::Health {
            addr,
            service,
            tls_ca,
            tls_domain,
            tls_cert,
            tls_key,
            timeout_secs,
        }) => {
            let probe = Probe {
                addr: addr
                    .unwrap_or_else(|| probe::local_addr(config.listen_addr().expect("validated"))),
                service,
                tls_ca,
                tls_domain,
                tls_identity: tls_cert.zip(tls_key),
                timeout: std::time::Duration::from_secs(timeout_secs),
            };
            health(&probe).await
        }
        Some(Command::Migrate) => migrate(&config).await,
        Some(Command::Reindex { agent }) => reindex(&config, agent.as_deref()).await,
        Some(Command::Serve | Command::Defaults) | None => listen(config).await,
    }
}

/// `engramd health`: exit 0 when the server says SERVING.
async fn health(probe: &Probe) -> anyhow::Result<()> {
    let status = probe::check(probe).await?;
    println!("{}", status.as_str_name());
    anyhow::ensure!(
        status == tonic_health::pb::health_check_response::ServingStatus::Serving,
        "{} is not serving",
        probe.addr
    );
    Ok(())
}

/// `engramd migrate`: the database schema brought current.
async fn migrate(config: &Config) -> anyhow::Result<()> {
    telemetry::init(&config.log);
    anyhow::ensure!(
        config.store.backend == BackendSetting::Postgres,
        "engramd migrate is for store.backend = \"postgres\"; the file store needs no migration"
    );
    engram_postgres::migrate_url(&config.postgres_config()).await?;
    println!("database schema is current");
    Ok(())
}

/// `engramd reindex`: every agent's (or one agent's) index rebuilt, a
/// line per agent as it finishes.
async fn reindex(config: &Config, agent: Option<&str>) -> anyhow::Result<()> {
    telemetry::init(&config.log);
    engram_server::reindex(config, agent, |id, index| {
        println!(
            "{id}: {} items, {} embedded{}",
            index.items,
            index.embedded,
            if index.model.is_empty() {
                String::new()
            } else {
                format!(" ({})", index.model)
            }
        );
    })
    .await?;
    Ok(())
}

/// `engramd serve`: binds the listeners, says where on stdout, serves
/// until SIGTERM or SIGINT.
async fn listen(config: Config) -> anyhow::Result<()> {
    telemetry::init(&config.log);
    // Before the listening line: a second engramd on this data says why
    // it cannot serve instead of seeming to. (Database replicas share
    // their data by design.)
    let _held = match config.store.backend {
        BackendSetting::Files => Some(engram_server::lock_data_dir(&config.store.data_dir)?),
        BackendSetting::Postgres => None,
    };
    let addr = config.listen_addr()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding server.listen {addr}"))?;
    let local = listener.local_addr()?;
    let listeners = engram_server::Listeners::bind_for(listener, &config).await?;
    let shutdown = shutdown_signal()?;
    match config.store.backend {
        BackendSetting::Files => {
            tracing::info!(%local, data_dir = %engram_server::wiring::absolute(&config.store.data_dir).display(), fsync = ?config.store.fsync, "engramd listening");
        }
        BackendSetting::Postgres => {
            tracing::info!(%local, backend = "postgres", "engramd listening");
        }
    }
    // Machine-readable lines on stdout, for scripts and tests that start the
    // server on port 0: gRPC first, as always, then metrics and HTTP if on.
    // Every listener is bound already. A reader that stopped reading
    // (closed our stdout after the line it wanted) is no reason to stop.
    announce(format_args!("engramd listening on {local}"));
    if let Some(m) = &listeners.metrics {
        announce(format_args!("engramd metrics on {}", m.local_addr()?));
    }
    if let Some(h) = &listeners.http {
        let addr = h.local_addr()?;
        tracing::info!(%addr, "HTTP listening: the JSON API under /v1/");
        announce(format_args!("engramd http on {addr}"));
    }
    engram_server::run_on(listeners, config, shutdown).await?;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is
/// called, not when first polled, so a signal that arrives right after
/// start-up still drains instead of killing the process.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// One line on stdout, flushed; a closed stdout is ignored (`println!`
/// would panic on it).
fn announce(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}
