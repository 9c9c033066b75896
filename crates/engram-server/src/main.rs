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
    tracing::info!(%local, data_dir = %config.store.data_dir.display(), fsync = ?config.store.fsync, "engramd listening");
    // One machine-readable line on stdout, for scripts and tests that start
    // the server on port 0.
    println!("engramd listening on {local}");
    engram_server::run(listener, config, shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
