//! Compaction on the database. `begin` takes a lease in the agent row (one
//! summarizer per agent across replicas, `leases.rs`) and hands out the job; the
//! summarizer runs with no transaction open; `finish` commits everything
//! in one transaction under the row lock — summary and facts stored, the
//! window's traces flagged archived, the new epoch's settings and the turn
//! checkpoint, a new generation — after checking that the window is still
//! the agent's, so a job that raced another replica's compaction or
//! writes commits nothing.

use async_trait::async_trait;
use engram_core::AgentId;
use engram_core::compaction::{CompactionRecord, Summary};
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_store::intent::Intent;
use engram_store::{Begun, CommitStep, Committed, Compacts, Hidden, Hiding, Job, Policy, Result};
use sqlx::PgConnection;

use crate::cache::Cached;
use crate::leases::clear_lease;
use crate::read::context_of;
use crate::write::save_meta;
use crate::{PgStore, db};

#[async_trait]
impl Compacts for PgStore {
    async fn begin_compaction(&self, id: &AgentId, policy: Policy) -> Result<Begun> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let mut tx = self.lock_existing(id, &mut slot).await?;
        if self.leased(&mut tx, id.as_str()).await? {
            return Ok(Begun::Busy);
        }
        let cached = slot.as_ref().expect("current");
        let Some(job) = cached.derived.job(policy) else {
            return Ok(Begun::Nothing);
        };
        let until =
            Self::take_lease(&mut tx, id.as_str(), self.inner.config.compaction_lease).await?;
        tx.commit().await.map_err(db("taking a compaction lease"))?;
        self.lease_taken(id.as_str(), until);
        Ok(Begun::Job(job))
    }

    async fn abort_compaction(&self, id: &AgentId, failed: bool) -> Result<u32> {
        let aborted = self.abort(id, failed).await;
        self.leases().ended(id.as_str(), aborted.is_ok());
        aborted
    }

    async fn finish_compaction(
        &self,
        id: &AgentId,
        job: Job,
        summary: Option<Summary>,
        policy: Policy,
    ) -> Result<Committed> {
        let finished = self.finish(id, job, summary, policy).await;
        // A failure may have cleared the lease or not: an orphan that
        // was cleared is only forgotten.
        self.leases().ended(id.as_str(), finished.is_ok());
        finished
    }

    async fn hide_old(
        &self,
        id: &AgentId,
        hiding: Hiding,
        keep_turns: usize,
        opened: Option<u32>,
    ) -> Result<Option<Hidden>> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let mut tx = self.lock_existing(id, &mut slot).await?;
        if self.leased(&mut tx, id.as_str()).await? {
            // A new epoch now would make that summary's work stale.
            return Ok(None);
        }
        let cached = slot.as_mut().expect("current");
        let Some((meta, hidden)) = cached.derived.hide_meta(hiding, keep_turns, opened) else {
            return Ok(None);
        };
        let cached = new_epoch(tx, id, &mut slot, meta, hiding.as_str()).await?;
        tracing::info!(agent = %id, hidden, tier = hiding.as_str(), "hid old messages from the prompt");
        Ok(Some(Hidden {
            hidden,
            context: context_of(cached),
        }))
    }

    async fn record_compaction(&self, id: &AgentId, record: CompactionRecord) -> Result<u64> {
        self.append_compaction(id, &record).await
    }

    async fn compaction_log(
        &self,
        id: &AgentId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<CompactionRecord>> {
        self.read_compaction_log(id, limit, before).await
    }
}

