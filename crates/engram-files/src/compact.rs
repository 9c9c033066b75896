//! Compaction's store part: take a window of old turns, and after the
//! summarizer answered, write the summary, archive the turns and start a
//! new epoch — crash-safe by rolling forward.
//!
//! The LLM call happens between [`Compacts::begin_compaction`] and
//! [`Compacts::finish_compaction`], without the agent's lock, so Ingest keeps
//! working meanwhile; what arrives is not in the window and lands after the
//! new snapshot. `finish` first writes everything it is about to do into
//! `state.json` (an [`Intent`]), then does it in an order where every step
//! can be repeated: episodic and semantic lines are appended unless their
//! id is there, the archive is cut back to its length before this
//! compaction and the window appended (only while the window is still in
//! the active file), the active file is rewritten atomically, and the
//! intent is cleared in the same atomic write that starts the epoch. An
//! agent found with an intent at load finishes it first. So after a crash
//! at any point every trace is in the active file or the archive exactly
//! once, no turn is in two episodic items, and no episodic item's turns
//! are still active.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use engram_core::compaction::{CompactionRecord, Summary};
use engram_core::{AgentId, RawTrace};
use engram_store::Compacts;

pub use crate::intent::Intent;

use crate::agent::{AgentMeta, AgentState, EPISODIC, RAW_ARCHIVE, RAW_TRACES, SEMANTIC};
use crate::durable::DurableFile;
use crate::jsonl::{append_sync, atomic_write, line};
use crate::{
    Begun, CommitStep, Committed, FileStore, FsyncPolicy, Hidden, Hiding, Job, Policy, Result,
    StoreError, wal,
};

/// The JSONL text of `traces` (slices appended whole, not byte by byte).
fn lines_of<'a>(traces: impl Iterator<Item = &'a RawTrace>) -> Vec<u8> {
    let mut out = Vec::new();
    for t in traces {
        out.extend_from_slice(&t.to_line());
    }
    out
}

/// An earlier compaction is written down but could not be finished for
/// lack of space (see `FileStore::loaded`): no other may start meanwhile.
pub(crate) fn waiting_for_space(dir: &Path) -> StoreError {
    StoreError::Full(format!(
        "an earlier compaction in {} waits for space to finish",
        dir.display()
    ))
}

/// Plans the commit of `job` with `summary` and writes it down as the
/// agent's intent. Returns it with the facts added and updated.
fn write_intent(
    state: &mut AgentState,
    job: &Job,
    summary: Option<Summary>,
    policy: Policy,
) -> Result<(Intent, u32, u32)> {
    let archive = state.dir.join(RAW_ARCHIVE);
    let archive_len = std::fs::metadata(&archive).map_or(0, |m| m.len());
    let (intent, added, updated) = state.commit_plan(
        job,
        summary,
        policy,
        archive_len,
        engram_store::unix_now(),
        engram_store::new_id,
    );
    let meta = AgentMeta {
        pending: Some(intent.clone()),
        ..state.meta.clone()
    };
    state.save_meta(meta)?;
    Ok((intent, added, updated))
}

