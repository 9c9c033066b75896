//! `engram-bench`: Engram's benchmarks (docs/BENCHMARKS.md).
//!
//! - `ingest`: durable Ingest against the disk's fdatasync rate and a tonic
//!   echo service (the framework ceiling).
//! - `prepare`: PrepareRequest latency by transcript size, with and without
//!   a large archive, and memory per loaded agent.

mod ingest;
mod prepare;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Engram benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Durable Ingest vs fdatasync and a tonic echo service.
    Ingest(ingest::Args),
    /// PrepareRequest latency by transcript size and archive size.
    Prepare(prepare::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Ingest(args) => ingest::run(args),
        Command::Prepare(args) => prepare::run(args),
    }
}
