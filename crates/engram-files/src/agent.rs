//! One agent's files and the in-memory state derived from them.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_core::memory::SemanticItem;
use engram_core::{RawTrace, TurnTracker};
use serde::{Deserialize, Serialize};

pub use crate::derived::{AgentMeta, Derived};
use crate::durable::{DurableFile, StorageHealth};
use crate::error::{Result, StoreError};
use crate::jsonl::{self, Recovery};
use crate::wal::Ticket;

pub const RAW_TRACES: &str = "raw_traces.jsonl";
pub const RAW_ARCHIVE: &str = "raw_traces_archive.jsonl";
pub const EPISODIC: &str = "episodic.jsonl";
pub const SEMANTIC: &str = "semantic.jsonl";
pub const STATE: &str = "state.json";
/// The turn state as of the last compaction (derived; see [`load_tracker`]).
pub const TURNS: &str = "turns.json";

/// A loaded agent: its files, and the state derived from them (`derived`,
/// which the store's other backends share). `raw` is `None` while the agent
/// does not exist on disk: its directory is only created by the first write
/// that passes validation, so refused input never leaves files behind.
#[derive(Debug)]
pub(crate) struct AgentState {
    pub dir: PathBuf,
    pub raw: Option<Arc<DurableFile>>,
    /// Set by DeleteAgent: holders of this state must look the agent up again.
    pub deleted: bool,
    /// The log record of the latest append: what a reader waits for.
    pub last_ticket: Option<Ticket>,
    /// The agent's memory blocks (`blocks.jsonl`).
    pub blocks: crate::blocks::ScopeBlocks,
    /// Lines of `semantic.jsonl` (fact versions) when loaded, plus those a
    /// client's change appended since: it changes with every such change,
    /// which is what the index looks for (a compaction's lines start a new
    /// epoch, which the index reads again whole).
    pub fact_lines: usize,
    /// The compaction log's last `seq` and length, once read
    /// (`compaction_log.rs`).
    pub compaction_log: Option<crate::compaction_log::LogCursor>,
    pub derived: Derived,
}

impl std::ops::Deref for AgentState {
    type Target = Derived;
    fn deref(&self) -> &Derived {
        &self.derived
    }
}

impl std::ops::DerefMut for AgentState {
    fn deref_mut(&mut self) -> &mut Derived {
        &mut self.derived
    }
}

impl AgentState {
    /// Loads the agent in `dir`, repairing torn or corrupt lines. Blocking.
    pub fn load(dir: PathBuf, health: &Arc<StorageHealth>) -> Result<Self> {
        let mut state = Self::absent(dir);
        if !state.dir.is_dir() {
            return Ok(state);
        }
        for name in [
            RAW_TRACES,
            EPISODIC,
            SEMANTIC,
            crate::compaction_log::COMPACTIONS,
        ] {
            remove_debris(&jsonl::tmp_path(&state.dir.join(name)))?;
        }
        remove_debris(&jsonl::tmp_path(&state.dir.join(STATE)))?;
        remove_debris(&jsonl::tmp_path(&state.dir.join(TURNS)))?;
        // Archived traces still count for turns, call ids and retries.
        state.derived = Derived::new(
            load_meta(&state.dir.join(STATE))?,
            load_tracker(&state.dir)?,
        );
        let (traces, recovery) = jsonl::load::<RawTrace>(&state.dir.join(RAW_TRACES))?;
        report(&state.dir, RAW_TRACES, &recovery);
        for trace in &traces {
            state.note(trace);
        }
        state.traces = traces;
        let (episodic, recovery) = jsonl::load(&state.dir.join(EPISODIC))?;
        report(&state.dir, EPISODIC, &recovery);
        state.episodic = episodic;
        let (mut semantic, recovery) = jsonl::load::<SemanticItem>(&state.dir.join(SEMANTIC))?;
        report(&state.dir, SEMANTIC, &recovery);
        if crate::fact_file::needs_scrub(&semantic) {
            // A delete that a crash cut short: its text goes now.
            semantic = crate::fact_file::scrub(&state.dir.join(SEMANTIC))?;
        }
        state.fact_lines = semantic.len();
        state.semantic = latest_by_id(semantic);
        let now = engram_store::unix_now();
        state.facts_changed(now);
        if let Some(meta) = state.facts_meta(None, now) {
            // A change or an expiry the snapshot does not show yet (a
            // crash came between the facts and the settings).
            let json = serde_json::to_vec_pretty(&meta).expect("AgentMeta serializes");
            jsonl::atomic_write(&state.dir.join(STATE), &json)?;
            state.meta = meta;
            engram_store::drop_later(state.rebuild_epoch());
        }
        state.blocks = crate::blocks::ScopeBlocks::load(&state.dir.join(crate::blocks::BLOCKS))?;
        state.raw = Some(Arc::new(DurableFile::open(
            &state.dir.join(RAW_TRACES),
            health,
        )?));
        Ok(state)
    }

