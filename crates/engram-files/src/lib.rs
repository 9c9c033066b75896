//! Engram's first storage backend: per-agent JSONL files under
//! `<data_dir>/agents/`, behind the [`Store`](engram_store::Store) trait of `engram-store`.
//!
//! - [`FileStore`]: the registry of agents. Agents load lazily on first use (so
//!   start-up cost does not grow with their number) and idle ones are
//!   evicted from memory. Each agent has one async lock: one writer at a
//!   time per agent, different agents in parallel. Each part of the
//!   `Store` trait is implemented in the module that does its I/O (the
//!   table in `engram_store`'s `traits`).
//! - [`wal`]: the write-ahead log shared by all agents: one flush covers
//!   the appends of every agent waiting at that moment (`always` policy).
//! - [`durable`]: append-only files with group commit and fsync policies.
//! - [`jsonl`]: loading with torn-tail and corrupt-line recovery, and the
//!   atomic rewrite helper.
//! - `agent`: one agent's files and derived state.
//! - `write`: the write path of Ingest and PrepareRequest (`Writes`).
//! - `read`: an agent's prompt, memories and files as they stand (`Reads`).
//! - `fork`: how ForkAgent copies every file of an agent under a new id.
//! - `registry`: listing, deleting and forking agents (`Admin`), idle
//!   eviction, checkpoints, the background upkeep, health (`Runtime`).
//! - `compact`: a compaction's window, and its commit carried out
//!   crash-safely (`Compacts`) (the intent in `state.json` is rolled forward).
//! - `index`, `ranked`, `indexer`: the per-agent search index (tantivy and
//!   int8 vectors) kept caught up, ranked search on it (`Ranks`), and the
//!   background indexer that embeds off the write path.
//! - `search`: SearchHistory (`Searches`); its all-words mode over active
//!   and archived traces.
//! - `faults`: fault injection for tests (`fault-injection` feature).

mod agent;
mod blocks;
mod compact;
mod compaction_log;
mod consolidations;
pub mod durable;
mod fact_file;
mod facts;
mod faults;
mod forget;

/// The steps of a forget a crash test may abort before
/// (`ENGRAM_TEST_CRASH_AT`): the active file, the other files, the
/// settings, the purge of the log and indexes.
pub const FORGET_STEPS: [&str; 4] = [
    "forget-active",
    "forget-files",
    "forget-finalize",
    "forget-purge",
];
mod fork;
mod gate;
mod index;
mod indexer;
pub mod jsonl;
mod memory;
mod portable;
mod quiet;
mod ranked;
mod read;
mod registry;
mod search;
mod user_facts;
mod user_index;
mod user_rank;
mod user_sync;
mod users;
pub mod wal;
mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_core::AgentId;
use engram_core::embed::Embedder;
use engram_core::turns::IngestLimits;
use tokio::sync::Mutex as AsyncMutex;

use agent::AgentState;
pub use durable::FsyncPolicy;
// The API crate's values and helpers under this crate's paths, so that
// every module names them the one way.
pub(crate) use engram_store::{
    AgentContext, Begun, Bundle, CommitStep, Committed, Hidden, Hiding, Hit, IndexState, Ingested,
    Job, Memory, Policy, PrepareInput, Prepared, Recalled, Result, Search, SearchPage, SeenBlocks,
    StoreError, Visible, VisibleAgent, derived, drop_later, error, intent, offload, offload_over,
    query_vector, unix_now,
};
#[cfg(test)]
pub(crate) use engram_store::{MemoryQuery, SearchMode};

/// File store settings (the `[store]` and `[limits]` config sections).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    pub fsync: FsyncPolicy,
    /// Flush period of [`FsyncPolicy::Interval`].
    pub fsync_interval: Duration,
    /// Unload agents unused for this long; `None` keeps them loaded.
    pub idle_evict: Option<Duration>,
    /// Checkpoint (flush agent files, drop old log segments) once the open
    /// log segment grows past this many bytes.
    pub wal_segment_bytes: u64,
    pub limits: IngestLimits,
    /// The model that embeds items for semantic search; `None`: lexical
    /// search only.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// How ranked searches rank (the `[search]` settings).
    pub ranking: engram_index::Params,
}

