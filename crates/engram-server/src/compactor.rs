//! Runs compactions: the store picks the window, the summarizer (embedded
//! or an LLM over HTTP, behind a circuit breaker) writes the summary, the
//! store archives and starts the epoch. Failures prune nothing and are
//! reported, never dropped.

use std::sync::Arc;
use std::time::Duration;

use engram_core::AgentId;
use engram_llm::{
    Chunked, CircuitBreaker, Extractive, HttpConfig, HttpSummarizer, Summarizer, SummaryRequest,
};
use engram_proto::pb;
use engram_store::Store;
use engram_store::compact::{Job, Policy, Summary};

use crate::budget::Budgets;
use crate::config::{LlmSection, PolicySection};

#[derive(Debug, Clone)]
pub struct Compactor {
    store: Store,
    budgets: Arc<Budgets>,
    summarizer: Arc<dyn Summarizer>,
    policy: Policy,
    /// `policy.max_active_turns` (0: off).
    max_active_turns: usize,
}

/// The summarizer `[llm]` asks for: an OpenAI-compatible endpoint behind a
/// circuit breaker, or the embedded extractive one when no base URL is set.
pub fn summarizer(llm: &LlmSection) -> Result<Arc<dyn Summarizer>, String> {
    if llm.base_url.trim().is_empty() {
        return Ok(Arc::new(Extractive));
    }
    let api_key = Some(llm.api_key.clone())
        .filter(|k| !k.is_empty())
        .or_else(|| {
            std::env::var(&llm.api_key_env)
                .ok()
                .filter(|k| !k.is_empty())
        });
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
    )))
}

impl Compactor {
    pub fn new(
        store: Store,
        budgets: Arc<Budgets>,
        summarizer: Arc<dyn Summarizer>,
        policy: &PolicySection,
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
    /// included. It runs as a task of its own, so a caller that goes away
    /// (a cancelled RPC) cannot leave it half-done or the agent marked busy.
    pub async fn compact(
        &self,
        agent: &AgentId,
        trigger: &str,
        focus: Option<&str>,
        tokens_before: u32,
    ) -> pb::CompactionReport {
        let this = self.clone();
        let label = trigger_label(trigger);
        let (agent, trigger) = (agent.clone(), trigger.to_owned());
        let focus = focus.map(str::to_owned);
        let task = tokio::spawn(async move {
            this.run(&agent, &trigger, focus.as_deref(), tokens_before)
                .await
        });
        let report = task.await.unwrap_or_else(|e| pb::CompactionReport {
            error: format!("the compaction task failed: {e}"),
            ..Default::default()
        });
        metrics::counter!("engram_compactions_total", "trigger" => label, "outcome" => outcome(&report))
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
                    tracing::warn!(agent = %agent, error = %e, "microcompact failed");
                    report.error = e.client_message();
                    return report;
                }
            }
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
                tracing::warn!(agent = %agent, error = %e, "no compaction window");
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
                let failures = self.store.abort_compaction(agent).await.unwrap_or(0);
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
                report.performed = true;
                report.turn_ids = out.turn_ids;
                report.episodic_id = out.episodic_id;
                report.semantic_added = out.semantic_added;
                report.semantic_updated = out.semantic_updated;
                report.traces_pruned = out.traces_pruned;
            }
            Err(e) => {
                tracing::warn!(agent = %agent, error = %e, "compaction could not be stored; nothing pruned");
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
    ) -> Result<(engram_llm::Summary, Job), String> {
        let summarizer = Arc::clone(&self.summarizer);
        let runtime = tokio::runtime::Handle::current();
        let focus = focus.map(str::to_owned);
        let task = tokio::task::spawn_blocking(move || {
            let answer = runtime.block_on(summarizer.summarize(SummaryRequest {
                traces: &job.traces,
                known_facts: &job.known_facts,
                focus: focus.as_deref(),
            }));
            answer
                .map(|summary| (summary, job))
                .map_err(|e| e.to_string())
        });
        task.await.unwrap_or_else(|e| {
            // A bug in a summarizer fails this compaction like an error
            // would (nothing pruned, a failure counted), not the agent.
            tracing::error!(error = %e, "the summarizer panicked");
            Err("the summarizer failed unexpectedly".to_owned())
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

fn outcome(report: &pb::CompactionReport) -> &'static str {
    if report.performed {
        if report.steps.iter().any(|s| s == "summarize") {
            "summarized"
        } else {
            "microcompacted"
        }
    } else if report.error.starts_with("nothing to compact") {
        "skipped"
    } else {
        "failed"
    }
}