    /// An agent with no files (yet, or any more).
    pub fn absent(dir: PathBuf) -> Self {
        Self {
            dir,
            raw: None,
            deleted: false,
            last_ticket: None,
            blocks: crate::blocks::ScopeBlocks::default(),
            fact_lines: 0,
            compaction_log: None,
            derived: Derived::default(),
        }
    }

    pub fn exists(&self) -> bool {
        self.raw.is_some() && !self.deleted
    }

    /// Creates the agent's directory and trace file, durably.
    pub fn create(&mut self, health: &Arc<StorageHealth>) -> Result<Arc<DurableFile>> {
        let parent = self.dir.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(&self.dir).map_err(StoreError::io("creating", &self.dir))?;
        jsonl::sync_dir(parent)?;
        let raw = Arc::new(DurableFile::open(&self.dir.join(RAW_TRACES), health)?);
        jsonl::sync_dir(&self.dir)?;
        self.raw = Some(Arc::clone(&raw));
        Ok(raw)
    }

    /// About how much text the agent holds: its active traces, system
    /// prompt, snapshot and memories (ranked by Retrieve: about a line of
    /// text each). Work over it runs off the async workers when it is
    /// large.
    pub(crate) fn bytes(&self) -> u64 {
        let active = self.raw.as_ref().map_or(0, |r| r.len());
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        let memories = (self.episodic.len() + self.semantic.len()) * 256;
        active + (text(&self.meta.system_prompt) + text(&self.meta.snapshot) + memories) as u64
    }

    /// Runs `f` over the agent; off the async workers when it is large
    /// enough for reading it to take a while.
    pub fn run<T>(&self, f: impl FnOnce(&Self) -> T) -> T {
        crate::offload_over(self.bytes(), || f(self))
    }

    /// The prompt as it stands, owned (the messages shared, not copied).
    pub fn context(&self) -> crate::AgentContext {
        self.derived.context(self.bytes())
    }

    /// Persists `meta` (atomically) and adopts it.
    pub fn save_meta(&mut self, meta: AgentMeta) -> Result<()> {
        if self.deleted {
            // A call that waited for the lock while the agent was deleted:
            // its directory is gone, and must not come back.
            let id = self.dir.file_name().unwrap_or_default().to_string_lossy();
            return Err(StoreError::NotFound(id.into_owned()));
        }
        let json = serde_json::to_vec_pretty(&meta).expect("AgentMeta serializes");
        // A rename and two fsyncs: never on an async worker.
        crate::offload(|| jsonl::atomic_write(&self.dir.join(STATE), &json))?;
        self.meta = meta;
        Ok(())
    }

    /// The stored trace with `id`: active first, then the archive (a retry
    /// of an event that a compaction archived since).
    pub fn find_trace(&self, id: &str) -> Result<Option<RawTrace>> {
        if let Some(t) = self.traces.iter().rev().find(|t| t.id == id) {
            return Ok(Some(t.clone()));
        }
        let archive = self.dir.join(RAW_ARCHIVE);
        // The whole archive is read: a rare path (a retry of an event a
        // compaction archived since), but never on an async worker.
        let text = match crate::offload(|| fs::read(&archive)) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("reading", archive)(e)),
        };
        Ok(text
            .split(|b| *b == b'\n')
            .filter_map(|line| RawTrace::from_line(line).ok())
            .find(|t| t.id == id))
    }
}

