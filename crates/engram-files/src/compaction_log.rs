//! An agent's compaction log on files: `compactions.jsonl` in its
//! directory, one record per line, appended and synced before the engine
//! is told it is stored. It goes with its agent (a delete, a fork, an
//! export). The file is cut back to the last [`KEEP`] records once it holds
//! twice as many, in one atomic rewrite, so its size is bounded and a
//! rewrite is rare.

use std::path::Path;

use engram_core::AgentId;
use engram_core::compaction::CompactionRecord;
use engram_core::compaction::log::KEEP;

use crate::jsonl::{self, append_sync, atomic_write, line, lines};
use crate::{FileStore, Result, StoreError};

pub(crate) const COMPACTIONS: &str = "compactions.jsonl";

/// What the log's file holds, known once it was read: the last `seq`
/// and how many lines.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogCursor {
    last_seq: u64,
    lines: usize,
}

impl FileStore {
    pub(crate) async fn append_compaction(
        &self,
        id: &AgentId,
        record: CompactionRecord,
    ) -> Result<u64> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        if handle.is_retired() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let path = state.dir.join(COMPACTIONS);
        let cursor = state.compaction_log;
        let appended = engram_store::offload(move || append(&path, cursor, record));
        // After a failure the file is read again: a cut that failed may
        // follow an append that did not.
        state.compaction_log = appended.as_ref().ok().map(|(_, c)| *c);
        appended.map(|(seq, _)| seq)
    }

    pub(crate) async fn read_compaction_log(
        &self,
        id: &AgentId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<CompactionRecord>> {
        self.read_locked(id, COMPACTIONS, move |path| {
            let (all, _) = jsonl::load::<CompactionRecord>(&path)?;
            Ok(newest_first(all, limit, before))
        })
        .await
    }
}

/// Appends `record` to the log at `path` (whose `cursor` is known, or read
/// now) with the next `seq`, and cuts the file back to the last [`KEEP`]
/// once it holds twice as many. Blocking.
fn append(
    path: &Path,
    cursor: Option<LogCursor>,
    mut record: CompactionRecord,
) -> Result<(u64, LogCursor)> {
    let mut cursor = match cursor {
        Some(c) => c,
        None => read_cursor(path)?,
    };
    record.seq = cursor.last_seq + 1;
    append_sync(path, &line(&record))?;
    cursor.last_seq = record.seq;
    cursor.lines += 1;
    if cursor.lines >= 2 * KEEP {
        let (mut all, _) = jsonl::load::<CompactionRecord>(path)?;
        all.drain(..all.len().saturating_sub(KEEP));
        atomic_write(path, &lines(&all))?;
        cursor.lines = all.len();
    }
    Ok((record.seq, cursor))
}

/// The last `seq` and the line count of the file at `path` (none yet: 0).
/// A torn last line (a crash mid-append) is repaired by the load.
fn read_cursor(path: &Path) -> Result<LogCursor> {
    let (all, _) = jsonl::load::<CompactionRecord>(path)?;
    Ok(LogCursor {
        last_seq: all.iter().map(|r| r.seq).max().unwrap_or(0),
        lines: all.len(),
    })
}

/// At most `limit` of `records` (in stored order) below `before`, newest
/// first.
fn newest_first(
    records: Vec<CompactionRecord>,
    limit: usize,
    before: Option<u64>,
) -> Vec<CompactionRecord> {
    records
        .into_iter()
        .rev()
        .filter(|r| before.is_none_or(|b| r.seq < b))
        .take(limit)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at: f64) -> CompactionRecord {
        serde_json::from_value(serde_json::json!({
            "seq": 0, "at": at, "duration_secs": 0.1, "outcome": "summarized",
            "trigger": "estimate", "tokens_before": 10, "tokens_after": 5
        }))
        .unwrap()
    }

    #[test]
    fn the_file_is_cut_back_to_the_last_records_and_numbers_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(COMPACTIONS);
        let full: Vec<CompactionRecord> = (1..2 * KEEP as u64)
            .map(|seq| CompactionRecord {
                seq,
                ..record(seq as f64)
            })
            .collect();
        atomic_write(&path, &lines(&full)).unwrap();
        // One short of the cut: read from the file, then appended.
        let (seq, cursor) = append(&path, None, record(0.5)).unwrap();
        assert_eq!(seq, 2 * KEEP as u64);
        assert_eq!(cursor.lines, KEEP, "cut back");
        let (kept, _) = jsonl::load::<CompactionRecord>(&path).unwrap();
        assert_eq!(kept.len(), KEEP);
        assert_eq!(kept[0].seq, KEEP as u64 + 1, "the oldest went");
        assert_eq!(kept.last().unwrap().seq, seq);
        let (next, cursor) = append(&path, Some(cursor), record(0.6)).unwrap();
        assert_eq!((next, cursor.lines), (seq + 1, KEEP + 1));
        let newest = newest_first(jsonl::load(&path).unwrap().0, 2, None);
        assert_eq!(
            newest.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [next, seq]
        );
    }
}
