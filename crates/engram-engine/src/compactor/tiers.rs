//! The tiers that call no model: snip and microcompact (prompt-only, the
//! first tiers of `summarize` and all of `compact_tool_results`), and the
//! `trim` strategy, which archives the oldest whole turns with no summary.
//! All keep the compactor's guarantees: whole turns, a call never separated
//! from its result, one compaction per agent at a time, one new epoch per
//! compaction.

use engram_core::AgentId;
use engram_core::compaction::{CompactionError, Strategy, Tier, Trigger};
use engram_store::{AgentContext, Hiding};

use super::{Compacted, Compactor, storage};
use crate::sizing;

impl Compacted {
    /// `context` is the prompt now, in the epoch this compaction opened.
    pub(super) fn now(&mut self, context: AgentContext) {
        self.opened = Some(context.epoch);
        self.context = Some(context);
    }
}

impl Compactor {
    /// Snip or microcompact, the first tiers of a size trigger: true when
    /// the prompt it leaves is under the trigger (the compaction is done).
    pub(super) async fn hide_tier(
        &self,
        agent: &AgentId,
        hiding: Hiding,
        out: &mut Compacted,
    ) -> Result<bool, CompactionError> {
        let done = match self
            .store
            .hide_old(agent, hiding, self.policy.raw_tail_turns, out.opened)
            .await
        {
            Ok(None) => return Ok(false),
            Ok(Some(done)) => done,
            Err(e) => return Err(storage(agent, &e, hiding.as_str())),
        };
        out.report.steps.push(match hiding {
            Hiding::Snip => Tier::Snip,
            Hiding::Microcompact => Tier::Microcompact,
        });
        let (over, tokens) =
            sizing::over_trigger(&self.caches, &self.budgets, agent, &done.context);
        out.now(done.context);
        // Smaller either way; a summary after it counts again.
        out.report.tokens_after = tokens;
        if over {
            return Ok(false);
        }
        out.report.performed = true;
        Ok(true)
    }

    /// `trim`: the turns older than the last `keep` (whole turns before
    /// the current one; a turn-count trigger keeps no more than it allows)
    /// move to the archive, where search and recall still find them. While
    /// the prompt (left) is over the trigger, fewer turns are kept (half as
    /// many each time, down to the current turn alone), so that the next
    /// prompt does not trim again at once.
    pub(super) async fn trim(
        &self,
        agent: &AgentId,
        trigger: Trigger,
        keep: usize,
        mut out: Compacted,
    ) -> Compacted {
        let mut keep = keep;
        if trigger == Trigger::TurnCount && self.max_active_turns > 0 {
            keep = keep.min(self.max_active_turns);
        }
        // Whether the prompt as found is over the trigger: read once, for
        // the passes that find nothing older to trim (nothing changes it).
        let mut over_before: Option<bool> = None;
        loop {
            let mut policy = self.policy;
            policy.raw_tail_turns = keep;
            let mut job = match self.window(agent, policy).await {
                Ok(job) => job,
                // Fewer turns kept than needed is not a failure of what
                // was trimmed already.
                Err(_) if out.report.performed => return out,
                // Every older turn is gone already, but the turns kept
                // are over the trigger: keep fewer.
                Err(e @ CompactionError::NothingToCompact { .. }) => {
                    let over = match over_before {
                        Some(over) => over,
                        None => *over_before.insert(self.over_trigger(agent).await),
                    };
                    if keep == 0 || !over {
                        return out.failed(e);
                    }
                    keep /= 2;
                    continue;
                }
                Err(e) => return out.failed(e),
            };
            if out.opened == Some(job.epoch) {
                // An earlier pass of this compaction opened the epoch.
                job.next_epoch = job.epoch;
            }
            let done = match self.store.finish_compaction(agent, job, None, policy).await {
                Ok(done) => done,
                Err(e) => return out.failed(storage(agent, &e, "storing the compaction")),
            };
            let report = &mut out.report;
            if !report.steps.contains(&Tier::Trim) {
                report.steps.push(Tier::Trim);
            }
            report.performed = true;
            report.turn_ids.extend(done.turn_ids);
            report.traces_pruned += done.traces_pruned;
            let (over, tokens) =
                sizing::over_trigger(&self.caches, &self.budgets, agent, &done.context);
            report.tokens_after = tokens;
            out.now(done.context);
            if keep == 0 || !over {
                return out;
            }
            keep /= 2;
        }
    }

    /// The agent's prompt is over its trigger now; false when it cannot be
    /// read.
    async fn over_trigger(&self, agent: &AgentId) -> bool {
        match self.store.context(agent).await {
            Ok(context) => sizing::over_trigger(&self.caches, &self.budgets, agent, &context).0,
            Err(_) => false,
        }
    }

    /// `compact_tool_results`: old tool results become placeholders, and
    /// nothing more. A size trigger whose prompt stays over the trigger is
    /// answered with the prompt as it is, the report saying so (its
    /// warning reaches the client); a Compact with no old result left to
    /// hide says that.
    pub(super) async fn tool_results_only(
        &self,
        agent: &AgentId,
        trigger: Trigger,
        mut out: Compacted,
    ) -> Compacted {
        match self.hide_tier(agent, Hiding::Microcompact, &mut out).await {
            Ok(true) => out,
            Err(e) => out.failed(e),
            Ok(false) if trigger.is_about_size() => out.failed(CompactionError::StrategyExhausted(
                Strategy::CompactToolResults,
            )),
            Ok(false) if out.opened.is_some() => {
                // Hidden, though not under the trigger: what was asked.
                out.report.performed = true;
                out
            }
            Ok(false) => out.failed(CompactionError::NothingToHide),
        }
    }
}
