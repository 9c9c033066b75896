//! GetContextStats: the numbers behind an agent's prompt, read without
//! writing anything.

use engram_core::AgentId;

use crate::api::ContextStats;
use crate::error::Result;
use crate::{Engine, limits, sizing};

impl Engine {
    /// What the agent's prompt holds now, for `model` (or the agent's last
    /// reported one), its storage and its search index.
    pub async fn context_stats(&self, agent_id: &str, model: Option<&str>) -> Result<ContextStats> {
        let id = limits::agent_id("agent_id", agent_id)?;
        let model = model.filter(|m| !m.is_empty());
        let (context, size, model) =
            sizing::measure(self.store.as_ref(), &self.caches, &self.budgets, &id, model).await?;
        let tokens_now = size.prompt_tokens();
        let index = self.store.index_state(&id).await?;
        let files = self.store.file_sizes(&id).await?;
        Ok(ContextStats {
            estimated_tokens: size.size.estimate,
            last_reported_prompt_tokens: size.size.reported.map_or(0, |(r, _)| r),
            estimated_tokens_since_report: size.size.reported.map_or(0, |(_, s)| s),
            percent_used: size.budget.percent_used(tokens_now),
            budget: size.budget,
            messages: u32::try_from(size.messages).unwrap_or(u32::MAX),
            turns: context.turns,
            epoch: context.epoch,
            compactions: context.compactions,
            consecutive_failures: context.consecutive_failures,
            files,
            compaction_required: context.compaction_required,
            model: model.clone(),
            index,
            user_id: context.user_id.clone(),
            precompact_tokens: self
                .budgets
                .precompact_tokens(id.as_str(), &model, &size.budget)
                .unwrap_or(0),
            summary_ahead: self.compactor.summary_ahead(&id, context.epoch),
            last_event_at: context.last_event_at,
        })
    }

    /// The agent's prompt size now (for its last reported model).
    pub(crate) async fn prompt_tokens(&self, id: &AgentId) -> Result<u32> {
        let (_, size, _) =
            sizing::measure(self.store.as_ref(), &self.caches, &self.budgets, id, None).await?;
        Ok(size.prompt_tokens())
    }
}
