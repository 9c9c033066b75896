//! kill -9 cycles of the real binary: writers ingest whole turns (a tool
//! call in one request, its result in the next) into shared agents and ask
//! for prompts, which compact against a slow summarizer; the server is
//! killed at a random moment, restarted, and every writer retries what was
//! in doubt with the same event ids. At the end the agents' files must hold
//! every acknowledged event exactly once, no turn in two summaries, every
//! tool result in its call's turn and consecutive turns.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_proto::pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::daemon::{Client, Daemon, Launch};
use crate::slow_llm::{self, Calls};

#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub binary: PathBuf,
    pub cycles: usize,
    pub writers: usize,
    pub agents: usize,
    /// How long the writers run before each kill: uniform in this range.
    pub run_ms: (u64, u64),
    /// How long the summarizer takes to answer.
    pub llm_delay: Duration,
    pub seed: u64,
    /// The agents' `policy.strategy` ("": the default); with `trim`, one
    /// turn is kept, so that the turn-count trigger trims often.
    pub strategy: String,
}

#[derive(Debug, Default, Clone)]
pub struct ChaosReport {
    pub cycles: usize,
    pub requests_acked: usize,
    pub events_acked: usize,
    /// Calls (Ingest or PrepareRequest) a kill cut off.
    pub cut_off_by_kill: usize,
    /// Ingest requests among them, retried with the same event ids.
    pub retried_after_kill: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub kills_during_summary: usize,
    pub kills_with_intent_on_disk: usize,
    pub compactions: usize,
    /// Trims the agents' compaction logs hold.
    pub trims: usize,
    pub turns_summarized_twice: usize,
    pub tool_results_off_turn: usize,
    pub turn_gaps: usize,
    /// Errors from a live server (not caused by a kill).
    pub unexpected_errors: Vec<String>,
    /// Milliseconds from spawn until every agent answered again.
    pub restart_ms: Vec<u64>,
}

impl ChaosReport {
    /// Nothing lost, duplicated or misplaced, and no unexpected error.
    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.turns_summarized_twice == 0
            && self.tool_results_off_turn == 0
            && self.turn_gaps == 0
            && self.unexpected_errors.is_empty()
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut restart = self.restart_ms.clone();
        restart.sort_unstable();
        let p50 = restart.get(restart.len() / 2).copied().unwrap_or(0);
        let max = restart.last().copied().unwrap_or(0);
        writeln!(f, "kill -9 cycles                      {}", self.cycles)?;
        writeln!(
            f,
            "requests acknowledged               {}",
            self.requests_acked
        )?;
        writeln!(
            f,
            "events (traces) acknowledged        {}",
            self.events_acked
        )?;
        writeln!(
            f,
            "calls cut off by a kill             {}",
            self.cut_off_by_kill
        )?;
        writeln!(
            f,
            "Ingests retried after a kill        {}",
            self.retried_after_kill
        )?;
        writeln!(f, "lost                                {}", self.lost)?;
        writeln!(f, "duplicated                          {}", self.duplicated)?;
        writeln!(
            f,
            "kills while a summary was written   {}",
            self.kills_during_summary
        )?;
        writeln!(
            f,
            "kills leaving a compaction intent   {}",
            self.kills_with_intent_on_disk
        )?;
        writeln!(
            f,
            "compactions stored                  {}",
            self.compactions
        )?;
        writeln!(f, "trims logged                        {}", self.trims)?;
        writeln!(
            f,
            "turns summarized twice              {}",
            self.turns_summarized_twice
        )?;
        writeln!(
            f,
            "tool results outside their turn     {}",
            self.tool_results_off_turn
        )?;
        writeln!(f, "gaps in turn numbers                {}", self.turn_gaps)?;
        writeln!(
            f,
            "unexpected errors                   {}",
            self.unexpected_errors.len()
        )?;
        for e in self.unexpected_errors.iter().take(5) {
            writeln!(f, "  {e}")?;
        }
        write!(
            f,
            "restart until every agent answers   p50 {p50} ms, max {max} ms ({} restarts)",
            restart.len()
        )
    }
}