impl StoreConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            fsync: FsyncPolicy::Always,
            fsync_interval: Duration::from_secs(1),
            idle_evict: Some(Duration::from_secs(600)),
            wal_segment_bytes: 64 * 1024 * 1024,
            limits: IngestLimits::default(),
            embedder: None,
            ranking: engram_index::Params::default(),
        }
    }
}

/// One agent in memory. Where both of its locks are taken, the index
/// slot is taken first, then the agent's state: a catch-up reads the agent
/// while it holds the index, and DeleteAgent closes the index before the
/// files go.
#[derive(Debug)]
struct AgentHandle {
    /// `None` until first loaded.
    state: AsyncMutex<Option<AgentState>>,
    /// Milliseconds since the store opened, at the last use.
    last_used: AtomicU64,
    /// The search index, opened at its first use.
    index: index::IndexSlot,
    /// Items left to embed, as the indexer last saw them.
    embedded: tokio::sync::watch::Sender<usize>,
    /// A prompt's recall has left active traces to the indexer: without a
    /// model, the indexer keeps this agent's open index caught up.
    recalls: AtomicBool,
    /// The agent's memory as last estimated (`memory.rs`).
    bytes: AtomicU64,
    /// Set once the agent this handle stood for is gone (deleted, under
    /// both locks; or found absent and dropped from the registry, under the
    /// agent's): a call still holding it answers NOT_FOUND rather than read
    /// whatever a new agent of the same id has put in the directory since,
    /// and its index is never opened again.
    retired: AtomicBool,
}

impl AgentHandle {
    async fn lock(&self) -> Slot<'_> {
        Slot(self.state.lock().await)
    }

    fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Marks the handle as standing for nothing any more; whoever waits for
    /// its embedding stops waiting (there is nothing left to embed).
    fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.embedded.send_replace(0);
    }
}

/// An agent's lock, held. If a panic unwinds while it is held (a bug in
/// counting, rendering or the turn rules), the agent's in-memory state is
/// dropped on the way out, so the next call reloads it from the files
/// rather than finding it half-changed: one bad request cannot leave an
/// agent unusable.
struct Slot<'a>(tokio::sync::MutexGuard<'a, Option<AgentState>>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            *self.0 = None;
        }
    }
}

impl std::ops::Deref for Slot<'_> {
    type Target = Option<AgentState>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Slot<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

#[derive(Debug)]
struct Inner {
    config: StoreConfig,
    agents_dir: PathBuf,
    agents: Mutex<HashMap<AgentId, Arc<AgentHandle>>>,
    wal: wal::Wal,
    /// Failed for good once a flush failed: every call is refused then.
    health: Arc<durable::StorageHealth>,
    /// Serializes checkpoints (upkeep and shutdown may both ask for one).
    checkpointing: AsyncMutex<()>,
    /// Faults tests ask for (nothing without `fault-injection`).
    faults: faults::Faults,
    opened: Instant,
    /// The model the indexer embeds with; `None`: words only.
    indexer: Option<Arc<indexer::Indexer>>,
    /// The agents waiting for the indexer's task.
    queue: indexer::Queue,
    /// The global and user scopes' memory blocks.
    blocks: blocks::ScopeCache,
    /// Each user's search index, opened at its first use.
    user_indexes: Mutex<HashMap<engram_core::UserId, user_index::UserSlot>>,
    /// The user of each agent seen with one (loaded or bound).
    agent_users: Mutex<HashMap<AgentId, engram_core::UserId>>,
    /// Agents changed since their user's index read them, by user.
    user_dirty: Mutex<HashMap<engram_core::UserId, std::collections::HashSet<AgentId>>>,
    /// The conversations to summarize once quiet (`quiet.rs`).
    quiet: quiet::QuietList,
}

/// The file-backed store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

const TRASH_PREFIX: &str = ".deleted-";
/// Where a fork is assembled before it is renamed into place.
const FORK_PREFIX: &str = ".fork-";

