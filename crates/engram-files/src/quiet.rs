//! The conversations waiting to be summarized once they go quiet, on
//! files: `quiet.json` in the data directory, each agent with the time it
//! last served a request, replaced whole (atomically) by every change. The
//! engine notes its agents here every few seconds, so a restart between a
//! conversation's last request and its idle time does not leave it
//! unsummarized. Holds agent ids only; a deleted agent is dropped from it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use engram_core::AgentId;
use tokio::sync::Mutex as AsyncMutex;

use crate::jsonl;
use crate::{Result, StoreError};

pub(crate) const QUIET: &str = "quiet.json";

#[derive(Debug)]
pub(crate) struct QuietList {
    path: PathBuf,
    /// Agent → Unix seconds of its last use; read from the file at first
    /// use, dropped after a failed write (the file then says what holds).
    marks: AsyncMutex<Option<BTreeMap<String, f64>>>,
}

impl QuietList {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            marks: AsyncMutex::new(None),
        }
    }

    /// Applies `change` to the list (read first if need be) and, when it
    /// reports a change, writes the list durably before returning.
    async fn with<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, f64>) -> (bool, T),
    ) -> Result<T> {
        let mut held = self.marks.lock().await;
        let mut marks = match held.take() {
            Some(marks) => marks,
            None => {
                let path = self.path.clone();
                engram_store::blocking(move || load(&path)).await?
            }
        };
        let (changed, out) = change(&mut marks);
        if changed {
            let path = self.path.clone();
            let bytes = serde_json::to_vec(&marks).expect("a map of numbers serializes");
            // On failure the cache stays dropped: the next call reads the
            // file, which holds the list as it was before this change.
            engram_store::blocking(move || jsonl::atomic_write(&path, &bytes)).await?;
        }
        *held = Some(marks);
        Ok(out)
    }

    pub(crate) async fn note(&self, used: &[(AgentId, f64)]) -> Result<()> {
        let used: Vec<(String, f64)> = used
            .iter()
            .filter(|(_, t)| t.is_finite())
            .map(|(id, t)| (id.to_string(), *t))
            .collect();
        self.with(move |marks| {
            let mut changed = false;
            for (id, t) in used {
                let at = marks.entry(id).or_insert(f64::NEG_INFINITY);
                if t > *at {
                    *at = t;
                    changed = true;
                }
            }
            (changed, ())
        })
        .await
    }

    pub(crate) async fn take(&self, before: f64) -> Result<Vec<AgentId>> {
        self.with(move |marks| {
            let quiet: Vec<String> = marks
                .iter()
                .filter(|(_, t)| **t <= before)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &quiet {
                marks.remove(id);
            }
            let ids = quiet.iter().filter_map(|id| AgentId::parse(id).ok());
            (!quiet.is_empty(), ids.collect())
        })
        .await
    }

    /// Drops a deleted agent from the list.
    pub(crate) async fn forget(&self, id: &AgentId) -> Result<()> {
        let id = id.to_string();
        self.with(move |marks| (marks.remove(&id).is_some(), ()))
            .await
    }
}

/// The list in `path`; empty without the file. Written whole by rename, so
/// damage means outside hands: it is logged and the list starts again
/// (the conversations in it are summarized at their next quiet spell).
fn load(path: &std::path::Path) -> Result<BTreeMap<String, f64>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), error = %e, "the list of conversations to summarize when quiet is unreadable; starting a new one");
            BTreeMap::new()
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(StoreError::io("reading", path)(e)),
    }
}
