//! Forgetting, on PostgreSQL (`Forgets`): the traces of a turn or some
//! events erased from every row that holds them, with what was drawn from
//! them (`engram_core::forget`).
//!
//! A forget is one transaction, under the user's scope lock (taken first,
//! as a fold takes it) and the agent's row lock: the traces' rows deleted,
//! active and archived, with their stored tool results; the summaries
//! that covered them hidden or deleted; the facts of their windows deleted
//! as DeleteMemory deletes them; the user's last conversation without
//! those summaries; the turn checkpoint replayed from the archive without
//! them; the snapshot rendered again in a new epoch (`erase`). It commits
//! whole or not at all, so no intent is written down first (the file
//! store's `AgentMeta::forgetting` stays empty here): there is no
//! half-done forget to finish. Nor is anything left to purge (`unpurged`
//! stays empty): the rows are the search index, and deleting them is the
//! purge. The old text is then in no row; the row versions that held it
//! are dead, and VACUUM removes them (their bytes stay in the pages' free
//! space until overwritten: PostgreSQL does not zero it; only a rewrite
//! of the table, VACUUM FULL, does).
//!
//! The agent row takes a new incarnation: every replica's cache of the
//! agent and its copies of the agent's and the user's vectors start over
//! from the rows (a copy catches up by the rows numbered since, and would
//! never learn of rows deleted).
//!
//! A hidden summary is a summary row with `live` false (and its body's
//! `rewriting`): nothing ranks, embeds or copies it; migration 0007 finds
//! the agents with one.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use engram_core::blocks::Scope;
use engram_core::compaction::Summary;
use engram_core::forget::{self, Forget, ForgetIntent};
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::turns::turn_number;
use engram_core::{AgentId, RawTrace, TurnTracker, UserId};
use engram_store::derived::Derived;
use engram_store::{
    AgentMeta, Forgets, Forgotten, Policy, Result, RewriteJob, StoreError, new_id, unix_now,
};
use sqlx::PgConnection;

use crate::cache::{Lock, bytes_of, refresh, traces_where};
use crate::erase::{erase, store_summary};
use crate::{PgStore, db};

