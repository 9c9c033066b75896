//! Facts that clients manage (docs/DESIGN.md §9a): add, list, read, update and
//! delete them in an agent's or a user's scope. `engram_core::facts`
//! decides; the store keeps every version; an agent's prompt shows the
//! change at its next request (the snapshot's facts section).

use std::collections::HashMap;

use engram_core::blocks::Scope;
use engram_core::facts::{self, Added, Change, Listing, NewFact, Op, Outcome};
use engram_core::memory::SemanticItem;
use engram_core::users::{FactSource, UserFact};
use engram_core::{AgentId, UserId};

use crate::api::ScopeRequest;
use crate::error::{EngineError, Result};
use crate::{Engine, limits};

/// One fact's outcome in AddMemories.
#[derive(Debug, Clone, PartialEq)]
pub struct AddedFact {
    pub id: String,
    pub merged: bool,
    pub version: u64,
}

/// A page of ListMemories.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FactPage {
    pub facts: Vec<SemanticItem>,
    /// Beside `facts`, one for each: the conversations that said it (a
    /// user's facts; empty for an agent's).
    pub sources: Vec<Vec<FactSource>>,
    /// Empty on the last page.
    pub next_page_token: String,
}

impl Engine {
    /// Adds facts (each merged into the same fact when it is there).
    pub async fn add_memories(
        &self,
        scope: &ScopeRequest,
        new: Vec<NewFact>,
    ) -> Result<Vec<AddedFact>> {
        let scope = fact_scope(scope)?;
        let applied = self.change(&scope, Op::Add(new)).await?;
        Ok(applied
            .outcomes
            .into_iter()
            .filter_map(|o| match o {
                Outcome::Added(f, how) => Some(AddedFact {
                    version: f.version(),
                    id: f.id,
                    merged: how == Added::Merged,
                }),
                _ => None,
            })
            .collect())
    }

