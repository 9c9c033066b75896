//! `engram-bench prepare --agent-loop`: one agent driven as a real agent
//! drives Engram. Each turn is a PrepareRequest that carries the new user
//! message (`user_input`, ~300 tokens) for a model with a 32k window,
//! rendered as OpenAI chat, then an Ingest of the assistant's answer
//! (~300 tokens). The agent first talks until it has compacted a few times
//! (so an archive exists and recall has something to search), then
//! PrepareRequest is timed over further turns, once per configuration:
//! recall off, recall on by words only (`embed.provider = "none"`), recall
//! on with the local model, each against a fresh `engramd` and data
//! directory, over the same conversation. With `--loop-summarizer-ms`, the
//! summaries come from an LLM over HTTP that takes that long, and
//! `--loop-precompact` compares summaries written ahead of the trigger
//! with none (every compaction waiting for its summary).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args as ClapArgs;
use engram_core::tokens::{Encoding, count_text};
use engram_proto::pb;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use hdrhistogram::Histogram;
use tonic::transport::Channel;

use crate::ingest::histogram;
use crate::server::{Server, connect};
use crate::words::Words;

/// The model the loop asks for: gpt-4o's tokenizer, and the window the
/// configuration gives this name (the longest prefix wins over the
/// bench's large "gpt-4o" window).
const MODEL: &str = "gpt-4o-loop";

/// The agent's id.
const AGENT: &str = "loop-agent";

/// Turns at most before the wanted compactions must have happened.
const MAX_WARM_UP: usize = 5_000;

#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Time the agent loop instead of the transcript-size cases.
    #[arg(long)]
    pub agent_loop: bool,
    /// Configurations, in order: off (recall off, no model), off-local
    /// (recall off, the local model indexing), words (recall on,
    /// embed.provider none), local (recall on, the local model).
    #[arg(long, value_delimiter = ',', default_value = "off,words,local")]
    loop_configs: Vec<String>,
    /// The model's window, in tokens.
    #[arg(long, default_value_t = 32_768)]
    loop_window: u32,
    /// The output reservation each PrepareRequest asks for.
    #[arg(long, default_value_t = 4_096)]
    loop_max_output: u32,
    /// Tokens of each user message and of each answer (about).
    #[arg(long, default_value_t = 300)]
    loop_turn_tokens: u32,
    /// Compactions the agent goes through before timing starts.
    #[arg(long, default_value_t = 3)]
    loop_compactions: usize,
    /// Turns timed after the warm-up.
    #[arg(long, default_value_t = 200)]
    loop_turns: usize,
    /// Pause after each answer's Ingest (the user's and the model's time
    /// in a real loop; the indexer runs meanwhile). 0: back to back.
    #[arg(long, default_value_t = 0)]
    loop_pause_ms: u64,
    /// Distinct words of the messages, drawn by Zipf's law (as in `users`);
    /// 0: the other benches' 25 words, each in nearly every message.
    #[arg(long, default_value_t = 5_000)]
    loop_vocabulary: usize,
    /// The summarizer: 0, the embedded one; else an LLM over HTTP (a local
    /// stand-in) that answers after this many ms.
    #[arg(long, default_value_t = 0)]
    loop_summarizer_ms: u64,
    /// `budget.precompact_ratio` values, each run with every configuration
    /// (0: no summary written ahead; every compaction waits for its own).
    #[arg(long, value_delimiter = ',', default_value = "0.6")]
    loop_precompact: Vec<f64>,
}

/// One configuration: its name, recall on or off, embed.provider.
fn config(name: &str) -> anyhow::Result<(bool, &'static str)> {
    Ok(match name {
        "off" => (false, "none"),
        "off-local" => (false, "local"),
        "words" => (true, "none"),
        "local" => (true, "local"),
        other => anyhow::bail!(
            "unknown agent-loop configuration {other:?} (off, off-local, words, local)"
        ),
    })
}

/// The conversation: messages of about `tokens` tokens each.
struct Talk {
    words: Words,
    per_message: usize,
}

impl Talk {
    fn new(vocabulary: usize, tokens: u32) -> Self {
        let words = Words::new(vocabulary);
        // Words per message from the tokens of a long sample.
        let sample = 2_000;
        let counted = count_text(Encoding::O200k, &words.text(7, sample)).max(1);
        let per_message = (f64::from(tokens) * sample as f64 / f64::from(counted)).round();
        Self {
            words,
            per_message: (per_message as usize).max(1),
        }
    }

    fn user(&self, turn: usize) -> String {
        self.words.text(2 * turn, self.per_message)
    }

    fn answer(&self, turn: usize) -> String {
        self.words.text(2 * turn + 1, self.per_message)
    }
}

/// What one configuration's timed turns came to.
#[derive(Default)]
struct Timed {
    all: Option<Histogram<u64>>,
    /// Turns whose PrepareRequest did not compact first.
    plain: Option<Histogram<u64>>,
    ingest: Option<Histogram<u64>>,
    compactions: usize,
    /// Compactions that waited for the summarizer (not written ahead).
    waited: usize,
    /// Turns the timed compactions summarized.
    summarized: usize,
    recalled: usize,
    prompt_tokens: Vec<u32>,
    /// The server's CPU time over the timed turns (user + system), ms.
    cpu_ms: f64,
}

