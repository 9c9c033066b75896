//! Runs compactions: the store picks the window, the summarizer (embedded
//! or an LLM over HTTP, behind the endpoint's circuit breaker) writes the
//! summary, the store archives and starts the epoch. Failures prune nothing
//! and are reported, never dropped. One compaction per agent runs at a
//! time (later requests share its report), and an agent whose compactions
//! keep failing pauses on its own, without holding up the others. A
//! summary can be written ahead of the trigger (`ahead.rs`): the trigger
//! then commits it without waiting for the summarizer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram_core::AgentId;
use engram_core::blocks::{Scope, WORKING_MEMORY};
use engram_core::compaction::{
    CompactionError, CompactionRecord, CompactionReport, Strategy, Tier, Trigger,
};
use engram_llm::{SummarizeError, Summarizer, SummaryRequest};
use engram_store::{AgentContext, Begun, Hiding, Job, Policy, RewriteJob, Store, StoreError};
use tokio::time::Instant;

use crate::ahead::{Ahead, Preparations};
use crate::budget::Budgets;
use crate::caches::ContextCaches;
use crate::flights::{Flights, Share};
use crate::settings::Settings;
use crate::sizing;
use crate::strategy::{Chosen, Strategies};

mod decisions;
mod tiers;
mod written_ahead;

/// A compaction's report, and the agent's prompt after it when the
/// compaction changed it (the caller need not read it again).
#[derive(Debug, Clone)]
pub struct Compacted {
    pub report: CompactionReport,
    pub context: Option<AgentContext>,
    /// The summary is still being written in the background and the
    /// prompt fits its window meanwhile: it is committed by a later prompt.
    pub deferred: bool,
    /// The epoch this compaction opened (a later tier changes it in place
    /// while the agent is still at it).
    opened: Option<u32>,
}

impl Compacted {
    fn only(report: CompactionReport) -> Self {
        Self {
            report,
            context: None,
            deferred: false,
            opened: None,
        }
    }

    fn deferred(self) -> Self {
        Self {
            deferred: true,
            ..self
        }
    }

    /// The compaction stopped: what it did so far stays reported (and a
    /// microcompact's new prompt stays the prompt).
    fn failed(self, error: CompactionError) -> Self {
        Self {
            report: self.report.failed(error),
            ..self
        }
    }
}

#[derive(Debug, Clone)]
pub struct Compactor {
    store: Arc<dyn Store>,
    caches: Arc<ContextCaches>,
    budgets: Arc<Budgets>,
    summarizer: Arc<dyn Summarizer>,
    policy: Policy,
    /// `policy.max_active_turns` (0: off).
    max_active_turns: usize,
    flights: Arc<Flights<Compacted>>,
    pauses: Arc<Pauses>,
    /// Summaries written ahead of the trigger.
    ahead: Arc<Preparations>,
    strategies: Arc<Strategies>,
}

/// How a compaction runs: the strategy it follows, and how it may treat a
/// summary being written in the background.
#[derive(Debug, Clone, Copy)]
pub struct How {
    pub wait: Wait,
    pub chosen: Chosen,
}

/// How a compaction may treat a summary being written in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Waits for it (a prompt that would not fit otherwise; a Compact).
    Always,
    /// The prompt fits its window as it is: the compaction does not wait
    /// for a summarizer, and a summary is started in the background if
    /// none is under way.
    NotWhileItFits,
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
        engram_store::lock(&self.until)
    }
}

