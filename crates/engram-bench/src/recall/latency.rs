//! SearchHistory latency by agent size: agents of 1k, 10k and 100k traces
//! (written as files, the oldest in the archive), the first search (which
//! builds the index from the files) timed alone, then the time until the
//! background indexer has embedded every item (the local model's indexing
//! rate, when engramd has one), then ranked searches, whose time includes
//! embedding the query (each search a question of its own).
//!
//! The text is the prepare benchmark's: 25 words in every message, so every
//! query term matches nearly every trace — the worst case for BM25, whose
//! cost follows the posting lists it walks.

use std::path::Path;
use std::time::Instant;

use engram_proto::pb;

use crate::ingest::{histogram, us};
use crate::prepare::make_agent;
use crate::server::{Server, connect};

const QUERIES: [&str; 5] = [
    "what was the weather forecast for the city?",
    "tool result latency",
    "which prompt did the provider cache",
    "summary of the compaction budget",
    "when did we talk about the archive window",
];

/// Traces kept active; the rest of an agent is archived.
const ACTIVE: usize = 2_000;

/// `i` spelled digit by digit ("two zero three"): a number would be a date
/// term as well; words are only more query terms, which the benchmark text
/// does not hold.
fn ordinal(i: usize) -> String {
    const ONES: [&str; 10] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    let digits = i.to_string();
    digits
        .bytes()
        .map(|d| ONES[usize::from(d - b'0')])
        .collect::<Vec<_>>()
        .join(" ")
}

pub async fn run(
    engramd: &Path,
    data: &Path,
    sizes: &[usize],
    rounds: usize,
) -> anyhow::Result<()> {
    for &n in sizes {
        let active = n.min(ACTIVE);
        make_agent(&data.join(format!("agents/size-{n}")), active, n - active)?;
    }
    let server = Server::start(engramd, data)?;
    let mut client = connect(&server.addr).await?;
    println!(
        "| traces | first search (indexes the words) | embedding every item | p50 µs | p99 µs | items / embedded |"
    );
    println!("|---|---|---|---|---|---|");
    for &n in sizes {
        let agent = format!("size-{n}");
        let ask = |q: &str| pb::SearchHistoryRequest {
            agent_id: agent.clone(),
            query: q.into(),
            limit: 10,
            ..Default::default()
        };
        let start = Instant::now();
        let first = client.search_history(ask(QUERIES[0])).await?.into_inner();
        let build = start.elapsed();
        let start = Instant::now();
        let embedded = loop {
            let page = client
                .search_history(pb::SearchHistoryRequest {
                    wait_for_index_ms: 60_000,
                    ..ask(QUERIES[0])
                })
                .await?
                .into_inner();
            let index = page.index.unwrap_or_default();
            if index.pending == 0 {
                break index.embedded;
            }
        };
        let embedding = start.elapsed();
        let mut h = histogram();
        for i in 0..rounds {
            // Each question once: the server remembers the vectors of the
            // texts it embedded last, and a repeated one would not be
            // embedded again (the ranking alone would be timed).
            let query = format!("{} ({})", QUERIES[i % QUERIES.len()], ordinal(i));
            let start = Instant::now();
            client.search_history(ask(&query)).await?;
            h.record(start.elapsed().as_nanos() as u64)?;
        }
        let items = first.index.map_or(0, |i| i.items);
        let rate = if embedded > 0 {
            format!(
                "{:.1} s ({:.0} items/s)",
                embedding.as_secs_f64(),
                embedded as f64 / embedding.as_secs_f64()
            )
        } else {
            "no model".to_owned()
        };
        println!(
            "| {n} | {:.2} s ({:.0} traces/s) | {rate} | {:.0} | {:.0} | {items} / {embedded} |",
            build.as_secs_f64(),
            items as f64 / build.as_secs_f64(),
            us(h.value_at_quantile(0.5)),
            us(h.value_at_quantile(0.99)),
        );
    }
    Ok(())
}
