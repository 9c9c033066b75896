//! SearchHistory's ranked mode and Retrieve(query): the agent's index,
//! caught up with every acknowledged write, ranks its traces (and for
//! Retrieve, its summaries and facts too) for the query — by their words,
//! and by meaning over what the indexer has embedded so far.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use engram_core::{AgentId, RawTrace};
use engram_index::lexical::IndexSource;
use engram_index::{Kind, Lexical, Placed, Ranked, pipeline, rank_index};
use engram_store::Ranks;

use engram_store::ranked::{
    MAX_CONTEXT, MAX_RANKED, Want, matched_by, memory_wants, page_bounds, search_filter,
};

use crate::index::{Lag, blocking, index_error};
use crate::{
    FileStore, Hit, IndexState, Memory, MemoryQuery, RankedMemories, Recalled, Result, Search,
    SearchPage, StoreError,
};

/// What ranking work gets: the agent's index caught up with every
/// acknowledged write, and the rankings it asked for.
struct Ranking<'a> {
    lexical: &'a mut Lexical,
    /// One per [`Want`], in order.
    ranked: Vec<Vec<Ranked>>,
    state: IndexState,
    /// Conversation order of the first active trace: earlier is archived.
    first_active: Option<u64>,
}

#[async_trait]
impl Ranks for FileStore {
    /// Retrieve(query) and recall: traces, summaries and live facts ranked
    /// together by the same index and fusion as SearchHistory.
    async fn rank_memories(&self, id: &AgentId, query: &MemoryQuery) -> Result<RankedMemories> {
        let asked = query.clone();
        let wants = move |first_active: Option<u64>| memory_wants(&asked, first_active);
        let context = query.neighbours.min(MAX_CONTEXT);
        // Recall searches the archive and the memories only: the active
        // traces written since the last commit can wait for the indexer.
        let lag = if query.archived_only {
            Lag::ActiveTraces
        } else {
            Lag::None
        };
        let asked = (query.query.as_str(), query.wait_for_index, lag);
        self.ranking(id, asked, wants, move |r| {
            let lexical = r.lexical;
            let mut ranked = r.ranked.into_iter();
            let (all, episodic, semantic) = (
                ranked.next().unwrap_or_default(),
                ranked.next().unwrap_or_default(),
                ranked.next().unwrap_or_default(),
            );
            let mut memories = Vec::with_capacity(all.len());
            for hit in &all {
                memories.extend(recalled(hit, lexical, r.first_active, context)?);
            }
            // Expired: gone from search at once (upkeep purges it), as
            // every other ranking of facts drops it.
            let now = engram_store::unix_now();
            let semantic: Vec<engram_core::memory::SemanticItem> = items(&semantic, lexical)?;
            Ok(RankedMemories {
                memories,
                episodic: items(&episodic, lexical)?,
                semantic: semantic
                    .into_iter()
                    .filter(|f| !f.is_expired(now))
                    .collect(),
                index: r.state,
            })
        })
        .await
    }

    async fn rank_user_memories(
        &self,
        user: &engram_core::UserId,
        query: &MemoryQuery,
        current: Option<&AgentId>,
    ) -> Result<RankedMemories> {
        self.user_ranking(user, query, current).await
    }

    fn expect_query(&self, text: &str) {
        if let Some(indexer) = &self.inner.indexer {
            engram_store::expect_query(Arc::clone(&indexer.embedder), text);
        }
    }

    async fn index_state(&self, id: &AgentId) -> Result<IndexState> {
        let mut current = self.caught_up(id).await?;
        Ok(current.index().state())
    }
}

impl FileStore {
    pub(crate) async fn ranked_search(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        let (from, end) = page_bounds(search)?;
        let filter = search_filter(search);
        let context = search.neighbours.min(MAX_CONTEXT);
        let wants = move |_| vec![(filter, end + 1)];
        let asked = (search.query.as_str(), search.wait_for_index, Lag::None);
        self.ranking(id, asked, wants, move |r| {
            let lexical = r.lexical;
            let ranked = r.ranked.into_iter().next().unwrap_or_default();
            let more = ranked.len() > end;
            let mut hits = Vec::new();
            for hit in ranked.iter().take(end).skip(from) {
                let found = recalled(hit, lexical, r.first_active, context)?;
                hits.extend(found.and_then(Hit::of));
            }
            Ok(SearchPage {
                hits,
                next_page_token: more.then(|| engram_store::ranked::page_token(end)),
                index: r.state,
            })
        })
        .await
    }

