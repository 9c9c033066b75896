//! One agent's files and the in-memory state derived from them.

use std::collections::BTreeSet;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::transcript::{Message, Role, Transcript};
use engram_core::{RawTrace, TurnTracker, Usage};
use serde::{Deserialize, Serialize};

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

/// The agent's settings and counters (`state.json`, rewritten atomically).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentMeta {
    /// Stored by PrepareRequest; the first message of every prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// A reported prompt size passed the trigger: compact before the next
    /// prompt is built. Cleared by a compaction.
    pub compaction_required: bool,
    /// Compaction epoch: the transcript's base changes with each.
    pub epoch: u32,
    pub compactions: u32,
    pub consecutive_failures: u32,
    /// The epoch's snapshot text (memory bundle and raw tail), the first
    /// message after the system prompt; none before the first compaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Active traces the snapshot already shows (its raw tail): they are
    /// not repeated as messages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snapshot_trace_ids: Vec<String>,
    /// A compaction written down but not finished (a crash or an I/O error
    /// interrupted it): finished before the agent is used again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<crate::intent::Intent>,
    /// The last active trace when this epoch began: usage reported before
    /// it measured an older prompt and no longer counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch_start_trace: Option<String>,
    /// Microcompact: results of turns before this one show as placeholders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub microcompact_before: Option<u32>,
}

/// A loaded agent. `raw` is `None` while the agent does not exist on disk:
/// its directory is only created by the first write that passes validation,
/// so refused input never leaves files behind.
#[derive(Debug)]
pub(crate) struct AgentState {
    pub dir: PathBuf,
    pub tracker: TurnTracker,
    /// Active traces in file order.
    pub traces: Vec<RawTrace>,
    pub episodic: Vec<EpisodicItem>,
    pub semantic: Vec<SemanticItem>,
    pub raw: Option<Arc<DurableFile>>,
    /// Set by DeleteAgent: holders of this state must look the agent up again.
    pub deleted: bool,
    /// The log record of the latest append: what a reader waits for.
    pub last_ticket: Option<Ticket>,
    pub meta: AgentMeta,
    /// The active transcript of the epoch, kept current with every append.
    pub transcript: Transcript,
    /// The provider's last usage report in this epoch, and the number of
    /// transcript messages before it (what that prompt covered, roughly).
    pub report: Option<(Usage, usize)>,
    /// Turn numbers among the active traces (derived, kept current with
    /// every trace folded in; a prompt need not walk the traces for it).
    active_turns: BTreeSet<u32>,
    /// A compaction's summarizer call is under way (memory only).
    pub compacting: bool,
    /// Replay has passed `meta.epoch_start_trace` (memory only).
    in_epoch: bool,
}

