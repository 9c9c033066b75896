//! `engram-bench truth`: memory that stays true (DESIGN §15), measured from
//! outside against the real `engramd`.
//!
//! Generated users (`truth/data.rs`) tell four dated conversations weeks
//! apart; about half of their eight attributes change once or twice. Each
//! conversation is compacted when it ends (its facts go to the user's
//! memory), with the embedded summarizer or with a scripted summarizer
//! that answers by handle (a local HTTP fake speaking the OpenAI API),
//! and the user's facts consolidated then (`--consolidate`, as the idle
//! sweep does once a conversation goes quiet).
//! Then each attribute is asked about from a new conversation of the user
//! (an 8k window), and the user's facts are listed. Reported, by changed
//! and unchanged attribute: the current value in the prompt; a stale value
//! shown; a stale value presented as current (shown before the current
//! one, or undated, on a line that does not name the current one too and
//! does not mark it as past: "since replaced", "later changed: …"); a
//! stale value shown after the current one and dated (marked or not);
//! stale facts still live; duplicate live facts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args as ClapArgs;
use engram_proto::pb;
use tokio::io::AsyncWriteExt;

use crate::server::{Client, Server, connect};

mod data;
use data::{ATTRIBUTES, History, Rng};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory for the server's data (emptied first).
    #[arg(long, default_value = "./bench-data/truth")]
    data_dir: PathBuf,
    /// Generated users.
    #[arg(long, default_value_t = 40)]
    users: usize,
    /// Conversations per user, three weeks apart.
    #[arg(long, default_value_t = 4)]
    conversations: usize,
    /// The summarizers measured: embedded, handles (or both).
    #[arg(long, value_delimiter = ',', default_value = "embedded,handles")]
    summarizers: Vec<String>,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The server binary.
    #[arg(long, default_value = "target/release/engramd")]
    engramd: PathBuf,
    /// Consolidate the user's facts after each conversation, as the idle
    /// sweep does once a conversation goes quiet (ConsolidateUser).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    consolidate: bool,
    /// Seconds between the last conversation and the questions: 0 asks
    /// back to back (the index may not have embedded what was just
    /// archived); a pause stands for the days before a user's next
    /// conversation, as a real client's would.
    #[arg(long, default_value_t = 0)]
    pause_secs: u64,
}

/// 2026-03-02: the first conversation's day.
const START: f64 = 1_772_409_600.0;
const WEEKS_APART: f64 = 3.0 * 7.0 * 86_400.0;
const MODEL: &str = "bench-8k";

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let mut rng = Rng::new(args.seed);
    let users: Vec<History> = (0..args.users)
        .map(|_| data::history(&mut rng, args.conversations))
        .collect();
    println!(
        "| summarizer | attributes | questions | current in prompt | stale shown | stale presented as current | stale after current, dated (of shown) | stale fact live | duplicate live facts |\n|---|---|---|---|---|---|---|---|---|"
    );
    for summarizer in &args.summarizers {
        let data = args.data_dir.join(summarizer);
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        let mut extra = format!(
            "[policy]\nraw_tail_turns = 1\n[budget.models.\"{MODEL}\"]\ncontext_tokens = 8192\n"
        );
        if summarizer == "handles" {
            let base = rt.block_on(scripted(&users))?;
            extra.push_str(&format!(
                "[llm]\nbase_url = {base:?}\nmodel = \"scripted\"\n"
            ));
        } else if summarizer != "embedded" {
            anyhow::bail!("--summarizers: embedded or handles, not {summarizer:?}");
        }
        let server = Server::start_with(&args.engramd, &data, &extra)?;
        let tally = rt.block_on(measure(&server.addr, &users, &args))?;
        tally.print(summarizer);
    }
    Ok(())
}

/// What was counted, for changed ([1]) and unchanged ([0]) attributes.
#[derive(Default)]
struct Tally {
    questions: [usize; 2],
    current: [usize; 2],
    stale_shown: [usize; 2],
    stale_as_current: [usize; 2],
    /// Shown before the current value or undated (marked past or not).
    stale_misplaced: [usize; 2],
    stale_fact_live: [usize; 2],
    duplicates: [usize; 2],
}

