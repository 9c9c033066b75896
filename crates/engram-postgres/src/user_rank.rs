//! Ranking across a user's conversations on the database: each of the
//! user's agents ranked in turn (its traces, summaries and facts, as
//! Retrieve(query) ranks them), the current conversation's active
//! transcript left out, and the results merged by score. Correct for any
//! number of conversations; its cost grows with them (one search over all
//! of a user's rows is the next step).

use std::collections::HashSet;

use engram_core::compaction::normalize;
use engram_core::{AgentId, UserId};
use engram_store::{Admin, MemoryQuery, RankedMemories, Ranks, Result, StoreError};

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
