//! What reads an agent as it stands: its prompt, its memories, its files.

use std::path::PathBuf;

use async_trait::async_trait;
use engram_core::AgentId;
use engram_store::Reads;

use crate::agent::AgentState;
use crate::{AgentContext, Bundle, FileStore, Result, StoreError};

#[async_trait]
impl Reads for FileStore {
    /// The prompt of an existing agent as it stands.
    async fn context(&self, id: &AgentId) -> Result<AgentContext> {
        self.read(id, AgentState::context).await
    }

    /// Every memory and the raw tail, copied out (the tail picked, and the
    /// copies made, off the async workers for a large agent).
    async fn bundle(&self, id: &AgentId, raw_tail_turns: usize) -> Result<Bundle> {
        self.read(id, |state| state.bundle(raw_tail_turns)).await
    }

    /// Name and size of every file of an agent, sorted by name.
    async fn file_sizes(&self, id: &AgentId) -> Result<Vec<(String, u64)>> {
        // Listed under the agent's lock: a delete renames the directory and
        // removes its files, and a file gone between the listing and its
        // size would be a storage error rather than the NOT_FOUND the
        // caller would see a moment later.
        let handle = self.existing_handle(id)?;
        let slot = handle.lock().await;
        if handle.is_retired() || slot.as_ref().is_some_and(|s| s.deleted) {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let sizes = list_files(self.agent_dir(id)).await;
        drop(slot);
        sizes
    }
}

async fn list_files(dir: PathBuf) -> Result<Vec<(String, u64)>> {
    engram_store::blocking(move || {
        let mut out = vec![];
        let entries = std::fs::read_dir(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StoreError::NotFound(
                dir.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            ),
            _ => StoreError::io("listing", &dir)(e),
        })?;
        for entry in entries {
            let entry = entry.map_err(StoreError::io("listing", &dir))?;
            let meta = entry
                .metadata()
                .map_err(StoreError::io("reading metadata of", entry.path()))?;
            if meta.is_file() {
                out.push((entry.file_name().to_string_lossy().into_owned(), meta.len()));
            }
        }
        out.sort();
        Ok(out)
    })
    .await
}
