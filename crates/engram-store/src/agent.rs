//! One agent's files and the in-memory state derived from them.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::{RawTrace, TurnTracker};

use crate::durable::DurableFile;
use crate::error::{Result, StoreError};
use crate::jsonl::{self, Recovery};
use crate::wal::Ticket;

pub const RAW_TRACES: &str = "raw_traces.jsonl";
pub const RAW_ARCHIVE: &str = "raw_traces_archive.jsonl";
pub const EPISODIC: &str = "episodic.jsonl";
pub const SEMANTIC: &str = "semantic.jsonl";

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
}

/// Read access to a loaded agent, for the server's views.
#[derive(Debug, Clone, Copy)]
pub struct AgentView<'a> {
    pub traces: &'a [RawTrace],
    pub episodic: &'a [EpisodicItem],
    pub semantic: &'a [SemanticItem],
    pub tracker: &'a TurnTracker,
    pub dir: &'a Path,
}

impl AgentState {
    /// Loads the agent in `dir`, repairing torn or corrupt lines. Blocking.
    pub fn load(dir: PathBuf) -> Result<Self> {
        let mut state = Self::absent(dir);
        if !state.dir.is_dir() {
            return Ok(state);
        }
        for name in [RAW_TRACES, EPISODIC, SEMANTIC] {
            remove_debris(&jsonl::tmp_path(&state.dir.join(name)))?;
        }
        let (traces, recovery) = jsonl::load::<RawTrace>(&state.dir.join(RAW_TRACES))?;
        report(&state.dir, RAW_TRACES, &recovery);
        for trace in &traces {
            state.tracker.apply(trace);
        }
        state.traces = traces;
        let (episodic, recovery) = jsonl::load(&state.dir.join(EPISODIC))?;
        report(&state.dir, EPISODIC, &recovery);
        state.episodic = episodic;
        let (semantic, recovery) = jsonl::load(&state.dir.join(SEMANTIC))?;
        report(&state.dir, SEMANTIC, &recovery);
        state.semantic = semantic;
        state.raw = Some(Arc::new(DurableFile::open(&state.dir.join(RAW_TRACES))?));
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
        }
    }

    pub fn exists(&self) -> bool {
        self.raw.is_some() && !self.deleted
    }

    /// Creates the agent's directory and trace file, durably.
    pub fn create(&mut self) -> Result<Arc<DurableFile>> {
        let parent = self.dir.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(&self.dir).map_err(StoreError::io("creating", &self.dir))?;
        jsonl::sync_dir(parent)?;
        let raw = Arc::new(DurableFile::open(&self.dir.join(RAW_TRACES))?);
        jsonl::sync_dir(&self.dir)?;
        self.raw = Some(Arc::clone(&raw));
        Ok(raw)
    }

    pub fn view(&self) -> AgentView<'_> {
        AgentView {
            traces: &self.traces,
            episodic: &self.episodic,
            semantic: &self.semantic,
            tracker: &self.tracker,
            dir: &self.dir,
        }
    }

    /// The stored trace with `id`: active first, then the archive (a retry
    /// of an event that a compaction archived since).
    pub fn find_trace(&self, id: &str) -> Result<Option<RawTrace>> {
        if let Some(t) = self.traces.iter().rev().find(|t| t.id == id) {
            return Ok(Some(t.clone()));
        }
        let archive = self.dir.join(RAW_ARCHIVE);
        let text = match fs::read(&archive) {
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
