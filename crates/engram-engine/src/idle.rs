//! Summaries of conversations that went quiet: a user's conversation idle
//! for `users.summarize_idle_after_secs` with turns not yet summarized is
//! compacted in the background, so that the user's next conversation has
//! a summary to start from (`users.rs`).
//!
//! The engine notes when it last served each agent, in memory, and hands
//! those notes to the store every few seconds (`UserMemory::note_used`),
//! and at shutdown: a conversation last used before a restart, or on
//! another replica, is still summarized once quiet. The sweep takes the
//! agents quiet long enough off the store's list (each to one replica) and
//! summarizes those of a user with finished turns in their transcript; the
//! last turn stays raw, as after any compaction. Then each such user's
//! facts are consolidated (`consolidate.rs`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use engram_core::AgentId;
use engram_core::compaction::Trigger;
use tokio::time::Instant;

use crate::Engine;
use crate::consolidate::Cause;

/// How often the engine's notes reach the store: what a crash can lose of
/// them (a conversation used only in that window is summarized after its
/// next use instead).
pub(crate) const NOTE_EVERY: Duration = Duration::from_secs(5);

/// When the engine last served each agent, since its last note to the
/// store.
#[derive(Debug)]
pub struct LastUsed {
    /// The wall clock when the engine started, in whole seconds, and the
    /// runtime's clock then: times are counted on the runtime's clock (a
    /// test may pause it) from that start. Whole seconds keep a time plus
    /// and minus a whole idle period exact.
    base: (f64, Instant),
    agents: Mutex<HashMap<AgentId, f64>>,
}

impl Default for LastUsed {
    fn default() -> Self {
        Self {
            base: (engram_store::unix_now().floor(), Instant::now()),
            agents: Mutex::default(),
        }
    }
}

impl LastUsed {
    /// Unix seconds now, on the runtime's clock.
    fn now(&self) -> f64 {
        self.base.0 + self.base.1.elapsed().as_secs_f64()
    }

    pub fn touch(&self, agent: &AgentId) {
        let now = self.now();
        engram_store::lock(&self.agents).insert(agent.clone(), now);
    }

    fn drain(&self) -> Vec<(AgentId, f64)> {
        engram_store::lock(&self.agents).drain().collect()
    }

    /// Puts back notes the store refused (a later touch stays).
    fn restore(&self, notes: Vec<(AgentId, f64)>) {
        let mut agents = engram_store::lock(&self.agents);
        for (id, t) in notes {
            let at = agents.entry(id).or_insert(t);
            *at = at.max(t);
        }
    }
}

impl Engine {
    /// Notes that `agent` was just used, for the idle sweep (only when
    /// idle summaries are on).
    pub(crate) fn touch(&self, agent: &AgentId) {
        if self.users.summarize_idle_after_secs > 0 {
            self.last_used.touch(agent);
        }
    }

    /// Hands the agents served since the last call to the store's list of
    /// conversations to summarize once quiet (kept for the next call if
    /// the store refuses). The upkeep calls it every few seconds, and the
    /// server at shutdown.
    pub async fn note_used(&self) {
        let notes = self.last_used.drain();
        if notes.is_empty() {
            return;
        }
        if let Err(e) = self.store.note_used(&notes).await {
            tracing::warn!(agents = notes.len(), error = %e, "could not note the agents served; trying again");
            self.last_used.restore(notes);
        }
    }

    /// Summarizes the users' conversations idle for the configured time
    /// that have finished turns not yet summarized; returns how many were
    /// compacted. The background upkeep calls it; a test may too.
    pub async fn summarize_idle(&self) -> usize {
        let secs = self.users.summarize_idle_after_secs;
        if secs == 0 {
            return 0;
        }
        self.note_used().await;
        let before = self.last_used.now() - secs as f64;
        let quiet = match self.store.take_quiet(before).await {
            Ok(quiet) => quiet,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the conversations gone quiet");
                return 0;
            }
        };
        let mut compacted = 0;
        let mut users = std::collections::BTreeSet::new();
        for id in quiet {
            let Ok(context) = self.store.context(&id).await else {
                continue; // deleted meanwhile
            };
            if context.user_id.is_none() || context.finished_turns == 0 {
                continue;
            }
            // A summary for the user's next conversation: agents whose
            // strategy writes none are left as they are.
            let chosen = self
                .compactor
                .strategy(id.as_str(), &context.model(None), None);
            if !chosen.strategy.summarizes() {
                continue;
            }
            let tokens = crate::sizing::over_trigger(&self.caches, &self.budgets, &id, &context).1;
            let report = self
                .compactor
                .compact(&id, Trigger::Idle, None, tokens, chosen)
                .await
                .report;
            if report.performed {
                compacted += 1;
                users.extend(context.user_id.clone());
                tracing::info!(agent = %id, turns = report.turn_ids.len(), "summarized an idle conversation");
            } else if let Some(e) = &report.error {
                tracing::debug!(agent = %id, error = %e, "an idle conversation was not summarized");
            }
        }
        // Each user's new facts reconciled with what the user's other
        // conversations said ("sleep-time"), once per sweep.
        for user in users {
            if let Err(e) = self.consolidate_user(&user, Cause::Idle).await {
                tracing::warn!(user = %user, error = %e, "an idle user's facts were not consolidated; the next idle summary will");
            }
        }
        compacted
    }

    /// How often the sweep looks: a quarter of the idle time, at most a
    /// minute.
    pub(crate) fn idle_sweep_every(&self) -> Option<Duration> {
        let secs = self.users.summarize_idle_after_secs;
        (secs > 0).then(|| {
            (Duration::from_secs(secs) / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