impl Compactor {
    pub fn new(
        store: Arc<dyn Store>,
        caches: Arc<ContextCaches>,
        budgets: Arc<Budgets>,
        summarizer: Arc<dyn Summarizer>,
        settings: &Settings,
    ) -> Self {
        let policy = &settings.policy;
        Self {
            store,
            caches,
            budgets,
            summarizer,
            policy: Policy {
                raw_tail_turns: policy.raw_tail_turns,
                max_episodic: policy.max_episodic_items,
                max_semantic: policy.max_semantic_items,
                carry_tokens: policy.max_carried_tokens,
                fact_ttl: (settings.memory.default_ttl_secs > 0)
                    .then_some(settings.memory.default_ttl_secs as f64),
            },
            max_active_turns: policy.max_active_turns,
            strategies: Arc::new(Strategies::new(policy)),
            flights: Arc::default(),
            ahead: Arc::default(),
            pauses: Arc::new(Pauses {
                after: settings.agent_failures.max(1),
                cooldown: settings.agent_cooldown,
                until: Mutex::default(),
            }),
        }
    }

    /// The turn-count trigger: more finished active turns than this (0: off).
    pub fn max_active_turns(&self) -> usize {
        self.max_active_turns
    }

    /// The strategy `agent`'s compactions follow for a prompt of `model`
    /// (the request's, if it named one).
    pub fn strategy(&self, agent: &str, model: &str, requested: Option<Strategy>) -> Chosen {
        self.strategies.of(agent, model, requested)
    }

    pub fn strategies(&self) -> &Strategies {
        &self.strategies
    }

    /// The policy a summary for `trigger` follows: a turn-count compaction
    /// keeps no more raw turns than the trigger allows, or the very next
    /// prompt would trigger it again with nothing left to do.
    /// The compaction settings with no trigger's adjustments (a forget's
    /// snapshot is rendered as a compaction renders it).
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Writes a summary a forget hid again from its remaining traces, as a
    /// compaction would summarize them; false if it no longer awaits that.
    pub async fn rewrite(&self, agent: &AgentId, job: &RewriteJob) -> Result<bool, String> {
        let working_memory = self.working_memory(agent).await;
        let window = Job {
            epoch: 0,
            next_epoch: 0,
            turn_ids: job.item.turn_ids.clone(),
            traces: job.traces.clone(),
            known_facts: job.known_facts.clone(),
            current_turn: 0,
            user_id: job.user_id.clone(),
        };
        let (summary, window) = self
            .summarize(window, None, working_memory)
            .await
            .map_err(|e| e.to_string())?;
        engram_store::drop_later(window);
        self.store
            .finish_rewrite(agent, job, summary, self.policy)
            .await
            .map_err(|e| e.client_message())
    }

    fn policy_for(&self, trigger: Trigger) -> Policy {
        let mut policy = self.policy;
        if trigger == Trigger::TurnCount && self.max_active_turns > 0 {
            policy.raw_tail_turns = policy.raw_tail_turns.min(self.max_active_turns);
        }
        // A conversation that went quiet is summarized whole (its current
        // turn aside): the user's next conversation starts from it.
        if trigger == Trigger::Idle {
            policy.raw_tail_turns = 0;
        }
        policy
    }

    /// The summarizer, for the other questions it answers (consolidation).
    pub fn summarizer(&self) -> Arc<dyn Summarizer> {
        Arc::clone(&self.summarizer)
    }

    /// One compaction of `agent`; the report says what happened, errors
    /// included. While one runs, another request for the same agent waits
    /// for it and gets its outcome. It runs as a task of its own, so a
    /// caller that goes away (a cancelled RPC) cannot leave it half-done or
    /// the agent marked busy.
    pub async fn compact(
        &self,
        agent: &AgentId,
        trigger: Trigger,
        focus: Option<&str>,
        tokens_before: u32,
        chosen: Chosen,
    ) -> Compacted {
        let how = How {
            wait: Wait::Always,
            chosen,
        };
        self.compact_waiting(agent, trigger, focus, tokens_before, how)
            .await
    }

