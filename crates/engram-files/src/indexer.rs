//! The background indexer: embeds what the lexical index holds and the
//! vectors do not, off the Ingest path; without a model, it keeps the open
//! indexes of agents that recall caught up, so that a prompt's recall
//! finds them committed and pays for no commit itself.
//!
//! A write names its agent to a bounded queue (an agent already queued is
//! not queued twice; when the queue is full the name is dropped, and the
//! agent's next search or write names it again). One task takes agents in
//! turn and embeds their pending items a batch at a time, with the agent's
//! index unlocked while the model runs, so searches go on meanwhile over
//! what is embedded so far. An embedder that is unavailable is retried
//! after a pause; the items stay pending.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use engram_core::AgentId;
use engram_core::embed::Embedder;
use engram_index::{Item, Kind, WordVectors};
use tokio::sync::mpsc;

use engram_store::embedding::embed_batch;

use crate::index::{AgentIndex, ModelId, blocking, index_error};
use crate::{AgentHandle, FileStore, Inner, Result};

/// Agents waiting for the indexer.
const QUEUE: usize = 4096;

/// Items per call to the model.
pub(crate) const BATCH: usize = 64;

/// How long a written agent waits in the queue before its index reads the
/// write in: the writes of a turn come in a burst (the user's message, the
/// answer, tool results), and the commit that reads them in is better
/// paid once, while the model generates, than during the turn's next
/// prompt, whose recall would wait for the index it holds.
const SETTLE: Duration = Duration::from_millis(100);

/// While calls arrive, the indexer puts a due catch-up off (its commit
/// holds the agent's index, which the agent's next recall waits for) until
/// no call has been in flight for [`QUIET`], for at most this long: an
/// agent in a loop without pauses still has its index read in every
/// couple of seconds, and a real loop's pauses (the model answering) are
/// where the commits land.
const DEFER_AT_MOST: Duration = Duration::from_secs(2);

/// See [`DEFER_AT_MOST`].
const QUIET: Duration = Duration::from_millis(20);

/// Pause after a failed embedding call before the agent is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The model the indexer embeds with.
#[derive(Debug)]
pub(crate) struct Indexer {
    pub embedder: Arc<dyn Embedder>,
    pub model: ModelId,
    /// Every agent's words, each embedded once (query expansion).
    pub words: RwLock<WordVectors>,
}

impl Indexer {
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        let model = ModelId {
            id: embedder.model().to_owned(),
            dim: embedder.dim(),
        };
        let words = RwLock::new(WordVectors::new(model.dim, engram_index::words::MAX_WORDS));
        Self {
            embedder,
            model,
            words,
        }
    }

    /// The table of word vectors, to read.
    pub fn words(&self) -> std::sync::RwLockReadGuard<'_, WordVectors> {
        engram_store::read(&self.words)
    }

    /// The table of word vectors, to change (tests; the indexer fills it
    /// through [`engram_store::embed_words`]).
    #[cfg(test)]
    pub(crate) fn words_mut(&self) -> std::sync::RwLockWriteGuard<'_, WordVectors> {
        engram_store::write(&self.words)
    }
}

/// What the indexer keeps of an agent's index beyond its items' vectors:
/// whether the words of its current commit have theirs (query expansion).
impl AgentIndex {
    /// What the indexer has left here: the items without a vector, and one
    /// more while the current commit's words have none (query expansion).
    pub fn left_to_embed(&self) -> usize {
        let done = self.words_at.map(|(generation, _)| generation);
        let words = self.vectors.is_some() && done != Some(self.lexical.generation());
        self.unembedded() + usize::from(words)
    }

    /// Notes the current commit's words as done when `table` holds every
    /// one of them already (an agent loaded again, a commit of words seen
    /// before) or there is no expansion: nothing then waits for the
    /// indexer's round. Not done when the table gave some of them up for
    /// others' since they were: the indexer is asked for them again.
    /// Blocking (reads the index's dictionary, once per commit and per
    /// change of the table's evictions).
    pub fn note_known_words(&mut self, table: &WordVectors, expanding: bool) -> Result<()> {
        let stamp = (self.lexical.generation(), table.evictions());
        if self.vectors.is_none() || self.words_at == Some(stamp) {
            return Ok(());
        }
        let known = !expanding
            || self
                .lexical
                .words_without_vectors(table)
                .map_err(index_error)?
                .is_empty();
        self.words_at = known.then_some(stamp);
        Ok(())
    }
}

/// The agents waiting for the indexer's task.
#[derive(Debug)]
pub(crate) struct Queue {
    tx: mpsc::Sender<(AgentId, Instant)>,
    pub(crate) queued: Mutex<HashSet<AgentId>>,
}