impl Tally {
    fn print(&self, summarizer: &str) {
        let share = |n: usize, of: usize| match of {
            0 => "–".to_owned(),
            _ => format!("{:.2}", n as f64 / of as f64),
        };
        for (k, name) in [(1, "changed"), (0, "unchanged")] {
            let q = self.questions[k];
            println!(
                "| {summarizer} | {name} | {q} | {} | {} | {} | {} | {} | {} |",
                share(self.current[k], q),
                share(self.stale_shown[k], q),
                self.stale_as_current[k],
                share(
                    self.stale_shown[k] - self.stale_misplaced[k],
                    self.stale_shown[k]
                ),
                share(self.stale_fact_live[k], q),
                self.duplicates[k],
            );
        }
    }
}

async fn measure(addr: &str, users: &[History], args: &Args) -> anyhow::Result<Tally> {
    let mut c = connect(addr).await?;
    for (u, h) in users.iter().enumerate() {
        for (k, said) in h.conversations.iter().enumerate() {
            let agent = format!("u{u}-c{k}");
            let day = START + k as f64 * WEEKS_APART;
            let mut events = vec![];
            for (m, s) in said.iter().enumerate() {
                let ts = day + m as f64 * 120.0;
                events.push(event(pb::TraceType::User, &s.text, ts));
                events.push(event(
                    pb::TraceType::Assistant,
                    "Noted, thank you.",
                    ts + 30.0,
                ));
            }
            c.ingest(pb::IngestRequest {
                agent_id: agent.clone(),
                user_id: user(u),
                events,
                ..Default::default()
            })
            .await?;
            c.compact(pb::CompactRequest {
                agent_id: agent,
                ..Default::default()
            })
            .await?;
            if args.consolidate {
                c.consolidate_user(pb::ConsolidateUserRequest { user_id: user(u) })
                    .await?;
            }
        }
    }
    tokio::time::sleep(std::time::Duration::from_secs(args.pause_secs)).await;
    let mut tally = Tally::default();
    // A development aid: the first few prompts missing the current value.
    let mut show_misses: usize = std::env::var("ENGRAM_BENCH_SHOW_MISSES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    for (u, h) in users.iter().enumerate() {
        let facts = live_facts(&mut c, u).await?;
        for (i, a) in ATTRIBUTES.iter().enumerate() {
            let k = usize::from(h.changed(i));
            tally.questions[k] += 1;
            let prompt = prompt(&mut c, u, i, a.question).await?;
            let current = h.current(i);
            let at_current = find(&prompt, current);
            tally.current[k] += usize::from(at_current.is_some());
            if at_current.is_none() && show_misses > 0 {
                show_misses -= 1;
                eprintln!(
                    "--- user {u}, {:?}: {current} missing\n{prompt}\n",
                    a.question
                );
            }
            let shown: Vec<usize> = h
                .stale(i)
                .iter()
                .flat_map(|v| occurrences(&prompt, v))
                .collect();
            if !shown.is_empty() {
                tally.stale_shown[k] += 1;
                // A line that names the current value too states the
                // change ("I sold the Octavia and got a Niro"): not stale.
                let misplaced = |&at: &usize| {
                    !names_current(&prompt, at, current)
                        && (at_current.is_none_or(|c| at < c) || !dated(&prompt, at))
                };
                // One marked as past ("since replaced", "later changed:
                // …" under a message) is not presented as current.
                let as_current = shown
                    .iter()
                    .any(|at| misplaced(at) && !marked_past(&prompt, *at));
                tally.stale_as_current[k] += usize::from(as_current);
                tally.stale_misplaced[k] += usize::from(shown.iter().any(misplaced));
            }
            let about: Vec<&'static str> =
                facts.iter().filter_map(|f| data::value_in(f, i)).collect();
            if about.iter().any(|v| h.stale(i).contains(v)) {
                tally.stale_fact_live[k] += 1;
            }
            tally.duplicates[k] += about
                .iter()
                .filter(|v| **v == current)
                .count()
                .saturating_sub(1);
        }
    }
    Ok(tally)
}

fn user(u: usize) -> String {
    format!("user-{u}")
}

fn event(kind: pb::TraceType, content: &str, ts: f64) -> pb::TraceEvent {
    pb::TraceEvent {
        trace_type: kind.into(),
        content: content.to_owned(),
        ts: Some(ts),
        ..Default::default()
    }
}

