//! `engramd`: the Engram server binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use engram_server::{Config, config::DEFAULT_TOML, telemetry};

/// Engram: a gRPC memory service for LLM agents.
#[derive(Debug, Parser)]
#[command(version, about)]
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
}

fn main() -> ExitCode {
    match serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engramd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn serve() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Defaults) = cli.command {
        print!("{DEFAULT_TOML}");
        return Ok(());
    }
    let config = Config::load(cli.config.as_deref())?;
    if let Some(Command::CheckConfig) = cli.command {
        println!("configuration ok");
        return Ok(());
    }
    telemetry::init(&config.log);
    let addr = config.listen_addr()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding server.listen {addr}"))?;
    let local = listener.local_addr()?;
    let shutdown = shutdown_signal()?;
    tracing::info!(%local, data_dir = %config.store.data_dir.display(), fsync = ?config.store.fsync, "engramd listening");
    // One machine-readable line on stdout, for scripts and tests that start
    // the server on port 0.
    println!("engramd listening on {local}");
    engram_server::run(listener, config, shutdown).await?;
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
