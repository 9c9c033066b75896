//! A user's facts in the database: one `user_facts` row per fact (its last
//! version), and its last summarized conversation (`user_conversations`).
//! A fold is one transaction under the user's advisory lock (the one its
//! blocks' writers and DeleteUser take), holding the agent's row so that
//! an erasure of the user waits for it or comes first. And the start of a
//! user's new conversation, which shows that last conversation.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use engram_core::blocks::Scope;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::users::consolidate::{Consolidated, ConsolidationRecord, Plan};
use engram_core::users::{self, Folded, LastConversation, UserFact};
use engram_core::{AgentId, UserId};
use engram_store::{Result, StoreError, UserMemory};

use crate::user_fact_changes::{load, store_row};
use crate::{PgStore, db};

#[async_trait]
impl UserMemory for PgStore {
    async fn user_facts(&self, user: &UserId) -> Result<Vec<UserFact>> {
        let mut conn = self
            .inner
            .pool
            .acquire()
            .await
            .map_err(db("reading a user's facts"))?;
        load(&mut conn, user).await
    }

    async fn note_used(&self, used: &[(AgentId, f64)]) -> Result<()> {
        let mut used: Vec<(&str, f64)> = used
            .iter()
            .filter(|(_, t)| t.is_finite())
            .map(|(id, t)| (id.as_str(), *t))
            .collect();
        if used.is_empty() {
            return Ok(());
        }
        // One row per agent in one statement (ON CONFLICT may not touch a
        // row twice), in id order so that two replicas' notes never wait
        // on each other in a circle.
        used.sort_by(|a, b| a.0.cmp(b.0).then(b.1.total_cmp(&a.1)));
        used.dedup_by(|a, b| a.0 == b.0);
        let (ids, times): (Vec<&str>, Vec<f64>) = used.into_iter().unzip();
        sqlx::query(
            "INSERT INTO quiet_agents (agent_id, used_at)
             SELECT * FROM unnest($1::text[], $2::float8[])
             ON CONFLICT (agent_id) DO UPDATE
                 SET used_at = greatest(quiet_agents.used_at, EXCLUDED.used_at)",
        )
        .bind(&ids)
        .bind(&times)
        .execute(&self.inner.pool)
        .await
        .map_err(db("noting agents used"))?;
        Ok(())
    }

    async fn take_quiet(&self, before: f64) -> Result<Vec<AgentId>> {
        // DELETE … RETURNING: a row goes to one replica only.
        let ids: Vec<String> =
            sqlx::query_scalar("DELETE FROM quiet_agents WHERE used_at <= $1 RETURNING agent_id")
                .bind(before)
                .fetch_all(&self.inner.pool)
                .await
                .map_err(db("taking quiet agents"))?;
        Ok(ids
            .iter()
            .filter_map(|id| AgentId::parse(id).ok())
            .collect())
    }

    async fn consolidate_user(
        &self,
        user: &UserId,
        plan: &Plan,
        record: ConsolidationRecord,
    ) -> Result<(Consolidated, ConsolidationRecord)> {
        self.consolidate(user, plan, record).await
    }

