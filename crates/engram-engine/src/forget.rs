//! ForgetTurn and ForgetEvents: the store erases the traces and what was
//! drawn from them (`engram_store::Forgets`); here the user's facts that
//! only those facts said go too, the agent's prompt caches are dropped
//! (a turn's recall may quote what went), and the summaries the store hid
//! are rewritten by the summarizer in the background (and again by the
//! upkeep, if the summarizer failed or the server stopped first).

use std::collections::HashSet;

use engram_core::AgentId;
use engram_core::blocks::Scope;
use engram_core::facts::Op;
use engram_core::forget::Forget;
use engram_store::{Forgotten, StoreError};

use crate::error::Result;
use crate::{Engine, limits};

impl Engine {
    /// Forgets what `what` names in agent `agent_id` (validated by
    /// `limits::forget_turn` / `limits::forget_events`).
    pub async fn forget(&self, agent_id: &str, what: Forget) -> Result<Forgotten> {
        let id = limits::agent_id("agent_id", agent_id)?;
        let forgotten = self
            .store
            .forget(&id, &what, self.compactor.policy())
            .await?;
        self.caches.drop_agent(&id);
        // A summary written ahead may quote what went (its commit would
        // find its window changed anyway).
        self.compactor.forget_ahead(&id);
        if let Some(user) = &forgotten.user_id {
            self.forget_in_user(&id, user).await?;
        }
        tracing::info!(agent = %id, traces = forgotten.traces_erased, facts = forgotten.facts_deleted, summaries = forgotten.summaries_rewritten, "forget done");
        // Also after a repeated forget: a rewrite a crash interrupted.
        self.rewrite_later(id);
        Ok(forgotten)
    }

    /// The user's facts whose only sources were facts of `agent` that are
    /// gone (those the forget deleted, or an earlier forget that a crash
    /// cut short before this step: its retry finds them here).
    async fn forget_in_user(&self, agent: &AgentId, user: &str) -> Result<()> {
        let user = limits::user_id("user_id", user)?;
        let kept: HashSet<String> = self
            .store
            .facts(&Scope::Agent(agent.clone()))
            .await?
            .into_iter()
            .map(|f| f.id)
            .collect();
        let user_facts = self.store.user_facts(&user).await?;
        let orphans = user_facts.into_iter().filter(|f| {
            f.fact.managed.deleted_at.is_none()
                && !f.sources.is_empty()
                && f.sources
                    .iter()
                    .all(|s| s.agent_id == agent.as_str() && !kept.contains(&s.fact_id))
        });
        for fact in orphans {
            let op = Op::Delete {
                id: fact.fact.id,
                expected_version: 0,
            };
            crate::facts::ignore_gone(self.change(&Scope::User(user.clone()), op).await)?;
        }
        Ok(())
    }

    /// Rewrites `agent`'s hidden summaries in the background, one agent
    /// once at a time.
    pub(crate) fn rewrite_later(&self, agent: AgentId) {
        if !self.rewriting.start(&agent) {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            engine.rewrite_summaries(&agent).await;
            engine.rewriting.end(&agent);
        });
    }

    /// Each hidden summary of `agent` written again from its remaining
    /// traces. A failure leaves it hidden, for the upkeep to try again.
    async fn rewrite_summaries(&self, agent: &AgentId) {
        let jobs = match self.store.rewrite_jobs(agent).await {
            Ok(jobs) => jobs,
            Err(StoreError::NotFound(_)) => return,
            Err(e) => {
                tracing::warn!(agent = %agent, error = %e, "reading the summaries to rewrite failed; the upkeep tries again");
                return;
            }
        };
        // The agent's user, once a rewrite wrote facts to fold into it.
        let mut fold_into: Option<String> = None;
        for job in jobs {
            match self.compactor.rewrite(agent, &job).await {
                Ok(true) => fold_into = job.user_id.clone(),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(agent = %agent, summary = %job.item.id, error = %e, "rewriting a summary after a forget failed; the upkeep tries again");
                    return;
                }
            }
            self.caches.drop_agent(agent);
        }
        if let Some(user) = fold_into {
            crate::users::fold_facts(self.store.as_ref(), agent, &user).await;
        }
    }

    /// The upkeep's pass: the agents the store knows to have hidden
    /// summaries.
    pub(crate) async fn rewrite_awaiting(&self) {
        match self.store.awaiting_rewrite().await {
            Ok(agents) => {
                for agent in agents {
                    self.rewrite_later(agent);
                }
            }
            Err(e) => tracing::warn!(error = %e, "listing the summaries to rewrite failed"),
        }
    }
}

/// Agents whose summaries are being rewritten (one task per agent).
#[derive(Debug, Default)]
pub(crate) struct Rewriting(std::sync::Mutex<HashSet<AgentId>>);

impl Rewriting {
    fn start(&self, agent: &AgentId) -> bool {
        engram_store::lock(&self.0).insert(agent.clone())
    }

    fn end(&self, agent: &AgentId) {
        engram_store::lock(&self.0).remove(agent);
    }
}
