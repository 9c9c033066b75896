//! A seeded gRPC fuzz of the real binary: every RPC with hostile fields
//! (see `hostile`), undecodable bytes, and DeleteAgent racing the writers;
//! then a delete storm: reads, writes and deletes of the same few agents at
//! once, round after round. It counts what must never happen: a crash, a
//! panic, a call that hangs, an INTERNAL or UNKNOWN answer, and an
//! UNAVAILABLE one (a storage error: the server's disk is healthy here, so
//! a call that meets a delete answers as before it or after it, OK or
//! NOT_FOUND, never as a failure); and after the storm, an agent that
//! ListAgents shows without its files.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_proto::{METHODS, pb};
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod blocks;
mod facts;
mod storm;

use storm::{delete_storm, ghosts};

use crate::daemon::{Client, Daemon, Launch};
use crate::hostile::{AGENTS, Gen};

#[derive(Debug, Clone)]
pub struct FuzzConfig {
    pub binary: PathBuf,
    pub seed: u64,
    pub cases: usize,
    /// Clients sending at once (plus one that deletes agents).
    pub concurrency: usize,
    /// A call that takes longer counts as a hang.
    pub call_timeout: Duration,
    /// Print every error answer to stderr.
    pub verbose: bool,
    /// Further `ENGRAM__…` settings of the server (another backend).
    pub env: Vec<(String, String)>,
}

#[derive(Debug, Default, Clone)]
pub struct FuzzReport {
    pub cases: usize,
    pub deletes: usize,
    /// Answers by gRPC code name.
    pub codes: BTreeMap<String, usize>,
    /// The delete storm that follows the hostile cases.
    pub storm: StormReport,
    /// Answers, of any code, that say the storage failed.
    pub storage_errors: usize,
    pub hangs: usize,
    pub crashes: usize,
    /// `engram_panics_total` at the end.
    pub panics: u64,
    /// The first few cases that went wrong: seed, case, method, answer.
    pub failures: Vec<String>,
    pub elapsed: Duration,
}

/// The delete storm: `rounds` calls on [`STORM_AGENTS`] while `deletes`
/// DeleteAgent calls remove them again and again.
#[derive(Debug, Default, Clone)]
pub struct StormReport {
    pub rounds: usize,
    pub deletes: usize,
    /// Answers by gRPC code name (the deletes' too).
    pub codes: BTreeMap<String, usize>,
    /// Agents ListAgents showed after the storm without their files (a
    /// directory a delete left, or that a late write brought back).
    pub ghosts: usize,
}

impl FuzzReport {
    /// Answers of this code, in both parts of the run.
    fn answers(&self, code: &str) -> usize {
        [&self.codes, &self.storm.codes]
            .iter()
            .map(|codes| codes.get(code).copied().unwrap_or(0))
            .sum()
    }

    pub fn internal(&self) -> usize {
        self.answers("Internal")
    }

    pub fn unknown(&self) -> usize {
        self.answers("Unknown")
    }

    /// Storage errors, or a server that could not be reached: never right
    /// in a fuzz, where the disk (or the database) is healthy.
    pub fn unavailable(&self) -> usize {
        self.answers("Unavailable")
    }

    pub fn clean(&self) -> bool {
        self.internal() == 0
            && self.unknown() == 0
            && self.unavailable() == 0
            && self.storage_errors == 0
            && self.storm.ghosts == 0
            && self.hangs == 0
            && self.crashes == 0
            && self.panics == 0
    }
}

impl fmt::Display for FuzzReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cases {} (+{} concurrent deletes) in {:.1} s",
            self.cases,
            self.deletes,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "crashes {}  panics {}  hangs {}  INTERNAL {}  UNKNOWN {}  UNAVAILABLE {}  storage errors {}",
            self.crashes,
            self.panics,
            self.hangs,
            self.internal(),
            self.unknown(),
            self.unavailable(),
            self.storage_errors
        )?;
        let codes = |codes: &BTreeMap<String, usize>| {
            let codes: Vec<String> = codes.iter().map(|(k, v)| format!("{k} {v}")).collect();
            codes.join(", ")
        };
        writeln!(f, "answers: {}", codes(&self.codes))?;
        let storm = &self.storm;
        write!(
            f,
            "delete storm: {} rounds on {} agents (+{} deletes), agents listed without their files after it {}; answers: {}",
            storm.rounds,
            STORM_AGENTS.len(),
            storm.deletes,
            storm.ghosts,
            codes(&storm.codes)
        )?;
        for failure in &self.failures {
            write!(f, "\n  {failure}")?;
        }
        Ok(())
    }
}