    /// [`compact`](Self::compact), for a prompt that may not have to wait
    /// for a summarizer (`how.wait`).
    pub async fn compact_waiting(
        &self,
        agent: &AgentId,
        trigger: Trigger,
        focus: Option<&str>,
        tokens_before: u32,
        how: How,
    ) -> Compacted {
        let this = self.clone();
        let work = {
            let agent = agent.clone();
            let focus = focus.map(str::to_owned);
            async move {
                let started = std::time::Instant::now();
                let compacted = this
                    .run(&agent, trigger, focus.as_deref(), tokens_before, how)
                    .await;
                if !compacted.deferred {
                    this.log(&agent, &compacted.report, started).await;
                }
                compacted
            }
        };
        let failed = move || {
            let mut report = CompactionReport::new(trigger, tokens_before);
            report.strategy = how.chosen.strategy;
            Compacted::only(report.failed(CompactionError::Unexpected))
        };
        let (mut compacted, share) = self.flights.run(agent, work, failed).await;
        let outcome = match share {
            Share::Led if compacted.deferred => "deferred",
            Share::Led => compacted.report.outcome(),
            Share::Joined => {
                tracing::debug!(agent = %agent, trigger = trigger.as_str(), "joined the running compaction");
                // The leader's prompt may have been taken before this
                // caller's own write (a microcompact early in the flight):
                // a joiner reads its own.
                compacted.context = None;
                "joined"
            }
        };
        metrics::counter!("engram_compactions_total", "trigger" => trigger.as_str(), "outcome" => outcome)
            .increment(1);
        compacted
    }

    /// Appends the compaction to the agent's log (skipped ones are not
    /// kept: `CompactionRecord::of`). The compaction stands whatever
    /// happens here: a log that cannot be written is only logged.
    async fn log(&self, agent: &AgentId, report: &CompactionReport, started: std::time::Instant) {
        let took = started.elapsed().as_secs_f64();
        let summarizer = self.summarizer.name();
        let now = engram_store::unix_now();
        let Some(record) = CompactionRecord::of(report, now, took, &summarizer) else {
            return;
        };
        match self.store.record_compaction(agent, record).await {
            Ok(_) | Err(StoreError::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(agent = %agent, error = %e, "the compaction log was not written");
            }
        }
    }

    /// True while the summarizer's circuit breaker is open.
    pub fn circuit_open(&self) -> bool {
        self.summarizer.circuit_open()
    }

