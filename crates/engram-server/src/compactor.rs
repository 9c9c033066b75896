//! Runs compactions: the store picks the window, the summarizer (embedded
//! or an LLM over HTTP, behind the endpoint's circuit breaker) writes the
//! summary, the store archives and starts the epoch. Failures prune nothing
//! and are reported, never dropped. One compaction per agent runs at a
//! time (later requests share its report), and an agent whose compactions
//! keep failing pauses on its own, without holding up the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use engram_core::AgentId;
use engram_llm::{
    Chunked, CircuitBreaker, Extractive, HttpConfig, HttpSummarizer, SummarizeError, Summarizer,
    SummaryRequest,
};
use engram_proto::pb;
use engram_store::Store;
use engram_store::compact::{Job, Policy, Summary};
use tokio::time::Instant;

use crate::budget::Budgets;
use crate::config::{LlmSection, PolicySection};
use crate::flights::{Flights, Share};

#[derive(Debug, Clone)]
pub struct Compactor {
    store: Store,
    budgets: Arc<Budgets>,
    summarizer: Arc<dyn Summarizer>,
    policy: Policy,
    /// `policy.max_active_turns` (0: off).
    max_active_turns: usize,
    flights: Arc<Flights<pb::CompactionReport>>,
    pauses: Arc<Pauses>,
}

/// Agents whose compactions failed `after` times in a row, and until when
/// their automatic compaction waits.
#[derive(Debug)]
struct Pauses {
    after: u32,
    cooldown: Duration,
    until: Mutex<HashMap<AgentId, Instant>>,
}

impl Pauses {
    fn remaining(&self, agent: &AgentId) -> Option<Duration> {
        let until = *self.lock().get(agent)?;
        until.checked_duration_since(Instant::now())
    }