/// What `turns.json` holds: the tracker, and the archive length it is for.
#[derive(Serialize, Deserialize)]
struct TurnsCheckpoint<T> {
    archive_len: u64,
    tracker: T,
}

/// The turn state of the archived traces: the checkpoint when it is for the
/// archive as it is, else a replay of the archive (which then writes one).
/// The checkpoint may also hold traces still active; applying those again
/// at load changes nothing.
fn load_tracker(dir: &Path) -> Result<TurnTracker> {
    let archive = dir.join(RAW_ARCHIVE);
    let archive_len = fs::metadata(&archive).map_or(0, |m| m.len());
    if archive_len == 0 {
        return Ok(TurnTracker::default());
    }
    let checkpoint = fs::read(dir.join(TURNS))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<TurnsCheckpoint<TurnTracker>>(&bytes).ok())
        .filter(|c| c.archive_len == archive_len);
    if let Some(c) = checkpoint {
        return Ok(c.tracker);
    }
    let mut tracker = TurnTracker::default();
    replay_archive(&archive, &mut tracker)?;
    if let Err(e) = save_turns(dir, &tracker) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not checkpoint the turn state; the next load replays the archive again");
    }
    Ok(tracker)
}

/// Checkpoints `tracker` for the archive as it is now. Not flushed: the file
/// is derived, and a stale, torn or missing one only means a replay.
pub fn save_turns(dir: &Path, tracker: &TurnTracker) -> Result<()> {
    let archive = dir.join(RAW_ARCHIVE);
    let archive_len = fs::metadata(&archive).map_or(0, |m| m.len());
    let json = serde_json::to_vec(&TurnsCheckpoint {
        archive_len,
        tracker,
    })
    .expect("the tracker serializes");
    jsonl::replace_unflushed(&dir.join(TURNS), &json)
}

/// Folds the archive into the turn state, a line at a time.
fn replay_archive(path: &Path, tracker: &mut TurnTracker) -> Result<()> {
    use std::io::BufRead;
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io("opening", path)(e)),
    };
    for line in std::io::BufReader::new(file).split(b'\n') {
        let line = line.map_err(StoreError::io("reading", path))?;
        if let Ok(trace) = RawTrace::from_line(&line) {
            tracker.apply(&trace);
        }
    }
    Ok(())
}

/// `semantic.jsonl` is append-only: a later line for the same id (a fact
/// marked superseded) replaces the earlier one, in the earlier's place.
fn latest_by_id(items: Vec<SemanticItem>) -> Vec<SemanticItem> {
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out: Vec<SemanticItem> = Vec::with_capacity(items.len());
    for item in items {
        match index.get(&item.id) {
            Some(&i) => out[i] = item,
            None => {
                index.insert(item.id.clone(), out.len());
                out.push(item);
            }
        }
    }
    out
}

fn load_meta(path: &Path) -> Result<AgentMeta> {
    match fs::read(path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            // Written atomically, so damage means outside hands: keep going
            // with defaults rather than refuse the agent.
            tracing::warn!(path = %path.display(), error = %e, "unreadable agent state; using defaults");
            AgentMeta::default()
        })),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(AgentMeta::default()),
        Err(e) => Err(StoreError::io("reading", path)(e)),
    }
}

fn remove_debris(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed an unfinished rewrite left by a crash");
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io("removing", path)(e)),
    }
}

fn report(dir: &Path, file: &str, recovery: &Recovery) {
    if !recovery.is_clean() {
        tracing::warn!(
            agent_dir = %dir.display(),
            file,
            torn_tail_offset = recovery.torn_tail.map(|(at, _)| at),
            quarantined = recovery.quarantined.len(),
            "file repaired at load; damaged lines are in the .quarantine side file"
        );
    }
}
