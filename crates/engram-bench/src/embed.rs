//! The local model on its own: how fast it embeds chat messages (the
//! indexer's work) and one query (a search's), in f32 and in int8, and how
//! near the two precisions' vectors are.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use engram_embed::{LocalModel, Precision};

use crate::ingest::{histogram, us};
use crate::recall::locomo;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// LoCoMo conversations (a directory of JSON files).
    #[arg(long, default_value = "../shared/eval/locomo-dev")]
    data: PathBuf,
    /// The model directory.
    #[arg(long, default_value = "./models/all-MiniLM-L6-v2")]
    model: PathBuf,
    /// Messages embedded for the throughput (in batches of 64, as the
    /// indexer sends them).
    #[arg(long, default_value_t = 2000)]
    messages: usize,
    /// Join this many consecutive messages into one text (longer texts:
    /// 8 makes ~2 KiB, the model's 256-token limit).
    #[arg(long, default_value_t = 1)]
    join: usize,
    /// Queries timed one at a time (the questions, then 200-character
    /// tails of messages: what a new turn's recall embeds).
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Rounds, alternating the precisions (ratios within one run).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Only this precision (`f32` or `int8`), e.g. to profile one.
    #[arg(long)]
    only: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    let conversations = locomo::load_dir(&args.data)?;
    let messages: Vec<String> = conversations
        .iter()
        .flat_map(|c| c.messages.chunks(args.join.max(1)))
        .map(|run| {
            run.iter()
                .map(|m| format!("{}: {}", m.speaker, m.text))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .take(args.messages)
        .collect();
    let questions: Vec<String> = conversations
        .iter()
        .flat_map(|c| &c.questions)
        .map(|q| q.question.clone())
        .take(args.queries)
        .collect();
    // A new turn's query: the last 200 characters of a long message.
    let tails: Vec<String> = conversations
        .iter()
        .flat_map(|c| c.messages.windows(3))
        .map(|w| {
            let text: String = w
                .iter()
                .map(|m| m.text.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let chars: Vec<char> = text.chars().collect();
            chars[chars.len().saturating_sub(200)..].iter().collect()
        })
        .take(args.queries)
        .collect();
    let models = [
        ("f32", LocalModel::load_as(&args.model, Precision::F32)),
        ("int8", LocalModel::load_as(&args.model, Precision::Int8)),
    ];
    let mut loaded = Vec::new();
    for (name, model) in models {
        if args.only.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        loaded.push((name, model.with_context(|| format!("loading {name}"))?));
    }
    println!(
        "{} messages, {} questions, {} 200-char queries; VNNI here: {}",
        messages.len(),
        questions.len(),
        tails.len(),
        Precision::fastest() == Precision::Int8
    );
    println!("| round | precision | messages/s | question p50 / p99 ms | 200-char p50 / p99 ms |");
    println!("|---|---|---|---|---|");
    let mut vectors: Vec<Vec<Vec<f32>>> = vec![Vec::new(); loaded.len()];
    for round in 1..=args.rounds {
        for (i, (name, model)) in loaded.iter().enumerate() {
            let start = Instant::now();
            let mut out = Vec::with_capacity(messages.len());
            for batch in messages.chunks(64) {
                out.extend(model.embed_blocking(batch)?);
            }
            let rate = messages.len() as f64 / start.elapsed().as_secs_f64();
            let (q50, q99) = timed(model, &questions)?;
            let (t50, t99) = timed(model, &tails)?;
            println!(
                "| {round} | {name} | {rate:.0} | {q50:.2} / {q99:.2} | {t50:.2} / {t99:.2} |"
            );
            vectors[i] = out;
        }
    }
    if vectors.len() < 2 {
        return Ok(());
    }
    let cosines: Vec<f32> = vectors[0]
        .iter()
        .zip(&vectors[1])
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum())
        .collect();
    let mean = cosines.iter().sum::<f32>() / cosines.len().max(1) as f32;
    let min = cosines.iter().copied().fold(f32::INFINITY, f32::min);
    println!("cosine of int8 to f32 vectors: mean {mean:.5}, min {min:.5}");
    Ok(())
}

/// p50 and p99 in ms of embedding each text alone.
fn timed(model: &LocalModel, texts: &[String]) -> Result<(f64, f64)> {
    let mut h = histogram();
    for text in texts {
        let start = Instant::now();
        model.embed_blocking(std::slice::from_ref(text))?;
        h.record(start.elapsed().as_nanos() as u64)?;
    }
    let ms = |q: f64| us(h.value_at_quantile(q)) / 1e3;
    Ok((ms(0.5), ms(0.99)))
}