impl PgStore {
    /// Clears the lease, counting a failure when `failed`.
    async fn abort(&self, id: &AgentId, failed: bool) -> Result<u32> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let mut tx = self.lock_existing(id, &mut slot).await?;
        clear_lease(&mut tx, id.as_str()).await?;
        let cached = slot.as_mut().expect("current");
        if failed {
            let meta = engram_store::AgentMeta {
                consecutive_failures: cached.derived.meta.consecutive_failures + 1,
                ..cached.derived.meta.clone()
            };
            if let Err(e) = save_meta(&mut tx, id.as_str(), cached, meta).await {
                *slot = None;
                return Err(e);
            }
        }
        let failures = cached.derived.meta.consecutive_failures;
        if let Err(e) = tx.commit().await {
            *slot = None;
            return Err(db("releasing a compaction lease")(e));
        }
        Ok(failures)
    }

    /// Commits the compaction, if its window is still the agent's.
    async fn finish(
        &self,
        id: &AgentId,
        job: Job,
        summary: Option<Summary>,
        policy: Policy,
    ) -> Result<Committed> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let mut tx = self.lock_existing(id, &mut slot).await?;
        clear_lease(&mut tx, id.as_str()).await?;
        let cached = slot.as_mut().expect("current");
        if let Err(stale) = cached.derived.check_current(&job) {
            tx.commit()
                .await
                .map_err(db("releasing a compaction lease"))?;
            return Err(stale.into());
        }
        let (intent, added, updated) = engram_store::offload(|| {
            cached.derived.commit_plan(
                &job,
                summary,
                policy,
                0,
                engram_store::unix_now(),
                engram_store::new_id,
            )
        });
        let meta = cached.derived.committed_meta(&intent);
        let written = self
            .write_commit(&mut tx, id.as_str(), cached, &intent, &meta)
            .await;
        let committed = match written {
            Ok(g) => tx
                .commit()
                .await
                .map(|()| g)
                .map_err(db("committing a compaction")),
            Err(e) => {
                // Rolled back now: the row lock must be free to release
                // the lease below.
                let _ = tx.rollback().await;
                Err(e)
            }
        };
        let generation = match committed {
            Ok(g) => g,
            Err(e) => {
                *slot = None;
                // The lease went back with the transaction.
                self.release_lease(id.as_str()).await;
                return Err(e);
            }
        };
        let cached = slot.as_mut().expect("current");
        let (version, generation) = generation;
        engram_store::drop_later(engram_store::offload(|| {
            cached.derived.adopt_commit(&intent, meta)
        }));
        cached.version = version;
        cached.generation = generation;
        tracing::info!(agent = %id, turns = intent.turn_ids.len(), epoch = cached.derived.meta.epoch, "compacted");
        engram_store::drop_later(job);
        Ok(Committed::of(
            intent,
            (added, updated),
            cached.derived.meta.epoch,
            context_of(cached),
        ))
    }

    /// The commit's statements; returns the agent's new version and
    /// generation.
    async fn write_commit(
        &self,
        tx: &mut PgConnection,
        id: &str,
        cached: &Cached,
        intent: &Intent,
        meta: &engram_store::AgentMeta,
    ) -> Result<(i64, i64)> {
        let faults = &self.inner.faults;
        // A superseded fact draws a vector_seq; its rows are written under
        // the same lock as the indexer's (after the agent's row, held).
        crate::vectors::lock_vector_writes(tx, vec![id]).await?;
        faults.check(CommitStep::Episodic)?;
        if let Some(item) = &intent.episodic {
            insert_episodic(tx, id, item).await?;
        }
        faults.check(CommitStep::Semantic)?;
        for fact in &intent.semantic {
            upsert_semantic(tx, id, fact).await?;
        }
        for item in intent.endings(&cached.derived.semantic) {
            upsert_semantic(tx, id, &item).await?;
        }
        faults.check(CommitStep::Archive)?;
        sqlx::query("UPDATE traces SET archived = true WHERE agent_id = $1 AND trace_id = ANY($2)")
            .bind(id)
            .bind(&intent.trace_ids)
            .execute(&mut *tx)
            .await
            .map_err(db("archiving traces"))?;
        faults.check(CommitStep::Finalize)?;
        // Every trace so far is in the tracker: a load takes it from here.
        let turns = serde_json::to_string(&cached.derived.tracker).expect("the tracker serializes");
        let row: (i64, i64) = sqlx::query_as(
            "UPDATE agents SET meta = $2, turns = $3, version = version + 1, generation = generation + 1
             WHERE id = $1 RETURNING version, generation",
        )
        .bind(id)
        .bind(crate::meta_json(meta))
        .bind(turns)
        .fetch_one(&mut *tx)
        .await
        .map_err(db("starting an epoch"))?;
        Ok(row)
    }
}