#[async_trait]
impl Compacts for FileStore {
    /// Picks the turns to summarize; `None` when there is nothing to
    /// compact or a compaction of this agent is already running.
    async fn begin_compaction(&self, id: &AgentId, policy: Policy) -> Result<Begun> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        if state.compacting {
            return Ok(Begun::Busy);
        }
        if state.meta.pending.is_some() {
            return Err(waiting_for_space(&state.dir));
        }
        let Some(job) = state.job(policy) else {
            return Ok(Begun::Nothing);
        };
        state.compacting = true;
        Ok(Begun::Job(job))
    }

    /// Gives up a job: nothing is written but, when the failure was this
    /// agent's (`failed`; not a summarizer that was not called at all), the
    /// failure count. Returns the consecutive failures so far.
    async fn abort_compaction(&self, id: &AgentId, failed: bool) -> Result<u32> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        state.compacting = false;
        if !failed {
            return Ok(state.meta.consecutive_failures);
        }
        let meta = AgentMeta {
            consecutive_failures: state.meta.consecutive_failures + 1,
            ..state.meta.clone()
        };
        state.save_meta(meta)?;
        Ok(state.meta.consecutive_failures)
    }

    /// Stores `summary` for `job` and starts the next epoch.
    async fn finish_compaction(
        &self,
        id: &AgentId,
        job: Job,
        summary: Option<Summary>,
        policy: Policy,
    ) -> Result<Committed> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        state.compacting = false;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        state.check_current(&job)?;
        let (intent, added, updated) =
            crate::offload(|| write_intent(state, &job, summary, policy))?;
        if let Err(e) = self.complete_intent(id, state, &intent).await {
            // The files hold the intent; memory may be ahead of them. The
            // next call reloads the agent and rolls the intent forward.
            *slot = None;
            return Err(e);
        }
        crate::drop_later(job);
        tracing::info!(agent = %id, turns = intent.turn_ids.len(), epoch = state.meta.epoch, "compacted");
        let committed = Committed::of(intent, (added, updated), state.meta.epoch, state.context());
        drop(slot);
        // The summary and the facts are new items for the index.
        self.index_later(id);
        Ok(committed)
    }

    /// Microcompact: tool results of turns older than the last
    /// `keep_turns` (and the current one) show as placeholders from now on,
    /// in a new epoch. Nothing is archived or lost. `None`: nothing changed.
    async fn hide_old(
        &self,
        id: &AgentId,
        hiding: Hiding,
        keep_turns: usize,
        opened: Option<u32>,
    ) -> Result<Option<Hidden>> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        if state.meta.pending.is_some() {
            return Err(waiting_for_space(&state.dir));
        }
        if state.compacting {
            // A new epoch now would make that summary's work stale.
            return Ok(None);
        }
        let Some((meta, hidden)) = state.hide_meta(hiding, keep_turns, opened) else {
            return Ok(None);
        };
        state.save_meta(meta)?;
        engram_store::drop_later(state.rebuild_epoch());
        tracing::info!(agent = %id, hidden, tier = hiding.as_str(), "hid old messages from the prompt");
        Ok(Some(Hidden {
            hidden,
            context: state.context(),
        }))
    }

    async fn record_compaction(&self, id: &AgentId, record: CompactionRecord) -> Result<u64> {
        self.append_compaction(id, record).await
    }

    async fn compaction_log(
        &self,
        id: &AgentId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<CompactionRecord>> {
        self.read_compaction_log(id, limit, before).await
    }
}

impl FileStore {
    /// Carries out `intent` (every step repeatable), starts the epoch and
    /// reloads the agent's derived state from its files. Blocking file I/O
    /// and the rebuild of the transcript run off the async workers; the
    /// agent stays locked throughout.
    pub(crate) async fn complete_intent(
        &self,
        id: &AgentId,
        state: &mut AgentState,
        intent: &Intent,
    ) -> Result<()> {
        let window: HashSet<&str> = intent.trace_ids.iter().map(String::as_str).collect();
        let kept = crate::offload(|| self.store_memories_and_archive(state, intent, &window))?;
        if let Some(kept) = &kept {
            self.replace_active(id, state, kept).await?;
        }
        crate::offload(|| self.start_epoch(id, state, intent, kept.is_some()))
    }