impl AgentState {
    /// Loads the agent in `dir`, repairing torn or corrupt lines. Blocking.
    pub fn load(dir: PathBuf, health: &Arc<StorageHealth>) -> Result<Self> {
        let mut state = Self::absent(dir);
        if !state.dir.is_dir() {
            return Ok(state);
        }
        for name in [RAW_TRACES, EPISODIC, SEMANTIC] {
            remove_debris(&jsonl::tmp_path(&state.dir.join(name)))?;
        }
        remove_debris(&jsonl::tmp_path(&state.dir.join(STATE)))?;
        remove_debris(&jsonl::tmp_path(&state.dir.join(TURNS)))?;
        state.meta = load_meta(&state.dir.join(STATE))?;
        state.in_epoch = state.meta.epoch_start_trace.is_none();
        if let Some(snapshot) = &state.meta.snapshot {
            state.transcript = Transcript::with_base(Message::text(Role::System, snapshot.clone()));
        }
        // Archived traces still count for turns, call ids and retries.
        state.tracker = load_tracker(&state.dir)?;
        let (traces, recovery) = jsonl::load::<RawTrace>(&state.dir.join(RAW_TRACES))?;
        report(&state.dir, RAW_TRACES, &recovery);
        for trace in &traces {
            state.note(trace);
        }
        state.traces = traces;
        let (episodic, recovery) = jsonl::load(&state.dir.join(EPISODIC))?;
        report(&state.dir, EPISODIC, &recovery);
        state.episodic = episodic;
        let (semantic, recovery) = jsonl::load::<SemanticItem>(&state.dir.join(SEMANTIC))?;
        report(&state.dir, SEMANTIC, &recovery);
        state.semantic = latest_by_id(semantic);
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
            tracker: TurnTracker::default(),
            traces: vec![],
            episodic: vec![],
            semantic: vec![],
            raw: None,
            deleted: false,
            last_ticket: None,
            meta: AgentMeta::default(),
            transcript: Transcript::default(),
            report: None,
            active_turns: BTreeSet::new(),
            compacting: false,
            in_epoch: true,
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
    fn bytes(&self) -> u64 {
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
        crate::AgentContext {
            transcript: self.transcript.id(),
            messages: self.transcript.shared(),
            tail: self.transcript.pending_tail(),
            system: self.meta.system_prompt.clone(),
            report: self.report,
            last_model: self.tracker.last_model().map(str::to_owned),
            compaction_required: self.meta.compaction_required,
            finished_turns: self.active_turns.len()
                - usize::from(self.active_turns.contains(&self.tracker.turn_count())),
            turns: self.tracker.turn_count(),
            current_turn_id: self.tracker.current_turn_id().unwrap_or_default(),
            epoch: self.meta.epoch,
            compactions: self.meta.compactions,
            consecutive_failures: self.meta.consecutive_failures,
            bytes: self.bytes(),
        }
    }

    /// Rebuilds the transcript from the active traces for
    /// the epoch `meta` describes (after a compaction). The turn state is
    /// kept: it already holds every trace, archived ones included.
    pub fn rebuild_epoch(&mut self) {
        let transcript = match &self.meta.snapshot {
            Some(snapshot) => Transcript::with_base(Message::text(Role::System, snapshot.clone())),
            None => Transcript::default(),
        };
        crate::drop_later(std::mem::replace(&mut self.transcript, transcript));
        self.report = None;
        self.in_epoch = self.meta.epoch_start_trace.is_none();
        self.active_turns.clear();
        let traces = std::mem::take(&mut self.traces);
        for trace in &traces {
            self.note_epoch(trace);
        }
        self.traces = traces;
    }

    /// Folds a stored trace into the derived state (turns, transcript).
    pub fn note(&mut self, trace: &RawTrace) {
        self.tracker.apply(trace);
        self.note_epoch(trace);
    }

    /// The part of [`note`](Self::note) that starts over with each epoch:
    /// the active turns and the transcript.
    fn note_epoch(&mut self, trace: &RawTrace) {
        if let Some(n) = engram_core::turns::turn_number(&trace.turn_id) {
            self.active_turns.insert(n);
        }
        let in_epoch = self.in_epoch;
        if self.meta.epoch_start_trace.as_deref() == Some(trace.id.as_str()) {
            self.in_epoch = true;
        }
        if self.meta.snapshot_trace_ids.contains(&trace.id) {
            return; // shown in the snapshot text
        }
        if let Some(usage) = trace.usage.filter(|_| in_epoch) {
            self.report = Some((usage, self.transcript.messages().len()));
        }
        let old_result = trace.trace_type == engram_core::TraceType::ToolResult
            && self.meta.microcompact_before.is_some_and(|before| {
                engram_core::turns::turn_number(&trace.turn_id).is_some_and(|n| n < before)
            });
        if old_result {
            self.transcript.push(&microcompacted(trace));
        } else {
            self.transcript.push(trace);
        }
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

/// A tool result as microcompact shows it: name, call id and size only.
pub fn microcompacted(trace: &RawTrace) -> RawTrace {
    let size = engram_core::transcript::result_text(trace).chars().count();
    RawTrace {
        tool_result: Some(serde_json::Value::String(format!(
            "[tool result of {size} characters omitted: {} ({}); the raw trace keeps it]",
            trace.tool_name.as_deref().unwrap_or("tool"),
            trace.tool_call_id.as_deref().unwrap_or_default()
        ))),
        tool_error: None,
        content: String::new(),
        ..trace.clone()
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
