//! A facts file (an agent's `semantic.jsonl`, a user's `facts.jsonl`) as a
//! delete leaves it: every version of a deleted fact without its text.
//! Used by a delete, and by a load, which finishes a delete a crash cut
//! short; and a user's facts as read from their file.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use engram_core::facts;
use engram_core::memory::SemanticItem;
use engram_core::users::UserFact;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::jsonl::atomic_write;

/// A user's facts file, in the user's directory.
pub(crate) const FACTS: &str = "facts.jsonl";
use crate::{Result, StoreError};

/// A line of a facts file: a version of a fact.
pub(crate) trait FactLine: Serialize + DeserializeOwned + PartialEq + Sized {
    fn fact(&self) -> &SemanticItem;
    /// This version without its text (what else it keeps: ids only).
    fn scrubbed(&self) -> Self;
}

impl FactLine for SemanticItem {
    fn fact(&self) -> &SemanticItem {
        self
    }

    fn scrubbed(&self) -> Self {
        facts::scrubbed(self)
    }
}

impl FactLine for UserFact {
    fn fact(&self) -> &SemanticItem {
        &self.fact
    }

    fn scrubbed(&self) -> Self {
        // The sources name agents, facts and turns: ids, no text; kept, so
        // that a later fold never brings the fact back.
        Self {
            fact: facts::scrubbed(&self.fact),
            sources: self.sources.clone(),
        }
    }
}

fn deleted<T: FactLine>(lines: &[T]) -> HashSet<&str> {
    lines
        .iter()
        .filter(|l| l.fact().managed.deleted_at.is_some())
        .map(|l| l.fact().id.as_str())
        .collect()
}

/// Whether `lines` hold text of a fact that was deleted since.
pub(crate) fn needs_scrub<T: FactLine>(lines: &[T]) -> bool {
    let deleted = deleted(lines);
    !deleted.is_empty()
        && lines
            .iter()
            .any(|l| deleted.contains(l.fact().id.as_str()) && *l != l.scrubbed())
}

/// Rewrites the facts file at `path` (atomically) with every version of a
/// deleted fact scrubbed of its text; returns the lines as they now are.
pub(crate) fn scrub<T: FactLine>(path: &std::path::Path) -> Result<Vec<T>> {
    let (lines, _) = crate::jsonl::load::<T>(path)?;
    if !needs_scrub(&lines) {
        return Ok(lines);
    }
    let deleted: HashSet<String> = deleted(&lines).into_iter().map(str::to_owned).collect();
    let lines: Vec<T> = lines
        .into_iter()
        .map(|l| {
            if deleted.contains(&l.fact().id) {
                l.scrubbed()
            } else {
                l
            }
        })
        .collect();
    atomic_write(path, &crate::jsonl::lines(&lines))?;
    Ok(lines)
}

/// A user's facts as its file (`users/<id>/facts.jsonl`) holds them, kept
/// in memory beside the user's blocks.
#[derive(Debug, Clone, Default)]
pub(crate) struct UserFacts {
    /// The last version of each, in the order facts first appeared.
    pub all: Arc<Vec<UserFact>>,
    at: HashMap<String, usize>,
    /// The live pinned ones, oldest first: every prompt of the user's
    /// conversations shows them.
    pub pinned: Arc<Vec<SemanticItem>>,
    /// The file's length (what the user's index compares).
    pub len: u64,
}

impl UserFacts {
    /// Reads the file at `path` (a delete a crash cut short is finished
    /// first). Blocking; a torn line is repaired (and logged) by the load.
    pub fn load(path: &Path) -> Result<Self> {
        let (mut versions, _) = crate::jsonl::load::<UserFact>(path)?;
        if needs_scrub(&versions) {
            versions = scrub::<UserFact>(path)?;
        }
        let mut facts = Self::default();
        facts.record(versions);
        facts.len = file_len(path)?;
        Ok(facts)
    }

    /// Takes in versions just stored.
    pub fn record(&mut self, versions: impl IntoIterator<Item = UserFact>) {
        let all = Arc::make_mut(&mut self.all);
        for v in versions {
            match self.at.get(&v.fact.id) {
                Some(&i) => all[i] = v,
                None => {
                    self.at.insert(v.fact.id.clone(), all.len());
                    all.push(v);
                }
            }
        }
        let mut pinned: Vec<SemanticItem> = all
            .iter()
            .filter(|f| f.is_live() && f.fact.managed.pinned)
            .map(|f| f.fact.clone())
            .collect();
        pinned.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        self.pinned = Arc::new(pinned);
    }

    /// The live facts past their expiry at `now`: id and version.
    pub fn expired(&self, now: f64) -> Vec<(String, u64)> {
        self.all
            .iter()
            .filter(|f| f.is_live() && f.fact.is_expired(now))
            .map(|f| (f.fact.id.clone(), f.fact.version()))
            .collect()
    }
}

pub(crate) fn file_len(path: &Path) -> Result<u64> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(StoreError::io("reading", path)(e)),
    }
}
