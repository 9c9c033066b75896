//! Retrieve (an agent's memories, the relevant first when there is a
//! query) and SearchHistory.

use engram_core::memory::{recent_episodic, top_semantic};
use engram_core::retrieve::tool_interactions;
use engram_store::SearchPage;

use crate::api::{RetrieveRequest, Retrieved, SearchRequest};
use crate::error::Result;
use crate::{Engine, limits};

impl Engine {
    /// The agent's summaries, facts and last turns; with a query, the
    /// memories ranked for it come first and the usual picks (recency,
    /// salience) fill what is left.
    pub async fn retrieve(&self, req: RetrieveRequest) -> Result<Retrieved> {
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
                recent_episodic(&bundle.episodic, max_episodic),
                top_semantic(&bundle.semantic, max_semantic),
            )
        });
        let (episodic, semantic, recalled, index) = match found {
            None => (recent, salient, vec![], None),
            Some(found) => (
                relevant_first(found.episodic, recent, max_episodic, |e| e.id.clone()),
                relevant_first(found.semantic, salient, max_semantic, |f| f.id.clone()),
                found.memories,
                Some(found.index),
            ),
        };
        Ok(Retrieved {
            episodic,
            semantic,
            tool_interactions: if req.include_tool_interactions {
                tool_interactions(&bundle.raw_tail)
            } else {
                vec![]
            },
            raw_tail: bundle.raw_tail,
            recalled,
            index,
        })
    }

    /// One page of the agent's history: ranked by relevance, or every
    /// word of the query, newest first.
    pub async fn search(&self, req: SearchRequest) -> Result<SearchPage> {
        let id = limits::agent_id("agent_id", &req.agent_id)?;
        let search = limits::search(&req)?;
        Ok(self.store.search(&id, &search).await?)
    }
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