impl Queue {
    /// The queue and the receiver the indexer's task reads.
    pub fn new() -> (Self, mpsc::Receiver<(AgentId, Instant)>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let queue = Self {
            tx,
            queued: Mutex::new(HashSet::new()),
        };
        (queue, rx)
    }

    pub(crate) fn enqueue(&self, id: &AgentId) {
        let mut queued = engram_store::lock(&self.queued);
        let due = Instant::now() + SETTLE;
        if queued.insert(id.clone()) && self.tx.try_send((id.clone(), due)).is_err() {
            queued.remove(id);
        }
    }
}

impl FileStore {
    pub(crate) fn model_id(&self) -> Option<ModelId> {
        self.inner.indexer.as_ref().map(|i| i.model.clone())
    }

    /// Asks the indexer to read in (and with a model, embed) what `id`
    /// wrote. Without a model only the open index of an agent whose recall
    /// left it work is kept up: an agent that never recalls costs no index
    /// work (its searches catch up for themselves).
    pub(crate) fn index_later(&self, id: &AgentId) {
        self.note_change(id);
        if self.inner.indexer.is_some() || self.keeps_up(id) {
            self.inner.queue.enqueue(id);
        }
    }

    /// Whether the indexer keeps `id`'s index up without a model: it
    /// recalls, and its index is open (or in use, so opening).
    fn keeps_up(&self, id: &AgentId) -> bool {
        let agents = engram_store::lock(&self.inner.agents);
        agents.get(id).is_some_and(|h| {
            h.recalls.load(std::sync::atomic::Ordering::Relaxed)
                && h.index.try_lock().map_or(true, |slot| slot.is_some())
        })
    }