/// One request of `method` with hostile fields, encoded.
fn request(g: &mut Gen, method: &str) -> Vec<u8> {
    match method {
        "Ingest" => pb::IngestRequest {
            user_id: g.user_id(),
            agent_id: g.agent_id(),
            events: g.events(),
            usage: g.rng.random_bool(0.3).then(|| pb::Usage {
                prompt_tokens: g.u32(),
                completion_tokens: g.u32(),
                total_tokens: g.u32(),
            }),
            model: if g.wild {
                g.unicode(0..30)
            } else {
                "gpt-4o".into()
            },
        }
        .encode_to_vec(),
        "PrepareRequest" => pb::PrepareRequestRequest {
            user_id: g.user_id(),
            agent_id: g.agent_id(),
            system_prompt: if g.rng.random_bool(0.3) {
                g.text()
            } else {
                String::new()
            },
            user_input: g.rng.random_bool(0.5).then(|| g.user_input()),
            model: ["gpt-4o", "claude-3-5-sonnet", "unknown-model", "", "x\0y"]
                [g.rng.random_range(0..if g.wild { 5 } else { 3 })]
            .into(),
            render_format: if g.wild {
                g.rng.random_range(-1..7)
            } else {
                g.rng.random_range(0..5)
            },
            max_output_tokens: g.u32(),
            force_compaction: g.rng.random_bool(0.2),
            recall: g.rng.random_bool(0.7).then(|| g.rng.random_bool(0.5)),
            recall_max_tokens: g.opt_u32(),
            preview: g.rng.random_bool(0.1),
            strategy: g.strategy(),
            recall_as_of: g.opt_time(),
        }
        .encode_to_vec(),
        "Compact" => pb::CompactRequest {
            agent_id: g.agent_id(),
            focus: g.text(),
            strategy: g.strategy(),
        }
        .encode_to_vec(),
        "Retrieve" => pb::RetrieveRequest {
            user_id: g.user_id(),
            agent_id: agent_unless_user(g),
            max_episodic: g.opt_u32(),
            max_semantic: g.opt_u32(),
            query: g.query(),
            raw_tail_turns: g.opt_u32(),
            include_tool_interactions: g.rng.random_bool(0.5),
            max_recalled: g.opt_u32(),
            context_messages: g.u32(),
            wait_for_index_ms: g.wait_ms(),
            as_of: g.opt_time(),
        }
        .encode_to_vec(),
        "SearchHistory" => pb::SearchHistoryRequest {
            user_id: g.user_id(),
            agent_id: agent_unless_user(g),
            query: g.query(),
            limit: g.u32(),
            page_token: g.unicode(0..40),
            mode: g.rng.random_range(-1..4),
            trace_types: (0..g.rng.random_range(0..4))
                .map(|_| g.rng.random_range(-1..6))
                .collect(),
            from_turn_id: g.unicode(0..12),
            to_turn_id: if g.rng.random_bool(0.5) {
                "turn_0003".into()
            } else {
                g.unicode(0..12)
            },
            from_ts: g.opt_time(),
            to_ts: g.opt_time(),
            context_messages: g.u32(),
            wait_for_index_ms: g.wait_ms(),
            as_of: g.opt_time(),
        }
        .encode_to_vec(),
        "GetContextStats" => pb::GetContextStatsRequest {
            agent_id: g.agent_id(),
            model: g.unicode(0..30),
        }
        .encode_to_vec(),
        "ListAgents" => pb::ListAgentsRequest {
            user_id: g.user_id(),
            page_size: g.u32(),
            page_token: g.unicode(0..40),
            id_contains: g.unicode(0..8),
        }
        .encode_to_vec(),
        "DeleteAgent" => pb::DeleteAgentRequest {
            agent_id: g.agent_id(),
        }
        .encode_to_vec(),
        "ForkAgent" => pb::ForkAgentRequest {
            source_agent_id: g.agent_id(),
            target_agent_id: g.agent_id(),
        }
        .encode_to_vec(),
        "DeleteUser" => pb::DeleteUserRequest {
            user_id: g.user_id(),
        }
        .encode_to_vec(),
        "ListCompactions" => pb::ListCompactionsRequest {
            agent_id: g.agent_id(),
            page_size: g.u32(),
            page_token: g.unicode(0..40),
        }
        .encode_to_vec(),
        "ConsolidateUser" => pb::ConsolidateUserRequest {
            user_id: g.user_id(),
        }
        .encode_to_vec(),
        "ListConsolidations" => pb::ListConsolidationsRequest {
            user_id: g.user_id(),
            page_size: g.u32(),
        }
        .encode_to_vec(),
        "ListUsers" => pb::ListUsersRequest {
            page_size: g.u32(),
            page_token: g.unicode(0..40),
        }
        .encode_to_vec(),
        "AddMemories" | "ListMemories" | "GetMemory" | "GetMemoryHistory" | "UpdateMemory"
        | "DeleteMemory" | "ForgetTurn" | "ForgetEvents" | "ExportMemory" | "ImportMemory" => {
            facts::request(g, method)
        }
        other => blocks::request(g, other),
    }
}

