//! `engram-bench`: Engram's benchmarks (docs/BENCHMARKS.md).
//!
//! - `ingest`: durable Ingest against the disk's fdatasync rate and a tonic
//!   echo service (the framework ceiling).
//! - `prepare`: PrepareRequest latency by transcript size, with and without
//!   a large archive, and memory per loaded agent; with `--agent-loop`, one
//!   agent's turns (a user message in, an answer ingested) over a 32k
//!   window, with recall off, by words, and with the local model.
//! - `compact`: the store's part of a compaction by window size, and Ingest
//!   latency while a compaction waits for its summary.
//! - `hostile`: token counting of 1M characters without whitespace, and
//!   small-Ingest latency while other clients prepare 1M-character prompts.
//! - `embed`: the local model alone, f32 against int8: messages a second,
//!   one query's latency, and how near the two precisions' vectors are.
//! - `facts`: AddMemories throughput and ListMemories/GetMemory latency by
//!   how many facts an agent has.
//! - `memory`: conversation text across many agents against a memory
//!   budget: peak resident memory, and the cost of reloading an agent.
//! - `overload`: a thousand clients at once, with the server's limits and
//!   without: calls answered and shed, latency, health checks, memory.
//! - `soak`: long mixed load (`make soak`); what grows without bound.
//! - `truth`: generated users whose attributes change across dated
//!   conversations: the current value in the prompt, stale values shown
//!   or presented as current, stale and duplicate live facts.

mod agent_loop;
mod compact;
mod embed;
mod facts;
mod hostile;
mod ingest;
mod memory;
mod overload;
mod prepare;
mod recall;
mod server;
mod soak;
mod staged;
mod strategies;
mod truth;
mod users;
mod words;

// The allocator engramd uses, so in-process measurements match the binary
// (and echo gets it too: the ratio compares like with like).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// Compaction cost without the LLM, and Ingest during a compaction.
    Compact(compact::Args),
    /// Counting hostile text, and Ingest latency beside huge prompts.
    Hostile(hostile::Args),
    /// Evidence recall on LoCoMo: ranked search vs a plain BM25.
    Recall(recall::Args),
    /// A new conversation's first prompt, by how many the user had before.
    Users(users::Args),
    /// The local model alone: f32 against int8.
    Embed(embed::Args),
    /// AddMemories throughput and ListMemories/GetMemory latency by facts.
    Facts(facts::Args),
    /// Far more clients than the machine serves: shed, latency, health.
    Overload(overload::Args),
    /// Conversation text across many agents against a memory budget.
    Memory(memory::Args),
    /// Long mixed load: does memory, fds, threads, the index or latency grow?
    Soak(soak::Args),
    /// PrepareRequest at the trigger by compaction strategy.
    Strategies(strategies::Args),
    /// Searching 1,000 traces the index has not committed (staged).
    Staged(staged::Args),
    /// Memory that stays true: changing attributes across conversations.
    Truth(truth::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Ingest(args) => ingest::run(args),
        Command::Prepare(args) => prepare::run(args),
        Command::Compact(args) => compact::run(args),
        Command::Hostile(args) => hostile::run(args),
        Command::Recall(args) => recall::run(args),
        Command::Users(args) => users::run(args),
        Command::Facts(args) => facts::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Overload(args) => overload::run(args),
        Command::Memory(args) => memory::run(args),
        Command::Soak(args) => soak::run(args),
        Command::Strategies(args) => strategies::run(args),
        Command::Staged(args) => staged::run(args),
        Command::Truth(args) => truth::run(args),
    }
}
