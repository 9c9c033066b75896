//! A compaction's commit written down before any file changes (in
//! `state.json`), so a crash at any step is rolled forward at the next load.

use crate::memory::{EpisodicItem, SemanticItem};
use serde::{Deserialize, Serialize};

/// A compaction written down before any file changes (in `state.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// The epoch this compaction ends.
    pub epoch: u32,
    /// The epoch it starts (absent in intents written before it existed:
    /// then `epoch + 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_epoch: Option<u32>,
    pub turn_ids: Vec<String>,
    pub trace_ids: Vec<String>,
    /// Length of the archive before this compaction appended to it.
    pub archive_len: u64,
    /// The summary's item; absent for a trim (archived with no summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episodic: Option<EpisodicItem>,
    pub semantic: Vec<SemanticItem>,
    /// `(old id, new id)`.
    pub superseded: Vec<(String, String)>,
    /// `(id, when)`: facts no longer true, with nothing replacing them
    /// (absent in intents written before invalidation existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalidated: Vec<(String, f64)>,
    pub snapshot: String,
    pub snapshot_trace_ids: Vec<String>,
    /// The facts the snapshot shows besides pinned ones (absent in intents
    /// written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts_limit: Option<u32>,
    /// The snapshot's carry-forward section: what it shows, what did not
    /// fit (absent in intents written before it existed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub carried: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub carry_dropped: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Intent {
    /// The lines that end facts of `known` as this compaction decided
    /// (superseded or invalidated), each fact not already ended so.
    pub fn endings(&self, known: &[SemanticItem]) -> Vec<SemanticItem> {
        crate::compaction::merge::ended(known, &self.superseded, &self.invalidated, &self.semantic)
    }
}