impl PgStore {
    /// Ends this replica's lease after a failed commit, so the next
    /// compaction need not wait for it to expire (best effort).
    async fn release_lease(&self, id: &str) {
        let released = async {
            let mut tx = self.begin().await?;
            clear_lease(&mut tx, id).await?;
            tx.commit()
                .await
                .map_err(db("releasing a compaction lease"))
        };
        if let Err(e) = released.await {
            tracing::warn!(agent = id, error = %e, "could not release a compaction lease; it expires by itself");
        }
    }
}

async fn insert_episodic(tx: &mut PgConnection, id: &str, e: &EpisodicItem) -> Result<()> {
    upsert_memory(tx, id, engram_store::episodic_item(e), true, None).await
}

pub(crate) async fn upsert_semantic(
    tx: &mut PgConnection,
    id: &str,
    f: &SemanticItem,
) -> Result<()> {
    let expires_at = f.managed.expires_at.filter(|_| !f.managed.pinned);
    upsert_memory(
        tx,
        id,
        engram_store::semantic_item(f),
        // Searchable unless deleted: a replaced or ended fact is found
        // with its span (DESIGN §15).
        f.managed.deleted_at.is_none(),
        expires_at,
    )
    .await
}

/// Stores a summary or fact (a later version of a fact replaces the
/// earlier in its place).
async fn upsert_memory(
    tx: &mut PgConnection,
    id: &str,
    item: engram_index::Item,
    live: bool,
    expires_at: Option<f64>,
) -> Result<()> {
    let kind = match item.kind {
        engram_index::Kind::Episodic => b'e',
        _ => b's',
    };
    sqlx::query(
        "INSERT INTO memories (agent_id, kind, id, body, ord, ts, live, words, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, to_tsvector('english', $8), $9)
         ON CONFLICT (agent_id, kind, id) DO UPDATE
         SET body = excluded.body, ord = excluded.ord, ts = excluded.ts, live = excluded.live, words = excluded.words,
             expires_at = excluded.expires_at,
             -- A fact superseded leaves the replicas' vectors too.
             vector_seq = CASE WHEN excluded.live THEN memories.vector_seq ELSE nextval('vector_seq') END",
    )
    .bind(id)
    .bind(kind as i8)
    .bind(&item.key)
    .bind(&item.body)
    .bind(item.order as i64)
    .bind(item.ts)
    .bind(live)
    .bind(crate::rows::item_words(&item))
    .bind(expires_at)
    .execute(&mut *tx)
    .await
    .map_err(db("storing a memory"))?;
    Ok(())
}

/// Stores `meta`, which starts a new transcript (microcompact, the first
/// epoch's start), in `tx` as a new generation (every replica's cache
/// rebuilds its transcript), commits, and adopts it in `slot`. An error
/// leaves the cache to be reloaded (committed or not, unknown).
pub(crate) async fn new_epoch<'s>(
    mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
    id: &AgentId,
    slot: &'s mut crate::cache::Slot<'_>,
    meta: engram_store::AgentMeta,
    what: &'static str,
) -> Result<&'s mut crate::cache::Cached> {
    let row: std::result::Result<(i64, i64), _> = sqlx::query_as(
        "UPDATE agents SET meta = $2, version = version + 1, generation = generation + 1
         WHERE id = $1 RETURNING version, generation",
    )
    .bind(id.as_str())
    .bind(crate::meta_json(&meta))
    .fetch_one(&mut *tx)
    .await;
    let committed = match row {
        Ok(row) => tx.commit().await.map(|()| row),
        Err(e) => Err(e),
    };
    let (version, generation) = match committed {
        Ok(row) => row,
        Err(e) => {
            **slot = None;
            return Err(db(what)(e));
        }
    };
    let cached = slot.as_mut().expect("current");
    cached.derived.meta = meta;
    engram_store::drop_later(cached.derived.rebuild_epoch());
    cached.version = version;
    cached.generation = generation;
    Ok(cached)
}
