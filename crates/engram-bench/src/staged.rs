//! Searching what the index has not committed: the whole ranking by words
//! over an agent's index of N committed traces, with 1,000 more staged
//! (what a search reads in when the indexer has not run: a compaction's
//! archive, an import), against the same N + 1,000 all committed. And
//! what reading the 1,000 in costs a request each way: staging them, or
//! the tantivy commit (in memory) a request paid before.

use std::time::Instant;

use clap::Parser;
use engram_index::{Filter, Item, Kind, Lexical, Params};
use hdrhistogram::Histogram;

use crate::ingest::histogram;
use crate::words::Words;

#[derive(Debug, Parser)]
pub struct Args {
    /// Committed traces before the staged ones (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub committed: Vec<usize>,
    /// Traces staged on top.
    #[arg(long, default_value_t = 1000)]
    pub staged: usize,
    /// Searches timed per index (each a different question).
    #[arg(long, default_value_t = 400)]
    pub searches: usize,
    /// Distinct words of the messages (Zipf's law).
    #[arg(long, default_value_t = 20_000)]
    pub vocabulary: usize,
}

fn traces(words: &Words, from: usize, n: usize) -> Vec<Item> {
    (from..from + n)
        .map(|i| Item {
            key: format!("t{i}"),
            kind: Kind::Trace,
            trace_type: 1 + (i % 2) as u8,
            order: engram_index::order(i as u32 / 2 + 1, (i % 2) as u32),
            ts: 1_700_000_000.0 + i as f64 * 30.0,
            text: words.text(i, 40),
            name: None,
            body: format!("{{\"id\":\"t{i}\"}}"),
        })
        .collect()
}

/// p50 and p99 (ms) of the ranking by words for `questions` over each
/// index, the two timed in turn for each question (drift falls on both).
fn searches(indexes: [&mut Lexical; 2], questions: &[String]) -> anyhow::Result<[(f64, f64); 2]> {
    let params = Params::default();
    let filter = Filter::default();
    let mut h: [Histogram<u64>; 2] = [histogram(), histogram()];
    let [first, second] = indexes;
    for q in questions {
        for (index, h) in [&mut *first, &mut *second].into_iter().zip(&mut h) {
            let t = Instant::now();
            let ranked = engram_index::rank(index, None, q, &filter, 10, &params)?;
            h.record(t.elapsed().as_nanos() as u64)?;
            std::hint::black_box(ranked);
        }
    }
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e6;
    Ok([0, 1].map(|i| (ms(&h[i], 0.5), ms(&h[i], 0.99))))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let words = Words::new(args.vocabulary);
    // Questions of a few words from the same vocabulary.
    let questions: Vec<String> = (0..args.searches)
        .map(|i| words.text(1_000_000 + i, 6))
        .collect();
    println!(
        "| committed | + staged | search p50 / p99 ms, all committed | search p50 / p99 ms, {} staged | reading {} in: staged ms | reading them in: committed ms |",
        args.staged, args.staged
    );
    println!("|---|---|---|---|---|---|");
    for &n in &args.committed {
        let base = traces(&words, 0, n);
        let more = traces(&words, n, args.staged);

        let mut all = Lexical::in_memory()?;
        all.upsert(&base)?;
        all.commit("")?;
        let t = Instant::now();
        all.upsert(&more)?;
        all.commit_in_memory("")?;
        let commit_ms = t.elapsed().as_secs_f64() * 1e3;

        let mut staged = Lexical::in_memory()?;
        staged.upsert(&base)?;
        staged.commit("")?;
        let t = Instant::now();
        staged.stage(&more)?;
        let stage_ms = t.elapsed().as_secs_f64() * 1e3;

        // Warm both (readers, sittings tables) before timing.
        searches([&mut all, &mut staged], &questions[..10])?;
        let [(a50, a99), (s50, s99)] = searches([&mut all, &mut staged], &questions)?;
        println!(
            "| {n} | {} | {a50:.2} / {a99:.2} | {s50:.2} / {s99:.2} | {stage_ms:.1} | {commit_ms:.1} |",
            args.staged
        );
    }
    Ok(())
}
