//! ExportMemory / ImportMemory on files (`Portable`).
//!
//! An export reads an agent's files under its lock, after a load that
//! finished any interrupted compaction or forget. An import writes each
//! agent's files into `agents/.fork-<uuid>` (debris a crash leaves there
//! is removed at the next start, as a fork's), each flushed, then renames
//! the directory into place in one step: an agent appears whole or not at
//! all. What is derived (the turn checkpoint, the search index) is not
//! written: the agent's first load and the indexer make it again.

use std::path::Path;

use async_trait::async_trait;
use engram_core::blocks::Block;
use engram_core::bundle::{
    AgentRecords, MemoryBundle, StoredResult, UserRecords, block_versions, fact_versions,
};
use engram_core::memory::SemanticItem;
use engram_core::users::UserFact;
use engram_core::{AgentId, RawTrace, UserId};
use engram_store::{Imported, Portable};

use crate::agent::{EPISODIC, RAW_ARCHIVE, RAW_TRACES, SEMANTIC, STATE};
use crate::blocks::BLOCKS;
use crate::compaction_log::COMPACTIONS;
use crate::fact_file::FACTS;
use crate::gate::Mark;
use crate::jsonl::{self, atomic_write, sync_dir};
use crate::user_facts::LAST;
use crate::{FileStore, Result, StoreError};

#[async_trait]
impl Portable for FileStore {
    async fn export_agent(&self, id: &AgentId) -> Result<AgentRecords> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let mut meta = state.meta.clone();
        // Keys this store's index has yet to drop: nothing of the records.
        meta.unpurged.clear();
        let active = state.traces.clone();
        let summaries = state.episodic.clone();
        let dir = state.dir.clone();
        let id = id.clone();
        engram_store::blocking(move || {
            let (archived, _) = jsonl::load::<RawTrace>(&dir.join(RAW_ARCHIVE))?;
            let (facts, _) = jsonl::load::<SemanticItem>(&dir.join(SEMANTIC))?;
            let (blocks, _) = jsonl::load::<Block>(&dir.join(BLOCKS))?;
            let (compactions, _) = jsonl::load(&dir.join(COMPACTIONS))?;
            let mut results = vec![];
            for path in archived
                .iter()
                .chain(&active)
                .filter_map(|t| t.tool_result_ref.as_deref())
            {
                let file = dir.join(path);
                match std::fs::read_to_string(&file) {
                    Ok(json) => results.push(StoredResult {
                        path: path.to_owned(),
                        json,
                    }),
                    // A result a forget erased: its trace went with it.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StoreError::io("reading", &file)(e)),
                }
            }
            Ok(AgentRecords {
                id,
                meta,
                archived,
                active,
                results,
                summaries,
                facts: fact_versions(&facts, |f| f),
                blocks: block_versions(&blocks),
                compactions,
            })
        })
        .await
    }

    async fn export_user(&self, user: &UserId) -> Result<UserRecords> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        let dir = self.user_dir(user);
        let id = user.clone();
        engram_store::blocking(move || {
            let (facts, _) = jsonl::load::<UserFact>(&dir.join(FACTS))?;
            let (blocks, _) = jsonl::load::<Block>(&dir.join(BLOCKS))?;
            let last = match std::fs::read(dir.join(LAST)) {
                Ok(bytes) => serde_json::from_slice(&bytes).ok(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(StoreError::io("reading", dir.join(LAST))(e)),
            };
            Ok(UserRecords {
                id,
                facts: fact_versions(&facts, |f| &f.fact),
                blocks: block_versions(&blocks),
                last,
            })
        })
        .await
    }

    async fn import(&self, bundle: &MemoryBundle, replace: bool) -> Result<Imported> {
        bundle.check()?;
        if !replace {
            self.refuse_existing(bundle).await?;
        }
        for agent in &bundle.agents {
            self.import_agent(agent, replace).await?;
        }
        if let Some(user) = &bundle.user {
            self.import_user(user, replace).await?;
        }
        Ok(Imported::of(bundle))
    }
}

impl FileStore {
    /// ALREADY_EXISTS for a bundle whose agents or user's memory exist,
    /// before anything is written.
    async fn refuse_existing(&self, bundle: &MemoryBundle) -> Result<()> {
        for agent in &bundle.agents {
            if self.agent_dir(&agent.id).join(STATE).exists()
                || self.agent_dir(&agent.id).join(RAW_TRACES).exists()
            {
                return Err(StoreError::AlreadyExists(agent.id.to_string()));
            }
        }
        if let Some(user) = &bundle.user
            && has_memory(&self.user_dir(&user.id))
        {
            return Err(StoreError::AlreadyExists(format!(
                "user {} has memory",
                user.id
            )));
        }
        Ok(())
    }