/// An agent id, or (half the time) none, so that a request that names a
/// user searches the user's conversations.
fn agent_unless_user(g: &mut Gen) -> String {
    if g.rng.random_bool(0.5) {
        g.agent_id()
    } else {
        String::new()
    }
}

/// A valid encoding damaged: bytes flipped, cut short, or noise.
fn damage(g: &mut Gen, mut bytes: Vec<u8>) -> Vec<u8> {
    match g.rng.random_range(0..3) {
        0 if !bytes.is_empty() => {
            for _ in 0..g.rng.random_range(1..8) {
                let i = g.rng.random_range(0..bytes.len());
                bytes[i] ^= 1 << g.rng.random_range(0..8);
            }
            bytes
        }
        1 if bytes.len() > 1 => {
            let keep = g.rng.random_range(1..bytes.len());
            bytes.truncate(keep);
            bytes
        }
        _ => (0..g.rng.random_range(1..512))
            .map(|_| g.rng.random())
            .collect(),
    }
}

/// Agents of the delete storm: few, so that nearly every call meets a
/// delete of its agent.
pub const STORM_AGENTS: [&str; 3] = ["storm-a", "storm-b", "storm-c"];

#[derive(Debug, Default)]
struct Tally {
    report: FuzzReport,
}

/// Makes calls and tallies their answers.
#[derive(Clone)]
struct Caller {
    channel: tonic::transport::Channel,
    timeout: Duration,
    verbose: bool,
    tally: Arc<Mutex<Tally>>,
    /// The answers are the delete storm's.
    storm: bool,
}

impl Caller {
    /// One call; its answer tallied.
    async fn call(&self, method: &str, body: Vec<u8>, what: String) {
        let answer = tokio::time::timeout(
            self.timeout,
            crate::raw::call_raw(self.channel.clone(), method, body),
        )
        .await;
        let mut tally = self.tally.lock().expect("tally");
        let report = &mut tally.report;
        let mut storage_error = false;
        let code = match answer {
            Err(_) => {
                report.hangs += 1;
                "Hang".to_owned()
            }
            Ok(Ok(())) => "Ok".to_owned(),
            Ok(Err(status)) => {
                if self.verbose {
                    let message: String = status.message().chars().take(150).collect();
                    eprintln!("{what}: {:?} {message}", status.code());
                }
                // The server's words for a failed store (whatever the code).
                let message = status.message();
                storage_error =
                    message.contains("storage error") || message.contains("storage failed");
                format!("{:?}", status.code())
            }
        };
        report.storage_errors += usize::from(storage_error);
        let failed = storage_error
            || matches!(
                code.as_str(),
                "Hang" | "Internal" | "Unknown" | "Unavailable"
            );
        if failed && report.failures.len() < 10 {
            report.failures.push(format!("{what}: {code}"));
        }
        let codes = if self.storm {
            &mut report.storm.codes
        } else {
            &mut report.codes
        };
        *codes.entry(code).or_default() += 1;
    }
}

