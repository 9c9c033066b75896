//! The agents as a whole: listing, deleting, forking.

use engram_store::Visible;

use crate::api::{AgentPage, ListAgentsRequest};
use crate::error::{EngineError, Result};
use crate::{Engine, limits};

impl Engine {
    /// A page of agent ids, sorted, of those `visible` accepts (a
    /// caller's scope), so pages stay full.
    pub async fn list_agents(
        &self,
        req: &ListAgentsRequest,
        visible: Visible<'_>,
    ) -> Result<AgentPage> {
        let token = Some(req.page_token.as_str()).filter(|t| !t.is_empty());
        if let Some(t) = token {
            engram_core::AgentId::parse(t).map_err(|_| {
                EngineError::invalid(
                    "page_token is not one this server issued; pass next_page_token unchanged",
                )
            })?;
        }
        let (agent_ids, next_page_token) = self
            .store
            .list_agents(limits::page_size(req.page_size), token, visible)
            .await?;
        Ok(AgentPage {
            agent_ids,
            next_page_token,
        })
    }

    /// Removes the agent and everything it holds.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<()> {
        let id = limits::agent_id("agent_id", agent_id)?;
        self.store.delete_agent(&id).await?;
        tracing::info!(agent = %id, "agent deleted");
        Ok(())
    }

    /// Copies `source`, memories and archive included, to the new agent
    /// `target`; returns the new agent's id.
    pub async fn fork_agent(&self, source: &str, target: &str) -> Result<String> {
        let source = limits::agent_id("source_agent_id", source)?;
        let target = limits::agent_id("target_agent_id", target)?;
        self.store.fork_agent(&source, &target).await?;
        Ok(target.to_string())
    }
}
