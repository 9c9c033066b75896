//! GetContextStats and ListCompactions: the numbers behind an agent's
//! prompt and its compactions so far, read without writing anything.

use engram_core::AgentId;

use crate::api::{CompactionPage, ContextStats, ListCompactionsRequest};
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
        let strategy = self.compactor.strategy(id.as_str(), &model, None);
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
            strategy,
            precompact_tokens: self
                .budgets
                .precompact_tokens(id.as_str(), &model, &size.budget)
                .filter(|_| strategy.strategy.summarizes())
                .unwrap_or(0),
            summary_ahead: self.compactor.summary_ahead(&id, context.epoch),
            last_event_at: context.last_event_at,
        })
    }

    /// A page of the agent's compaction log, newest first. NOT_FOUND for
    /// an agent that does not exist.
    pub async fn list_compactions(&self, req: &ListCompactionsRequest) -> Result<CompactionPage> {
        let id = limits::agent_id("agent_id", &req.agent_id)?;
        let number = |t: &str| t.parse::<u64>().is_ok_and(|n| n > 0);
        let before = crate::agents::page_token(&req.page_token, number)?
            .map(|t| t.parse::<u64>().expect("checked"));
        let size = limits::page_size(req.page_size);
        // One more than the page: whether another page follows.
        let mut compactions = self.store.compaction_log(&id, size + 1, before).await?;
        if compactions.is_empty() && before.is_none() {
            // Empty, or no such agent.
            self.store.context(&id).await?;
        }
        let next_page_token = (compactions.len() > size).then(|| {
            compactions.truncate(size);
            compactions.last().map_or(0, |r| r.seq).to_string()
        });
        Ok(CompactionPage {
            compactions,
            next_page_token,
        })
    }

    /// The agent's prompt size now (for its last reported model).
    pub(crate) async fn prompt_tokens(&self, id: &AgentId) -> Result<u32> {
        let (_, size, _) =
            sizing::measure(self.store.as_ref(), &self.caches, &self.budgets, id, None).await?;
        Ok(size.prompt_tokens())
    }
}
