//! Ranking across a user's conversations: the user's index (`user_index`),
//! caught up with every acknowledged write of the user's agents and facts,
//! ranks them as an agent's index ranks its own (words and meaning fused),
//! with the current conversation's active transcript hidden.

use std::collections::HashMap;
use std::sync::Arc;

use engram_core::users::UserFact;
use engram_core::{AgentId, RawTrace, UserId};
use engram_index::{Kind, Lexical, Params, Ranked, Words};
use engram_store::items::trace_order;
use engram_store::ranked::{MAX_CONTEXT, MAX_RANKED, matched_by, memory_wants};

use crate::index::{blocking, index_error};
use crate::ranked::{item, parse};
use crate::user_index::{place, range, split_key};
use crate::{FileStore, IndexState, Memory, MemoryQuery, RankedMemories, Recalled, Result};

impl FileStore {
    pub(crate) async fn user_ranking(
        &self,
        user: &UserId,
        query: &MemoryQuery,
        current: Option<&AgentId>,
    ) -> Result<RankedMemories> {
        if let (Some(wait), Some(id)) = (query.wait_for_index, current) {
            // The current conversation's own items are embedded first.
            self.wait_embedded(id, std::time::Instant::now() + wait)
                .await
                .ok();
        }
        self.user_caught_up(user).await?;
        // Where the current conversation's active transcript starts.
        let first_active = match current {
            Some(id) if query.archived_only => {
                match self.read(id, |s| s.traces.first().map(trace_order)).await {
                    Ok(first) => first,
                    Err(crate::StoreError::NotFound(_)) => None,
                    Err(e) => return Err(e),
                }
            }
            _ => None,
        };
        let slot = self.user_slot(user);
        let guard = Arc::clone(&slot).lock_owned().await;
        let hidden = match (current, first_active, guard.as_ref()) {
            (Some(id), Some(first), Some(index)) => index
                .ordinal(id.as_str())
                .map(|o| (place(o, first), range(o).1)),
            _ => None,
        };
        let mut wants = memory_wants(query, None);
        wants[0].0.traces_before = None;
        wants[0].0.traces_hidden = hidden;
        let text = query.query.clone();
        let words = blocking(move || {
            let mut guard = guard;
            let Some(index) = guard.as_mut() else {
                return Ok((guard, vec![]));
            };
            let params = Params::default();
            let words = wants
                .iter()
                .map(|(filter, limit)| match (*limit).min(MAX_RANKED) {
                    0 => Ok(None),
                    limit => {
                        engram_index::by_words(&mut index.lexical, &text, filter, limit, &params)
                            .map(Some)
                            .map_err(index_error)
                    }
                })
                .collect::<Result<Vec<Option<Words>>>>()?;
            Ok((guard, words))
        });
        let query_vector = async {
            match self.inner.indexer.as_ref() {
                Some(indexer) => crate::query_vector(indexer.embedder.as_ref(), &query.query).await,
                None => None,
            }
        };
        let (query_vector, words) = tokio::join!(query_vector, words);
        let (guard, words) = words?;
        let context = query.neighbours.min(MAX_CONTEXT);
        let current = current.map(|c| c.to_string());
        blocking(move || {
            let Some(index) = guard.as_ref() else {
                return Ok(RankedMemories::default());
            };
            let state = IndexState {
                items: index.lexical.len(),
                embedded: index.vectors.as_ref().map_or(0, |v| v.len() as u64),
                ..IndexState::default()
            };
            let ranked = engram_index::fuse_each(
                words,
                index.vectors.as_ref(),
                query_vector.as_deref(),
                &Params::default(),
            );
            let mut ranked = ranked.into_iter();
            let (all, episodic, semantic) = (
                ranked.next().unwrap_or_default(),
                ranked.next().unwrap_or_default(),
                ranked.next().unwrap_or_default(),
            );
            let by_ordinal = index.agents_by_ordinal();
            let found = Found {
                lexical: &index.lexical,
                by_ordinal: &by_ordinal,
                current: current.as_deref(),
            };
            let mut memories = Vec::with_capacity(all.len());
            for hit in &all {
                memories.extend(found.recalled(hit, context)?);
            }
            let only = |hits: &[Ranked]| -> Result<Vec<Memory>> {
                let mut out = vec![];
                for hit in hits {
                    out.extend(found.recalled(hit, 0)?.map(|r| r.memory));
                }
                Ok(out)
            };
            Ok(RankedMemories {
                memories,
                episodic: only(&episodic)?
                    .into_iter()
                    .filter_map(|m| match m {
                        Memory::Episodic(e) => Some(e),
                        _ => None,
                    })
                    .collect(),
                semantic: only(&semantic)?
                    .into_iter()
                    .filter_map(|m| match m {
                        Memory::Semantic(f) => Some(f),
                        _ => None,
                    })
                    .collect(),
                index: state,
            })
        })
        .await
    }
}

/// What the hits of a user's index are read with.
struct Found<'a> {
    lexical: &'a Lexical,
    by_ordinal: &'a HashMap<u32, String>,
    current: Option<&'a str>,
}

impl Found<'_> {
    /// The memory a hit of the user's index is, naming its conversation,
    /// with up to `context` neighbours each side from the same one.
    fn recalled(&self, hit: &Ranked, context: usize) -> Result<Option<Recalled>> {
        let (lexical, current) = (self.lexical, self.current);
        let Some(body) = hit.body(lexical).map_err(index_error)? else {
            return Ok(None);
        };
        // By its place (a hit found as a neighbour has no key at hand); the
        // user's facts have none.
        let agent = match hit.key().map(split_key) {
            Some((None, _)) => None,
            _ => self.by_ordinal.get(&((hit.order >> 40) as u32)).cloned(),
        };
        let (memory, (before, after)) = match hit.kind {
            Kind::Trace => {
                // Its own conversation's active traces are hidden: what is
                // found of it was archived. Of another, it is not in this
                // prompt either way.
                let archived = agent.as_deref() == current;
                (
                    Memory::Trace {
                        trace: Box::new(parse(&body)?),
                        archived,
                    },
                    neighbours_within(lexical, hit.order, context)?,
                )
            }
            Kind::Episodic => (Memory::Episodic(item(&body)?), Default::default()),
            Kind::Semantic => {
                let fact: UserFact = item(&body)?;
                (Memory::Semantic(fact.fact), Default::default())
            }
        };
        Ok(Some(Recalled {
            memory,
            score: hit.score,
            matched_by: matched_by(hit),
            before,
            after,
            agent_id: agent,
        }))
    }
}

/// Up to `n` traces on each side of the one at `order`, of the same
/// conversation (its ordinal's range), oldest first.
fn neighbours_within(
    lexical: &Lexical,
    order: u64,
    n: usize,
) -> Result<(Vec<RawTrace>, Vec<RawTrace>)> {
    let (lo, hi) = range((order >> 40) as u32);
    let traces = |placed: Vec<engram_index::Placed>| -> Result<Vec<RawTrace>> {
        let mut out = Vec::new();
        for (at, _) in placed.into_iter().filter(|(at, _)| (lo..=hi).contains(at)) {
            if let Some(body) = lexical.body_at(at).map_err(index_error)? {
                out.push(parse(&body)?);
            }
        }
        Ok(out)
    };
    let (before, after) = lexical.neighbours(order, n);
    let mut before = traces(before)?;
    before.reverse();
    Ok((before, traces(after)?))
}