    /// A page of the scope's facts as `listing` selects them.
    /// `source_agent` (a user's scope only; "" for any): only the user's
    /// facts that agent's compactions said.
    pub async fn list_memories(
        &self,
        scope: &ScopeRequest,
        listing: &Listing,
        source_agent: &str,
        (page_size, page_token): (u32, &str),
    ) -> Result<FactPage> {
        let scope = fact_scope(scope)?;
        let from = match page_token {
            "" => 0,
            t => t
                .strip_prefix('m')
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    EngineError::invalid(
                        "page_token is not one this server issued; pass next_page_token unchanged",
                    )
                })?,
        };
        let size = limits::page_size(page_size);
        let (all, mut sources) = match (source_agent, &scope) {
            // The user's facts as `facts` reads them (the undeleted ones),
            // each with its sources: one read.
            (source, Scope::User(user)) => {
                let source = match source {
                    "" => None,
                    s => Some(limits::agent_id("source_agent_id", s)?),
                };
                let said = |f: &UserFact| match &source {
                    None => true,
                    Some(a) => f.sources.iter().any(|s| s.agent_id == a.as_str()),
                };
                let facts = self.store.user_facts(user).await?.into_iter();
                split_sources(facts.filter(|f| f.fact.managed.deleted_at.is_none() && said(f)))
            }
            ("", _) => (self.store.facts(&scope).await?, HashMap::new()),
            _ => {
                return Err(EngineError::invalid(
                    "source_agent_id selects among a user's facts: give scope.user_id",
                ));
            }
        };
        let all = match listing.as_of {
            Some(at) => self.versions_at(&scope, all, at).await?,
            None => all,
        };
        let listed = facts::listed(&all, listing, engram_store::unix_now());
        let end = from.saturating_add(size).min(listed.len());
        let page = listed.get(from..end).unwrap_or_default().to_vec();
        let sources = page
            .iter()
            .map(|f| sources.remove(&f.id).unwrap_or_default())
            .collect();
        Ok(FactPage {
            facts: page,
            sources,
            next_page_token: if end < listed.len() {
                format!("m{end}")
            } else {
                String::new()
            },
        })
    }

    /// `facts` (the last version of each) with each fact a client changed
    /// since `at` as its version of then: the last one begun by `at`. Only
    /// those facts' histories are read (a client's changes are rare).
    async fn versions_at(
        &self,
        scope: &Scope,
        mut facts: Vec<SemanticItem>,
        at: f64,
    ) -> Result<Vec<SemanticItem>> {
        if !(at.is_finite() && at >= 0.0) {
            return Err(EngineError::invalid(format!(
                "as_of is epoch seconds, not {at}"
            )));
        }
        for fact in facts.iter_mut() {
            if fact.version() == 1 || fact.valid_since() <= at || fact.managed.deleted_at.is_some()
            {
                continue;
            }
            let history = self.store.fact_history(scope, &fact.id).await?;
            if let Some(then) = history.into_iter().rev().find(|v| v.valid_since() <= at) {
                // Its end is when the next version began.
                *fact = SemanticItem {
                    superseded_by: None,
                    invalid_at: Some(fact.valid_since()),
                    ..then
                };
            }
        }
        Ok(facts)
    }

    /// One fact as it stands (superseded or expired ones too; NOT_FOUND
    /// once deleted), with the conversations that said it (a user's fact;
    /// none for an agent's).
    pub async fn get_memory(
        &self,
        scope: &ScopeRequest,
        id: &str,
    ) -> Result<(SemanticItem, Vec<FactSource>)> {
        let scope = fact_scope(scope)?;
        let id = limits::fact_id(id)?;
        let found = match &scope {
            Scope::User(user) => self
                .store
                .user_facts(user)
                .await?
                .into_iter()
                .find(|f| f.fact.id == id && f.fact.managed.deleted_at.is_none())
                .map(|f| (f.fact, f.sources)),
            _ => self
                .store
                .facts(&scope)
                .await?
                .into_iter()
                .find(|f| f.id == id)
                .map(|f| (f, vec![])),
        };
        found.ok_or_else(|| not_found(id))
    }

    /// Every version of a fact, oldest first.
    pub async fn memory_history(
        &self,
        scope: &ScopeRequest,
        id: &str,
    ) -> Result<Vec<SemanticItem>> {
        let scope = fact_scope(scope)?;
        let id = limits::fact_id(id)?;
        let versions = self.store.fact_history(&scope, id).await?;
        if versions.is_empty() {
            return Err(not_found(id));
        }
        Ok(versions)
    }

    /// A new version of a fact.
    pub async fn update_memory(
        &self,
        scope: &ScopeRequest,
        id: &str,
        change: Change,
    ) -> Result<SemanticItem> {
        let scope = fact_scope(scope)?;
        let id = limits::fact_id(id)?;
        let op = Op::Update {
            id: id.to_owned(),
            change: change.clone(),
        };
        let applied = self.change(&scope, op).await?;
        let Some(Outcome::Updated(fact)) = applied.outcomes.into_iter().next() else {
            return Err(not_found(id));
        };
        if let Scope::User(user) = &scope {
            self.update_sources(user, id, change).await;
        }
        Ok(fact)
    }

    /// Deletes a fact; returns the deleting version.
    pub async fn delete_memory(
        &self,
        scope: &ScopeRequest,
        id: &str,
        expected_version: u64,
    ) -> Result<u64> {
        let scope = fact_scope(scope)?;
        let id = limits::fact_id(id)?;
        match &scope {
            // Its conversations' copies go first: a delete cut short is
            // done again by its retry, which still finds the user's fact.
            Scope::User(user) => self.delete_sources(user, id, expected_version).await?,
            Scope::Agent(agent) => self.delete_in_user(agent, id, expected_version).await?,
            Scope::Global => {}
        }
        let op = Op::Delete {
            id: id.to_owned(),
            expected_version,
        };
        let applied = self.change(&scope, op).await?;
        match applied.outcomes.into_iter().next() {
            Some(Outcome::Deleted(version)) => Ok(version),
            _ => Err(not_found(id)),
        }
    }

    pub(crate) async fn change(&self, scope: &Scope, op: Op) -> Result<facts::Applied> {
        let applied = self
            .store
            .change_facts(scope, op, Some(self.facts_limit))
            .await?;
        for line in &applied.lines {
            tracing::info!(scope = scope.kind(), id = scope.id(), fact = %line.id, version = line.version(), deleted = line.managed.deleted_at.is_some(), "fact written");
        }
        Ok(applied)
    }
}

impl Engine {
    /// The conversations' facts the user's fact `id` was folded from.
    async fn sources(&self, user: &UserId, id: &str) -> Result<Vec<FactSource>> {
        let facts = self.store.user_facts(user).await?;
        Ok(facts
            .into_iter()
            .find(|f| f.fact.id == id)
            .map(|f| f.sources)
            .unwrap_or_default())
    }