    fn record(&self, agent: &AgentId, consecutive_failures: Option<u32>) {
        let mut until = self.lock();
        match consecutive_failures {
            Some(n) if n >= self.after => {
                let now = Instant::now();
                // Ended pauses go, so the map holds only paused agents.
                until.retain(|_, t| *t > now);
                until.insert(agent.clone(), now + self.cooldown);
            }
            Some(_) => {}
            None => {
                until.remove(agent);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AgentId, Instant>> {
        self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The summarizer `[llm]` asks for: an OpenAI-compatible endpoint behind a
/// circuit breaker, or the embedded extractive one when no base URL is set.
pub fn summarizer(llm: &LlmSection) -> Result<Arc<dyn Summarizer>, String> {
    if llm.base_url.trim().is_empty() {
        return Ok(Arc::new(Extractive));
    }
    let api_key = Some(llm.api_key.0.clone()).filter(|k| !k.is_empty());
    let http = HttpSummarizer::new(HttpConfig {
        api_key,
        timeout: Duration::from_secs(llm.timeout_secs),
        max_retries: llm.max_retries,
        json_mode: llm.json_mode,
        ..HttpConfig::new(&llm.base_url, &llm.model)
    })?;
    Ok(Arc::new(CircuitBreaker::new(
        Chunked::new(http, llm.context_tokens),
        llm.circuit_failures,
        Duration::from_secs(llm.circuit_cooldown_secs),
        Duration::from_secs(llm.circuit_max_cooldown_secs),
    )))
}

impl Compactor {
    pub fn new(
        store: Store,
        budgets: Arc<Budgets>,
        summarizer: Arc<dyn Summarizer>,
        policy: &PolicySection,
        llm: &LlmSection,
    ) -> Self {
        Self {
            store,
            budgets,
            summarizer,
            policy: Policy {
                raw_tail_turns: policy.raw_tail_turns,
                max_episodic: policy.max_episodic_items,
                max_semantic: policy.max_semantic_items,
            },
            max_active_turns: policy.max_active_turns,
            flights: Arc::default(),
            pauses: Arc::new(Pauses {
                after: llm.agent_failures.max(1),
                cooldown: Duration::from_secs(llm.agent_cooldown_secs),
                until: Mutex::default(),
            }),
        }
    }

    /// The turn-count trigger: more finished active turns than this (0: off).
    pub fn max_active_turns(&self) -> usize {
        self.max_active_turns
    }

    /// The policy a summary for `trigger` follows: a turn-count compaction
    /// keeps no more raw turns than the trigger allows, or the very next
    /// prompt would trigger it again with nothing left to do.
    fn policy_for(&self, trigger: &str) -> Policy {
        let mut policy = self.policy;
        if trigger == "turn_count" && self.max_active_turns > 0 {
            policy.raw_tail_turns = policy.raw_tail_turns.min(self.max_active_turns);
        }
        policy
    }

    pub fn summarizer_name(&self) -> String {
        self.summarizer.name()
    }

    /// One compaction of `agent`; the report says what happened, errors
    /// included. While one runs, another request for the same agent waits
    /// for it and gets its report. It runs as a task of its own, so a
    /// caller that goes away (a cancelled RPC) cannot leave it half-done or
    /// the agent marked busy.
    pub async fn compact(
        &self,
        agent: &AgentId,
        trigger: &str,
        focus: Option<&str>,
        tokens_before: u32,
    ) -> pb::CompactionReport {
        let this = self.clone();
        let label = trigger_label(trigger);
        let work = {
            let (agent, trigger) = (agent.clone(), trigger.to_owned());
            let focus = focus.map(str::to_owned);
            async move {
                this.run(&agent, &trigger, focus.as_deref(), tokens_before)
                    .await
            }
        };
        let (report, share) = self.flights.run(agent, work, unexpected).await;
        let outcome = match share {
            Share::Led => outcome(&report),
            Share::Joined => {
                tracing::debug!(agent = %agent, trigger, "joined the running compaction");
                "joined"
            }
        };
        metrics::counter!("engram_compactions_total", "trigger" => label, "outcome" => outcome)
            .increment(1);
        report
    }

    /// True while the summarizer's circuit breaker is open.
    pub fn circuit_open(&self) -> bool {
        self.summarizer.circuit_open()
    }

    async fn run(
        &self,
        agent: &AgentId,
        trigger: &str,
        focus: Option<&str>,
        tokens_before: u32,
    ) -> pb::CompactionReport {
        let mut report = pb::CompactionReport {
            trigger: trigger.to_owned(),
            tokens_before,
            tokens_after: tokens_before,
            ..Default::default()
        };
        // The cheapest tier that can answer the trigger. Hiding old tool
        // results shrinks the prompt but keeps every turn: it answers the
        // token triggers only; a turn count or a manual Compact summarizes.
        let mut opened_epoch = false;
        if matches!(trigger, "token_pressure" | "estimate" | "reactive") {
            match self
                .store
                .microcompact(agent, self.policy.raw_tail_turns)
                .await
            {
                Ok(0) => {}
                Ok(_) => {
                    report.steps.push("microcompact".to_owned());
                    opened_epoch = true;
                    match crate::context::over_trigger(&self.store, &self.budgets, agent).await {
                        Ok((false, tokens)) => {
                            report.performed = true;
                            report.tokens_after = tokens;
                            return report;
                        }
                        Ok((true, _)) => {}
                        Err(e) => {
                            report.error = format!("storage: {}", e.message());
                            return report;
                        }
                    }
                }
                Err(e) => {
                    if !deleted(&e) {
                        tracing::warn!(agent = %agent, error = %e, "microcompact failed");
                    }
                    report.error = e.client_message();
                    return report;
                }
            }
        }
        if trigger != "manual"
            && let Some(left) = self.pauses.remaining(agent)
        {
            report.error = format!(
                "compaction paused: this agent's last {} compactions failed; automatic compaction resumes in {}s (a manual Compact tries at once)",
                self.pauses.after,
                left.as_secs_f64().ceil()
            );
            return report;
        }
        let policy = self.policy_for(trigger);
        let mut job = match self.store.begin_compaction(agent, policy).await {
            Ok(Some(job)) => job,
            Ok(None) => {
                report.error = format!(
                    "nothing to compact: no whole turns older than the raw tail ({} turns), or a compaction is already running",
                    policy.raw_tail_turns
                );
                return report;
            }
            Err(e) => {
                if !deleted(&e) {
                    tracing::warn!(agent = %agent, error = %e, "no compaction window");
                }
                report.error = e.client_message();
                return report;
            }
        };
        if opened_epoch {
            job.next_epoch = job.epoch;
        }
        report.steps.push("summarize".to_owned());
        let started = std::time::Instant::now();
        let answer = self.summarize(job, focus).await;
        metrics::histogram!("engram_summarizer_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        let (summary, job) = match answer {
            Ok(out) => out,
            Err(e) => {
                metrics::counter!("engram_summarizer_failures_total").increment(1);
                // An open circuit did not try this agent's turns at all.
                let own = !matches!(e, SummarizeError::CircuitOpen(_));
                let failures = self.store.abort_compaction(agent, own).await.unwrap_or(0);
                if own {
                    self.pauses.record(agent, Some(failures));
                }
                tracing::warn!(agent = %agent, error = %e, failures, "summary failed; nothing pruned");
                report.error =
                    format!("{e} (consecutive failures: {failures}); nothing was pruned");
                return report;
            }
        };
        let summary = Summary {
            text: summary.episodic_summary,
            tags: summary.tags,
            salience: summary.salience,
            facts: summary.semantic_facts,
        };
        match self
            .store
            .finish_compaction(agent, job, summary, policy)
            .await
        {
            Ok(out) => {
                self.pauses.record(agent, None);
                report.performed = true;
                report.turn_ids = out.turn_ids;
                report.episodic_id = out.episodic_id;
                report.semantic_added = out.semantic_added;
                report.semantic_updated = out.semantic_updated;
                report.traces_pruned = out.traces_pruned;
            }
            Err(e) => {
                if !deleted(&e) {
                    tracing::warn!(agent = %agent, error = %e, "compaction could not be stored; nothing pruned");
                }
                report.error = format!("storing the compaction failed: {}", e.client_message());
            }
        }
        report
    }

    /// The summarizer's answer for `job`. The whole call runs on a blocking
    /// thread of its own: building the prompt of a large window, counting
    /// its chunks and the embedded summarizer are CPU work that must not
    /// hold an async worker, and the HTTP wait there costs nobody.
    async fn summarize(
        &self,
        job: Job,
        focus: Option<&str>,
    ) -> Result<(engram_llm::Summary, Job), SummarizeError> {
        let summarizer = Arc::clone(&self.summarizer);
        let runtime = tokio::runtime::Handle::current();
        let focus = focus.map(str::to_owned);
        let task = tokio::task::spawn_blocking(move || {
            let answer = runtime.block_on(summarizer.summarize(SummaryRequest {
                traces: &job.traces,
                known_facts: &job.known_facts,
                focus: focus.as_deref(),
            }));
            answer.map(|summary| (summary, job))
        });
        task.await.unwrap_or_else(|e| {
            // A bug in a summarizer fails this compaction like an error
            // would (nothing pruned, a failure counted), not the agent.
            tracing::error!(error = %e, "the summarizer panicked");
            Err(SummarizeError::BadAnswer(
                "the summarizer failed unexpectedly".to_owned(),
            ))
        })
    }
}

/// Triggers are a fixed set; anything else (never expected) is one label,
/// so a label cannot grow without bound.
fn trigger_label(trigger: &str) -> &'static str {
    match trigger {
        "token_pressure" => "token_pressure",
        "turn_count" => "turn_count",
        "estimate" => "estimate",
        "reactive" => "reactive",
        "manual" => "manual",
        _ => "other",
    }
}

/// The agent was deleted while it was being compacted: a race with
/// DeleteAgent, no fault of the server's worth a warning.
fn deleted(e: &engram_store::StoreError) -> bool {
    matches!(e, engram_store::StoreError::NotFound(_))
}

/// The report of a compaction whose task panicked or was dropped.
fn unexpected() -> pb::CompactionReport {
    pb::CompactionReport {
        error: "the compaction failed unexpectedly; nothing was pruned".to_owned(),
        ..Default::default()
    }
}

fn outcome(report: &pb::CompactionReport) -> &'static str {
    if report.performed {
        if report.steps.iter().any(|s| s == "summarize") {
            "summarized"
        } else {
            "microcompacted"
        }
    } else if report.error.starts_with("nothing to compact")
        || report.error.starts_with("compaction paused")
    {
        "skipped"
    } else {
        "failed"
    }
}
