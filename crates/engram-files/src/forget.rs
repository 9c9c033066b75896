//! Forgetting, on files (`Forgets`): the traces of a turn or some events
//! erased from every file that holds them, with what was drawn from them.
//!
//! Crash-safe as a compaction is: the erasure (ids only) and the settings
//! it ends with are written into `state.json` first
//! (`AgentMeta::forgetting`), then every step is one that can be repeated:
//! the active file and the archive rewritten without the traces (each
//! atomically; the log told that earlier appends to the active file no
//! longer apply), stored tool results removed, the summaries file
//! rewritten with the hidden ones scrubbed, the facts deleted as
//! DeleteMemory deletes them, the turn checkpoint removed (the next load
//! replays the archive without them), and the settings saved with the
//! intent cleared. An agent found with the intent at load finishes it
//! first. Then, outside the agent's lock: the log checkpointed (its
//! segments that held the traces deleted), the search index and the
//! user's purged of the erased keys, the user's last conversation written
//! again without the hidden summaries.

use std::collections::HashSet;
use std::path::Path;

use async_trait::async_trait;
use engram_core::compaction::Summary;
use engram_core::forget::{self, Erasure, Forget, ForgetIntent};
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::users::LastConversation;
use engram_core::{AgentId, RawTrace, UserId};
use engram_store::{Forgets, Forgotten, RewriteJob};

use crate::agent::{AgentMeta, AgentState, EPISODIC, RAW_ARCHIVE, SEMANTIC, TURNS};
use crate::jsonl::{append_sync, atomic_write};
use crate::{FileStore, Policy, Result, StoreError};

#[async_trait]
impl Forgets for FileStore {
    async fn forget(&self, id: &AgentId, what: &Forget, policy: Policy) -> Result<Forgotten> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        if state.meta.pending.is_some() {
            return Err(crate::compact::waiting_for_space(&state.dir));
        }
        let archive = crate::offload(|| read_archive(&state.dir))?;
        let now = engram_store::unix_now();
        let intent = crate::offload(|| state.forget_intent(what, &archive, policy, now));
        drop(archive);
        let Some(intent) = intent else {
            // Done before (or named nothing): nothing is written.
            let user_id = state.meta.user_id.clone();
            drop(slot);
            // A repeated forget finishes what a crash left undone.
            self.purge_forgotten(id).await?;
            return Ok(Forgotten {
                user_id,
                ..Forgotten::default()
            });
        };
        let out = Forgotten::of(&intent.erasure, &state.semantic, state.meta.user_id.clone());
        let meta = AgentMeta {
            forgetting: Some(intent.clone()),
            ..state.meta.clone()
        };
        state.save_meta(meta)?;
        self.inner.faults.check_forget("forget-active");
        let done = self.complete_forget(id, state, &intent).await;
        // Memory is behind the files now: the next use loads them.
        *slot = None;
        done?;
        drop(slot);
        self.purge_forgotten(id).await?;
        Ok(out)
    }

    async fn rewrite_jobs(&self, id: &AgentId) -> Result<Vec<RewriteJob>> {
        let hidden = self
            .read(id, |s| {
                let hidden: Vec<EpisodicItem> = s
                    .episodic
                    .iter()
                    .filter(|e| !e.is_shown())
                    .cloned()
                    .collect();
                let known: Vec<SemanticItem> =
                    s.semantic.iter().filter(|f| f.is_live()).cloned().collect();
                (hidden, known, s.traces.clone(), s.meta.user_id.clone())
            })
            .await?;
        let (hidden, known, active, user_id) = hidden;
        if hidden.is_empty() {
            return Ok(vec![]);
        }
        let dir = self.agent_dir(id);
        let archive = crate::offload(|| read_archive(&dir))?;
        Ok(hidden
            .into_iter()
            .map(|item| RewriteJob {
                traces: forget::remaining(&item, archive.iter().chain(active.iter())),
                item,
                known_facts: known.clone(),
                user_id: user_id.clone(),
            })
            .collect())
    }

    async fn finish_rewrite(
        &self,
        id: &AgentId,
        job: &RewriteJob,
        summary: Summary,
        policy: Policy,
    ) -> Result<bool> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        // Still hidden, and from the same traces (no forget since).
        let now = engram_store::unix_now();
        let Some(commit) = state.rewrite_commit(
            &job.item,
            summary,
            &job.traces,
            policy,
            now,
            engram_store::new_id,
        ) else {
            return Ok(false);
        };
        let dir = state.dir.clone();
        let written = crate::offload(|| {
            atomic_write(&dir.join(EPISODIC), &crate::jsonl::lines(&commit.summaries))?;
            if !commit.lines.is_empty() {
                append_sync(&dir.join(SEMANTIC), &crate::jsonl::lines(&commit.lines))?;
            }
            Ok::<_, StoreError>(())
        })
        .and_then(|()| state.save_meta(commit.meta));
        // The rewritten files are read again at the next use.
        *slot = None;
        written?;
        drop(slot);
        tracing::info!(agent = %id, summary = %job.item.id, "summary rewritten after a forget");
        self.index_later(id);
        Ok(true)
    }

    async fn awaiting_rewrite(&self) -> Result<Vec<AgentId>> {
        Ok(self.scan_loaded(|id, state| {
            state
                .episodic
                .iter()
                .any(|e| !e.is_shown())
                .then(|| id.clone())
        }))
    }
}

