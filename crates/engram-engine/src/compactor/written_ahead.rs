//! The compactor's side of summaries written ahead of the trigger
//! (`crate::ahead`): starting one, and committing it at the trigger.

use std::time::Duration;

use engram_core::AgentId;
use engram_core::compaction::{CompactionError, Tier, Trigger};
use engram_store::{Begun, Job, Policy, StoreError};

use super::{Compacted, Compactor, storage};
use crate::ahead::Prepared;

impl Compactor {
    /// Starts writing the summary the agent's next compaction will commit
    /// (its prompt passed `budget.precompact_ratio`), unless one is under
    /// way or ready (for `epoch`, the agent's epoch now, if given), or the
    /// agent's compactions are paused.
    pub fn prepare_ahead(&self, agent: &AgentId, epoch: Option<u32>) {
        if self.pauses.remaining(agent).is_some() {
            return;
        }
        let this = self.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            if let Err(e) = this.start_ahead(&agent, epoch).await {
                tracing::debug!(agent = %agent, error = %e, "no summary written ahead");
            }
        });
    }

    /// Takes the agent's window (under the compaction lock, which the
    /// summary holds until it is written) and has its summary written in
    /// the background; Ok also when one is under way or ready already.
    pub(super) async fn start_ahead(
        &self,
        agent: &AgentId,
        epoch: Option<u32>,
    ) -> Result<(), CompactionError> {
        let Some(claim) = self.ahead.claim(agent, epoch) else {
            return Ok(());
        };
        // The turns that will come while it is written stay raw instead of
        // as many of the tail (`Pace::turns_during_summary`). A failure
        // here drops the claim: nothing is under way.
        let fewer_raw = self.ahead.pace.turns_during_summary(agent);
        let (job, policy) = self.begin(agent, Trigger::Estimate, fewer_raw).await?;
        let this = self.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            if let Some(prepared) = this.prepare(&agent, job, policy).await {
                claim.ready(prepared);
            }
        });
        Ok(())
    }

    /// The summary of `job`, held with it; the compaction lock is given
    /// back meanwhile. A failed summary counts as a failed compaction
    /// (`summary`).
    async fn prepare(&self, agent: &AgentId, mut job: Job, policy: Policy) -> Option<Prepared> {
        let outcome = |o: &'static str| {
            metrics::counter!("engram_summaries_ahead_total", "outcome" => o).increment(1);
        };
        crate::users::add_known_facts(self.store.as_ref(), agent, &mut job).await;
        let Ok((summary, job)) = self.summary(agent, job, None).await else {
            outcome("failed");
            return None;
        };
        if let Err(e) = self.store.abort_compaction(agent, false).await {
            tracing::debug!(agent = %agent, error = %e, "a summary written ahead was dropped");
            return None;
        }
        outcome("ready");
        tracing::debug!(agent = %agent, turns = job.turn_ids.len(), "summary ready ahead of the trigger");
        Some(Prepared {
            job,
            summary,
            policy,
            at: std::time::Instant::now(),
        })
    }

    /// Commits a summary written ahead, under the compaction lock; false
    /// (nothing written) when its window is no longer the agent's.
    pub(super) async fn commit_prepared(
        &self,
        agent: &AgentId,
        prepared: Prepared,
        out: &mut Compacted,
    ) -> Result<bool, CompactionError> {
        let stale = || {
            metrics::counter!("engram_summaries_ahead_total", "outcome" => "stale").increment(1);
            tracing::debug!(agent = %agent, "a summary written ahead was stale");
            Ok(false)
        };
        match self.store.begin_compaction(agent, prepared.policy).await {
            Ok(Begun::Job(_)) => {}
            // Its turns are gone, or another compaction is under way
            // (another replica's): this one would be stale.
            Ok(Begun::Nothing | Begun::Busy) => return stale(),
            Err(e) => return Err(storage(agent, &e, "choosing the window")),
        }
        let Prepared {
            job,
            summary,
            policy,
            at,
        } = prepared;
        let user = job.user_id.clone();
        match self
            .store
            .finish_compaction(agent, job, Some(summary), policy)
            .await
        {
            Ok(done) => {
                metrics::counter!("engram_summaries_ahead_total", "outcome" => "committed")
                    .increment(1);
                out.report.steps.push(Tier::Summarize);
                out.report.prepared_ago = Some(at.elapsed());
                self.committed(agent, done, user, out).await;
                Ok(true)
            }
            // The commit released the lock.
            Err(StoreError::Conflict(_)) => stale(),
            Err(e) => Err(storage(agent, &e, "storing the compaction")),
        }
    }

    /// Whether a prompt of `size` (its tokens, and the agent's turns)
    /// should start the agent's summary ahead now: past `at` (the ratio's
    /// tokens), and late enough to be ready at the `trigger` with little
    /// written since (see `ahead.rs`).
    pub fn ahead_due(&self, agent: &AgentId, size: (u32, u32), at: u32, trigger: u32) -> bool {
        self.ahead.pace.due(agent, size, at, trigger)
    }

    /// The agent's summary ahead of the trigger at `epoch`: "", "writing"
    /// or "ready".
    pub fn summary_ahead(&self, agent: &AgentId, epoch: u32) -> &'static str {
        self.ahead.status(agent, epoch)
    }

    /// Drops what `agent` had ahead (it was deleted).
    pub fn forget_ahead(&self, agent: &AgentId) {
        self.ahead.forget(agent);
    }

    /// Drops summaries held longer than `age`; returns how many.
    pub fn drop_ahead_older_than(&self, age: Duration) -> usize {
        self.ahead.drop_older_than(age)
    }
}