impl FileStore {
    /// Opens (creating if needed) the store. Does not read any agent.
    pub async fn open(config: StoreConfig) -> Result<Self> {
        let agents_dir = config.data_dir.join("agents");
        let wal_dir = config.data_dir.join("wal");
        let dir = agents_dir.clone();
        let users_dir = config.data_dir.join("users");
        let quiet_path = config.data_dir.join(quiet::QUIET);
        let health = durable::StorageHealth::new();
        let wal_health = Arc::clone(&health);
        // Replays what a crash left in the log (whatever the policy is now)
        // before any agent can be read.
        let wal = engram_store::blocking(move || {
            prepare_agents_dir(&dir)?;
            prepare_agents_dir(&users_dir)?;
            wal::Wal::open(&wal_dir, &dir, &wal_health)
        })
        .await?;
        let indexer = config.embedder.clone().map(|embedder| {
            // A prompt's query and the same message's item embedded once.
            let embedder = engram_store::Remembering::wrap(embedder);
            Arc::new(indexer::Indexer::new(embedder))
        });
        let (queue, queued) = indexer::Queue::new();
        let store = Self {
            inner: Arc::new(Inner {
                indexer,
                queue,
                config,
                agents_dir,
                agents: Mutex::new(HashMap::new()),
                wal,
                health,
                checkpointing: AsyncMutex::new(()),
                faults: faults::Faults::default(),
                opened: Instant::now(),
                blocks: blocks::ScopeCache::default(),
                user_indexes: Mutex::default(),
                agent_users: Mutex::default(),
                user_dirty: Mutex::default(),
                quiet: quiet::QuietList::new(quiet_path),
            }),
        };
        store.spawn_indexer(queued);
        Ok(store)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    fn agent_dir(&self, id: &AgentId) -> PathBuf {
        self.inner.agents_dir.join(id.as_str())
    }

    fn now_ms(&self) -> u64 {
        self.inner.opened.elapsed().as_millis() as u64
    }

    fn handle(&self, id: &AgentId) -> Arc<AgentHandle> {
        let mut agents = engram_store::lock(&self.inner.agents);
        let handle = match agents.get(id) {
            Some(handle) => handle,
            None => agents.entry(id.clone()).or_insert_with(|| {
                Arc::new(AgentHandle {
                    state: AsyncMutex::new(None),
                    last_used: AtomicU64::new(0),
                    index: Arc::default(),
                    embedded: tokio::sync::watch::Sender::new(0),
                    recalls: AtomicBool::new(false),
                    bytes: AtomicU64::new(0),
                    retired: AtomicBool::new(false),
                })
            }),
        };
        handle.last_used.store(self.now_ms(), Ordering::Relaxed);
        Arc::clone(handle)
    }

    /// Whether `handle` is the registry's entry for `id` (a handle dropped
    /// from the registry stands for an agent that is gone: a newer handle
    /// may own the directory now).
    fn is_registered(&self, id: &AgentId, handle: &Arc<AgentHandle>) -> bool {
        engram_store::lock(&self.inner.agents)
            .get(id)
            .is_some_and(|h| Arc::ptr_eq(h, handle))
    }

    /// Drops `id` from the registry if `handle` is its entry and nobody but
    /// the registry and the caller holds it. Checked and done under the
    /// registry's lock, where every other holder takes its copy, so nobody
    /// can be left with a handle the registry no longer knows.
    fn unregister_unused(&self, id: &AgentId, handle: &Arc<AgentHandle>) {
        let mut agents = engram_store::lock(&self.inner.agents);
        if agents.get(id).is_some_and(|h| Arc::ptr_eq(h, handle)) && Arc::strong_count(handle) == 2
        {
            agents.remove(id);
        }
    }

    /// Drops `id` from the registry if `handle` is still its entry (a newer
    /// handle for the same id stays).
    fn unregister(&self, id: &AgentId, handle: &Arc<AgentHandle>) {
        let mut agents = engram_store::lock(&self.inner.agents);
        if agents.get(id).is_some_and(|h| Arc::ptr_eq(h, handle)) {
            agents.remove(id);
        }
    }

    /// The handle of an agent that exists, without registering absent ids.
    fn existing_handle(&self, id: &AgentId) -> Result<Arc<AgentHandle>> {
        let known = engram_store::lock(&self.inner.agents).contains_key(id);
        if !known && !self.agent_dir(id).is_dir() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(self.handle(id))
    }

    async fn loaded<'a>(&self, id: &AgentId, slot: &'a mut Slot<'_>) -> Result<&'a mut AgentState> {
        if let Some(reason) = self.inner.health.failure() {
            return Err(StoreError::Failed(reason));
        }
        if slot.is_none() {
            let state = self.load(id).await?;
            if let Some(user) = &state.meta.user_id {
                self.note_user(id, user);
            }
            if !state.meta.unpurged.is_empty() {
                // A forget a crash cut short after its files.
                self.purge_forgotten_later(id);
            }
            **slot = Some(state);
        }
        let state = slot.as_mut().expect("just loaded");
        // A compaction that was interrupted (a crash, an I/O error) is
        // finished before the agent is used again.
        if let Some(intent) = state.meta.pending.clone() {
            tracing::warn!(agent = %id, "finishing an interrupted compaction");
            if let Err(e) = self.complete_intent(id, state, &intent).await {
                // Memory may be ahead of the files now: start over from them.
                **slot = None;
                if !matches!(e, StoreError::Full(_)) {
                    return Err(e);
                }
                // The agent serves what it had before that compaction, which
                // is finished at a later call, once there is room.
                tracing::warn!(agent = %id, error = %e, "disk full; the interrupted compaction waits for space");
                **slot = Some(self.load(id).await?);
            }
        }
        let state = slot.as_mut().expect("loaded");
        if let Some(intent) = state.meta.forgetting.clone() {
            tracing::warn!(agent = %id, "finishing an interrupted forget");
            let done = self.complete_forget(id, state, &intent).await;
            // The files are the truth: read them again.
            **slot = None;
            done?;
            **slot = Some(self.load(id).await?);
            self.purge_forgotten_later(id);
        }
        Ok(slot.as_mut().expect("loaded"))
    }

    /// [`purge_forgotten`](Self::purge_forgotten) once the caller has let
    /// go of the agent.
    fn purge_forgotten_later(&self, id: &AgentId) {
        let (store, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            if let Err(e) = store.purge_forgotten(&id).await {
                tracing::warn!(agent = %id, error = %e, "purging what a forget erased failed; its next load tries again");
            }
        });
    }

