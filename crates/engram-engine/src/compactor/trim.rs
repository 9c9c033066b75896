//! The strategies that call no model: `trim` archives the oldest whole
//! turns with no summary, `compact_tool_results` only hides old tool
//! results. Both keep the compactor's guarantees: whole turns, a call never
//! separated from its result, one compaction per agent at a time, one new
//! epoch per compaction.

use engram_core::AgentId;
use engram_core::compaction::{CompactionError, Strategy, Tier, Trigger};
use engram_store::Hiding;

use super::{Compacted, Compactor, storage};
use crate::sizing;

impl Compactor {
    /// `trim`: the turns older than the last `keep` (whole turns before
    /// the current one; a turn-count trigger keeps no more than it allows)
    /// move to the archive, where search and recall still find them. While
    /// the prompt (left) is over its model's input budget, fewer turns are
    /// kept (half as many each time, down to the current turn alone): a
    /// trimmed agent's prompt fits unless its current turn alone does not.
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
        loop {
            let mut policy = self.policy;
            policy.raw_tail_turns = keep;
            let mut job = match self.window(agent, policy).await {
                Ok(job) => job,
                // Fewer turns kept than needed is not a failure of what
                // was trimmed already.
                Err(_) if out.report.performed => return out,
                // Every older turn is gone already, but the turns kept
                // do not fit the window: keep fewer.
                Err(e @ CompactionError::NothingToCompact { .. }) => {
                    if keep == 0 || !self.over_budget(agent).await {
                        return out.failed(e);
                    }
                    keep /= 2;
                    continue;
                }
                Err(e) => return out.failed(e),
            };
            if out.context.is_some() {
                // An earlier pass of this compaction opened its epoch.
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
            let (tokens, budget) =
                sizing::size_now(&self.caches, &self.budgets, agent, &done.context);
            report.tokens_after = tokens;
            out.context = Some(done.context);
            if keep == 0 || tokens <= budget.input_budget {
                return out;
            }
            keep /= 2;
        }
    }

    /// The agent's prompt is over its model's input budget now (not only
    /// over the trigger); false when it cannot be read.
    async fn over_budget(&self, agent: &AgentId) -> bool {
        let Ok(context) = self.store.context(agent).await else {
            return false;
        };
        let (tokens, budget) = sizing::size_now(&self.caches, &self.budgets, agent, &context);
        tokens > budget.input_budget
    }

    /// `compact_tool_results`: old tool results become placeholders, and
    /// nothing more. A prompt still over the trigger is served as it is,
    /// the report saying so (its warning reaches the client).
    pub(super) async fn tool_results_only(&self, agent: &AgentId, mut out: Compacted) -> Compacted {
        match self.hide_tier(agent, Hiding::Microcompact, &mut out).await {
            Ok(true) => out,
            Ok(false) => out.failed(CompactionError::StrategyExhausted(
                Strategy::CompactToolResults,
            )),
            Err(e) => out.failed(e),
        }
    }
}