/// What the writers share: acknowledged event ids and how it went.
#[derive(Debug, Default)]
struct Ledger {
    acked: HashSet<String>,
    requests: usize,
    cut_off: usize,
    retried: usize,
    errors: Vec<String>,
}

/// A writer's place in its script, kept across kills.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    job: usize,
    /// 0: the user message and the tool call; 1: the result and the
    /// answer; 2: the prompt (every third job).
    step: u8,
    /// The request at this step may have been applied before a kill.
    in_doubt: bool,
}

pub async fn run(config: &ChaosConfig) -> anyhow::Result<ChaosReport> {
    let data = tempfile::tempdir()?;
    let calls = Arc::new(Calls::default());
    let base = slow_llm::serve(config.llm_delay, Arc::clone(&calls)).await?;
    let launch = Launch {
        binary: config.binary.clone(),
        data_dir: data.path().to_owned(),
        env: vec![
            ("ENGRAM__LLM__BASE_URL".into(), base),
            ("ENGRAM__LLM__MODEL".into(), "chaos".into()),
            ("ENGRAM__LLM__TIMEOUT_SECS".into(), "30".into()),
            ("ENGRAM__POLICY__MAX_ACTIVE_TURNS".into(), "3".into()),
            ("ENGRAM__POLICY__RAW_TAIL_TURNS".into(), "1".into()),
        ]
        .into_iter()
        .chain(
            (!config.strategy.is_empty())
                .then(|| {
                    [
                        ("ENGRAM__POLICY__STRATEGY".into(), config.strategy.clone()),
                        ("ENGRAM__POLICY__KEEP_LAST_TURNS".into(), "1".into()),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .collect(),
        metrics: false,
    };
    let agents: Vec<String> = (0..config.agents).map(|a| format!("chaos-{a}")).collect();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut cursors = vec![Cursor::default(); config.writers];
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut report = ChaosReport::default();

    for cycle in 0..=config.cycles {
        let started = Instant::now();
        let mut daemon = Daemon::spawn(&launch)?;
        let client = daemon.client().await?;
        if cycle > 0 {
            for agent in &agents {
                // Loads the agent: replays its log, rolls a compaction forward.
                stats(&mut client.clone(), agent).await?;
            }
            report
                .restart_ms
                .push(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        }
        if cycle == config.cycles {
            daemon.stop()?;
            break;
        }
        let killed = Arc::new(AtomicBool::new(false));
        let mut tasks = vec![];
        for (w, cursor) in cursors.iter().enumerate() {
            let (client, agents) = (client.clone(), agents.clone());
            let (ledger, killed) = (Arc::clone(&ledger), Arc::clone(&killed));
            let cursor = *cursor;
            tasks.push(tokio::spawn(async move {
                write(w, cursor, client, &agents, &ledger, &killed).await
            }));
        }
        let run_for = rng.random_range(config.run_ms.0..=config.run_ms.1);
        tokio::time::sleep(Duration::from_millis(run_for)).await;
        killed.store(true, Ordering::SeqCst);
        if calls.in_flight.load(Ordering::SeqCst) > 0 {
            report.kills_during_summary += 1;
        }
        daemon.kill9();
        for (w, task) in tasks.into_iter().enumerate() {
            cursors[w] = task.await?;
        }
        if intents_on_disk(data.path())? > 0 {
            report.kills_with_intent_on_disk += 1;
        }
        report.cycles += 1;
    }
    let ledger = std::mem::take(&mut *ledger.lock().expect("ledger"));
    report.requests_acked = ledger.requests;
    report.cut_off_by_kill = ledger.cut_off;
    report.retried_after_kill = ledger.retried;
    report.events_acked = ledger.acked.len();
    report.unexpected_errors = ledger.errors;
    verify(data.path(), &agents, &ledger.acked, &mut report)?;
    Ok(report)
}

async fn stats(client: &mut Client, agent: &str) -> anyhow::Result<()> {
    match client
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: agent.into(),
            model: String::new(),
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(s) => anyhow::bail!("{agent} after restart: {s:?}"),
    }
}

fn event(kind: pb::TraceType, id: String) -> pb::TraceEvent {
    pb::TraceEvent {
        trace_type: kind.into(),
        content: format!("{id}: {}", "words about the task at hand ".repeat(4)),
        event_id: id,
        ..Default::default()
    }
}

/// The requests of one job of writer `w`: a turn with a tool call.
fn requests(w: usize, job: usize, agent: &str) -> [pb::IngestRequest; 2] {
    let key = format!("w{w}-j{job}");
    let call_id = format!("call-{key}");
    let call = pb::TraceEvent {
        tool_name: "lookup".into(),
        tool_call_id: call_id.clone(),
        ..event(pb::TraceType::ToolCall, format!("{key}-call"))
    };
    let result = pb::TraceEvent {
        tool_call_id: call_id,
        ..event(pb::TraceType::ToolResult, format!("{key}-result"))
    };
    let req = |events| pb::IngestRequest {
        agent_id: agent.into(),
        events,
        ..Default::default()
    };
    [
        req(vec![
            event(pb::TraceType::User, format!("{key}-user")),
            call,
        ]),
        req(vec![
            result,
            event(pb::TraceType::Assistant, format!("{key}-answer")),
        ]),
    ]
}

/// Runs writer `w` from `cursor` until the server goes away; returns where
/// to go on.
async fn write(
    w: usize,
    mut cursor: Cursor,
    mut client: Client,
    agents: &[String],
    ledger: &Mutex<Ledger>,
    killed: &AtomicBool,
) -> Cursor {
    loop {
        // Writers share agents: neighbours write into the same ones.
        let agent = &agents[(w + cursor.job) % agents.len()];
        let result = if cursor.step < 2 {
            let req = requests(w, cursor.job, agent)[usize::from(cursor.step)].clone();
            let ids: Vec<String> = req.events.iter().map(|e| e.event_id.clone()).collect();
            let sent = client.ingest(req).await.map(|_| ());
            if sent.is_ok() {
                let mut l = ledger.lock().expect("ledger");
                l.requests += 1;
                l.retried += usize::from(cursor.in_doubt && cursor.step < 2);
                l.acked.extend(ids);
            }
            sent
        } else {
            client
                .prepare_request(pb::PrepareRequestRequest {
                    agent_id: agent.clone(),
                    model: "gpt-4o".into(),
                    ..Default::default()
                })
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) => {
                cursor.in_doubt = false;
                cursor.step += 1;
                // A prompt every third job: the kills land on Ingests too,
                // not mostly on prompts waiting for a summary.
                if cursor.step == 2 && cursor.job % 3 != 2 {
                    cursor.step = 3;
                }
                if cursor.step == 3 {
                    cursor.step = 0;
                    cursor.job += 1;
                }
            }
            Err(status) => {
                if killed.load(Ordering::SeqCst) {
                    cursor.in_doubt = true;
                    ledger.lock().expect("ledger").cut_off += 1;
                    return cursor;
                }
                ledger
                    .lock()
                    .expect("ledger")
                    .errors
                    .push(format!("writer {w} on {agent}: {status:?}"));
                // Skip the job: the script must go on.
                cursor = Cursor {
                    job: cursor.job + 1,
                    ..Cursor::default()
                };
            }
        }
    }
}

fn intents_on_disk(data: &Path) -> anyhow::Result<usize> {
    let mut n = 0;
    let agents = data.join("agents");
    if !agents.exists() {
        return Ok(0);
    }
    for dir in std::fs::read_dir(agents)? {
        let state = dir?.path().join("state.json");
        if let Ok(text) = std::fs::read_to_string(state) {
            let meta: serde_json::Value = serde_json::from_str(&text)?;
            n += usize::from(meta.get("pending").is_some_and(|p| !p.is_null()));
        }
    }
    Ok(n)
}

fn lines(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(vec![]);
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

fn field<'a>(v: &'a serde_json::Value, key: &str) -> &'a str {
    v.get(key).and_then(|x| x.as_str()).unwrap_or_default()
}

/// Checks the files of a cleanly stopped server against the ledger.
fn verify(
    data: &Path,
    agents: &[String],
    acked: &HashSet<String>,
    report: &mut ChaosReport,
) -> anyhow::Result<()> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for agent in agents {
        let dir = data.join("agents").join(agent);
        let mut traces = lines(&dir.join("raw_traces_archive.jsonl"))?;
        traces.extend(lines(&dir.join("raw_traces.jsonl"))?);
        let mut call_turn: HashMap<&str, &str> = HashMap::new();
        let mut user_turns: Vec<u32> = vec![];
        for t in &traces {
            *seen.entry(field(t, "event_id").to_owned()).or_default() += 1;
            match field(t, "trace_type") {
                "tool_call" => {
                    call_turn.insert(field(t, "tool_call_id"), field(t, "turn_id"));
                }
                "user" => user_turns.extend(
                    field(t, "turn_id")
                        .trim_start_matches("turn_")
                        .parse::<u32>()
                        .ok(),
                ),
                _ => {}
            }
        }
        report.tool_results_off_turn += traces
            .iter()
            .filter(|t| field(t, "trace_type") == "tool_result")
            .filter(|t| call_turn.get(field(t, "tool_call_id")) != Some(&field(t, "turn_id")))
            .count();
        user_turns.sort_unstable();
        report.turn_gaps += user_turns
            .iter()
            .enumerate()
            .filter(|(i, n)| u32::try_from(*i + 1).ok() != Some(**n))
            .count()
            .min(1);
        let mut summarized: HashMap<String, usize> = HashMap::new();
        let episodic = lines(&dir.join("episodic.jsonl"))?;
        report.compactions += episodic.len();
        report.trims += lines(&dir.join("compactions.jsonl"))?
            .iter()
            .filter(|r| field(r, "outcome") == "trimmed")
            .count();
        for item in &episodic {
            for turn in item["turn_ids"].as_array().into_iter().flatten() {
                *summarized
                    .entry(turn.as_str().unwrap_or_default().to_owned())
                    .or_default() += 1;
            }
        }
        report.turns_summarized_twice += summarized.values().filter(|n| **n > 1).count();
    }
    report.lost = acked.iter().filter(|id| !seen.contains_key(*id)).count();
    seen.remove("");
    report.duplicated = seen.values().filter(|n| **n > 1).count();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(event: &str, kind: &str, turn: &str, call: &str) -> String {
        serde_json::json!({"event_id": event, "trace_type": kind, "turn_id": turn, "tool_call_id": call})
            .to_string()
    }

    /// The checker finds each kind of damage it reports.
    #[test]
    fn verify_counts_lost_duplicated_misplaced_and_twice_summarized() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("agents/a");
        std::fs::create_dir_all(&dir).unwrap();
        let active = [
            trace("u1", "user", "turn_0001", ""),
            trace("c1", "tool_call", "turn_0001", "k"),
            trace("u3", "user", "turn_0003", ""),
            trace("r1", "tool_result", "turn_0003", "k"),
            trace("u3", "user", "turn_0003", ""),
        ];
        std::fs::write(dir.join("raw_traces.jsonl"), active.join("\n")).unwrap();
        let episodic = [
            r#"{"turn_ids": ["turn_0001"]}"#,
            r#"{"turn_ids": ["turn_0001", "turn_0003"]}"#,
        ];
        std::fs::write(dir.join("episodic.jsonl"), episodic.join("\n")).unwrap();
        let acked: HashSet<String> = ["u1", "c1", "r1", "gone"].map(String::from).into();
        let mut report = ChaosReport::default();
        verify(data.path(), &["a".to_owned()], &acked, &mut report).unwrap();
        assert_eq!(report.lost, 1, "gone");
        assert_eq!(report.duplicated, 1, "u3");
        assert_eq!(report.tool_results_off_turn, 1, "r1");
        assert_eq!(report.turn_gaps, 1, "no turn 2");
        assert_eq!(report.turns_summarized_twice, 1, "turn 1");
        assert_eq!(report.compactions, 2);
        assert!(!report.clean());
    }
}