    /// Deletes the conversations' facts the user's fact `id` came from,
    /// once it is known to be deletable at `expected` (their prompts show
    /// them no more).
    async fn delete_sources(&self, user: &UserId, id: &str, expected: u64) -> Result<()> {
        let facts = self.store.user_facts(user).await?;
        let current: Vec<SemanticItem> = facts.iter().map(|f| f.fact.clone()).collect();
        match facts::changeable(&current, id, expected) {
            // A superseded fact is deleted too.
            Ok(_) | Err(engram_core::CoreError::Precondition(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let sources = facts.into_iter().find(|f| f.fact.id == id);
        for source in sources.map(|f| f.sources).unwrap_or_default() {
            let Ok(agent) = AgentId::parse(&source.agent_id) else {
                continue;
            };
            let op = Op::Delete {
                id: source.fact_id,
                expected_version: 0,
            };
            ignore_gone(self.change(&Scope::Agent(agent), op).await)?;
        }
        Ok(())
    }

    /// Deleting agent `agent`'s fact `id`: the user's fact that only it
    /// said goes too (one that other conversations said stays theirs).
    async fn delete_in_user(&self, agent: &AgentId, id: &str, expected: u64) -> Result<()> {
        let current = self.store.facts(&Scope::Agent(agent.clone())).await?;
        if facts::changeable(&current, id, expected).is_err_and(|e| {
            matches!(
                e,
                engram_core::CoreError::Absent(_) | engram_core::CoreError::Stale(_)
            )
        }) {
            return Ok(()); // refused below, with nothing changed
        }
        let Some(user) = self.store.context(agent).await?.user_id else {
            return Ok(());
        };
        let user = limits::user_id("user_id", &user)?;
        let facts = self.store.user_facts(&user).await?;
        let only_here = facts.into_iter().filter(|f| {
            f.fact.managed.deleted_at.is_none()
                && !f.sources.is_empty()
                && f.sources
                    .iter()
                    .all(|s| s.agent_id == agent.as_str() && s.fact_id == id)
        });
        for fact in only_here {
            let op = Op::Delete {
                id: fact.fact.id,
                expected_version: 0,
            };
            ignore_gone(self.change(&Scope::User(user.clone()), op).await)?;
        }
        Ok(())
    }

    /// The user's change of fact `id` in the conversations it came from
    /// (its words, tags, expiry and metadata; a pin is the user's, shown in
    /// every conversation already). A failure is logged: the user's fact
    /// is changed, and what the conversation shows is its own copy.
    async fn update_sources(&self, user: &UserId, id: &str, change: Change) {
        let sources = match self.sources(user, id).await {
            Ok(sources) => sources,
            Err(e) => {
                tracing::warn!(user = %user, fact = %id, error = %e, "a user's fact's conversations were not updated");
                return;
            }
        };
        let change = Change {
            pinned: None,
            expected_version: 0,
            ..change
        };
        for source in sources {
            let Ok(agent) = AgentId::parse(&source.agent_id) else {
                continue;
            };
            let op = Op::Update {
                id: source.fact_id,
                change: change.clone(),
            };
            if let Err(e) = ignore_gone(self.change(&Scope::Agent(agent), op).await) {
                tracing::warn!(user = %user, fact = %id, error = %e, "a user's fact's conversation was not updated");
            }
        }
    }
}

/// A change of a fact that went meanwhile (its agent deleted, the fact
/// deleted or replaced) is nothing to do.
pub(crate) fn ignore_gone(changed: Result<facts::Applied>) -> Result<()> {
    match changed {
        Ok(_) | Err(EngineError::NotFound(_) | EngineError::Precondition(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A user's facts apart from their sources (by fact id).
fn split_sources(
    facts: impl Iterator<Item = UserFact>,
) -> (Vec<SemanticItem>, HashMap<String, Vec<FactSource>>) {
    let mut sources = HashMap::new();
    let facts = facts
        .map(|f| {
            if !f.sources.is_empty() {
                sources.insert(f.fact.id.clone(), f.sources);
            }
            f.fact
        })
        .collect();
    (facts, sources)
}

/// An agent or a user: facts have no global scope.
fn fact_scope(scope: &ScopeRequest) -> Result<Scope> {
    match limits::scope(scope)? {
        Scope::Global => Err(EngineError::invalid(
            "facts belong to an agent_id or a user_id scope, not the global one",
        )),
        scope => Ok(scope),
    }
}

fn not_found(id: &str) -> EngineError {
    EngineError::NotFound(format!("fact {id:?} not found"))
}
