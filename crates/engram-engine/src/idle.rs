//! Summaries of conversations that went quiet: a user's conversation idle
//! for `users.summarize_idle_after_secs` with turns not yet summarized is
//! compacted in the background, so that the user's next conversation has
//! a summary to start from (`users.rs`).
//!
//! The engine notes when it last served each agent (in memory: an agent
//! last used before a restart is noted again at its next use). The sweep
//! takes the agents idle long enough off the list and summarizes those of
//! a user with finished turns in their transcript; the last turn stays
//! raw, as after any compaction.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use engram_core::AgentId;
use engram_core::compaction::Trigger;
use tokio::time::Instant;

use crate::Engine;

/// When the engine last served each agent.
#[derive(Debug, Default)]
pub struct LastUsed {
    agents: Mutex<HashMap<AgentId, Instant>>,
}

impl LastUsed {
    pub fn touch(&self, agent: &AgentId) {
        engram_store::lock(&self.agents).insert(agent.clone(), Instant::now());
    }

    /// Takes the agents unused for at least `idle` off the list.
    fn take_idle(&self, idle: Duration) -> Vec<AgentId> {
        let now = Instant::now();
        let mut agents = engram_store::lock(&self.agents);
        let quiet: Vec<AgentId> = agents
            .iter()
            .filter(|(_, used)| now.duration_since(**used) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &quiet {
            agents.remove(id);
        }
        quiet
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

    /// Summarizes the users' conversations idle for the configured time
    /// that have finished turns not yet summarized; returns how many were
    /// compacted. The background upkeep calls it; a test may too.
    pub async fn summarize_idle(&self) -> usize {
        let secs = self.users.summarize_idle_after_secs;
        if secs == 0 {
            return 0;
        }
        let mut compacted = 0;
        for id in self.last_used.take_idle(Duration::from_secs(secs)) {
            let Ok(context) = self.store.context(&id).await else {
                continue; // deleted meanwhile
            };
            if context.user_id.is_none() || context.finished_turns == 0 {
                continue;
            }
            let tokens = crate::sizing::over_trigger(&self.caches, &self.budgets, &id, &context).1;
            let report = self
                .compactor
                .compact(&id, Trigger::Idle, None, tokens)
                .await
                .report;
            if report.performed {
                compacted += 1;
                tracing::info!(agent = %id, turns = report.turn_ids.len(), "summarized an idle conversation");
            } else if let Some(e) = &report.error {
                tracing::debug!(agent = %id, error = %e, "an idle conversation was not summarized");
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
mod tests;
