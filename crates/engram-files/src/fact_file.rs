//! An agent's facts file (`semantic.jsonl`) as a delete leaves it: every
//! version of a deleted fact without its text. Used by a delete, and by
//! an agent's load, which finishes a delete a crash cut short.

use engram_core::facts;
use engram_core::memory::SemanticItem;

use crate::Result;
use crate::jsonl::atomic_write;

/// Whether `lines` hold text of a fact that was deleted since.
pub(crate) fn needs_scrub(lines: &[SemanticItem]) -> bool {
    let deleted: std::collections::HashSet<&str> = lines
        .iter()
        .filter(|f| f.managed.deleted_at.is_some())
        .map(|f| f.id.as_str())
        .collect();
    !deleted.is_empty()
        && lines
            .iter()
            .any(|f| deleted.contains(f.id.as_str()) && *f != facts::scrubbed(f))
}

/// Rewrites the facts file at `path` (atomically) with every version of a
/// deleted fact scrubbed of its text; returns the lines as they now are.
pub(crate) fn scrub(path: &std::path::Path) -> Result<Vec<SemanticItem>> {
    let (lines, _) = crate::jsonl::load::<SemanticItem>(path)?;
    if !needs_scrub(&lines) {
        return Ok(lines);
    }
    let deleted: std::collections::HashSet<String> = lines
        .iter()
        .filter(|f| f.managed.deleted_at.is_some())
        .map(|f| f.id.clone())
        .collect();
    let lines: Vec<SemanticItem> = lines
        .into_iter()
        .map(|f| {
            if deleted.contains(&f.id) {
                facts::scrubbed(&f)
            } else {
                f
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