    /// Ranks `query` for what `wants` asks (given where the active
    /// transcript starts) and hands the rankings to `work`, on blocking
    /// threads, over the agent's index caught up (once `wait`, at most, has
    /// let the indexer embed what it holds). The query is embedded while
    /// the words are ranked: on two cores, the two halves overlap (one
    /// interleaved A/B at 1,000 traces: p50 6.0–6.3 ms against 7.6–7.7 ms
    /// one after the other, on a host whose own noise is about ±0.7 ms).
    async fn ranking<T: Send + 'static>(
        &self,
        id: &AgentId,
        (query, wait, lag): (&str, Option<std::time::Duration>, Lag),
        wants: impl FnOnce(Option<u64>) -> Vec<Want> + Send + 'static,
        work: impl FnOnce(Ranking<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if let Some(wait) = wait {
            self.wait_embedded(id, Instant::now() + wait).await?;
        }
        // An unknown agent is refused before its query costs an embedding.
        let handle = self.existing_handle(id)?;
        let params = self.inner.config.ranking.clone();
        let fusing = params.clone();
        let indexer = self.inner.indexer.clone();
        let noting = indexer.clone();
        let words = async {
            let mut current = self.caught_up_as(id, handle, lag).await?;
            let query = query.to_owned();
            blocking(move || {
                let wants = wants(current.first_active);
                // Words the indexer has not given vectors yet (after a
                // restart, or a commit it has not reached): it is asked to.
                if let Some(indexer) = &noting {
                    let expanding = params.expansion_words > 0;
                    current
                        .index()
                        .note_known_words(&indexer.words(), expanding)?;
                }
                let words_left = current.index().left_to_embed() > 0;
                let wants: Vec<Want> = wants
                    .into_iter()
                    .map(|(filter, limit)| (filter, limit.min(MAX_RANKED)))
                    .collect();
                let mut source = IndexSource::new(&mut current.index().lexical, None, None);
                let lexed = rank_index(&mut source, |s| {
                    pipeline::by_words(s, &query, &wants, &params)
                })
                .map_err(index_error)?;
                Ok((current, lexed, words_left))
            })
            .await
        };
        let (query_vector, words) = tokio::join!(self.query_vector(query), words);
        let (mut current, words, words_left) = words?;
        if words_left && indexer.is_some() {
            self.inner.queue.enqueue(id);
        }
        blocking(move || {
            let first_active = current.first_active;
            let index = current.index();
            let state = index.state();
            let table = indexer.as_ref().map(|i| i.words());
            let mut source =
                IndexSource::new(&mut index.lexical, index.vectors.as_ref(), table.as_deref());
            let ranked = rank_index(&mut source, |s| {
                pipeline::by_meaning(s, words, query_vector.as_deref(), &fusing)
            })
            .map_err(index_error)?;
            drop(table);
            work(Ranking {
                lexical: &mut index.lexical,
                ranked,
                state,
                first_active,
            })
        })
        .await
    }

    /// The query's vector, or `None` (no model; see [`crate::query_vector`]).
    async fn query_vector(&self, query: &str) -> Option<Vec<f32>> {
        let indexer = self.inner.indexer.as_ref()?;
        crate::query_vector(indexer.embedder.as_ref(), query).await
    }
}

/// The memory a ranked item is, with up to `context` neighbours each side
/// for a trace (archived when placed before `first_active`); `None` when
/// the index no longer holds it.
fn recalled(
    hit: &Ranked,
    lexical: &Lexical,
    first_active: Option<u64>,
    context: usize,
) -> Result<Option<Recalled>> {
    let Some(body) = hit.body(lexical).map_err(index_error)? else {
        return Ok(None);
    };
    let (memory, (before, after)) = match hit.kind {
        Kind::Trace => (
            Memory::Trace {
                trace: Box::new(parse(&body)?),
                archived: first_active.is_none_or(|first| hit.order < first),
            },
            neighbours(lexical, hit.order, context)?,
        ),
        Kind::Episodic => (Memory::Episodic(item(&body)?), Default::default()),
        Kind::Semantic => {
            let fact: engram_core::memory::SemanticItem = item(&body)?;
            // Expired: gone from search at once (upkeep purges it).
            if fact.is_expired(engram_store::unix_now()) {
                return Ok(None);
            }
            (Memory::Semantic(fact), Default::default())
        }
    };
    Ok(Some(Recalled {
        agent_id: None,
        memory,
        score: hit.score,
        matched_by: matched_by(hit),
        before,
        after,
    }))
}

/// Up to `n` traces on each side of the one at `order`, oldest first.
fn neighbours(lexical: &Lexical, order: u64, n: usize) -> Result<(Vec<RawTrace>, Vec<RawTrace>)> {
    let traces_at = |placed: Vec<Placed>| -> Result<Vec<RawTrace>> {
        let mut out = Vec::with_capacity(placed.len());
        for (order, _) in placed {
            if let Some(body) = lexical.body_at(order).map_err(index_error)? {
                out.push(parse(&body)?);
            }
        }
        Ok(out)
    };
    let (before, after) = lexical.neighbours(order, n);
    // Neighbours come nearest first.
    let mut before = traces_at(before)?;
    before.reverse();
    Ok((before, traces_at(after)?))
}

/// The summaries or facts `ranked` names.
fn items<T: serde::de::DeserializeOwned>(ranked: &[Ranked], lexical: &Lexical) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(ranked.len());
    for hit in ranked {
        if let Some(body) = hit.body(lexical).map_err(index_error)? {
            out.push(item(&body)?);
        }
    }
    Ok(out)
}

/// A summary or fact as the index stores it (its line).
pub(crate) fn item<T: serde::de::DeserializeOwned>(body: &str) -> Result<T> {
    serde_json::from_str(body)
        .map_err(|e| StoreError::Index(format!("search index holds an unreadable memory: {e}")))
}

pub(crate) fn parse(body: &str) -> Result<RawTrace> {
    RawTrace::from_line(body.as_bytes())
        .map_err(|e| StoreError::Index(format!("search index holds an unreadable trace: {e}")))
}