/// Runs the configurations `args` names against `engramd`, each over a
/// fresh directory under `data_dir` (and with `pg`, a fresh schema of that
/// database).
pub fn run(args: &Args, engramd: &Path, data_dir: &Path, pg: Option<String>) -> anyhow::Result<()> {
    let data_dir = data_dir.join("prepare-loop");
    let configs = args
        .loop_configs
        .iter()
        .map(|c| config(c).map(|c2| (c.as_str(), c2)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let talk = Talk::new(args.loop_vocabulary, args.loop_turn_tokens);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let llm = match args.loop_summarizer_ms {
        0 => String::new(),
        ms => {
            // The chaos run's stand-in: a summary after `ms`, every call.
            let calls = std::sync::Arc::default();
            let delay = Duration::from_millis(ms);
            let base = runtime.block_on(engram_chaos::slow_llm::serve(delay, calls))?;
            format!("[llm]\nbase_url = {base:?}\nmodel = \"bench\"\n")
        }
    };
    println!(
        "\nAgent loop: model {MODEL} ({}-token window, {} reserved for output), \
         ~{} tokens a message ({} words), OpenAI chat, {} compactions first, \
         {} turns timed, {} ms after each answer, summarizer: {}",
        args.loop_window,
        args.loop_max_output,
        args.loop_turn_tokens,
        talk.per_message,
        args.loop_compactions,
        args.loop_turns,
        args.loop_pause_ms,
        match args.loop_summarizer_ms {
            0 => "embedded".to_owned(),
            ms => format!("an LLM over HTTP answering after {ms} ms"),
        }
    );
    println!(
        "  config      ahead  warm-up turns  compactions (waited, turns)  prompt tokens min/p50/max  recalled/turn  \
         prepare p50 ms  p99 ms  max ms  (not compacting p50/p99)  ingest p50 ms  server CPU ms/turn"
    );
    let runs = configs
        .iter()
        .flat_map(|c| args.loop_precompact.iter().map(move |p| (c, *p)));
    for (&(name, (recall, provider)), precompact) in runs {
        let data = data_dir.join(name);
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        let mut extra = format!(
            "[budget]\nprecompact_ratio = {precompact}\n\
             [budget.models.\"{MODEL}\"]\ncontext_tokens = {}\n\
             [embed]\nprovider = \"{provider}\"\n[recall]\nenabled = {recall}\n{llm}",
            args.loop_window
        );
        if let Some(url) = &pg {
            let schema = runtime.block_on(crate::ingest::fresh_schema(url))?;
            extra.push_str(&format!(
                "[store]\nbackend = \"postgres\"\n[store.postgres]\nurl = {url:?}\nschema = {schema:?}\n"
            ));
        }
        let server = Server::start_with(engramd, &data, &extra)?;
        let (warm_up, timed) = runtime
            .block_on(drive(&server, &talk, args, provider != "none"))
            .with_context(|| format!("agent loop, configuration {name}"))?;
        drop(server);
        let _ = std::fs::remove_dir_all(&data);
        report(name, precompact, warm_up, &timed, args.loop_turns);
    }
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(())
}

fn ms(nanos: u64) -> f64 {
    nanos as f64 / 1e6
}

fn report(name: &str, precompact: f64, warm_up: usize, t: &Timed, turns: usize) {
    let q = |h: &Option<Histogram<u64>>, at: f64| {
        h.as_ref().map_or(0.0, |h| ms(h.value_at_quantile(at)))
    };
    let mut tokens = t.prompt_tokens.clone();
    tokens.sort_unstable();
    let at = |i: usize| tokens.get(i).copied().unwrap_or(0);
    let max = t.all.as_ref().map_or(0.0, |h| ms(h.max()));
    println!(
        "  {:<10}  {:>5}  {:>13}  {:>11} ({:>3}, {:>4})       {:>8}/{:>6}/{:>6}     {:>13.1}  {:>14.2}  {:>6.2}  {:>6.2}  ({:>8.2}/{:>8.2})     {:>13.2}  {:>18.1}",
        name,
        precompact,
        warm_up,
        t.compactions,
        t.waited,
        t.summarized,
        at(0),
        at(tokens.len() / 2),
        at(tokens.len().saturating_sub(1)),
        t.recalled as f64 / turns.max(1) as f64,
        q(&t.all, 0.5),
        q(&t.all, 0.99),
        max,
        q(&t.plain, 0.5),
        q(&t.plain, 0.99),
        q(&t.ingest, 0.5),
        t.cpu_ms / turns.max(1) as f64,
    );
}

/// Warms the agent up to the wanted compactions, then times the turns.
/// Returns the warm-up's turns and what the timed ones came to.
async fn drive(
    server: &Server,
    talk: &Talk,
    args: &Args,
    embeds: bool,
) -> anyhow::Result<(usize, Timed)> {
    let mut c = connect(&server.addr).await?;
    let pause = Duration::from_millis(args.loop_pause_ms);
    let mut turn = 0;
    let mut compactions = 0;
    while compactions < args.loop_compactions {
        anyhow::ensure!(
            turn < MAX_WARM_UP,
            "{MAX_WARM_UP} turns without {} compactions: is the window too large?",
            args.loop_compactions
        );
        let (answer, _) = one_turn(&mut c, talk, turn, args).await?;
        compactions += usize::from(compacted(&answer)?);
        turn += 1;
        tokio::time::sleep(pause).await;
    }
    let warm_up = turn;
    if embeds {
        // What the warm-up left to embed is embedded before timing starts
        // (a search that waits for the indexer): the timed turns see the
        // indexer as a steady conversation does, not a backlog.
        for _ in 0..10 {
            let page = c
                .search_history(pb::SearchHistoryRequest {
                    agent_id: AGENT.into(),
                    query: "memory".into(),
                    limit: 1,
                    wait_for_index_ms: 60_000,
                    ..Default::default()
                })
                .await?
                .into_inner();
            if page.index.is_none_or(|i| i.pending == 0) {
                break;
            }
        }
    }
    let mut timed = Timed {
        all: Some(histogram()),
        plain: Some(histogram()),
        ingest: Some(histogram()),
        ..Default::default()
    };
    let cpu_before = cpu_ms(server.pid());
    for _ in 0..args.loop_turns {
        let (answer, (prepare_ns, ingest_ns)) = one_turn(&mut c, talk, turn, args).await?;
        let compacted = compacted(&answer)?;
        let record = |h: &mut Option<Histogram<u64>>, v: u64| -> anyhow::Result<()> {
            h.as_mut().expect("set above").record(v)?;
            Ok(())
        };
        record(&mut timed.all, prepare_ns)?;
        record(&mut timed.ingest, ingest_ns)?;
        if compacted {
            timed.compactions += 1;
            if let Some(report) = &answer.compaction {
                let summarized = report.steps.iter().any(|s| s == "summarize");
                timed.waited += usize::from(summarized && !report.prepared_in_background);
                timed.summarized += report.turn_ids.len();
            }
        } else {
            record(&mut timed.plain, prepare_ns)?;
        }
        timed.recalled += answer.recalled.len();
        timed.prompt_tokens.push(answer.estimated_prompt_tokens);
        turn += 1;
        tokio::time::sleep(pause).await;
    }
    timed.cpu_ms = cpu_ms(server.pid()) - cpu_before;
    Ok((warm_up, timed))
}

/// Whether the prompt compacted first (an error fails the bench: the
/// numbers would not be the loop's).
fn compacted(answer: &pb::PrepareRequestResponse) -> anyhow::Result<bool> {
    match &answer.compaction {
        Some(report) if !report.error.is_empty() => {
            anyhow::bail!("a compaction failed: {}", report.error)
        }
        Some(report) => Ok(report.performed),
        None => Ok(false),
    }
}

/// One turn: the user's message through PrepareRequest, the answer
/// through Ingest. Returns the prompt and the two calls' times (ns).
async fn one_turn(
    c: &mut MemoryServiceClient<Channel>,
    talk: &Talk,
    turn: usize,
    args: &Args,
) -> anyhow::Result<(pb::PrepareRequestResponse, (u64, u64))> {
    let request = pb::PrepareRequestRequest {
        agent_id: AGENT.into(),
        system_prompt: "You are a research assistant.".into(),
        user_input: Some(pb::TraceEvent {
            trace_type: pb::TraceType::User.into(),
            content: talk.user(turn),
            ..Default::default()
        }),
        model: MODEL.into(),
        render_format: pb::RenderFormat::OpenaiChat.into(),
        max_output_tokens: args.loop_max_output,
        ..Default::default()
    };
    let started = Instant::now();
    let answer = c.prepare_request(request).await?.into_inner();
    let prepare_ns = started.elapsed().as_nanos() as u64;
    let ingest = pb::IngestRequest {
        agent_id: AGENT.into(),
        events: vec![pb::TraceEvent {
            trace_type: pb::TraceType::Assistant.into(),
            content: talk.answer(turn),
            ..Default::default()
        }],
        ..Default::default()
    };
    let started = Instant::now();
    c.ingest(ingest).await?;
    let ingest_ns = started.elapsed().as_nanos() as u64;
    Ok((answer, (prepare_ns, ingest_ns)))
}

/// CPU time process `pid` has used (user + system), in ms (Linux; 0
/// elsewhere).
fn cpu_ms(pid: u32) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the command's closing parenthesis: utime is the
            // 12th, stime the 13th.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let user: f64 = f.get(11)?.parse().ok()?;
            let system: f64 = f.get(12)?.parse().ok()?;
            Some((user + system) * 1000.0 / ticks)
        })
        .unwrap_or(0.0)
}
