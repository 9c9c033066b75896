//! The conformance suite against the file store.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{FileStore, StoreConfig};
use engram_store::conformance::Harness;
use engram_store::prelude::*;

/// A file store in a temp dir of its own.
struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Self {
        Self(tempfile::tempdir().expect("a temp dir"))
    }
}

#[async_trait]
impl Harness for Files {
    type Backend = FileStore;

    async fn open(&self) -> Arc<FileStore> {
        Arc::new(
            FileStore::open(StoreConfig::new(self.0.path()))
                .await
                .expect("the store opens"),
        )
    }

    async fn reopen(&self, store: Arc<FileStore>) -> Arc<FileStore> {
        store.close().await;
        drop(store);
        self.open().await
    }

    fn commit_steps(&self) -> Vec<crate::CommitStep> {
        crate::CommitStep::ALL.to_vec()
    }

    fn fail_commit_at(&self, store: &FileStore, step: Option<crate::CommitStep>) {
        store.inject_compaction_fault(step);
    }

    async fn holding(&self, _: &FileStore, text: &str) -> Vec<String> {
        let mut found = vec![];
        files_holding(self.0.path(), text.as_bytes(), &mut found);
        found
    }
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_holding(dir: &std::path::Path, needle: &[u8], found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_holding(&path, needle, found);
        } else if std::fs::read(&path)
            .unwrap_or_default()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            found.push(path.display().to_string());
        }
    }
}

engram_store::conformance_suite!(Files::new());