    /// The agent's state from its files. Blocking work, off the workers.
    async fn load(&self, id: &AgentId) -> Result<AgentState> {
        let dir = self.agent_dir(id);
        let health = Arc::clone(&self.inner.health);
        engram_store::blocking(move || AgentState::load(dir, &health)).await
    }

    /// Runs `f` over a consistent view of an existing agent. What `f` saw is
    /// durable when this returns (no read of data a crash could still lose).
    pub(crate) async fn read<T>(
        &self,
        id: &AgentId,
        f: impl FnOnce(&AgentState) -> T,
    ) -> Result<T> {
        let handle = self.existing_handle(id)?;
        self.read_through(id, &handle, f).await
    }

    /// [`read`](Self::read) through `handle`, not the handle the registry
    /// holds for `id` now: a call of several steps (a catch-up) reads the
    /// one agent it started with, and answers NOT_FOUND once that one is
    /// deleted, even if a new agent of the same id exists by then.
    async fn read_through<T>(
        &self,
        id: &AgentId,
        handle: &AgentHandle,
        f: impl FnOnce(&AgentState) -> T,
    ) -> Result<T> {
        let mut slot = handle.lock().await;
        if handle.is_retired() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let out = state.run(f);
        let ticket = state.last_ticket.clone();
        drop(slot);
        if let Some(ticket) = ticket {
            // What `f` saw may include a write whose flush failed: never
            // acknowledged, so never shown.
            ticket.wait().await.map_err(|e| e.for_agent(id.as_str()))?;
        }
        Ok(out)
    }
}

/// Creates `agents/` and finishes deletions a crash interrupted.
/// Creates `dir` (agents/ or users/) and removes what an interrupted
/// delete or fork left in it.
fn prepare_agents_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(StoreError::io("creating", dir))?;
    for entry in std::fs::read_dir(dir).map_err(StoreError::io("listing", dir))? {
        let entry = entry.map_err(StoreError::io("listing", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // Debris of a delete or a fork that a crash interrupted.
        if name.starts_with(TRASH_PREFIX) || name.starts_with(FORK_PREFIX) {
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(StoreError::io("removing", &path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
