//! Ingest, with the compaction mark a provider's usage report can set, and
//! Compact, the compaction a client asks for.

use engram_core::compaction::{CompactionReport, Strategy, Trigger};
use engram_store::Ingested;

use crate::api::IngestRequest;
use crate::error::Result;
use crate::{Engine, limits};

impl Engine {
    /// Stores the events all or nothing. A reported prompt over the
    /// model's compaction trigger (without what Engram added to it for
    /// that call only) marks the agent, so its next prompt is compacted
    /// first.
    pub async fn ingest(&self, req: IngestRequest) -> Result<Ingested> {
        let id = limits::agent_id("agent_id", &req.agent_id)?;
        let model = req.model.as_deref().filter(|m| !m.is_empty());
        let user = limits::optional_user(req.user_id.as_deref())?;
        // The usage is of the last prompt served: what Engram added to it
        // for that call only (its recall block) is not the next prompt's.
        let usage = req.usage.map(|u| engram_core::Usage {
            engram_added_tokens: self.caches.served_extra(&id),
            ..u
        });
        let mut out = self
            .store
            .ingest(&id, &req.events, usage, model, user.as_ref())
            .await?;
        if usage.is_some() {
            self.caches.served_reported(&id);
        }
        if let Some(reported) = usage.map(|u| u.carried_prompt_tokens())
            && !out.compaction_required
        {
            let model = out.model.as_deref().unwrap_or_default();
            let trigger = self.budgets.budget(id.as_str(), model, None).trigger_tokens;
            if reported > trigger {
                tracing::info!(agent = %id, reported, trigger, "reported prompt passed the compaction trigger");
                // The traces are stored: this request is not refused for
                // want of the mark. Without it the reported usage, kept in
                // the trace, still triggers by the estimate.
                match self.store.mark_compaction_required(&id, out.epoch).await {
                    Ok(marked) => out.compaction_required = marked,
                    Err(e) => {
                        tracing::warn!(agent = %id, error = %e, "could not store the compaction mark");
                    }
                }
            }
        }
        self.touch(&id);
        tracing::debug!(agent = %id, events = req.events.len(), turn = %out.current_turn_id, "ingested");
        metrics::counter!("engram_traces_ingested_total").increment(out.traces.len() as u64);
        Ok(out)
    }

    /// A compaction now, whatever the triggers say, with an optional
    /// `focus` for the summary, following `strategy` (else the agent's).
    /// The report says what happened, errors included; only a bad request
    /// or an unreadable agent is an error.
    pub async fn compact(
        &self,
        agent_id: &str,
        focus: Option<&str>,
        strategy: Option<Strategy>,
    ) -> Result<CompactionReport> {
        let id = limits::agent_id("agent_id", agent_id)?;
        let focus = focus.map(str::trim).filter(|f| !f.is_empty());
        let (_, size, model) =
            crate::sizing::measure(self.store.as_ref(), &self.caches, &self.budgets, &id, None)
                .await?;
        let chosen = self.compactor.strategy(id.as_str(), &model, strategy);
        let before = size.prompt_tokens();
        let compacted = self
            .compactor
            .compact(&id, Trigger::Manual, focus, before, chosen)
            .await;
        let mut report = compacted.report;
        // A compaction that changed the prompt counted it already.
        if compacted.context.is_none() {
            report.tokens_after = self.prompt_tokens(&id).await?;
        }
        Ok(report)
    }
}
