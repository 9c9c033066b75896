//! `engram-bench prepare`: PrepareRequest latency (p50/p99) for transcripts
//! of 100, 1,000 and 10,000 messages of about 200 tokens (text and tool
//! calls mixed), rendered as nothing and as OpenAI chat, each once with no
//! archive and once with 100,000 archived traces on disk; and the memory a
//! loaded agent takes. The server is the real `engramd` binary in its own
//! process, so its memory can be read from /proc. `--agent-loop` times an
//! agent's turns instead (see [`crate::agent_loop`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Args as ClapArgs;
use engram_core::{NewEvent, RawTrace};
use engram_proto::pb;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use serde_json::json;
use tonic::transport::Channel;

use crate::ingest::{histogram, us};
use crate::server::{Server, connect};
use crate::words::text;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the generated agents (created, then emptied).
    #[arg(long, default_value = "./bench-data")]
    data_dir: PathBuf,
    /// Transcript sizes, in messages.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    messages: Vec<usize>,
    /// Archived traces on disk for the "with archive" agents.
    #[arg(long, default_value_t = 100_000)]
    archive: usize,
    /// Measured calls per case (after warm-up).
    #[arg(long, default_value_t = 300)]
    calls: usize,
    /// The server binary (build it with `cargo build --release -p engram-server`).
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
    /// store.backend: files (agents written as files) or postgres (agents
    /// ingested through gRPC into a fresh schema of --pg-url; no archive
    /// cases).
    #[arg(long, default_value = "files")]
    backend: String,
    /// The database for --backend postgres (default as for `ingest`).
    #[arg(long)]
    pg_url: Option<String>,
    /// embed.provider of the server: none (the default: prompts alone are
    /// measured) or local (the background indexer embeds the agents'
    /// messages, at idle priority, while their prompts are measured).
    #[arg(long, default_value = "none")]
    embed: String,
    /// The agent loop (`--agent-loop` and its `--loop-*` options).
    #[command(flatten)]
    agent_loop: crate::agent_loop::Args,
}

/// Traces whose transcript has about `messages` messages: user question,
/// assistant tool call, tool result, assistant answer, repeated.
fn conversation(messages: usize) -> Vec<NewEvent> {
    let mut events = vec![];
    for turn in 0..messages.div_ceil(4) {
        events.push(NewEvent::user(text(turn * 4)));
        events.push(NewEvent::tool_call(
            format!("call_{turn}"),
            "search",
            json!({"query": text(turn * 4 + 1).chars().take(300).collect::<String>()}),
        ));
        events.push(NewEvent::tool_result(
            format!("call_{turn}"),
            json!(text(turn * 4 + 2)),
        ));
        events.push(NewEvent::assistant(text(turn * 4 + 3)));
    }
    events
}

fn write_lines(path: &Path, traces: &[RawTrace]) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for t in traces {
        f.write_all(&t.to_line())?;
    }
    f.flush()?;
    Ok(())
}

/// Writes an agent's files directly (as a long-lived agent would have them).
pub(crate) fn make_agent(dir: &Path, messages: usize, archive: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    // One conversation, its oldest whole turns archived: ids and turns
    // run on from the archive into the active file, as after a compaction.
    let archive = archive - archive % 4;
    let all = engram_core::turns::assign_all(conversation(archive + messages));
    let (old, active) = all.split_at(archive);
    write_lines(&dir.join("raw_traces.jsonl"), active)?;
    // An archive exists only after a compaction, which starts epoch 1.
    let epoch = u32::from(archive > 0);
    std::fs::write(
        dir.join("state.json"),
        format!(r#"{{"system_prompt":"You are a research assistant.","epoch":{epoch}}}"#),
    )?;
    if archive > 0 {
        write_lines(&dir.join("raw_traces_archive.jsonl"), old)?;
    }
    Ok(())
}

/// Resident memory of process `pid`, in KiB (Linux).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    proc_status(pid, "VmRSS:")
}

/// A number field of `/proc/<pid>/status` (`VmRSS:` in KiB, `Threads:`);
/// 0 if unreadable.
pub(crate) fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.agent_loop.agent_loop {
        let pg = match args.backend.as_str() {
            "postgres" => Some(crate::ingest::pg_url(args.pg_url.as_deref())?),
            _ => None,
        };
        return crate::agent_loop::run(&args.agent_loop, &args.engramd, &args.data_dir, pg);
    }
    let data = args.data_dir.join("prepare");
    let _ = std::fs::remove_dir_all(&data);
    let agents = data.join("agents");
    println!("generating agents in {} ...", agents.display());
    make_agent(&agents.join("warm-up"), 4, 0)?;
    for &n in &args.messages {
        make_agent(&agents.join(format!("m{n}")), n, 0)?;
        make_agent(&agents.join(format!("m{n}-archived")), n, args.archive)
            .with_context(|| "writing the archive")?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let extra = match args.backend.as_str() {
        "postgres" => {
            let url = crate::ingest::pg_url(args.pg_url.as_deref())?;
            let schema = runtime.block_on(crate::ingest::fresh_schema(&url))?;
            format!(
                "[store]\nbackend = \"postgres\"\n[store.postgres]\nurl = {url:?}\nschema = {schema:?}\n"
            )
        }
        _ => String::new(),
    };
    let extra = format!("[embed]\nprovider = {:?}\n{extra}", args.embed);
    runtime.block_on(measure(&args, &data, &extra))?;
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}

