//! `engram-bench users`: the cost of a user's history. A user with 10, 100
//! and 1,000 earlier conversations (100 messages of ~200 tokens each by
//! default: 100,000 messages at 1,000); each round starts a brand-new
//! conversation of that user, whose first PrepareRequest recalls from all
//! of them (the user's index searched, the start from the last conversation
//! stored). p50 and p99 of that first prompt, against the real `engramd`.
//! Between rounds, untimed, the user's index reads the round's conversation
//! in (a search by user), as background work does between conversations.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use engram_proto::pb;

use crate::ingest::{histogram, us};
use crate::server::{Server, alternating, connect};
use crate::words::Words;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the server's data (emptied first).
    #[arg(long, default_value = "./bench-data/users")]
    data_dir: PathBuf,
    /// Earlier conversations of the user, one case each.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    conversations: Vec<usize>,
    /// Messages per earlier conversation.
    #[arg(long, default_value_t = 100)]
    messages: usize,
    /// New conversations timed per case.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// The server binary.
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
    /// embed.provider: local (the default: the local model embeds the
    /// history in the background, and each prompt's query) or none.
    #[arg(long, default_value = "local")]
    embed: String,
    /// Seconds to wait, per case, for the history to be embedded before
    /// timing (what is left unembedded is reported).
    #[arg(long, default_value_t = 600)]
    embed_wait_secs: u64,
    /// Words of each new conversation's first message (the query the
    /// model embeds: its cost grows with the message, not the history).
    #[arg(long, default_value_t = 180)]
    first_words: usize,
    /// Distinct words of the messages, drawn by Zipf's law as in real
    /// text (a few words in most messages, most words in few); 0: the
    /// other benches' 25 words, each in nearly every message (the worst
    /// case for word search: every query word's postings are walked).
    #[arg(long, default_value_t = 5000)]
    vocabulary: usize,
    /// store.backend: files or postgres (a fresh schema of --pg-url per
    /// case).
    #[arg(long, default_value = "files")]
    backend: String,
    /// The database for --backend postgres (default as for `ingest`).
    #[arg(long)]
    pg_url: Option<String>,
}

const USER: &str = "bench-user";

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    println!(
        "| earlier conversations | messages in all | embedded | first prompt p50 | p99 |\n|---|---|---|---|---|"
    );
    for &n in &args.conversations {
        let data = args.data_dir.join(format!("users-{n}"));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        let mut extra = format!("[embed]\nprovider = \"{}\"\n", args.embed);
        if args.backend == "postgres" {
            let url = crate::ingest::pg_url(args.pg_url.as_deref())?;
            let schema = rt.block_on(crate::ingest::fresh_schema(&url))?;
            extra.push_str(&format!(
                "[store]\nbackend = \"postgres\"\n[store.postgres]\nurl = {url:?}\nschema = {schema:?}\n"
            ));
        }
        let server = Server::start_with(&args.engramd, &data, &extra)?;
        rt.block_on(case(&server.addr, n, &args))?;
    }
    Ok(())
}

async fn case(addr: &str, n: usize, args: &Args) -> anyhow::Result<()> {
    let mut c = connect(addr).await?;
    let words = Words::new(args.vocabulary);
    for k in 0..n {
        let events = (0..args.messages)
            .map(|m| alternating(m, words.text(k * args.messages + m, 180)))
            .collect();
        c.ingest(pb::IngestRequest {
            agent_id: format!("earlier-{k}"),
            user_id: USER.into(),
            events,
            ..Default::default()
        })
        .await?;
    }
    // The history embedded (as far as the wait allows): a search of each
    // conversation that waits for its indexer.
    let deadline = Instant::now() + Duration::from_secs(args.embed_wait_secs);
    if args.embed != "none" {
        for k in 0..n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            c.search_history(pb::SearchHistoryRequest {
                agent_id: format!("earlier-{k}"),
                query: "memory".into(),
                limit: 1,
                wait_for_index_ms: left.as_millis().min(60_000) as u32,
                ..Default::default()
            })
            .await?;
        }
    }
    // The user's index opened and caught up once (what a server does at
    // the first request of a user after it starts).
    let state = c
        .retrieve(pb::RetrieveRequest {
            user_id: USER.into(),
            query: "memory".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .index
        .unwrap_or_default();
    let mut first = histogram();
    for round in 0..args.rounds + 10 {
        let started = Instant::now();
        c.prepare_request(pb::PrepareRequestRequest {
            agent_id: format!("new-{round}"),
            user_id: USER.into(),
            user_input: Some(pb::TraceEvent {
                content: words.text(1_000_000 + round, args.first_words),
                ..Default::default()
            }),
            model: "gpt-4o".into(),
            ..Default::default()
        })
        .await?;
        if round >= 10 {
            first.record(started.elapsed().as_nanos() as u64)?;
        }
        // Untimed: the user's index reads the new conversation in, as the
        // server's background work does between one conversation and the
        // next (what is timed is a new conversation over its history).
        c.search_history(pb::SearchHistoryRequest {
            user_id: USER.into(),
            query: "memory".into(),
            limit: 1,
            ..Default::default()
        })
        .await?;
    }
    println!(
        "| {n} | {} | {} of {} | {:.1} ms | {:.1} ms |",
        n * args.messages,
        state.embedded,
        state.items,
        us(first.value_at_quantile(0.5)) / 1000.0,
        us(first.value_at_quantile(0.99)) / 1000.0,
    );
    Ok(())
}