    async fn run(
        &self,
        agent: &AgentId,
        trigger: Trigger,
        focus: Option<&str>,
        tokens_before: u32,
        How { wait, chosen }: How,
    ) -> Compacted {
        let mut out = Compacted::only(CompactionReport::new(trigger, tokens_before));
        out.report.strategy = chosen.strategy;
        if chosen.strategy == Strategy::None {
            return out.failed(CompactionError::Off);
        }
        let summarizes = chosen.strategy.summarizes();
        // A summary written ahead answers a size trigger or a plain
        // Compact; a turn count, a quiet conversation or a focus want
        // their own window or words; another strategy wants none (it is
        // dropped, or waited for while it holds the agent's compaction).
        let usable = summarizes
            && (trigger.is_about_size() || (trigger == Trigger::Manual && focus.is_none()));
        // A prompt the provider refused (reactive) cannot wait, and a turn
        // count wants its own window.
        let may_defer = summarizes
            && wait == Wait::NotWhileItFits
            && matches!(trigger, Trigger::Estimate | Trigger::TokenPressure);
        loop {
            match self.ahead.take(agent) {
                Ahead::Nothing => break,
                Ahead::Ready(prepared) if usable => {
                    match self.commit_prepared(agent, *prepared, &mut out).await {
                        Ok(true) => return out,
                        // Stale: the compaction runs as without it.
                        Ok(false) => break,
                        Err(e) => return out.failed(e),
                    }
                }
                Ahead::Ready(_) => break,
                Ahead::Running(_) if may_defer => return out.deferred(),
                Ahead::Running(mut done) => {
                    // It holds the agent's compaction lock until done.
                    let _ = done.changed().await;
                }
            }
        }
        match chosen.strategy {
            Strategy::CompactToolResults => {
                return self.tool_results_only(agent, trigger, out).await;
            }
            Strategy::Trim => return self.trim(agent, trigger, chosen.keep_last_turns, out).await,
            Strategy::Summarize | Strategy::None => {}
        }
        // The cheapest tiers that can answer the trigger. Snipping and
        // hiding old tool results shrink the prompt but keep every turn:
        // they answer the size triggers only; a turn count or a manual
        // Compact summarizes.
        if trigger.is_about_size() {
            for hiding in [Hiding::Snip, Hiding::Microcompact] {
                match self.hide_tier(agent, hiding, &mut out).await {
                    Ok(true) => return out,
                    Ok(false) => {}
                    Err(e) => return out.failed(e),
                }
            }
        }
        // The prompt fits: its summary is written in the background (of
        // the epoch a microcompact may just have opened), and committed by
        // a later prompt.
        if may_defer && self.pauses.remaining(agent).is_none() {
            return match self.start_ahead(agent, None).await {
                Ok(()) => out.deferred(),
                // Nothing to compact, or another replica compacting: said
                // now, as a compaction would.
                Err(e) => out.failed(e),
            };
        }
        let (mut job, policy) = match self.begin(agent, trigger, 0).await {
            Ok(begun) => begun,
            Err(e) => return out.failed(e),
        };
        if out.opened == Some(job.epoch) {
            // Microcompact opened this compaction's epoch already.
            job.next_epoch = job.epoch;
        }
        out.report.steps.push(Tier::Summarize);
        crate::users::add_known_facts(self.store.as_ref(), agent, &mut job).await;
        let user = job.user_id.clone();
        let (summary, job) = match self.summary(agent, job, focus).await {
            Ok(answer) => answer,
            Err(e) => return out.failed(e),
        };
        match self
            .store
            .finish_compaction(agent, job, Some(summary), policy)
            .await
        {
            Ok(done) => {
                self.committed(agent, done, user, &mut out).await;
                out
            }
            Err(e) => out.failed(storage(agent, &e, "storing the compaction")),
        }
    }

    /// The report of a stored compaction, and its facts to its user.
    async fn committed(
        &self,
        agent: &AgentId,
        done: engram_store::Committed,
        user: Option<String>,
        out: &mut Compacted,
    ) {
        self.pauses.record(agent, None);
        let report = &mut out.report;
        report.performed = true;
        report.turn_ids = done.turn_ids;
        report.episodic_id = done.episodic_id;
        report.semantic_added = done.semantic_added;
        report.semantic_updated = done.semantic_updated;
        report.carried = done.carried;
        report.carry_dropped = done.carry_dropped;
        report.traces_pruned = done.traces_pruned;
        report.tokens_after =
            sizing::over_trigger(&self.caches, &self.budgets, agent, &done.context).1;
        out.now(done.context);
        if let Some(user) = user {
            crate::users::fold_facts(self.store.as_ref(), agent, &user).await;
        }
    }

    /// The window to summarize, unless the agent is paused after failed
    /// summaries (a manual Compact is not), has nothing to compact, or is
    /// compacting already.
    async fn begin(
        &self,
        agent: &AgentId,
        trigger: Trigger,
        fewer_raw: usize,
    ) -> Result<(Job, Policy), CompactionError> {
        if trigger != Trigger::Manual
            && let Some(left) = self.pauses.remaining(agent)
        {
            return Err(CompactionError::Paused {
                failures: self.pauses.after,
                resumes_in_secs: left.as_secs_f64().ceil() as u64,
            });
        }
        let mut policy = self.policy_for(trigger);
        policy.raw_tail_turns = policy.raw_tail_turns.saturating_sub(fewer_raw);
        self.window(agent, policy).await.map(|job| (job, policy))
    }

