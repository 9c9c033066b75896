//! The file store's search index: one `engram-index` index per agent in
//! `agents/<id>/.index/`, derived from the agent's files.
//!
//! The index is never the source of truth. Its commit records how far it
//! has read the agent (a [`Cursor`]: the epoch, how many active traces,
//! summaries and facts of that epoch, how many bytes of the archive), so
//! after a crash between a write and its indexing it reads on from there.
//! A search catches the index up first, so everything acknowledged is
//! searchable. Fork does not copy the directory (dot-prefixed): the copy
//! indexes itself. Delete the directory at any time to have it rebuilt.
//!
//! The index lives inside the agent's directory but is opened and closed
//! through the agent's handle: it is opened only for an agent that exists,
//! and DeleteAgent takes the index slot, closes the index (its merges
//! finished) and retires the handle before the directory goes, so no
//! search reads files being removed and no late catch-up creates the
//! directory of a deleted agent again.

use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::Arc;

use engram_core::AgentId;
use engram_index::{Item, Lexical, Vectors};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use engram_store::items::{for_embedding, trace_order};
use engram_store::vector_model;

use crate::{AgentHandle, FileStore, IndexState, Result, StoreError};

/// The index directory inside an agent's directory.
pub(crate) const INDEX_DIR: &str = ".index";

/// The vectors file inside the index directory.
pub(crate) const VECTORS_FILE: &str = "vectors.bin";

/// Archived traces held at once when catching up a large archive.
pub(crate) const BATCH: usize = 4096;

/// How far the index has read the agent's files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cursor {
    pub epoch: u32,
    active: usize,
    episodic: usize,
    semantic: usize,
    pub archive: u64,
    /// The agent's fact lines when read (`AgentState::fact_lines`): a
    /// client's change within an epoch replaces facts in place, so their
    /// number alone does not show it. Absent in older commits.
    #[serde(default)]
    facts: usize,
}

/// What an index commit records: how far it read, in the item format of
/// this version. An index in another format is read again from the start
/// (each item replaced by key), so a change of what is indexed reaches old
/// agents. 2: memories carry their tags and event times.
const ITEM_FORMAT: u32 = 2;

#[derive(Serialize, Deserialize)]
struct Committed {
    #[serde(default)]
    format: u32,
    #[serde(flatten)]
    cursor: Cursor,
}

/// An agent's open index and how far it has read.
pub(crate) struct AgentIndex {
    pub lexical: Lexical,
    /// `None` until a commit says how far it read: read everything.
    cursor: Option<Cursor>,
    /// How far a search has staged what the commit does not hold
    /// ([`Lexical::stage`]): searched at once, committed by the indexer.
    staged_to: Option<Cursor>,
    /// With an embedding model: the vectors, and the items the lexical
    /// side holds that have none yet (oldest first; body left out).
    pub vectors: Option<Vectors>,
    pub pending: VecDeque<Item>,
    /// Items taken from `pending` by the indexer and not yet written back
    /// (as vectors, or to `pending` again).
    pub in_flight: usize,
    /// Keys a catch-up removed (a forget), or placed another text before,
    /// while a batch was in flight: that batch's vectors for them are
    /// not written back.
    pub stale_in_flight: HashSet<String>,
    /// More items lack a vector than `pending` holds: it is filled again
    /// from the index when it runs empty.
    overflowed: bool,
    /// The commit ([`Lexical::generation`]) whose vocabulary the indexer
    /// last gave word vectors (query expansion), and the table's evictions
    /// then: until the current one's have them, the index is not wholly
    /// caught up, and once the table gave words up they are checked again.
    pub words_at: Option<(u64, u64)>,
}

/// Items an agent's queue holds at most: a model slower than Ingest (the
/// local one on a busy server) keeps memory bounded; what does not fit is
/// read from the index again when the queue runs empty.
const MAX_PENDING: usize = if cfg!(test) { 8 } else { 2048 };