    async fn import_agent(&self, agent: &AgentRecords, replace: bool) -> Result<()> {
        let id = &agent.id;
        if replace {
            match engram_store::Admin::delete_agent(self, id).await {
                Ok(()) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(user) = &agent.meta.user_id {
            // Marked before the agent appears, as a fork's copy is.
            while let Mark::Wait(gate) = self.mark_user(user, id).await? {
                gate.passed().await; // no lock held: this lands after the erasure
            }
        }
        let staging = self.staging_dir();
        let (records, to) = (agent.clone(), staging.clone());
        engram_store::blocking(move || write_agent(&records, &to)).await?;
        self.put_in_place(&staging, id).await?;
        if agent.meta.user_id.is_some() {
            self.note_change(id);
        }
        tracing::info!(agent = %id, "agent imported");
        Ok(())
    }

    /// The user's facts, blocks and last conversation, each file replaced
    /// whole (atomically), under the user's lock; the cached copies and
    /// the user's index made again from them.
    async fn import_user(&self, user: &UserRecords, replace: bool) -> Result<()> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(&user.id));
        let mut shared = slot.lock().await;
        let dir = self.user_dir(&user.id);
        let records = user.clone();
        engram_store::blocking(move || {
            std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
            // Again under the user's lock: a write may have come first.
            if !replace && has_memory(&dir) {
                return Err(StoreError::AlreadyExists(format!(
                    "user {} has memory",
                    records.id
                )));
            }
            atomic_write(&dir.join(FACTS), &jsonl::lines(&records.facts))?;
            atomic_write(&dir.join(BLOCKS), &jsonl::lines(&records.blocks))?;
            match &records.last {
                Some(last) => {
                    let json = serde_json::to_vec(last).expect("summaries serialize");
                    atomic_write(&dir.join(LAST), &json)
                }
                None => remove_synced(&dir.join(LAST)),
            }
        })
        .await?;
        shared.forget_loaded();
        drop(shared);
        // The index's copy of the facts it held is made again from the
        // files (the old facts' text goes with it).
        self.drop_user_index(&user.id).await?;
        let (store, id) = (self.clone(), user.id.clone());
        tokio::spawn(async move { store.user_facts_later(&id).await });
        Ok(())
    }
}

/// Whether the user whose directory is `dir` has facts or blocks.
fn has_memory(dir: &Path) -> bool {
    let holds = |name: &str| std::fs::metadata(dir.join(name)).is_ok_and(|m| m.len() > 0);
    holds(FACTS) || holds(BLOCKS)
}

/// Removes `path` durably; a missing file is fine.
fn remove_synced(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(path.parent().unwrap_or(Path::new("."))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io("removing", path)(e)),
    }
}

/// Writes an agent's files into `dir` (new), each flushed. Blocking.
fn write_agent(agent: &AgentRecords, dir: &Path) -> Result<()> {
    std::fs::create_dir(dir).map_err(StoreError::io("creating", dir))?;
    let write = |name: &str, bytes: &[u8]| atomic_write(&dir.join(name), bytes);
    let traces =
        |traces: &[RawTrace]| -> Vec<u8> { traces.iter().flat_map(RawTrace::to_line).collect() };
    write(RAW_TRACES, &traces(&agent.active))?;
    if !agent.archived.is_empty() {
        write(RAW_ARCHIVE, &traces(&agent.archived))?;
    }
    write(EPISODIC, &jsonl::lines(&agent.summaries))?;
    write(SEMANTIC, &jsonl::lines(&agent.facts))?;
    if !agent.blocks.is_empty() {
        write(BLOCKS, &jsonl::lines(&agent.blocks))?;
    }
    if !agent.compactions.is_empty() {
        write(COMPACTIONS, &jsonl::lines(&agent.compactions))?;
    }
    if !agent.results.is_empty() {
        let results = dir.join("tool_results");
        std::fs::create_dir(&results).map_err(StoreError::io("creating", &results))?;
        for r in &agent.results {
            // Checked: the name is the trace's own `tool_results/<id>.json`.
            write(&r.path, r.json.as_bytes())?;
        }
        sync_dir(&results)?;
    }
    let meta = serde_json::to_vec_pretty(&agent.meta).expect("AgentMeta serializes");
    write(STATE, &meta)?;
    sync_dir(dir)
}
