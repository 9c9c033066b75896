//! `engram-bench recall`: can Engram find what was said? Evidence recall
//! on LoCoMo (docs/BENCHMARKS.md), next to a plain BM25 in the same run.

mod baseline;
mod context_exp;
mod grpc;
mod latency;
pub mod locomo;
mod paraphrase;
mod prompt;
mod users;

use std::path::PathBuf;

use anyhow::Result;
use engram_index::{Filter, Item, Kind, Lexical, Params};

use locomo::{Conversation, Score};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory of LoCoMo conversations (conv-*.json), e.g.
    /// ../shared/eval/locomo-dev.
    #[arg(long)]
    pub data: PathBuf,
    /// The engramd binary to ask through SearchHistory (skipped if absent).
    #[arg(long, default_value = "target/release/engramd")]
    pub engramd: PathBuf,
    /// Scratch directory for the server's data (emptied first).
    #[arg(long, default_value = "./bench-data/recall")]
    pub data_dir: PathBuf,
    /// Agent sizes (traces) for the SearchHistory latency part; `--sizes`
    /// alone: none.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1000,10000,100000")]
    pub sizes: Vec<usize>,
    /// Searches timed per size.
    #[arg(long, default_value_t = 300)]
    pub rounds: usize,
    /// Share of a neighbour's score a message gains (ranking experiment).
    #[arg(long)]
    pub neighbour_weight: Option<f32>,
    /// Neighbours on each side.
    #[arg(long)]
    pub neighbour_span: Option<usize>,
    /// Parts to run: search (evidence recall of SearchHistory and the
    /// baselines), prompt (Retrieve and the prompt at an 8k window: recall
    /// on with the questions back to back, paced and after the index; and
    /// off), users (each session a conversation of one user, each
    /// question a new conversation's first prompt), paraphrase, latency;
    /// and on request, context (the in-process ranking with each message
    /// embedded alone or read after the one before, LoCoMo and the
    /// paraphrases: `RECALL_CONTEXT_MODES`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "search,prompt,users,paraphrase,latency"
    )]
    pub parts: Vec<String>,
    /// store.backend of the servers the search and prompt parts ask:
    /// files, or postgres (each server in a fresh schema of --pg-url).
    #[arg(long, default_value = "files")]
    pub backend: String,
    /// Whether the search part also runs each ranking mechanism off
    /// (`--ablations false`: only every mechanism, for quick experiments).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub ablations: bool,
    /// The database for --backend postgres (default as for `ingest`).
    #[arg(long)]
    pub pg_url: Option<String>,
    /// The prompt part's paced run: the pause after each conversation
    /// before its first question, and between questions (ms), as an agent
    /// waiting for its model would leave.
    #[arg(long, default_value_t = 15_000)]
    pub pace_after_ms: u64,
    #[arg(long, default_value_t = 500)]
    pub pace_between_ms: u64,
    /// The prompt part's runs: back-to-back, paced, waited (after the
    /// index), off (recall off). Retrieve's table needs `waited`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "back-to-back,paced,waited,off"
    )]
    pub prompt_runs: Vec<String>,
}

/// Each ranking mechanism off in turn (issue 28): what it adds. Each is a
/// scratch directory, a `[search]` setting and a label.
const ABLATIONS: [(&str, &str, &str); 4] = [
    (
        "speaker-prior-off",
        "speaker_prior = 1.0",
        "SearchHistory, no speaker prior",
    ),
    (
        "expansion-off",
        "expansion_words = 0",
        "SearchHistory, no expansion",
    ),
    (
        "sittings-off",
        "sitting_weight = 0.0",
        "SearchHistory, no sitting scores",
    ),
    (
        "question-prior-off",
        "question_prior = 1.0",
        "SearchHistory, no question prior",
    ),
];

