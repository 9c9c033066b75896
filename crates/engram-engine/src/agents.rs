//! The agents as a whole: listing, deleting, forking.

use engram_store::{Visible, VisibleAgent};

use crate::api::{AgentPage, ListAgentsRequest, ListUsersRequest, UserPage};
use crate::error::{EngineError, Result};
use crate::{Engine, limits};

impl Engine {
    /// A page of agent ids, sorted, of those `visible` accepts (a
    /// caller's scope, shown each agent's user), so pages stay full.
    pub async fn list_agents(
        &self,
        req: &ListAgentsRequest,
        visible: VisibleAgent<'_>,
    ) -> Result<AgentPage> {
        let token = page_token(&req.page_token, |t| engram_core::AgentId::parse(t).is_ok())?;
        let size = limits::page_size(req.page_size);
        let part = req.id_contains.as_str();
        if part.chars().count() > limits::MAX_ID_FILTER_CHARS {
            return Err(EngineError::invalid(format!(
                "id_contains is longer than an agent id may be ({} characters)",
                limits::MAX_ID_FILTER_CHARS
            )));
        }
        let (agent_ids, next_page_token) = match limits::optional_user(Some(&req.user_id))? {
            None => {
                let visible = |id: &str, user: Option<&str>| id.contains(part) && visible(id, user);
                self.store.list_agents(size, token, &visible).await?
            }
            Some(user) => {
                let ids = self.store.user_agents(&user).await?;
                let visible = |id: &str| id.contains(part) && visible(id, Some(user.as_str()));
                engram_store::page(ids.iter().map(|id| id.as_str()), size, token, &visible)
            }
        };
        Ok(AgentPage {
            agent_ids,
            next_page_token,
        })
    }

    /// A page of user ids, sorted, of those `visible` accepts.
    pub async fn list_users(
        &self,
        req: &ListUsersRequest,
        visible: Visible<'_>,
    ) -> Result<UserPage> {
        let token = page_token(&req.page_token, |t| engram_core::UserId::parse(t).is_ok())?;
        let size = limits::page_size(req.page_size);
        let (user_ids, next_page_token) = self.store.list_users(size, token, visible).await?;
        Ok(UserPage {
            user_ids,
            next_page_token,
        })
    }

    /// Erases everything the user owns (its agents, blocks and memories);
    /// returns how many agents went. Idempotent.
    pub async fn delete_user(&self, user_id: &str) -> Result<usize> {
        let user = limits::user_id("user_id", user_id)?;
        let erased = self.store.delete_user(&user).await?;
        tracing::info!(user = %user, agents = erased, "user deleted");
        Ok(erased)
    }

    /// The user `agent_id` belongs to: `None` for an agent with none, one
    /// that does not exist, or an id that is not one (the request that
    /// names it is refused for that by itself).
    pub async fn agent_user(&self, agent_id: &str) -> Result<Option<String>> {
        let Ok(id) = engram_core::AgentId::parse(agent_id) else {
            return Ok(None);
        };
        match self.store.context(&id).await {
            Ok(context) => Ok(context.user_id),
            Err(engram_store::StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the agent and everything it holds.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<()> {
        let id = limits::agent_id("agent_id", agent_id)?;
        self.store.delete_agent(&id).await?;
        self.compactor.forget_ahead(&id);
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

/// A page token as given ("": the first page), if it is an id `valid`
/// accepts, as the tokens this server issues are.
pub(crate) fn page_token(token: &str, valid: impl Fn(&str) -> bool) -> Result<Option<&str>> {
    if token.is_empty() {
        return Ok(None);
    }
    if !valid(token) {
        return Err(EngineError::invalid(
            "page_token is not one this server issued; pass next_page_token unchanged",
        ));
    }
    Ok(Some(token))
}

#[cfg(test)]
mod tests {
    use super::page_token;

    #[test]
    fn a_page_token_is_an_id_or_nothing() {
        let user = |t: &str| engram_core::UserId::parse(t).is_ok();
        assert_eq!(page_token("", user).unwrap(), None);
        assert_eq!(page_token("ana", user).unwrap(), Some("ana"));
        let refused = page_token("not an id\n", user).unwrap_err();
        assert!(refused.to_string().contains("page_token"), "{refused}");
    }
}
