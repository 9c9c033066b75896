//! Ranking across a user's conversations: the user's index (`user_index`),
//! caught up with every acknowledged write of the user's agents and facts,
//! runs a ranked read's plan as an agent's index does (`ranked.rs`): for
//! recall and Retrieve (every kind, the current conversation's active
//! transcript hidden) and for SearchHistory (traces, in pages).

use std::collections::HashMap;
use std::sync::Arc;

use engram_core::{AgentId, UserId};
use engram_index::lexical::IndexSource;
use engram_index::pipeline::Wanted;
use engram_index::{Lexical, Ranked, pipeline, rank_index};
use engram_store::items::trace_order;
use engram_store::ranked::{place, range};
use engram_store::ranking::{Found, Plan};

use crate::index::{blocking, index_error};
use crate::ranked::{Whose, recalled};
use crate::user_index::UserIndex;
use crate::{FileStore, IndexState, Result};

/// What ranking work gets: the hits' reader, and the rankings asked for.
struct Ranking<'a> {
    lexical: &'a Lexical,
    whose: Whose<'a>,
    ranked: Vec<Vec<Ranked>>,
    state: IndexState,
}

impl FileStore {
    /// A plan over `user`'s index, caught up with every conversation of
    /// the user (`current`'s active transcript, when a want leaves it out,
    /// kept out of the index's reach).
    pub(crate) async fn user_rank(
        &self,
        user: &UserId,
        current: Option<&AgentId>,
        plan: &Plan,
    ) -> Result<Found> {
        if let Some(wait) = plan.wait {
            self.wait_user_embedded(user, current, std::time::Instant::now() + wait)
                .await?;
        }
        let archived_only = plan.wants.iter().any(|w| w.archived_only);
        // Where the current conversation's active transcript starts, and
        // its epoch.
        let (first_active, epoch) = match current {
            Some(id) => {
                let read = self.read(id, |s| (s.traces.first().map(trace_order), s.meta.epoch));
                match read.await {
                    Ok((first, epoch)) => (first.filter(|_| archived_only), Some(epoch)),
                    Err(crate::StoreError::NotFound(_)) => (None, None),
                    Err(e) => return Err(e),
                }
            }
            None => (None, None),
        };
        let hidden_current = current.zip(epoch).filter(|_| archived_only);
        let asked = plan.wants.clone();
        let own = current.map(|c| c.to_string());
        let wants = move |index: &UserIndex| {
            let active = match (&own, first_active) {
                (Some(id), Some(first)) => index.ordinal(id).map(|o| (place(o, first), range(o).1)),
                _ => None,
            };
            let wants = asked.iter().map(|w| (w.user_filter(active), w.limit));
            wants.collect()
        };
        let read = plan.wants.clone();
        let current = current.map(|c| c.to_string());
        let caught_up = self.user_caught_up_as(user, hidden_current, true);
        self.user_ranked(user, &plan.query, caught_up, current, wants, move |r| {
            Found::read_back(&read, &r.ranked, r.state, |hit, context| {
                recalled(hit, r.lexical, r.whose, context)
            })
        })
        .await
    }