pub fn run(args: Args) -> Result<()> {
    let convs = locomo::load_dir(&args.data)?;
    let part = |name: &str| args.parts.iter().any(|p| p == name);
    let mut params = Params::default();
    if let Some(w) = args.neighbour_weight {
        params.neighbour_weight = w;
    }
    if let Some(s) = args.neighbour_span {
        params.neighbour_span = s;
    }
    println!("{} conversations\n", convs.len());
    if part("search") {
        let mut base = Score::default();
        let mut index = Score::default();
        for conv in &convs {
            baseline_conv(conv, &mut base);
            index_conv(conv, &params, &mut index)?;
        }
        println!("{} questions\n", base.questions());
        println!("| retriever | category | all / any @5 | @10 | @25 |\n|---|---|---|---|---|");
        print!("{}", base.table("plain BM25"));
        print!("{}", index.table("words only (in process)"));
    }
    if part("context") {
        context_exp::run(&convs, &params)?;
    }
    if !args.engramd.exists() {
        eprintln!(
            "{} not found: the parts through engramd are skipped",
            args.engramd.display()
        );
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&args.data_dir);
    std::fs::create_dir_all(&args.data_dir)?;
    let rt = tokio::runtime::Runtime::new()?;
    // The search and prompt parts' store: the files under each run's
    // directory, or a schema of its own per run.
    let store = || -> Result<String> {
        if args.backend != "postgres" {
            return Ok(String::new());
        }
        let url = crate::ingest::pg_url(args.pg_url.as_deref())?;
        let schema = rt.block_on(crate::ingest::fresh_schema(&url))?;
        Ok(format!(
            "[store]\nbackend = \"postgres\"\n[store.postgres]\nurl = {url:?}\nschema = {schema:?}\n"
        ))
    };
    if part("search") {
        let (served, timed) = rt.block_on(grpc::search_history(
            &args.engramd,
            &args.data_dir,
            &convs,
            &store()?,
        ))?;
        print!("{}", served.table("SearchHistory"));
        let mut latencies = grpc::latency_line("every mechanism", &timed);
        let ablations: &[(&str, &str, &str)] = if args.ablations { &ABLATIONS } else { &[] };
        for &(dir, setting, label) in ablations {
            let off = args.data_dir.join(dir);
            std::fs::create_dir_all(&off)?;
            let (without, timed) = rt.block_on(grpc::search_history(
                &args.engramd,
                &off,
                &convs,
                &format!("{}[search]\n{setting}\n", store()?),
            ))?;
            print!("{}", without.table(label));
            latencies.push_str(&grpc::latency_line(label, &timed));
        }
        print!("\n{latencies}");
    }
    if part("prompt") {
        use prompt::Pace;
        let paced = Pace::Paced {
            after: std::time::Duration::from_millis(args.pace_after_ms),
            between: std::time::Duration::from_millis(args.pace_between_ms),
        };
        // Recall on, the questions back to back, paced, and after the
        // index; then off (pace does not matter without recall).
        let mut runs = vec![];
        for (run, name, recall, pace) in [
            ("back-to-back", "prompt-fast", true, Pace::BackToBack),
            ("paced", "prompt-paced", true, paced),
            ("waited", "prompt", true, Pace::Waited),
            ("off", "prompt-off", false, Pace::BackToBack),
        ] {
            if !args.prompt_runs.iter().any(|r| r == run) {
                continue;
            }
            let data = args.data_dir.join(name);
            std::fs::create_dir_all(&data)?;
            let store = store()?;
            let on = (args.engramd.as_path(), data.as_path(), store.as_str());
            let run = rt.block_on(prompt::run(on, &convs, recall, pace))?;
            runs.push((recall, pace, run));
        }
        if let Some((_, _, (_, retrieve))) = runs.iter().find(|r| r.1 == Pace::Waited) {
            println!(
                "\n| retriever | category | all / any @5 | @10 | @25 |\n|---|---|---|---|---|"
            );
            print!("{}", retrieve.table("Retrieve (compacted, 8k)"));
        }
        let Some((_, first, (on, _))) = runs.first() else {
            anyhow::bail!("--prompt-runs names no run");
        };
        println!(
            "\nEvidence in the PrepareRequest prompt (8,192-token window): {} questions, {} compactions, a recall block in {} prompts (~{} tokens each), {}\n",
            on.questions(),
            on.compactions,
            on.with_block,
            on.block_tokens / on.with_block.max(1) as u64,
            first.label()
        );
        println!("| prompt | category | all / any evidence in it |\n|---|---|---|");
        for (recall, pace, (shares, _)) in &runs {
            let name = if *recall {
                format!("recall on, {}", pace.label())
            } else {
                "recall off".to_owned()
            };
            print!("{}", shares.table(&name));
        }
    }
    if part("users") {
        let data = args.data_dir.join("users");
        std::fs::create_dir_all(&data)?;
        let across = rt.block_on(users::run(&args.engramd, &data, &convs))?;
        println!(
            "\nEvidence in a new conversation's first prompt, each session an earlier conversation of the user (8,192-token window): {} questions, a recall block in {} prompts\n",
            across.questions(),
            across.with_block
        );
        println!("| prompt | category | all / any evidence in it |\n|---|---|---|");
        print!("{}", across.table("across conversations"));
    }
    if part("paraphrase") {
        let data = args.data_dir.join("paraphrase");
        std::fs::create_dir_all(&data)?;
        let (words, both) = rt.block_on(paraphrase::run(&args.engramd, &data))?;
        let n = paraphrase::PAIRS.len();
        println!(
            "\nParaphrases ({n} questions sharing no indexed word with their message)\n\n| retriever | @1 | @5 |\n|---|---|---|\n| words only (in process) | {}/{n} | {}/{n} |\n| SearchHistory (words + meaning) | {}/{n} | {}/{n} |",
            words.at1, words.at5, both.at1, both.at5
        );
    }
    if part("latency") && !args.sizes.is_empty() {
        let data = args.data_dir.join("latency");
        std::fs::create_dir_all(&data)?;
        println!("\nSearchHistory latency by agent size\n");
        rt.block_on(latency::run(&args.engramd, &data, &args.sizes, args.rounds))?;
    }
    Ok(())
}