pub async fn run(config: &FuzzConfig) -> anyhow::Result<FuzzReport> {
    let data = tempfile::tempdir()?;
    let mut daemon = Daemon::spawn(&Launch {
        binary: config.binary.clone(),
        data_dir: data.path().to_owned(),
        env: vec![
            // Room for the megabyte fields, and compactions that happen.
            (
                "ENGRAM__SERVER__MAX_MESSAGE_BYTES".into(),
                (8 << 20).to_string(),
            ),
            ("ENGRAM__POLICY__MAX_ACTIVE_TURNS".into(), "4".into()),
        ]
        .into_iter()
        .chain(config.env.iter().cloned())
        .collect(),
        metrics: true,
    })?;
    let started = Instant::now();
    let tally = Arc::new(Mutex::new(Tally::default()));
    let caller = Caller {
        channel: daemon.channel().await?,
        timeout: config.call_timeout,
        verbose: config.verbose,
        tally: Arc::clone(&tally),
        storm: false,
    };
    hostile_cases(config, &caller).await?;
    let storm = Caller {
        storm: true,
        ..caller
    };
    delete_storm(config, &storm).await?;
    let mut report = std::mem::take(&mut tally.lock().expect("tally").report);
    report.elapsed = started.elapsed();
    if daemon.exited().is_some() {
        report.crashes += 1;
    } else {
        // Still answering, and what it says about itself.
        let mut c: Client = daemon.client().await?;
        match ghosts(&mut c).await {
            Ok(ghosts) => {
                report.storm.ghosts = ghosts.len();
                for ghost in ghosts {
                    report
                        .failures
                        .push(format!("after the storm: {ghost} listed without its files"));
                }
            }
            Err(e) => {
                report.crashes += 1;
                report.failures.push(format!("after the run: {e:?}"));
            }
        }
        if let Some(addr) = &daemon.metrics {
            report.panics = panics(addr).await?;
        }
        daemon.stop()?;
    }
    Ok(report)
}

/// The hostile cases, `config.concurrency` clients at once, with a client
/// that deletes the agents they use meanwhile.
async fn hostile_cases(config: &FuzzConfig, caller: &Caller) -> anyhow::Result<()> {
    let done = Arc::new(AtomicBool::new(false));
    let deleter = {
        let (caller, done) = (caller.clone(), Arc::clone(&done));
        let mut rng = StdRng::seed_from_u64(config.seed ^ 0xde1e7e);
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let agent = AGENTS[rng.random_range(0..AGENTS.len())];
                let body = pb::DeleteAgentRequest {
                    agent_id: agent.into(),
                }
                .encode_to_vec();
                let what = format!("concurrent DeleteAgent {agent}");
                caller.call("DeleteAgent", body, what).await;
                caller.tally.lock().expect("tally").report.deletes += 1;
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..50))).await;
            }
        })
    };
    let mut workers = vec![];
    for w in 0..config.concurrency.max(1) {
        let caller = caller.clone();
        let config = config.clone();
        workers.push(tokio::spawn(async move {
            // Each client's stream follows from (seed, client): a case is
            // replayed with the same --seed and --concurrency.
            let seed = config.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ w as u64;
            let mut g = Gen::new(StdRng::seed_from_u64(seed));
            for case in (w..config.cases).step_by(config.concurrency.max(1)) {
                // Ingest often, so the other calls find agents with turns.
                let method = if g.rng.random_bool(0.3) {
                    "Ingest"
                } else {
                    METHODS[g.rng.random_range(0..METHODS.len())]
                };
                g.wild = g.rng.random_bool(0.4);
                let mut body = request(&mut g, method);
                let raw = g.rng.random_bool(0.1);
                if raw {
                    body = damage(&mut g, body);
                }
                let what = format!(
                    "seed {} case {case}: {method}{} ({} bytes)",
                    config.seed,
                    if raw { ", damaged" } else { "" },
                    body.len()
                );
                caller.call(method, body, what).await;
                caller.tally.lock().expect("tally").report.cases += 1;
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    done.store(true, Ordering::SeqCst);
    deleter.await?;
    Ok(())
}

/// The sum of `engram_panics_total` on the metrics endpoint.
async fn panics(addr: &str) -> anyhow::Result<u64> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: engram\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("engram_panics_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}