    /// Starts the indexer task on `rx`, the indexer's queue. It holds the
    /// store weakly and ends with it.
    pub(crate) fn spawn_indexer(&self, mut rx: mpsc::Receiver<(AgentId, Instant)>) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some((id, due)) = rx.recv().await {
                // In the order queued, so each wait ends at the latest due.
                tokio::time::sleep_until(due.into()).await;
                let latest = tokio::time::Instant::from_std(due + DEFER_AT_MOST);
                quiet_or_late(engram_core::load::Load::global(), latest).await;
                let Some(inner) = weak.upgrade() else { break };
                let store = FileStore { inner };
                engram_store::lock(&store.inner.queue.queued).remove(&id);
                if store.inner.indexer.is_none() {
                    if let Err(e) = store.catch_up_open(&id).await {
                        tracing::debug!(agent = %id, error = %e, "an index was not caught up; its next search does it");
                    }
                    store.persist_open(&id).await;
                    continue;
                }
                let embedded = store.embed_pending(&id).await;
                store.persist_open(&id).await;
                // Its user's index reads it in now, not at the user's next
                // prompt (which would pay for it).
                store.user_catch_up_later(&id).await;
                if let Err(e) = embedded {
                    tracing::warn!(agent = %id, error = %e, "embedding failed; retrying later");
                    let store = store.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(RETRY_AFTER).await;
                        store.index_later(&id);
                    });
                }
            }
        });
    }

    /// Without a model: catches the agent's index up if it is open.
    async fn catch_up_open(&self, id: &AgentId) -> Result<()> {
        let Ok(handle) = self.existing_handle(id) else {
            return Ok(());
        };
        if handle.index.lock().await.is_none() {
            return Ok(());
        }
        match self.caught_up_with(id, handle).await {
            Ok(_) | Err(crate::StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes out what the agent's open index holds in memory only (what
    /// searches read in): off the request path, so that requests write
    /// and sync no index file. Failing, it stays in memory, and is tried
    /// again at the next catch-up.
    pub(crate) async fn persist_open(&self, id: &AgentId) {
        let Ok(handle) = self.existing_handle(id) else {
            return;
        };
        let slot = Arc::clone(&handle.index).lock_owned().await;
        if slot
            .as_ref()
            .is_none_or(|i| i.lexical.unpersisted_bytes() == 0)
        {
            return;
        }
        let persisted = blocking(move || {
            let mut slot = slot;
            match slot.as_mut() {
                // Its merges finished first: what they wrote goes out too.
                Some(index) => index
                    .lexical
                    .release_writer()
                    .and_then(|()| index.lexical.persist())
                    .map_err(index_error),
                None => Ok(()),
            }
        })
        .await;
        if let Err(e) = persisted {
            tracing::warn!(agent = %id, error = %e, "an index commit was not written out; kept in memory until the next try");
        }
    }

    /// Commits what every open index stages and writes out what every one,
    /// an agent's or a user's, holds in memory only (a clean shutdown).
    pub(crate) async fn persist_open_indexes(&self) {
        let agents: Vec<AgentId> = engram_store::lock(&self.inner.agents)
            .keys()
            .cloned()
            .collect();
        for id in &agents {
            // What searches staged is committed first: the next start
            // reads none of it again.
            if let Err(e) = self.catch_up_open(id).await {
                tracing::warn!(agent = %id, error = %e, "an index was not caught up at shutdown; its next start reads on from its commit");
            }
            self.persist_open(id).await;
        }
        let users: Vec<engram_core::UserId> = engram_store::lock(&self.inner.user_indexes)
            .keys()
            .cloned()
            .collect();
        for user in &users {
            self.persist_user_index(user).await;
        }
    }

    /// Embeds the agent's pending items, a batch at a time.
    async fn embed_pending(&self, id: &AgentId) -> Result<()> {
        let Some(indexer) = self.inner.indexer.clone() else {
            return Ok(());
        };
        loop {
            // Deleted meanwhile: nothing to do.
            let Ok(handle) = self.existing_handle(id) else {
                return Ok(());
            };
            let slot = Arc::clone(&handle.index).lock_owned().await;
            // The index catches up (a commit) only once what it queued is
            // done, not before every batch: a backlog costs Ingest no
            // extra commits. A search catches up by itself.
            let slot = if slot.as_ref().is_some_and(|i| !i.pending.is_empty()) {
                slot
            } else {
                drop(slot);
                // Through this handle: its index is the one written below.
                match self.caught_up_with(id, Arc::clone(&handle)).await {
                    Ok(current) => current.guard,
                    Err(crate::StoreError::NotFound(_)) => return Ok(()),
                    Err(e) => return Err(e),
                }
            };
            let gap = self.inner.config.ranking.session_gap;
            let batch: Vec<(Item, Option<String>)> = blocking(move || {
                let mut slot = slot;
                let Some(index) = slot.as_mut() else {
                    return Ok(vec![]);
                };
                index.refill()?;
                let n = index.pending.len().min(BATCH);
                index.in_flight = n;
                let batch: Vec<Item> = index.pending.drain(..n).collect();
                // Each trace read after the one before it, as the index
                // holds it now (unreadable: alone, rather than lose the
                // batch).
                Ok(batch
                    .into_iter()
                    .map(|item| {
                        let before = match item.kind {
                            Kind::Trace => index.lexical.text_before(item.order, gap),
                            _ => Ok(None),
                        };
                        let before = before.unwrap_or_else(|e| {
                            tracing::warn!(error = %e, "the trace before one to embed is unreadable");
                            None
                        });
                        (item, before)
                    })
                    .collect())
            })
            .await?;
            if batch.is_empty() {
                return self.embed_words(&indexer, &handle).await;
            }
            let started = Instant::now();
            let outcome = embed_batch(indexer.embedder.as_ref(), batch).await;
            metrics::histogram!("engram_embed_batch_seconds").record(started.elapsed());
            metrics::counter!("engram_embedded_items_total")
                .increment(outcome.embedded.len() as u64);
            let mut embedded = outcome.embedded;
            // The index as it is: what was written since is a later
            // catch-up's, not this batch's. Deleted or unloaded meanwhile,
            // the slot is empty and the batch is dropped.
            let slot = Arc::clone(&handle.index).lock_owned().await;
            let mut retry = outcome.retry;
            let (slot, written) = blocking(move || {
                let mut slot = slot;
                // Unloaded meanwhile: reopening finds these items unembedded.
                let mut written = Ok(());
                if let Some(index) = slot.as_mut() {
                    // What a catch-up erased meanwhile is not written back
                    // (an erased text's vector would outlive it), nor what
                    // it placed another text before (read anew once the
                    // queue runs empty).
                    let stale = std::mem::take(&mut index.stale_in_flight);
                    embedded.retain(|e| !stale.contains(&e.key));
                    retry.retain(|i| !stale.contains(&i.key));
                    if let Some(vectors) = index.vectors.as_mut() {
                        written = vectors.write(&embedded, &[]).map_err(index_error);
                    }
                    // What the model could not take now goes back to the
                    // queue's head, in the same step, so that a waiter
                    // never sees the batch as neither pending nor embedded.
                    for item in retry.into_iter().rev() {
                        index.pending.push_front(item);
                    }
                    index.in_flight = 0;
                }
                Ok((slot, written))
            })
            .await?;
            let unembedded = slot.as_ref().map_or(0, AgentIndex::left_to_embed);
            drop(slot);
            // Its user's index copies the new vectors at its next search.
            self.note_change(id);
            handle.embedded.send_replace(unembedded);
            written?;
            if let Some(why) = outcome.failed {
                return Err(crate::StoreError::Index(why));
            }
        }
    }

    /// Gives the words of the agent's vocabulary that have none a vector
    /// (query expansion), a batch at a time, with the index unlocked while
    /// the model runs; then notes the commit as done and publishes that
    /// nothing is left.
    async fn embed_words(&self, indexer: &Arc<Indexer>, handle: &Arc<AgentHandle>) -> Result<()> {
        let expanding = self.inner.config.ranking.expansion_words > 0;
        let slot = Arc::clone(&handle.index).lock_owned().await;
        let table = Arc::clone(indexer);
        let asked = blocking(move || {
            let mut slot = slot;
            let Some(index) = slot.as_mut() else {
                return Ok(None);
            };
            let generation = index.lexical.generation();
            if index.words_at.is_some_and(|(at, _)| at == generation) {
                return Ok(None);
            }
            let missing = match expanding {
                true => index
                    .lexical
                    .words_without_vectors(&table.words())
                    .map_err(index_error)?,
                false => Vec::new(),
            };
            Ok(Some((generation, missing)))
        })
        .await?;
        let Some((generation, missing)) = asked else {
            return Ok(());
        };
        let embedder = indexer.embedder.as_ref();
        engram_store::embed_words(embedder, &indexer.words, &missing, BATCH)
            .await
            .map_err(crate::StoreError::Index)?;
        let evictions = indexer.words().evictions();
        let slot = Arc::clone(&handle.index).lock_owned().await;
        let left = blocking(move || {
            let mut slot = slot;
            Ok(slot.as_mut().map(|index| {
                index.words_at = Some((generation, evictions));
                index.left_to_embed()
            }))
        })
        .await?;
        if let Some(left) = left {
            handle.embedded.send_replace(left);
        }
        Ok(())
    }

    /// Waits until the agent has nothing left to embed, or `deadline`.
    pub(crate) async fn wait_embedded(&self, id: &AgentId, deadline: Instant) -> Result<()> {
        let handle = self.existing_handle(id)?;
        self.wait_embedded_with(id, &handle, deadline).await
    }

    /// [`wait_embedded`](Self::wait_embedded) for the agent `handle` stands
    /// for (a delete meanwhile ends the wait: see [`AgentHandle::retire`]).
    pub(crate) async fn wait_embedded_with(
        &self,
        id: &AgentId,
        handle: &Arc<AgentHandle>,
        deadline: Instant,
    ) -> Result<()> {
        let mut progress = handle.embedded.subscribe();
        // The catch-up publishes what is left to embed.
        let current = self.caught_up_with(id, Arc::clone(handle)).await?;
        // An agent loaded again finds its words' vectors in the table: no
        // round through the indexer's queue for them.
        let indexer = self.inner.indexer.clone();
        let expanding = self.inner.config.ranking.expansion_words > 0;
        let publishing = Arc::clone(handle);
        let left = blocking(move || {
            let mut current = current;
            let index = current.index();
            if let Some(indexer) = &indexer {
                index.note_known_words(&indexer.words(), expanding)?;
            }
            let left = index.left_to_embed();
            // Words the table gave up since the catch-up published its
            // count: published while the index is held, so the indexer's
            // count (published once it is done) comes after this one.
            if left > 0 {
                publishing.embedded.send_replace(left);
            }
            Ok(left)
        })
        .await?;
        if left == 0 {
            return Ok(());
        }
        self.index_later(id);
        let _waiting = engram_core::load::Load::global().waiting();
        let _ =
            tokio::time::timeout_at(deadline.into(), progress.wait_for(|pending| *pending == 0))
                .await;
        Ok(())
    }
}

/// Returns once no call has been in flight for [`QUIET`], or at `latest`.
/// (A search that waits for the index does not count: it waits for this.)
async fn quiet_or_late(load: &engram_core::load::Load, latest: tokio::time::Instant) {
    while load.busy(QUIET) && tokio::time::Instant::now() < latest {
        tokio::time::sleep(QUIET).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::load::Load;

    #[tokio::test(start_paused = true)]
    async fn a_catch_up_waits_while_a_call_is_in_flight_but_not_past_its_latest() {
        let load = Load::new();
        let start = tokio::time::Instant::now();
        quiet_or_late(&load, start + DEFER_AT_MOST).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "no call: at once");

        let _call = load.serving();
        quiet_or_late(&load, start + DEFER_AT_MOST).await;
        let waited = start.elapsed();
        assert!(waited >= DEFER_AT_MOST, "{waited:?}");
        assert!(waited < DEFER_AT_MOST + QUIET * 2, "{waited:?}");
    }
}
