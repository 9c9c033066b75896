//! `engram-chaos`: kill -9 cycles and a seeded gRPC fuzz against the real
//! `engramd` (see the crate docs). Exits non-zero when anything was lost,
//! duplicated or misplaced, or the server crashed, panicked, hung,
//! answered INTERNAL/UNKNOWN/UNAVAILABLE, or listed a deleted agent.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use engram_chaos::{chaos, daemon, fuzz};

#[derive(Debug, Parser)]
#[command(about = "Engram under kill -9 and hostile gRPC")]
struct Cli {
    /// The engramd to run (default: next to this executable).
    #[arg(long, global = true)]
    binary: Option<PathBuf>,
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// kill -9 cycles under concurrent writers and compactions.
    Chaos {
        #[arg(long, default_value_t = 20)]
        cycles: usize,
        #[arg(long, default_value_t = 16)]
        writers: usize,
        #[arg(long, default_value_t = 6)]
        agents: usize,
        /// Writers run this long (ms, at least) before each kill…
        #[arg(long, default_value_t = 500)]
        min_run_ms: u64,
        /// …and at most.
        #[arg(long, default_value_t = 2500)]
        max_run_ms: u64,
        /// How long the local summarizer takes.
        #[arg(long, default_value_t = 300)]
        llm_delay_ms: u64,
        /// The agents' compaction strategy (policy.strategy; "" for the
        /// default, summarize). With trim, one turn is kept.
        #[arg(long, default_value = "")]
        strategy: String,
    },
    /// Seeded hostile requests to every RPC.
    Fuzz {
        #[arg(long, default_value_t = 5000)]
        cases: usize,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        #[arg(long, default_value_t = 60)]
        call_timeout_secs: u64,
        /// Print every error answer (case, code, message) to stderr.
        #[arg(long)]
        verbose: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let binary = cli.binary.unwrap_or_else(daemon::default_binary);
    let runtime = tokio::runtime::Runtime::new()?;
    let clean = match cli.command {
        Command::Chaos {
            cycles,
            writers,
            agents,
            min_run_ms,
            max_run_ms,
            llm_delay_ms,
            strategy,
        } => {
            let report = runtime.block_on(chaos::run(&chaos::ChaosConfig {
                binary,
                cycles,
                writers,
                agents,
                run_ms: (min_run_ms, max_run_ms.max(min_run_ms)),
                llm_delay: Duration::from_millis(llm_delay_ms),
                seed: cli.seed,
                strategy,
            }))?;
            println!("{report}");
            report.clean()
        }
        Command::Fuzz {
            cases,
            concurrency,
            call_timeout_secs,
            verbose,
        } => {
            let report = runtime.block_on(fuzz::run(&fuzz::FuzzConfig {
                binary,
                seed: cli.seed,
                cases,
                concurrency,
                call_timeout: Duration::from_secs(call_timeout_secs),
                verbose,
                // The server inherits this process's ENGRAM__ variables:
                // ENGRAM__STORE__BACKEND=postgres fuzzes the database backend.
                env: vec![],
            }))?;
            println!("{report}");
            report.clean()
        }
    };
    anyhow::ensure!(clean, "faults found (see above)");
    Ok(())
}