impl FileStore {
    /// Carries out `intent` (every step repeatable) and saves the settings
    /// it ends with. The caller drops the agent's state after: the files
    /// are the truth, read again at the next use.
    pub(crate) async fn complete_forget(
        &self,
        id: &AgentId,
        state: &mut AgentState,
        intent: &ForgetIntent,
    ) -> Result<()> {
        let erasure = &intent.erasure;
        let erased = |t: &RawTrace| erasure.trace_ids.contains(&t.id);
        if state.traces.iter().any(erased) {
            let kept: Vec<u8> = state
                .traces
                .iter()
                .filter(|t| !erased(t))
                .flat_map(RawTrace::to_line)
                .collect();
            self.replace_active(id, state, &kept).await?;
        }
        self.inner.faults.check_forget("forget-files");
        let dir = state.dir.clone();
        let now = engram_store::unix_now();
        crate::offload(|| erase_files(&dir, erasure, now))?;
        self.inner.faults.check_forget("forget-finalize");
        state.save_meta(state.meta.after_forget(intent))
    }

    /// What a forget leaves for after the agent's lock: the log's old
    /// segments deleted, the indexes purged of the erased keys, the
    /// user's last conversation without the hidden summaries; then the
    /// keys are no longer kept. Repeatable.
    pub(crate) async fn purge_forgotten(&self, id: &AgentId) -> Result<()> {
        let (unpurged, user) = match self
            .read(id, |s| (s.meta.unpurged.clone(), s.meta.user_id.clone()))
            .await
        {
            Ok(read) => read,
            Err(StoreError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if unpurged.is_empty() {
            return Ok(());
        }
        self.inner.faults.check_forget("forget-purge");
        self.checkpoint().await?;
        if self.agent_dir(id).join(crate::index::INDEX_DIR).exists() {
            // The catch-up removes the keys and rewrites their segments.
            drop(self.caught_up(id).await?);
        }
        if let Some(user) = user.as_deref().and_then(|u| UserId::parse(u).ok()) {
            self.forget_in_user(&user, id, &unpurged).await?;
        }
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if state.exists() && state.meta.unpurged == unpurged {
            let meta = AgentMeta {
                unpurged: vec![],
                ..state.meta.clone()
            };
            state.save_meta(meta)?;
        }
        Ok(())
    }

    /// The user's index reads the agent again from the start (its items
    /// removed, the segments that held them rewritten); the user's last
    /// conversation loses the summaries that are gone.
    async fn forget_in_user(&self, user: &UserId, id: &AgentId, gone: &[String]) -> Result<()> {
        if self.user_dir(user).join(crate::index::INDEX_DIR).exists() {
            self.user_caught_up(user, None).await?;
            self.forget_in_user_index(id, &self.user_slot(user)).await?;
            self.note_change_of(user, id);
            self.purge_user_index(user).await?;
        }
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        let path = self.user_dir(user).join(crate::user_facts::LAST);
        let (gone, agent) = (gone.to_vec(), id.to_string());
        engram_store::blocking(move || {
            let last: LastConversation = match std::fs::read(&path) {
                Ok(bytes) => match serde_json::from_slice(&bytes) {
                    Ok(last) => last,
                    Err(_) => return Ok(()),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(StoreError::io("reading", &path)(e)),
            };
            if last.agent_id != agent || !last.summaries.iter().any(|s| gone.contains(&s.id)) {
                return Ok(());
            }
            let kept: Vec<EpisodicItem> = last
                .summaries
                .into_iter()
                .filter(|s| !gone.contains(&s.id))
                .collect();
            match LastConversation::of(&agent, &kept) {
                Some(last) => {
                    let json = serde_json::to_vec(&last).expect("summaries serialize");
                    atomic_write(&path, &json)
                }
                None => std::fs::remove_file(&path).map_err(StoreError::io("removing", &path)),
            }
        })
        .await
    }
}

/// Every trace of the archive (none without one). Blocking.
fn read_archive(dir: &Path) -> Result<Vec<RawTrace>> {
    let path = dir.join(RAW_ARCHIVE);
    let len = std::fs::metadata(&path).map_or(0, |m| m.len());
    let mut out = vec![];
    crate::index::read_archive(&path, 0, len, |t| {
        out.push(t);
        Ok(())
    })?;
    Ok(out)
}

/// The erasure's steps on the agent's other files (blocking, repeatable):
/// the archive, stored results, summaries, facts, the turn checkpoint.
fn erase_files(dir: &Path, erasure: &Erasure, now: f64) -> Result<()> {
    let archive = dir.join(RAW_ARCHIVE);
    if archive.exists() {
        let bytes = std::fs::read(&archive).map_err(StoreError::io("reading", &archive))?;
        let mut kept = Vec::with_capacity(bytes.len());
        let mut changed = false;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let gone = RawTrace::from_line(line).is_ok_and(|t| erasure.trace_ids.contains(&t.id));
            changed |= gone;
            if !gone {
                kept.extend_from_slice(line);
            }
        }
        if changed {
            atomic_write(&archive, &kept)?;
        }
    }
    for id in &erasure.spilled {
        let path = dir.join(engram_core::spill::spill_path(id));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError::io("removing", &path)(e));
            }
            _ => {}
        }
    }
    let episodic = dir.join(EPISODIC);
    let (items, _) = crate::jsonl::load::<EpisodicItem>(&episodic)?;
    let after = forget::apply_to_summaries(&items, erasure);
    if after != items {
        atomic_write(&episodic, &crate::jsonl::lines(&after))?;
    }
    let semantic = dir.join(SEMANTIC);
    let (versions, _) = crate::jsonl::load::<SemanticItem>(&semantic)?;
    let gone: HashSet<&str> = erasure.facts.iter().map(String::as_str).collect();
    let mut tombstones: Vec<SemanticItem> = vec![];
    for id in &erasure.facts {
        let last = versions.iter().rev().find(|v| v.id == *id);
        if let Some(last) = last.filter(|v| v.managed.deleted_at.is_none()) {
            tombstones.push(engram_core::facts::tombstone(last, now));
        }
    }
    if !tombstones.is_empty() {
        append_sync(&semantic, &crate::jsonl::lines(&tombstones))?;
    }
    if !gone.is_empty() {
        crate::fact_file::scrub::<SemanticItem>(&semantic)?;
    }
    match std::fs::remove_file(dir.join(TURNS)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(StoreError::io("removing", dir.join(TURNS))(e))
        }
        _ => Ok(()),
    }
}