#[async_trait]
impl Forgets for PgStore {
    async fn forget(&self, id: &AgentId, what: &Forget, policy: Policy) -> Result<Forgotten> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let (mut tx, user) = self.lock_with_user(id, &mut slot).await?;
        let cached = slot.as_ref().expect("current");
        let archive = traces_where(
            &mut tx,
            id.as_str(),
            "archived AND seq >= $2 AND seq < $3",
            0,
            cached.next_seq,
        )
        .await?;
        let derived = &cached.derived;
        let now = unix_now();
        let planned = engram_store::offload_over(bytes_of(&archive), || {
            plan(what, &archive, derived, policy, now)
        });
        engram_store::drop_later(archive);
        let user_id = derived.meta.user_id.clone();
        let Some((intent, tracker)) = planned else {
            // Done before (or named nothing): nothing is written.
            return Ok(Forgotten {
                user_id,
                ..Forgotten::default()
            });
        };
        let out = Forgotten::of(&intent.erasure, &derived.semantic, user_id);
        // Nothing to purge later: the rows were the index.
        let meta = AgentMeta {
            unpurged: vec![],
            ..derived.meta.after_forget(&intent)
        };
        let who = (id.as_str(), user.as_ref());
        let gap = self.inner.config.ranking.session_gap;
        let erased = erase(&mut tx, who, &intent.erasure, &derived.semantic, (now, gap)).await;
        let erased = match erased {
            Ok(()) => new_incarnation(&mut tx, id.as_str(), &meta, &tracker).await,
            e => e,
        };
        let committed = match erased {
            Ok(()) => tx.commit().await.map_err(db("committing a forget")),
            Err(e) => Err(e),
        };
        // Every replica (this one too) loads the agent again.
        *slot = None;
        committed?;
        Ok(out)
    }

    async fn rewrite_jobs(&self, id: &AgentId) -> Result<Vec<RewriteJob>> {
        // Each hidden summary with the active traces it keeps; the
        // archived ones are read after, by id.
        let (hidden, known, user_id) = self
            .read(id, |c| {
                let d = &c.derived;
                let hidden: Vec<(EpisodicItem, Vec<RawTrace>)> = d
                    .episodic
                    .iter()
                    .filter(|e| !e.is_shown())
                    .map(|e| (e.clone(), forget::remaining(e, d.traces.iter())))
                    .collect();
                let known: Vec<SemanticItem> = if hidden.is_empty() {
                    vec![]
                } else {
                    d.semantic.iter().filter(|f| f.is_live()).cloned().collect()
                };
                (hidden, known, d.meta.user_id.clone())
            })
            .await?;
        if hidden.is_empty() {
            return Ok(vec![]);
        }
        let mut conn = self.conn().await?;
        let items: Vec<&EpisodicItem> = hidden.iter().map(|(e, _)| e).collect();
        let archive = archived_for(&mut conn, id.as_str(), &items).await?;
        Ok(hidden
            .into_iter()
            .map(|(item, active)| {
                let mut traces = forget::remaining(&item, archive.iter());
                // A compaction since the read archived some: kept once.
                let archived: HashSet<String> = traces.iter().map(|t| t.id.clone()).collect();
                traces.extend(active.into_iter().filter(|t| !archived.contains(&t.id)));
                RewriteJob {
                    item,
                    traces,
                    known_facts: known.clone(),
                    user_id: user_id.clone(),
                }
            })
            .collect())
    }

    async fn finish_rewrite(
        &self,
        id: &AgentId,
        job: &RewriteJob,
        summary: Summary,
        policy: Policy,
    ) -> Result<bool> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let mut tx = self.lock_existing(id, &mut slot).await?;
        let cached = slot.as_ref().expect("current");
        let derived = &cached.derived;
        // Still hidden, and from the same traces (no forget since).
        let Some(commit) =
            derived.rewrite_commit(&job.item, summary, &job.traces, policy, unix_now(), new_id)
        else {
            return Ok(false);
        };
        let written = rewritten(
            &mut tx,
            id.as_str(),
            &commit.episodic,
            &commit.lines,
            &commit.meta,
        )
        .await;
        let committed = match written {
            Ok(()) => tx.commit().await.map_err(db("committing a rewrite")),
            Err(e) => Err(e),
        };
        // Every replica (this one too) loads the memories again.
        *slot = None;
        committed?;
        tracing::info!(agent = %id, summary = %job.item.id, "summary rewritten after a forget");
        Ok(true)
    }

    /// Every agent with a hidden summary, by migration 0007's index.
    async fn awaiting_rewrite(&self) -> Result<Vec<AgentId>> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT agent_id FROM memories WHERE kind = 'e' AND NOT live ORDER BY 1",
        )
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("finding summaries to rewrite"))?;
        Ok(ids
            .iter()
            .filter_map(|id| AgentId::parse(id).ok())
            .collect())
    }
}

impl PgStore {
    /// A transaction holding the agent's user's scope lock (if it has a
    /// user), then the agent's row, then its vectors' lock, with `slot`
    /// current; NOT_FOUND for an agent that does not exist. The user's
    /// lock comes first, as a fold takes them; the vectors' after the
    /// row, as a compaction takes them (the deletes never wait on rows an
    /// indexer holds while that indexer waits on this transaction).
    async fn lock_with_user(
        &self,
        id: &AgentId,
        slot: &mut crate::cache::Slot<'_>,
    ) -> Result<(sqlx::Transaction<'static, sqlx::Postgres>, Option<UserId>)> {
        let mut user = self.user_of(id).await?;
        loop {
            let mut tx = self.begin().await?;
            if let Some(user) = &user {
                crate::lock_scope(&mut tx, &Scope::User(user.clone())).await?;
            }
            if !refresh(&mut tx, id.as_str(), slot, Lock::Update).await? {
                return Err(StoreError::NotFound(id.to_string()));
            }
            let meta = &slot.as_ref().expect("current").derived.meta;
            let bound = meta.user_id.as_deref().and_then(|u| UserId::parse(u).ok());
            if bound != user {
                // Bound to a user since it was read: that user's lock first.
                user = bound;
                continue;
            }
            crate::vectors::lock_vector_writes(&mut tx, vec![id.as_str()]).await?;
            return Ok((tx, user));
        }
    }

