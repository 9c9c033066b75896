//! ForkAgent: every file of an agent copied under a new id, atomically.
//!
//! The copy is assembled in `agents/.fork-<uuid>`, each file flushed, then
//! renamed to the target's name in one step, so a crash leaves either no
//! target or a whole one (debris is removed at the next start). The source
//! is locked meanwhile, so the copy is one consistent state of it.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use engram_core::AgentId;

use crate::jsonl::sync_dir;
use crate::{FileStore, Result, StoreError};

impl FileStore {
    /// Drops a cached "does not exist" state of `id`, so the next use reads
    /// the files that are about to appear.
    pub(crate) async fn forget_absent(&self, id: &AgentId) {
        let cached = engram_store::lock(&self.inner.agents)
            .get(id)
            .map(Arc::clone);
        if let Some(handle) = cached {
            let mut slot = handle.lock().await;
            if slot.as_ref().is_none_or(|s| !s.exists()) {
                // Whoever waits for this handle looks the id up again
                // rather than load or create the agent under a handle the
                // registry no longer holds.
                let mut gone = crate::agent::AgentState::absent(self.agent_dir(id));
                gone.deleted = true;
                *slot = Some(gone);
                // A catch-up still holding it must not open an index in
                // the directory the fork is about to put there: the new
                // agent's handle will.
                handle.retire();
                self.unregister(id, &handle);
            }
        }
    }
}

impl FileStore {
    /// A new place to assemble an agent directory in (removed at start if
    /// a crash leaves it).
    pub(crate) fn staging_dir(&self) -> std::path::PathBuf {
        let name = format!("{}{}", crate::FORK_PREFIX, uuid::Uuid::new_v4());
        self.inner.agents_dir.join(name)
    }

    /// Renames the agent directory assembled in `staging` to `id`'s, in
    /// one step (a fork's copy, an import); ALREADY_EXISTS, with the
    /// staging directory removed, if `id` appeared meanwhile.
    pub(crate) async fn put_in_place(&self, staging: &Path, id: &AgentId) -> Result<()> {
        let target = self.agent_dir(id);
        self.forget_absent(id).await;
        let renamed = crate::offload(|| fs::rename(staging, &target));
        if renamed.is_err() || !target.exists() {
            let _ = fs::remove_dir_all(staging);
            return match renamed {
                // Created meanwhile (an Ingest or another fork won the race).
                Err(e) if target.exists() || e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                    Err(StoreError::AlreadyExists(id.to_string()))
                }
                Err(e) => Err(StoreError::io("renaming", staging)(e)),
                Ok(()) => Err(StoreError::AlreadyExists(id.to_string())),
            };
        }
        let agents_dir = self.inner.agents_dir.clone();
        crate::offload(|| sync_dir(&agents_dir))
    }
}

/// Copies the agent's regular files (not temp files) and flushes them.
pub(crate) fn copy_agent(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir(to).map_err(StoreError::io("creating", to))?;
    for entry in fs::read_dir(from).map_err(StoreError::io("listing", from))? {
        let entry = entry.map_err(StoreError::io("listing", from))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            // tool_results/: the whole tool results the traces point at.
            copy_agent(&entry.path(), &to.join(&name))?;
            continue;
        }
        let dst = to.join(&name);
        fs::copy(entry.path(), &dst).map_err(StoreError::io("copying to", &dst))?;
        fs::File::open(&dst)
            .and_then(|f| f.sync_all())
            .map_err(StoreError::io("syncing", &dst))?;
    }
    sync_dir(to)
}