impl AgentIndex {
    /// Items without a vector yet: waiting or being embedded.
    pub fn unembedded(&self) -> usize {
        match &self.vectors {
            Some(vectors) if self.overflowed => {
                (self.lexical.len() as usize).saturating_sub(vectors.len())
            }
            // Staged items are queued once the indexer commits them.
            Some(_) => self.pending.len() + self.in_flight + self.lexical.staged() as usize,
            None => self.pending.len() + self.in_flight,
        }
    }

    /// After an overflow, once the queue has run empty: queues what lacks
    /// a vector, up to [`MAX_PENDING`] (blocking: it reads the index). An
    /// item the model refused stays without one until the agent is loaded
    /// again; it is not asked for here again and again.
    pub fn refill(&mut self) -> Result<()> {
        let Some(vectors) = &self.vectors else {
            return Ok(());
        };
        if !self.overflowed || !self.pending.is_empty() || self.in_flight > 0 {
            return Ok(());
        }
        let missing = self
            .lexical
            .items_except(|key| vectors.contains(key), MAX_PENDING + 1)
            .map_err(index_error)?;
        self.overflowed = missing.len() > MAX_PENDING;
        self.pending = missing
            .into_iter()
            .take(MAX_PENDING)
            .map(for_embedding)
            .collect();
        Ok(())
    }
}

/// The embedding model an index's vectors are for.
#[derive(Debug, Clone)]
pub(crate) struct ModelId {
    pub id: String,
    pub dim: usize,
}

impl AgentIndex {
    /// Closes the index: once this returns, nothing of it writes in its
    /// directory any more (blocking: a merge may be finishing).
    pub fn close(self) -> Result<()> {
        self.lexical.close().map_err(index_error)
    }
}

impl AgentIndex {
    /// How far this index has read its agent's memory.
    pub fn state(&self) -> IndexState {
        IndexState {
            items: self.lexical.len(),
            embedded: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
            pending: self.unembedded() as u64,
            model: self
                .vectors
                .as_ref()
                .map(|v| engram_store::model_of_vectors(v.model()).to_owned())
                .unwrap_or_default(),
        }
    }
}

impl std::fmt::Debug for AgentIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentIndex")
            .field("cursor", &self.cursor)
            .finish()
    }
}

/// The slot an agent's handle keeps its index in: one holder at a time
/// (catching up, searching); never the agent's own lock, so Ingest never
/// waits for the index.
pub(crate) type IndexSlot = Arc<AsyncMutex<Option<AgentIndex>>>;

/// What a catch-up may leave to the indexer. Every acknowledged write is
/// searchable after any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lag {
    /// Nothing: everything is committed (the indexer, a forget, a wait
    /// for the index).
    None,
    /// The commit (a search): what the commit does not hold is staged in
    /// memory and searched as it is ([`Lexical::stage`]).
    Commit,
    /// As [`Lag::Commit`], and active traces written since are left to
    /// the indexer when nothing else was (see [`FileStore::caught_up_as`]).
    ActiveTraces,
}

/// The open index of an agent, caught up with everything acknowledged.
pub(crate) struct Current {
    pub guard: OwnedMutexGuard<Option<AgentIndex>>,
    /// Conversation order of the first active trace: earlier is archived.
    pub first_active: Option<u64>,
    /// The agent stays loaded while its index is in use: an idle eviction
    /// meanwhile would let a new handle open the same directory again.
    _handle: Arc<AgentHandle>,
}

impl Current {
    pub fn index(&mut self) -> &mut AgentIndex {
        self.guard.as_mut().expect("opened by catch_up")
    }
}

impl FileStore {
    /// Opens the agent's index if needed and indexes what it has not read.
    pub(crate) async fn caught_up(&self, id: &AgentId) -> Result<Current> {
        let handle = self.existing_handle(id)?;
        self.caught_up_with(id, handle).await
    }