/// The text of the prompt a new conversation of user `u` gets for
/// `question` (about attribute `i`).
async fn prompt(c: &mut Client, u: usize, i: usize, question: &str) -> anyhow::Result<String> {
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: format!("u{u}-ask-{i}"),
            user_id: user(u),
            user_input: Some(event(
                pb::TraceType::User,
                question,
                START + 400.0 * 86_400.0,
            )),
            model: MODEL.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(p.messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n"))
}

async fn live_facts(c: &mut Client, u: usize) -> anyhow::Result<Vec<String>> {
    let listed = c
        .list_memories(pb::ListMemoriesRequest {
            scope: Some(pb::MemoryScope {
                scope: Some(pb::memory_scope::Scope::UserId(user(u))),
            }),
            page_size: 1000,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(listed.memories.into_iter().map(|f| f.fact).collect())
}

fn occurrences(text: &str, value: &str) -> Vec<usize> {
    let (text, value) = (text.to_lowercase(), value.to_lowercase());
    text.match_indices(&value).map(|(at, _)| at).collect()
}

fn find(text: &str, value: &str) -> Option<usize> {
    occurrences(text, value).first().copied()
}

/// Whether the line holding byte `at` names `current` as well.
fn names_current(prompt: &str, at: usize, current: &str) -> bool {
    let start = prompt[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = prompt[at..].find('\n').map_or(prompt.len(), |i| at + i);
    prompt[start..end]
        .to_lowercase()
        .contains(&current.to_lowercase())
}

/// Whether the line holding byte `at` says it is no longer true: a
/// recalled fact's "since replaced" / "no longer true", or a recalled
/// message's note on the next line ("later changed: …", "later no longer
/// true").
fn marked_past(prompt: &str, at: usize) -> bool {
    let start = prompt[..at].rfind('\n').map_or(0, |i| i + 1);
    let mut lines = prompt[start..].lines();
    let line = lines.next().unwrap_or_default();
    let next = lines.next().unwrap_or_default().trim_start();
    line.contains(", since replaced)")
        || line.contains(", no longer true)")
        || next.starts_with("(later changed: ")
        || next.starts_with("(later no longer true")
}

/// Whether the entry holding byte `at` says when: its first line (the
/// line itself, or the nearest above it that starts an entry or a
/// section) carries a date.
fn dated(prompt: &str, at: usize) -> bool {
    let before = &prompt[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let mut lines = prompt[..line_start].lines().rev();
    let mut line = &prompt[line_start..];
    line = line.split('\n').next().unwrap_or_default();
    loop {
        if has_date(line) {
            return true;
        }
        if line.starts_with("- ") || line.starts_with('[') || line.is_empty() {
            return false;
        }
        match lines.next() {
            Some(l) => line = l,
            None => return false,
        }
    }
}

fn has_date(line: &str) -> bool {
    let b = line.as_bytes();
    b.windows(10).any(|w| {
        w[..4].iter().all(u8::is_ascii_digit)
            && w[4] == b'-'
            && w[5..7].iter().all(u8::is_ascii_digit)
            && w[7] == b'-'
            && w[8..].iter().all(u8::is_ascii_digit)
    })
}

/// The scripted summarizer: an OpenAI-compatible endpoint on port 0 that
/// answers each summary request by handle ([`data::answer_by_handle`]).
async fn scripted(users: &[History]) -> anyhow::Result<String> {
    let mut statements: HashMap<String, (usize, &'static str)> = HashMap::new();
    for h in users {
        for said in h.conversations.iter().flatten() {
            if let Some(s) = said.states {
                statements.insert(said.text.clone(), s);
            }
        }
    }
    let statements = Arc::new(statements);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let statements = Arc::clone(&statements);
            tokio::spawn(async move {
                let Some(body) = read_body(&mut stream).await else {
                    return;
                };
                let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let said = request["messages"][1]["content"]
                    .as_str()
                    .unwrap_or_default();
                let content = if said.starts_with("Group 1:") {
                    data::answer_consolidation(said)
                } else {
                    data::answer_by_handle(said, &statements)
                };
                let answer = serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
                    .to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    Ok(base)
}

/// The body of one HTTP/1.1 request (by its content-length).
async fn read_body(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![];
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + length {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Some(buf[end + 4..end + 4 + length].to_vec());
    }
}
