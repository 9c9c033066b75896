//! A facts file (an agent's `semantic.jsonl`, a user's `facts.jsonl`) as a
//! delete leaves it: every version of a deleted fact without its text.
//! Used by a delete, and by a load, which finishes a delete a crash cut
//! short.

use std::collections::HashSet;

use engram_core::facts;
use engram_core::memory::SemanticItem;
use engram_core::users::UserFact;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Result;
use crate::jsonl::atomic_write;

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
    let mut bytes = Vec::new();
    for line in &lines {
        serde_json::to_writer(&mut bytes, line).expect("a fact serializes");
        bytes.push(b'\n');
    }
    atomic_write(path, &bytes)?;
    Ok(lines)
}