    /// Replaces the agent's active file with `kept` (atomically), after
    /// flushing what was appended to it and telling the log that its
    /// earlier records of the file no longer apply (a replay must not
    /// write them into the new one). The caller opens the new file for
    /// appends, or drops the state to load it again.
    pub(crate) async fn replace_active(
        &self,
        id: &AgentId,
        state: &AgentState,
        kept: &[u8],
    ) -> Result<()> {
        if let Some(raw) = state.raw.clone() {
            raw.sync_all().await?;
        }
        if self.inner.config.fsync == FsyncPolicy::Always {
            let ticket = self.inner.wal.append(&wal::Record::Reset {
                agent: id.as_str(),
                file: RAW_TRACES,
            })?;
            ticket.wait().await?;
        }
        let raw_path = state.dir.join(RAW_TRACES);
        crate::offload(|| atomic_write(&raw_path, kept))
    }

    /// The episodic and semantic lines of `intent` and the window's traces
    /// in the archive; the lines the active file keeps, while the window is
    /// still in it (`None`: an earlier attempt already rewrote it).
    fn store_memories_and_archive(
        &self,
        state: &AgentState,
        intent: &Intent,
        window: &HashSet<&str>,
    ) -> Result<Option<Vec<u8>>> {
        let dir = &state.dir;
        self.inner.faults.check(CommitStep::Episodic)?;
        if let Some(item) = &intent.episodic
            && !state.episodic.iter().any(|e| e.id == item.id)
        {
            append_sync(&dir.join(EPISODIC), &line(item))?;
        }
        self.inner.faults.check(CommitStep::Semantic)?;
        let known: HashSet<&str> = state.semantic.iter().map(|s| s.id.as_str()).collect();
        let mut lines = vec![];
        for item in intent
            .semantic
            .iter()
            .filter(|s| !known.contains(s.id.as_str()))
        {
            lines.extend(line(item));
        }
        for ended in intent.endings(&state.semantic) {
            lines.extend(line(&ended));
        }
        if !lines.is_empty() {
            append_sync(&dir.join(SEMANTIC), &lines)?;
        }
        let still_active = state.traces.iter().any(|t| window.contains(t.id.as_str()));
        if !still_active {
            return Ok(None);
        }
        self.inner.faults.check(CommitStep::Archive)?;
        // Bytes past `archive_len` are this compaction's own, cut short.
        let archive = dir.join(RAW_ARCHIVE);
        if archive.exists() {
            let f = OpenOptions::new()
                .write(true)
                .open(&archive)
                .map_err(StoreError::io("opening", &archive))?;
            f.set_len(intent.archive_len)
                .map_err(StoreError::io("truncating", &archive))?;
        }
        let moved = lines_of(
            state
                .traces
                .iter()
                .filter(|t| window.contains(t.id.as_str())),
        );
        append_sync(&archive, &moved)?;
        self.inner.faults.check(CommitStep::Rewrite)?;
        Ok(Some(lines_of(
            state
                .traces
                .iter()
                .filter(|t| !window.contains(t.id.as_str())),
        )))
    }

    /// Starts the epoch of `intent` on disk (clearing the intent) and in
    /// memory.
    fn start_epoch(
        &self,
        id: &AgentId,
        state: &mut AgentState,
        intent: &Intent,
        still_active: bool,
    ) -> Result<()> {
        let dir = state.dir.clone();
        // So that loading this agent need not replay the archive it just grew.
        if let Err(e) = crate::agent::save_turns(&dir, &state.tracker) {
            tracing::warn!(agent = %id, error = %e, "could not checkpoint the turn state; loads replay the archive");
        }
        self.inner.faults.check(CommitStep::Finalize)?;
        let meta = state.committed_meta(intent);
        state.save_meta(meta.clone())?;
        // The new state in memory, from what was just written (no reload).
        engram_store::drop_later(state.adopt_commit(intent, meta));
        if still_active {
            // The rewrite replaced the file: appends go to the new one. The
            // old one's blocks are freed when its last handle closes, which
            // for megabytes of lines is milliseconds in the kernel.
            let fresh = Arc::new(DurableFile::open(
                &dir.join(RAW_TRACES),
                &self.inner.health,
            )?);
            crate::drop_later(state.raw.replace(fresh));
            state.last_ticket = None;
        }
        Ok(())
    }
}