fn baseline_conv(conv: &Conversation, score: &mut Score) {
    let bm25 = baseline::Bm25::new(conv.messages.iter().map(|m| m.text.as_str()));
    for q in &conv.questions {
        let ranked: Vec<String> = bm25
            .top(&q.question, 25)
            .into_iter()
            .map(|i| conv.messages[i].dia_id.clone())
            .collect();
        score.add(q, &ranked);
    }
}

/// Turn and seq as Engram assigns them: speaker A's message opens a turn.
fn orders(conv: &Conversation) -> Vec<u64> {
    let (mut turn, mut seq) = (0u32, 0u32);
    conv.messages
        .iter()
        .map(|m| {
            if m.is_a || turn == 0 {
                turn += 1;
                seq = 0;
            } else {
                seq += 1;
            }
            engram_index::order(turn, seq)
        })
        .collect()
}

fn index_conv(conv: &Conversation, params: &Params, score: &mut Score) -> Result<()> {
    let mut lex = Lexical::in_memory()?;
    let items: Vec<Item> = conv
        .messages
        .iter()
        .zip(orders(conv))
        .map(|(m, order)| Item {
            key: m.dia_id.clone(),
            kind: Kind::Trace,
            trace_type: 1,
            order,
            ts: m.ts,
            text: m.text.clone(),
            name: Some(m.speaker.clone()),
            body: m.dia_id.clone(),
        })
        .collect();
    lex.upsert(&items)?;
    lex.commit("")?;
    for q in &conv.questions {
        let hits = engram_index::rank(&mut lex, None, &q.question, &Filter::default(), 25, params)?;
        let ranked = hits
            .iter()
            .map(|h| Ok(h.body(&lex)?.unwrap_or_default()))
            .collect::<Result<Vec<String>>>()?;
        locomo::print_miss("words", conv, q, &ranked);
        score.add(q, &ranked);
    }
    Ok(())
}