    /// The window of whole turns older than `policy`'s raw tail, marked
    /// as being compacted.
    async fn window(&self, agent: &AgentId, policy: Policy) -> Result<Job, CompactionError> {
        match self.store.begin_compaction(agent, policy).await {
            Ok(Begun::Job(job)) => Ok(job),
            Ok(Begun::Nothing) => Err(CompactionError::NothingToCompact {
                raw_tail_turns: policy.raw_tail_turns,
            }),
            Ok(Begun::Busy) => Err(CompactionError::Busy),
            Err(e) => Err(storage(agent, &e, "choosing the window")),
        }
    }

    /// The summary of `job`, timed; a failure releases the job (nothing is
    /// pruned) and counts towards the agent's pause.
    async fn summary(
        &self,
        agent: &AgentId,
        job: Job,
        focus: Option<&str>,
    ) -> Result<(engram_core::compaction::Summary, Job), CompactionError> {
        let working_memory = self.working_memory(agent).await;
        let started = std::time::Instant::now();
        let answer = self.summarize(job, focus, working_memory).await;
        metrics::histogram!("engram_summarizer_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        if answer.is_ok() {
            self.ahead.pace.summarized(started.elapsed());
        }
        let e = match answer {
            Ok(answer) => return Ok(answer),
            Err(e) => e,
        };
        metrics::counter!("engram_summarizer_failures_total").increment(1);
        // An open circuit did not try this agent's turns at all.
        let own = !matches!(e, SummarizeError::CircuitOpen(_));
        let failures = self.store.abort_compaction(agent, own).await.unwrap_or(0);
        if own {
            self.pauses.record(agent, Some(failures));
        }
        tracing::warn!(agent = %agent, error = %e, failures, "summary failed; nothing pruned");
        Err(CompactionError::Summarizer {
            message: e.to_string(),
            consecutive_failures: failures,
            tried: own,
        })
    }

    /// The agent's working memory, for the summarizer to see. Context, not
    /// what is summarized: a failed read leaves it out rather than fail
    /// the compaction.
    async fn working_memory(&self, agent: &AgentId) -> Option<String> {
        let scope = Scope::Agent(agent.clone());
        match self.store.list_blocks(&scope).await {
            Ok(blocks) => blocks
                .into_iter()
                .find(|b| b.label == WORKING_MEMORY)
                .map(|b| b.value),
            Err(e) => {
                tracing::debug!(agent = %agent, error = %e, "working memory not read for the summary");
                None
            }
        }
    }

    /// The summarizer's answer for `job`. The whole call runs on a blocking
    /// thread of its own: building the prompt of a large window, counting
    /// its chunks and the embedded summarizer are CPU work that must not
    /// hold an async worker, and the HTTP wait there costs nobody.
    async fn summarize(
        &self,
        job: Job,
        focus: Option<&str>,
        working_memory: Option<String>,
    ) -> Result<(engram_core::compaction::Summary, Job), SummarizeError> {
        let summarizer = Arc::clone(&self.summarizer);
        let runtime = tokio::runtime::Handle::current();
        let focus = focus.map(str::to_owned);
        let task = tokio::task::spawn_blocking(move || {
            let answer = runtime.block_on(summarizer.summarize(SummaryRequest {
                traces: &job.traces,
                known_facts: &job.known_facts,
                focus: focus.as_deref(),
                working_memory: working_memory.as_deref(),
            }));
            answer.map(|summary| {
                decisions::count(&summary);
                (summary, job)
            })
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

/// The report's account of a storage error (no paths or OS errors), logged
/// unless the agent was deleted meanwhile: a race with DeleteAgent is no
/// fault of the server's worth a warning.
fn storage(agent: &AgentId, e: &StoreError, step: &'static str) -> CompactionError {
    if !matches!(e, StoreError::NotFound(_)) {
        tracing::warn!(agent = %agent, error = %e, step, "compaction stopped by storage; nothing pruned");
    }
    let message = e.client_message();
    CompactionError::Storage(match step {
        "storing the compaction" => format!("storing the compaction failed: {message}"),
        _ => message,
    })
}
