//! A user's consolidation on files: the plan applied to
//! `users/<id>/facts.jsonl` (its changed facts appended and synced, as a
//! fold's), then the run's record appended to `consolidations.jsonl`
//! beside it, under the user's lock. A crash between the two loses only
//! the record: the facts are whole either way (a torn line is repaired
//! at the next read), and a run again finds nothing left to do. The log
//! is cut back to the last `LOG_KEEP` records once it holds twice as many.

use std::path::Path;
use std::sync::Arc;

use engram_core::UserId;
use engram_core::users::consolidate::{self, Consolidated, ConsolidationRecord, LOG_KEEP, Plan};

use crate::fact_file::FACTS;
use crate::jsonl::{self, append_sync, atomic_write, line, lines};
use crate::{FileStore, Result, StoreError};

pub(crate) const CONSOLIDATIONS: &str = "consolidations.jsonl";

impl FileStore {
    pub(crate) async fn consolidate(
        &self,
        user: &UserId,
        plan: &Plan,
        record: ConsolidationRecord,
    ) -> Result<(Consolidated, ConsolidationRecord)> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let mut shared = slot.lock().await;
        let dir = self.user_dir(user);
        let path = dir.join(FACTS);
        let facts = shared.facts(path.clone()).await?;
        let known = Arc::clone(&facts.all);
        let plan = plan.clone();
        let (done, appended, record) = engram_store::blocking(move || {
            let done = consolidate::apply(&known, &plan);
            let bytes = lines(&done.changed);
            if !bytes.is_empty() {
                append_sync(&path, &bytes)?;
            }
            let mut record = record;
            record.counts = done.counts;
            record.done = done.done.clone();
            std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
            let record = append(&dir.join(CONSOLIDATIONS), record)?;
            Ok::<_, StoreError>((done, bytes.len() as u64, record))
        })
        .await?;
        facts.len += appended;
        facts.record(done.changed.iter().cloned());
        Ok((done, record))
    }

    pub(crate) async fn read_consolidations(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ConsolidationRecord>> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        let path = self.user_dir(user).join(CONSOLIDATIONS);
        engram_store::blocking(move || {
            let (mut all, _) = jsonl::load::<ConsolidationRecord>(&path)?;
            all.reverse();
            all.truncate(limit);
            Ok(all)
        })
        .await
    }
}

/// Appends `record` with the next `seq` to the log at `path`, cutting it
/// back to the last [`LOG_KEEP`] once it holds twice as many. Blocking.
fn append(path: &Path, mut record: ConsolidationRecord) -> Result<ConsolidationRecord> {
    let (mut all, _) = jsonl::load::<ConsolidationRecord>(path)?;
    record.seq = all.last().map_or(0, |r| r.seq) + 1;
    append_sync(path, &line(&record))?;
    all.push(record.clone());
    if all.len() >= 2 * LOG_KEEP {
        let keep = &all[all.len() - LOG_KEEP..];
        atomic_write(path, &lines(keep))?;
    }
    Ok(record)
}