    async fn consolidations(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ConsolidationRecord>> {
        self.read_consolidations(user, limit).await
    }

    async fn fold_into_user(
        &self,
        user: &UserId,
        agent: &AgentId,
        items: &[SemanticItem],
        summaries: &[EpisodicItem],
    ) -> Result<Folded> {
        let mut tx = self.begin().await?;
        crate::lock_scope(&mut tx, &Scope::User(user.clone())).await?;
        let owned: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM agents WHERE id = $1 AND user_id = $2 FOR SHARE")
                .bind(agent.as_str())
                .bind(user.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db("reading an agent"))?;
        if owned.is_none() {
            return Err(StoreError::NotFound(agent.to_string()));
        }
        let (items, summaries) = as_stored(&mut tx, agent.as_str(), items, summaries).await?;
        let (items, summaries) = (items.as_slice(), summaries.as_slice());
        let known = load(&mut tx, user).await?;
        let bytes: usize = known.iter().map(|f| f.fact.fact.len()).sum();
        let folded = engram_store::offload_over(bytes as u64, || {
            users::fold(&known, agent.as_str(), items, engram_store::new_id)
        });
        for fact in &folded.changed {
            store_row(&mut tx, user, fact).await?;
        }
        if let Some(last) = LastConversation::of(agent.as_str(), summaries) {
            sqlx::query(
                "INSERT INTO user_conversations (user_id, last) VALUES ($1, $2)
                 ON CONFLICT (user_id) DO UPDATE SET last = excluded.last",
            )
            .bind(user.as_str())
            .bind(serde_json::to_string(&last).expect("summaries serialize"))
            .execute(&mut *tx)
            .await
            .map_err(db("storing a user's last conversation"))?;
        }
        tx.commit().await.map_err(db("storing a user's facts"))?;
        Ok(folded)
    }

    async fn last_conversation(&self, user: &UserId) -> Result<Option<LastConversation>> {
        read_last(&self.inner.pool, user).await
    }
}

impl PgStore {
    /// The first epoch's snapshot, stored under the agent's row lock; a new
    /// generation, so that every replica's cache rebuilds its transcript.
    pub(crate) async fn first_epoch(
        &self,
        id: &AgentId,
        snapshot: Option<String>,
    ) -> Result<Option<engram_store::AgentContext>> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let tx = self.lock_existing(id, &mut slot).await?;
        let cached = slot.as_mut().expect("current");
        let Some(meta) = cached.derived.first_epoch_meta(snapshot) else {
            return Ok(None);
        };
        let cached =
            crate::compact::new_epoch(tx, id, &mut slot, meta, "starting a conversation").await?;
        Ok(Some(crate::read::context_of(cached)))
    }
}

/// Of `items` and `summaries` (the agent's, as its caller read them), what
/// the agent's rows still hold, read under the agent's row (held by the
/// fold): a fold that read them before a forget must not bring back what
/// it erased. Left out: a live fact whose row is deleted; a summary that
/// is hidden, whose row is hidden or says something else, or that names
/// traces and has no row (a summary of nothing stored is the caller's
/// own and kept, as a fact without a row).
async fn as_stored(
    tx: &mut sqlx::PgConnection,
    agent: &str,
    items: &[SemanticItem],
    summaries: &[EpisodicItem],
) -> Result<(Vec<SemanticItem>, Vec<EpisodicItem>)> {
    let ids: Vec<&str> = items
        .iter()
        .filter(|f| f.is_live())
        .map(|f| f.id.as_str())
        .chain(summaries.iter().map(|e| e.id.as_str()))
        .collect();
    let rows: Vec<(i8, String, String)> = if ids.is_empty() {
        vec![]
    } else {
        sqlx::query_as("SELECT kind, id, body FROM memories WHERE agent_id = $1 AND id = ANY($2)")
            .bind(agent)
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(db("reading an agent's memories"))?
    };
    let mut deleted: HashSet<String> = HashSet::new();
    let mut stored: HashMap<String, EpisodicItem> = HashMap::new();
    for (kind, id, body) in rows {
        if kind as u8 == b'e' {
            stored.insert(id, crate::parse(agent, "summary", &body)?);
        } else if crate::parse::<SemanticItem>(agent, "fact", &body)?
            .managed
            .deleted_at
            .is_some()
        {
            deleted.insert(id);
        }
    }
    let items = items
        .iter()
        .filter(|f| !f.is_live() || !deleted.contains(&f.id))
        .cloned()
        .collect();
    let summaries = summaries
        .iter()
        .filter(|e| e.is_shown())
        .filter(|e| match stored.get(&e.id) {
            // Hidden or rewritten since the caller read it.
            Some(row) => row.is_shown() && row.summary == e.summary && row.tags == e.tags,
            None => e.source.trace_ids.is_empty(),
        })
        .cloned()
        .collect();
    Ok((items, summaries))
}

/// The user's last conversation, read through `conn` (the pool, or a
/// transaction's snapshot).
pub(crate) async fn read_last<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    user: &UserId,
) -> Result<Option<LastConversation>> {
    let last: Option<String> =
        sqlx::query_scalar("SELECT last FROM user_conversations WHERE user_id = $1")
            .bind(user.as_str())
            .fetch_optional(conn)
            .await
            .map_err(db("reading a user's last conversation"))?;
    last.map(|l| {
        serde_json::from_str(&l)
            .map_err(|e| crate::broken(format!("a user's last conversation does not parse: {e}")))
    })
    .transpose()
}