    /// The user the agent belongs to, read without a lock (to take the
    /// user's lock before the agent's); NOT_FOUND without the agent.
    async fn user_of(&self, id: &AgentId) -> Result<Option<UserId>> {
        let row: Option<Option<String>> =
            sqlx::query_scalar("SELECT user_id FROM agents WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(db("reading an agent"))?;
        match row {
            None => Err(StoreError::NotFound(id.to_string())),
            Some(user) => Ok(user.as_deref().and_then(|u| UserId::parse(u).ok())),
        }
    }
}

/// What forgetting `what` erases from the agent `derived` (its `archive`
/// read) at `now`, with the settings it ends with, and the turn state of
/// the archive without the erased traces: what a load would replay
/// without a checkpoint (the old one knew the erased events' ids and
/// calls; a retry of one is a new event now). `None`: nothing to erase.
fn plan(
    what: &Forget,
    archive: &[RawTrace],
    derived: &Derived,
    policy: Policy,
    now: f64,
) -> Option<(ForgetIntent, TurnTracker)> {
    let intent = derived.forget_intent(what, archive, policy, now)?;
    let mut tracker = TurnTracker::default();
    for trace in archive {
        if !intent.erasure.trace_ids.contains(&trace.id) {
            tracker.apply(trace);
        }
    }
    Some((intent, tracker))
}

/// Stores the settings, the turn checkpoint and a new incarnation (every
/// replica's cache and vector copies of the agent are void).
async fn new_incarnation(
    tx: &mut PgConnection,
    id: &str,
    meta: &AgentMeta,
    tracker: &TurnTracker,
) -> Result<()> {
    sqlx::query(
        "UPDATE agents SET meta = $2, turns = $3, incarnation = $4,
             version = version + 1, generation = generation + 1
         WHERE id = $1",
    )
    .bind(id)
    .bind(crate::meta_json(meta))
    .bind(serde_json::to_string(tracker).expect("the tracker serializes"))
    .bind(uuid::Uuid::now_v7())
    .execute(&mut *tx)
    .await
    .map_err(db("storing an agent after a forget"))?;
    Ok(())
}

/// A rewrite's statements: the summary shown again, the facts, the
/// settings (a new generation: every replica reloads the memories).
async fn rewritten(
    tx: &mut PgConnection,
    id: &str,
    summary: &EpisodicItem,
    facts: &[SemanticItem],
    meta: &AgentMeta,
) -> Result<()> {
    // New facts and the old summary's vector change: drawn in order.
    crate::vectors::lock_vector_writes(tx, vec![id]).await?;
    store_summary(tx, id, summary).await?;
    for fact in facts {
        crate::compact::upsert_semantic(tx, id, fact).await?;
    }
    sqlx::query(
        "UPDATE agents SET meta = $2, version = version + 1, generation = generation + 1
         WHERE id = $1",
    )
    .bind(id)
    .bind(crate::meta_json(meta))
    .execute(&mut *tx)
    .await
    .map_err(db("storing an agent after a rewrite"))?;
    Ok(())
}

/// The archived traces `items` name (by id; by turn, for items written
/// before provenance was kept), in order.
async fn archived_for(
    conn: &mut PgConnection,
    id: &str,
    items: &[&EpisodicItem],
) -> Result<Vec<RawTrace>> {
    let ids: Vec<&str> = items
        .iter()
        .flat_map(|e| e.source.trace_ids.iter().map(String::as_str))
        .collect();
    // A trace's place is its turn's number (0 for a turn id without one)
    // shifted up 32 bits: a turn's traces are one range of places.
    let mut turns: Vec<i64> = items
        .iter()
        .filter(|e| e.source.trace_ids.is_empty())
        .flat_map(|e| e.turn_ids.iter())
        .map(|t| i64::from(turn_number(t).unwrap_or(0)))
        .collect();
    turns.sort_unstable();
    turns.dedup();
    let mut rows: BTreeMap<i64, String> = BTreeMap::new();
    if !ids.is_empty() {
        let found: Vec<(i64, String)> = sqlx::query_as(
            "SELECT seq, body FROM traces WHERE agent_id = $1 AND archived AND trace_id = ANY($2)",
        )
        .bind(id)
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading traces to summarize"))?;
        rows.extend(found);
    }
    if !turns.is_empty() {
        let found: Vec<(i64, String)> = sqlx::query_as(
            "SELECT t.seq, t.body FROM unnest($2::bigint[]) AS n(turn)
             JOIN traces t ON t.agent_id = $1 AND t.archived
               AND t.ord >= n.turn << 32 AND t.ord < (n.turn + 1) << 32",
        )
        .bind(id)
        .bind(&turns)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading traces to summarize"))?;
        rows.extend(found);
    }
    rows.values().map(|b| crate::parse_trace(id, b)).collect()
}