    /// Waits until every conversation of `user` has nothing left to embed
    /// (`current` first: its own items matter most), or `deadline`; the
    /// user's index copies their vectors as it catches up.
    async fn wait_user_embedded(
        &self,
        user: &UserId,
        current: Option<&AgentId>,
        deadline: std::time::Instant,
    ) -> Result<()> {
        let others = self.agents_of(user).await?;
        let agents = current
            .into_iter()
            .chain(others.iter().filter(|a| Some(*a) != current));
        for agent in agents {
            match self.wait_embedded(agent, deadline).await {
                // Deleted meanwhile: nothing of it to wait for.
                Ok(()) | Err(crate::StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // The user's index copies a conversation's vectors as it catches
        // up, unless that conversation's index is busy at that moment (the
        // indexer writing it out): such a one is waited for, and copied at
        // the next round. A few rounds: a vector the model refused is
        // never there to copy.
        for _ in 0..3 {
            self.user_caught_up(user, None).await?;
            let waiting = match self.user_slot(user).lock().await.as_ref() {
                Some(index) => index.waiting_for_vectors(),
                None => return Ok(()),
            };
            let busy: Vec<_> = waiting
                .iter()
                .filter_map(|a| AgentId::parse(a).ok())
                .filter_map(|a| self.existing_handle(&a).ok())
                .collect();
            if busy.is_empty() || std::time::Instant::now() >= deadline {
                return Ok(());
            }
            for handle in busy {
                let free = handle.index.lock();
                if tokio::time::timeout_at(deadline.into(), free)
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Ranks `text` over `user`'s index, caught up, for what `wants` asks
    /// (given the index), and hands the rankings to `work`, on blocking
    /// threads; the query is embedded while the words are ranked.
    async fn user_ranked<T: Send + 'static>(
        &self,
        user: &UserId,
        text: &str,
        caught_up: impl std::future::Future<Output = Result<()>>,
        current: Option<String>,
        wants: impl FnOnce(&UserIndex) -> Vec<Wanted> + Send + 'static,
        work: impl FnOnce(Ranking<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        caught_up.await?;
        let slot = self.user_slot(user);
        let guard = Arc::clone(&slot).lock_owned().await;
        let text = text.to_owned();
        let query = text.clone();
        let params = self.inner.config.ranking.clone();
        let fusing = params.clone();
        let noting = self.inner.indexer.clone();
        let words = blocking(move || {
            let mut guard = guard;
            let Some(index) = guard.as_mut() else {
                return Ok((guard, None, vec![]));
            };
            let unvisited = match &noting {
                Some(indexer) if params.expansion_words > 0 => {
                    index.agents_missing_words(&indexer.words())?
                }
                _ => Vec::new(),
            };
            let wants = wants(index);
            let mut source = IndexSource::new(&mut index.lexical, None, None);
            let lexed = rank_index(&mut source, |s| {
                pipeline::by_words(s, &text, &wants, &params)
            })
            .map_err(index_error)?;
            Ok((guard, Some(lexed), unvisited))
        });
        let query_vector = async {
            match self.inner.indexer.as_ref() {
                Some(indexer) => crate::query_vector(indexer.embedder.as_ref(), &query).await,
                None => None,
            }
        };
        let (query_vector, words) = tokio::join!(query_vector, words);
        let (guard, words, unvisited) = words?;
        for agent in unvisited.iter().filter_map(|a| AgentId::parse(a).ok()) {
            self.inner.queue.enqueue(&agent);
        }
        let indexer = self.inner.indexer.clone();
        blocking(move || {
            let mut guard = guard;
            let Some(index) = guard.as_mut() else {
                // Erased meanwhile: as after the erasure, nothing.
                let empty = Lexical::in_memory().map_err(index_error)?;
                let by_ordinal = HashMap::new();
                return work(Ranking {
                    lexical: &empty,
                    whose: Whose::User {
                        by_ordinal: &by_ordinal,
                        current: None,
                    },
                    ranked: vec![],
                    state: IndexState::default(),
                });
            };
            // The user's vectors are copied from the conversations' (and
            // may hold a few the lexical side has since replaced): what
            // is embedded is counted among the items, the rest pending.
            let items = index.lexical.len();
            let embedded = index.vectors.as_ref().map_or(0, |v| v.len() as u64);
            let state = IndexState {
                items,
                embedded: embedded.min(items),
                pending: match index.vectors {
                    Some(_) => items.saturating_sub(embedded),
                    None => 0,
                },
                model: index.vectors.as_ref().map_or(String::new(), |v| {
                    engram_store::model_of_vectors(v.model()).to_owned()
                }),
            };
            // The user's vocabulary: every conversation's words (their
            // vectors given by the indexer as it embeds each agent).
            let ranked = match words {
                Some(words) => {
                    let table = indexer.as_ref().map(|i| i.words());
                    let vectors = index.vectors.as_ref();
                    let mut source =
                        IndexSource::new(&mut index.lexical, vectors, table.as_deref());
                    rank_index(&mut source, |s| {
                        pipeline::by_meaning(s, words, query_vector.as_deref(), &fusing)
                    })
                    .map_err(index_error)?
                }
                None => Vec::new(),
            };
            let index = &*index;
            let by_ordinal = index.agents_by_ordinal();
            work(Ranking {
                lexical: &index.lexical,
                whose: Whose::User {
                    by_ordinal: &by_ordinal,
                    current: current.as_deref(),
                },
                ranked,
                state,
            })
        })
        .await
    }
}
