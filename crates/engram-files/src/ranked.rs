//! A ranked read's plan (`engram_store::ranking`) over the agent's index,
//! caught up with every acknowledged write: `engram_index::pipeline` over
//! the index (by the words, and by meaning over what the indexer has
//! embedded so far), and the ranked items read back from it. A user's
//! index is ranked alike (`user_rank.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use engram_core::users::UserFact;
use engram_core::{AgentId, RawTrace};
use engram_index::lexical::IndexSource;
use engram_index::{Kind, Lexical, Placed, Ranked, pipeline, rank_index};
use engram_store::Ranks;

use engram_index::pipeline::Wanted;
use engram_store::ranked::{CONVERSATION_BITS, matched_by, split_key};
use engram_store::ranking::{Found, Over, Plan};

use crate::index::{Lag, blocking, index_error};
use crate::{FileStore, IndexState, Memory, Recalled, Result, StoreError};

/// What ranking work gets: the agent's index caught up with every
/// acknowledged write, and the rankings it asked for.
struct Ranking<'a> {
    lexical: &'a mut Lexical,
    /// One per [`Wanted`], in order.
    ranked: Vec<Vec<Ranked>>,
    state: IndexState,
    /// Conversation order of the first active trace: earlier is archived.
    first_active: Option<u64>,
}

#[async_trait]
impl Ranks for FileStore {
    async fn rank(&self, over: Over<'_>, plan: &Plan) -> Result<Found> {
        match over {
            Over::Agent(id) => self.agent_rank(id, plan).await,
            Over::User { user, current } => self.user_rank(user, current, plan).await,
        }
    }

    fn expect_query(&self, text: &str) {
        if let Some(indexer) = &self.inner.indexer {
            engram_store::expect_query(Arc::clone(&indexer.embedder), text);
        }
    }

    async fn index_state(&self, id: &AgentId) -> Result<IndexState> {
        // A request (GetContextStats): staged, not committed.
        let handle = self.existing_handle(id)?;
        let mut current = self.caught_up_as(id, handle, Lag::Commit).await?;
        Ok(current.index().state())
    }
}

impl FileStore {
    /// A plan over the agent's index, caught up with every acknowledged
    /// write (staged where the indexer has not committed it; what no want
    /// may find, the active traces written since, left to the indexer).
    async fn agent_rank(&self, id: &AgentId, plan: &Plan) -> Result<Found> {
        let lag = match plan.wants.iter().any(|w| w.may_find_active()) {
            true => Lag::Commit,
            false => Lag::ActiveTraces,
        };
        let asked = plan.wants.clone();
        let wants = move |first_active: Option<u64>| {
            let wants = asked
                .iter()
                .map(|w| (w.agent_filter(first_active), w.limit));
            wants.collect()
        };
        let read = plan.wants.clone();
        let asked = (plan.query.as_str(), plan.wait, lag);
        self.ranking(id, asked, wants, move |r| {
            let whose = Whose::Agent {
                first_active: r.first_active,
            };
            Found::read_back(&read, &r.ranked, r.state, |hit, context| {
                recalled(hit, r.lexical, whose, context)
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
        wants: impl FnOnce(Option<u64>) -> Vec<Wanted> + Send + 'static,
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

/// Whose index a ranked item is read back from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Whose<'a> {
    /// An agent's: a trace placed before `first_active` is archived.
    Agent { first_active: Option<u64> },
    /// A user's: each item names its conversation (by its place's
    /// ordinal; the user's own facts name none), and what is found of
    /// `current` was archived (its active transcript is hidden).
    User {
        by_ordinal: &'a HashMap<u32, String>,
        current: Option<&'a str>,
    },
}

/// The memory a ranked item is, with up to `context` neighbours each side
/// for a trace (of its own conversation); `None` when the index no longer
/// holds it.
pub(crate) fn recalled(
    hit: &Ranked,
    lexical: &Lexical,
    whose: Whose<'_>,
    context: usize,
) -> Result<Option<Recalled>> {
    let Some(body) = hit.body(lexical).map_err(index_error)? else {
        return Ok(None);
    };
    // By its place (a hit found as a neighbour has no key at hand).
    let agent = match (whose, hit.key().map(split_key)) {
        (Whose::Agent { .. }, _) | (Whose::User { .. }, Some((None, _))) => None,
        (Whose::User { by_ordinal, .. }, _) => by_ordinal
            .get(&((hit.order >> CONVERSATION_BITS) as u32))
            .cloned(),
    };
    let (memory, (before, after)) = match hit.kind {
        Kind::Trace => {
            let archived = match whose {
                Whose::Agent { first_active } => first_active.is_none_or(|f| hit.order < f),
                Whose::User { current, .. } => agent.as_deref() == current,
            };
            let trace = Box::new(parse(&body)?);
            let sides = neighbours(lexical, hit.order, context)?;
            (Memory::Trace { trace, archived }, sides)
        }
        Kind::Episodic => (Memory::Episodic(item(&body)?), Default::default()),
        Kind::Semantic => match whose {
            Whose::Agent { .. } => (Memory::Semantic(item(&body)?), Default::default()),
            Whose::User { .. } => {
                let fact: UserFact = item(&body)?;
                (Memory::Semantic(fact.fact), Default::default())
            }
        },
    };
    Ok(Some(Recalled {
        agent_id: agent,
        memory,
        score: hit.score,
        matched_by: matched_by(hit),
        before,
        after,
    }))
}

/// Up to `n` traces on each side of the one at `order` (of its own
/// conversation), oldest first.
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

/// A summary or fact as the index stores it (its line).
pub(crate) fn item<T: serde::de::DeserializeOwned>(body: &str) -> Result<T> {
    serde_json::from_str(body)
        .map_err(|e| StoreError::Index(format!("search index holds an unreadable memory: {e}")))
}

pub(crate) fn parse(body: &str) -> Result<RawTrace> {
    RawTrace::from_line(body.as_bytes())
        .map_err(|e| StoreError::Index(format!("search index holds an unreadable trace: {e}")))
}