async fn measure(args: &Args, data: &Path, extra: &str) -> anyhow::Result<()> {
    let postgres = args.backend == "postgres";
    println!(
        "\nPrepareRequest latency, model gpt-4o, {} calls per case, backend {}, embed {}",
        args.calls, args.backend, args.embed
    );
    println!(
        "  messages  archive   format       p50 us    p99 us   prompt tokens   agent load ms   agent RSS MiB"
    );
    if postgres {
        // The same agents as the files, ingested into the database through
        // a server of their own (the measured ones then load them).
        let server = Server::start_with(&args.engramd, data, extra)?;
        let mut client = connect(&server.addr).await?;
        copy_in(&mut client, "warm-up", 4).await?;
        for &n in &args.messages {
            copy_in(&mut client, &format!("m{n}"), n).await?;
        }
    }
    let mut reloads = vec![];
    for &n in &args.messages {
        for archived in [false, true] {
            if archived && postgres {
                continue;
            }
            let agent = if archived {
                format!("m{n}-archived")
            } else {
                format!("m{n}")
            };
            // A fresh server per case: its memory growth is this agent's.
            let server = Server::start_with(&args.engramd, data, extra)?;
            let pid = server.pid();
            let mut client = connect(&server.addr).await?;

            // Loads the tokenizers (and everything else a first call needs).
            prepare(&mut client, "warm-up", pb::RenderFormat::OpenaiChat).await?;
            let rss_before = rss_kib(pid);
            let loaded = Instant::now();
            let first = prepare(&mut client, &agent, pb::RenderFormat::Unspecified).await?;
            let load_ms = loaded.elapsed().as_secs_f64() * 1e3;
            let rss_mib = rss_kib(pid).saturating_sub(rss_before) as f64 / 1024.0;
            for (format, name) in [
                (pb::RenderFormat::Unspecified, "none"),
                (pb::RenderFormat::OpenaiChat, "openai-chat"),
            ] {
                let mut h = histogram();
                for _ in 0..20 {
                    prepare(&mut client, &agent, format).await?;
                }
                for _ in 0..args.calls {
                    let t = Instant::now();
                    prepare(&mut client, &agent, format).await?;
                    h.record(t.elapsed().as_nanos() as u64)?;
                }
                println!(
                    "  {:>8}  {:>7}   {:<11} {:>8.0}  {:>8.0}   {:>13}   {:>13.1}   {:>13.1}",
                    n,
                    if archived { args.archive } else { 0 },
                    name,
                    us(h.value_at_quantile(0.5)),
                    us(h.value_at_quantile(0.99)),
                    first.estimated_prompt_tokens,
                    load_ms,
                    rss_mib
                );
            }
            if archived {
                // A second process: the first load wrote the turn-state
                // checkpoint, so this one need not replay the archive.
                drop(client);
                drop(server);
                let server = Server::start_with(&args.engramd, data, extra)?;
                let mut client = connect(&server.addr).await?;
                prepare(&mut client, "warm-up", pb::RenderFormat::OpenaiChat).await?;
                let t = Instant::now();
                prepare(&mut client, &agent, pb::RenderFormat::Unspecified).await?;
                reloads.push((n, t.elapsed().as_secs_f64() * 1e3));
            }
        }
    }
    println!(
        "\nAgent load in a restarted server (archive of {} traces, turn state from turns.json)",
        args.archive
    );
    for (n, ms) in reloads {
        println!("  {n:>8} messages   {ms:>8.1} ms");
    }
    Ok(())
}

/// Ingests the conversation of `messages` messages [`make_agent`] writes
/// (system prompt included) into `agent`.
async fn copy_in(
    client: &mut MemoryServiceClient<Channel>,
    agent: &str,
    messages: usize,
) -> anyhow::Result<()> {
    let events = conversation(messages);
    for chunk in events.chunks(400) {
        let events = chunk
            .iter()
            .map(engram_server::convert::event_to_pb)
            .collect();
        client
            .ingest(pb::IngestRequest {
                agent_id: agent.into(),
                events,
                ..Default::default()
            })
            .await?;
    }
    client
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: agent.into(),
            system_prompt: "You are a research assistant.".into(),
            model: "gpt-4o".into(),
            ..Default::default()
        })
        .await?;
    Ok(())
}

async fn prepare(
    client: &mut MemoryServiceClient<Channel>,
    agent: &str,
    format: pb::RenderFormat,
) -> anyhow::Result<pb::PrepareRequestResponse> {
    Ok(client
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: agent.into(),
            model: "gpt-4o".into(),
            render_format: format.into(),
            max_output_tokens: 4096,
            ..Default::default()
        })
        .await?
        .into_inner())
}