    /// [`caught_up`](Self::caught_up) through `handle`: every step reads the
    /// agent the handle stands for. (Looked up by id again, a step could
    /// meet a new agent of the same id, created since a delete, and apply
    /// its traces to the old one's index.)
    pub(crate) async fn caught_up_with(
        &self,
        id: &AgentId,
        handle: Arc<AgentHandle>,
    ) -> Result<Current> {
        self.caught_up_as(id, handle, Lag::None).await
    }

    /// The agent's index for a search that may `lag`. A search stages
    /// what the commit does not hold yet ([`Lexical::stage`]: analyzed and
    /// searched in memory, no segment written, no reader reloaded) and
    /// leaves the commit to the indexer; with [`Lag::ActiveTraces`], active
    /// traces written since are not even staged when nothing else was
    /// written ([`Delta::may_wait`]: a prompt's recall leaves the active
    /// transcript out). A forget's removals, or more than
    /// [`MAX_STAGED`] at once, are committed here (in memory: the indexer
    /// writes the commit out).
    pub(crate) async fn caught_up_as(
        &self,
        id: &AgentId,
        handle: Arc<AgentHandle>,
        lag: Lag,
    ) -> Result<Current> {
        let mut guard = Arc::clone(&handle.index).lock_owned().await;
        // Deleted while this waited for the index: it is closed for good.
        if handle.is_retired() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        if guard.is_none() {
            // Opening an index creates its directory, inside the agent's:
            // only for an agent that exists, or a deleted agent's directory
            // would come back. It cannot be deleted meanwhile: a delete
            // waits for the index slot this holds.
            self.read_through(id, &handle, |_| ()).await?;
            let dir = self.agent_dir(id);
            let model = self.model_id();
            let opened = blocking(move || open(&dir, model.as_ref())).await?;
            *guard = Some(opened);
        }
        let index = guard.as_ref().expect("opened");
        let committed = index.cursor;
        let staged = index.staged_to.or(committed);
        let staging = lag != Lag::None;
        let room = MAX_STAGED.saturating_sub(index.lexical.staged_bytes());
        let (delta, first_active) = self
            .read_through(id, &handle, |state| {
                let picked = match staging {
                    true => match delta(state, staged) {
                        Some(d) if d.stageable(staged.unwrap_or_default(), room) => {
                            Some((d, Some(staged.unwrap_or_default())))
                        }
                        Some(_) => delta(state, committed).map(|d| (d, None)),
                        None => None,
                    },
                    false => delta(state, committed).map(|d| (d, None)),
                };
                (picked, state.traces.first().map(trace_order))
            })
            .await?;
        // (An index with nothing committed reads everything at once.)
        let delta = delta.filter(|(d, from)| {
            let later = lag == Lag::ActiveTraces
                && from.is_some()
                && staged.is_some_and(|from| d.may_wait(from));
            if later {
                handle
                    .recalls
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.index_later(id);
            }
            !later
        });
        let unstaged = !staging && guard.as_ref().is_some_and(|i| i.staged_to.is_some());
        if delta.is_some() || unstaged {
            let dir = self.agent_dir(id);
            let gap = self.inner.config.ranking.session_gap;
            let staged = delta.as_ref().is_some_and(|(_, from)| from.is_some());
            guard = blocking(move || {
                let mut guard = guard;
                let index = guard.as_mut().expect("opened");
                match delta {
                    Some((delta, Some(from))) => stage(index, &dir, delta, from)?,
                    delta => {
                        // The commit is read from its own cursor: what was
                        // staged is indexed again, from the files.
                        index.lexical.unstage();
                        index.staged_to = None;
                        if let Some((delta, _)) = delta {
                            apply(index, &dir, delta, gap)?;
                        }
                    }
                }
                Ok(guard)
            })
            .await?;
            if staged {
                // Without a model, the indexer commits what a recalling
                // agent staged (`FileStore::keeps_up`).
                handle
                    .recalls
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.index_later(id);
            } else if guard
                .as_ref()
                .is_some_and(|i| i.lexical.unpersisted_bytes() > 0)
            {
                // Read in, in memory: the indexer writes it out.
                self.inner.queue.enqueue(id);
            }
        }
        if let Some(index) = guard.as_ref()
            && index.vectors.is_some()
        {
            handle.embedded.send_replace(index.left_to_embed());
        }
        Ok(Current {
            guard,
            first_active,
            _handle: handle,
        })
    }

