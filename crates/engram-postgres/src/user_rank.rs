//! Ranking across a user's conversations on the database: each of the
//! user's agents ranked in turn (its traces, summaries and facts, as
//! Retrieve(query) ranks them), the current conversation's active
//! transcript left out, and the results merged by score. Correct for any
//! number of conversations; its cost grows with them (one search over all
//! of a user's rows is the next step).

use std::collections::HashSet;

use engram_core::compaction::normalize;
use engram_core::{AgentId, UserId};
use engram_store::{
    Admin, MemoryQuery, RankedMemories, Ranks, Result, Search, SearchPage, Searches, StoreError,
};

use crate::PgStore;

impl PgStore {
    pub(crate) async fn user_ranking(
        &self,
        user: &UserId,
        query: &MemoryQuery,
        current: Option<&AgentId>,
    ) -> Result<RankedMemories> {
        let mut out = RankedMemories::default();
        let mut facts_seen = HashSet::new();
        for agent in self.user_agents(user).await? {
            let own = current == Some(&agent);
            let asked = MemoryQuery {
                archived_only: query.archived_only && own,
                wait_for_index: if own { query.wait_for_index } else { None },
                ..query.clone()
            };
            let ranked = match self.rank_memories(&agent, &asked).await {
                Ok(ranked) => ranked,
                // Deleted meanwhile: answers as after the delete.
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            out.index.items += ranked.index.items;
            out.index.embedded += ranked.index.embedded;
            out.index.pending += ranked.index.pending;
            out.memories
                .extend(ranked.memories.into_iter().map(|mut m| {
                    m.agent_id = Some(agent.to_string());
                    m
                }));
            out.episodic.extend(ranked.episodic);
            for fact in ranked.semantic {
                if facts_seen.insert(normalize(&fact.fact)) {
                    out.semantic.push(fact);
                }
            }
        }
        out.memories.sort_by(|a, b| b.score.total_cmp(&a.score));
        out.memories.truncate(query.limit);
        out.episodic.truncate(query.episodic);
        out.semantic.truncate(query.semantic);
        Ok(out)
    }
}

impl PgStore {
    /// A ranked page over the user's conversations: each one's best up to
    /// the page's end, merged by score.
    pub(crate) async fn user_search(&self, user: &UserId, search: &Search) -> Result<SearchPage> {
        engram_store::ranked::check_user_search(search)?;
        let (from, end) = engram_store::ranked::page_bounds(search)?;
        let each = Search {
            limit: end + 1,
            page_token: None,
            ..search.clone()
        };
        let mut hits = Vec::new();
        let mut index = engram_store::IndexState::default();
        for agent in self.user_agents(user).await? {
            let page = match self.search(&agent, &each).await {
                Ok(page) => page,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            index.items += page.index.items;
            index.embedded += page.index.embedded;
            index.pending += page.index.pending;
            hits.extend(page.hits.into_iter().map(|mut h| {
                h.agent_id = Some(agent.to_string());
                h
            }));
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        let more = hits.len() > end;
        let hits = hits.into_iter().take(end).skip(from).collect();
        Ok(SearchPage {
            hits,
            next_page_token: more.then(|| engram_store::ranked::page_token(end)),
            index,
        })
    }
}
