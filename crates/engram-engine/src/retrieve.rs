//! Retrieve (an agent's memories, the relevant first when there is a
//! query) and SearchHistory.

use engram_core::UserId;
use engram_core::memory::{EpisodicItem, SemanticItem, recent_episodic, top_shown, top_valid_at};
use engram_core::retrieve::tool_interactions;
use engram_store::SearchPage;
use engram_store::ranking::RankedReads;

use crate::api::{RetrieveRequest, Retrieved, SearchRequest};
use crate::error::Result;
use crate::{Engine, limits};

impl Engine {
    /// The agent's summaries, facts and last turns; with a query, the
    /// memories ranked for it come first and the usual picks (recency,
    /// salience) fill what is left.
    pub async fn retrieve(&self, req: RetrieveRequest) -> Result<Retrieved> {
        if let Some(user) = by_user(&req.agent_id, &req.user_id)? {
            return self.retrieve_user(&user, &req).await;
        }
        let id = limits::agent_id("agent_id", &req.agent_id)?;
        let max_episodic = req.max_episodic.unwrap_or(limits::DEFAULT_MAX_EPISODIC) as usize;
        let max_semantic = req.max_semantic.unwrap_or(limits::DEFAULT_MAX_SEMANTIC) as usize;
        let tail_turns = req.raw_tail_turns.unwrap_or(limits::DEFAULT_RAW_TAIL_TURNS) as usize;
        let bundle = self.store.bundle(&id, tail_turns).await?;
        let query = req.query.trim();
        let found = if query.is_empty() {
            None
        } else {
            let query = limits::memory_query(&req, query, max_episodic, max_semantic)?;
            Some(self.store.rank_memories(&id, &query).await?)
        };
        // Picking from every memory is CPU work: off the async workers
        // when there are many.
        let memories = (bundle.episodic.len() + bundle.semantic.len()) as u64 * 256;
        let (recent, salient) = engram_store::offload_over(memories, || {
            (
                recent_by(&bundle.episodic, max_episodic, req.as_of),
                salient_at(&bundle.semantic, max_semantic, req.as_of),
            )
        });
        let mut raw_tail = bundle.raw_tail;
        if let Some(at) = req.as_of {
            raw_tail.retain(|t| t.ts <= at);
        }
        let (episodic, semantic, recalled, index) = match found {
            None => (recent, salient, vec![], None),
            Some(found) => (
                relevant_first(found.episodic, recent, max_episodic, |e| e.id.clone()),
                relevant_first(current(found.semantic, &req), salient, max_semantic, |f| {
                    f.id.clone()
                }),
                found.memories,
                Some(found.index),
            ),
        };
        Ok(Retrieved {
            episodic,
            semantic,
            tool_interactions: if req.include_tool_interactions {
                tool_interactions(&raw_tail)
            } else {
                vec![]
            },
            raw_tail,
            recalled,
            index,
        })
    }

    /// One page of the agent's history: ranked by relevance, or every
    /// word of the query, newest first.
    pub async fn search(&self, req: SearchRequest) -> Result<SearchPage> {
        let search = limits::search(&req)?;
        if let Some(user) = by_user(&req.agent_id, &req.user_id)? {
            return Ok(self.store.search_user(&user, &search).await?);
        }
        let id = limits::agent_id("agent_id", &req.agent_id)?;
        Ok(self.store.search(&id, &search).await?)
    }

    /// Retrieve by user: the user's facts (by salience) and its last
    /// conversation's summaries; with a query, the memories of every
    /// conversation ranked for it first.
    async fn retrieve_user(&self, user: &UserId, req: &RetrieveRequest) -> Result<Retrieved> {
        let max_episodic = req.max_episodic.unwrap_or(limits::DEFAULT_MAX_EPISODIC) as usize;
        let max_semantic = req.max_semantic.unwrap_or(limits::DEFAULT_MAX_SEMANTIC) as usize;
        let facts: Vec<_> = self
            .store
            .user_facts(user)
            .await?
            .into_iter()
            .map(|f| f.fact)
            .collect();
        let last = self.store.last_conversation(user).await?;
        let summaries = last.map(|l| l.summaries).unwrap_or_default();
        let recent = recent_by(&summaries, max_episodic, req.as_of);
        let salient = engram_store::offload_over(facts.len() as u64 * 256, || {
            salient_at(&facts, max_semantic, req.as_of)
        });
        let query = req.query.trim();
        let (episodic, semantic, recalled, index) = if query.is_empty() {
            (recent, salient, vec![], None)
        } else {
            let query = limits::memory_query(req, query, max_episodic, max_semantic)?;
            let found = self.store.rank_user_memories(user, &query, None).await?;
            (
                relevant_first(found.episodic, recent, max_episodic, |e| e.id.clone()),
                relevant_first(current(found.semantic, req), salient, max_semantic, |f| {
                    f.id.clone()
                }),
                found.memories,
                Some(found.index),
            )
        };
        Ok(Retrieved {
            episodic,
            semantic,
            tool_interactions: vec![],
            raw_tail: vec![],
            recalled,
            index,
        })
    }
}

/// The user a request names in place of an agent (`None`: it names an
/// agent); both or neither is INVALID_ARGUMENT (neither: the agent id's
/// own message).
fn by_user(agent_id: &str, user_id: &str) -> Result<Option<UserId>> {
    match (agent_id.is_empty(), user_id.is_empty()) {
        (_, true) => Ok(None),
        (true, false) => Ok(Some(limits::user_id("user_id", user_id)?)),
        (false, false) => Err(crate::error::EngineError::invalid(
            "give agent_id (one conversation) or user_id (all of a user's), not both",
        )),
    }
}

/// The `n` latest summaries, oldest first; as of a time, of what had been
/// said by then.
fn recent_by(items: &[EpisodicItem], n: usize, as_of: Option<f64>) -> Vec<EpisodicItem> {
    match as_of {
        None => recent_episodic(items, n),
        Some(at) => {
            let then: Vec<EpisodicItem> = items.iter().filter(|e| e.said_by(at)).cloned().collect();
            recent_episodic(&then, n)
        }
    }
}

/// The `n` facts of the highest salience shown now; as of a time, of those
/// true then (replaced or ended since or not).
fn salient_at(items: &[SemanticItem], n: usize, as_of: Option<f64>) -> Vec<SemanticItem> {
    match as_of {
        None => top_shown(items, n, engram_store::unix_now()),
        Some(at) => top_valid_at(items, n, at),
    }
}

/// The facts of `found` that the bundle holds: those shown now (search
/// also finds replaced and ended ones, which `recalled` keeps with their
/// span); as of a time, the ranking kept only those true then.
fn current(found: Vec<SemanticItem>, req: &RetrieveRequest) -> Vec<SemanticItem> {
    if req.as_of.is_some() {
        return found;
    }
    let now = engram_store::unix_now();
    found.into_iter().filter(|f| f.is_shown(now)).collect()
}

/// `relevant`, then the `usual` picks not among them: `n` in all.
fn relevant_first<T>(
    relevant: Vec<T>,
    usual: Vec<T>,
    n: usize,
    id: impl Fn(&T) -> String,
) -> Vec<T> {
    let seen: std::collections::HashSet<String> = relevant.iter().map(&id).collect();
    relevant
        .into_iter()
        .chain(usual.into_iter().filter(|t| !seen.contains(&id(t))))
        .take(n)
        .collect()
}