    /// `engramd reindex`: the agent's index deleted and built again from
    /// its files, and with a model, every item embedded again before this
    /// returns.
    pub async fn reindex(&self, id: &AgentId) -> Result<IndexState> {
        let handle = self.existing_handle(id)?;
        {
            let mut slot = handle.index.lock().await;
            // Deleted meanwhile: the directory is another agent's, or none.
            if handle.is_retired() {
                return Err(StoreError::NotFound(id.to_string()));
            }
            // Closed before its files go.
            let open = slot.take();
            let dir = self.agent_dir(id).join(INDEX_DIR);
            blocking(move || {
                open.map(AgentIndex::close).transpose()?;
                match std::fs::remove_dir_all(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(StoreError::io("removing", &dir)(e))
                    }
                    _ => Ok(()),
                }
            })
            .await?;
        }
        if self.inner.indexer.is_some() {
            // As long as it takes: the operator asked for every vector.
            let a_day = std::time::Duration::from_secs(86_400);
            self.wait_embedded_with(id, &handle, std::time::Instant::now() + a_day)
                .await?;
        }
        let mut current = self.caught_up_with(id, handle).await?;
        Ok(current.index().state())
    }
}

/// [`engram_store::blocking`] with the store's error, so that closures
/// ending in a bare `Ok(…)` need no annotation.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    engram_store::blocking(f).await
}

fn open(agent_dir: &Path, model: Option<&ModelId>) -> Result<AgentIndex> {
    let dir = agent_dir.join(INDEX_DIR);
    // Not `create_dir_all`: if the agent's directory is not there, neither
    // is the agent, and nothing here brings its directory back.
    match std::fs::create_dir(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = agent_dir.file_name().unwrap_or_default().to_string_lossy();
            return Err(StoreError::NotFound(id.into_owned()));
        }
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(StoreError::io("creating", &dir)(e));
        }
        _ => {}
    }
    let opened = Lexical::open(&dir).and_then(|lexical| {
        let cursor = lexical
            .payload()?
            .and_then(|p| serde_json::from_str::<Committed>(&p).ok())
            .filter(|c| c.format == ITEM_FORMAT)
            .map(|c| c.cursor);
        Ok((lexical, cursor))
    });
    let (lexical, cursor) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            // Derived data: start over rather than refuse to search.
            tracing::warn!(dir = %dir.display(), error = %e, "search index unreadable; rebuilding it");
            std::fs::remove_dir_all(&dir).map_err(StoreError::io("removing", &dir))?;
            (Lexical::open(&dir).map_err(index_error)?, None)
        }
    };
    let mut index = AgentIndex {
        lexical,
        cursor,
        staged_to: None,
        vectors: None,
        pending: VecDeque::new(),
        in_flight: 0,
        stale_in_flight: HashSet::new(),
        overflowed: false,
        words_at: None,
    };
    if let Some(model) = model {
        // Another model's file is started over: its items are all pending.
        let vectors = Vectors::open(&dir.join(VECTORS_FILE), &vector_model(&model.id), model.dim)
            .map_err(index_error)?;
        // Items without a vector (after a crash, a model change, a period
        // without a model) are found as after an overflow.
        index.overflowed = (vectors.len() as u64) < index.lexical.len();
        index.vectors = Some(vectors);
        index.refill()?;
    }
    Ok(index)
}

pub(crate) fn index_error(e: engram_index::IndexError) -> StoreError {
    StoreError::Index(e.to_string())
}

mod delta;
pub(crate) use delta::{Delta, delta, read_archive};
use delta::{MAX_STAGED, apply, stage};
