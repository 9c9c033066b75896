//! Reads: a cache brought current without the agent row's lock, and what
//! Retrieve and the prompt take from it.

use async_trait::async_trait;
use engram_core::AgentId;
use engram_core::memory::EpisodicItem;
use engram_store::{AgentContext, Bundle, Reads, Result, StoreError};

use crate::cache::{Cached, Lock, Slot, refresh};
use crate::{PgStore, db};

#[async_trait]
impl Reads for PgStore {
    async fn context(&self, id: &AgentId) -> Result<AgentContext> {
        self.read(id, context_of).await
    }

    async fn bundle(&self, id: &AgentId, raw_tail_turns: usize) -> Result<Bundle> {
        let mut bundle = self.read(id, |c| c.derived.bundle(raw_tail_turns)).await?;
        // A summary a forget hid is shown nowhere until it is rewritten.
        bundle.episodic.retain(EpisodicItem::is_shown);
        Ok(bundle)
    }

    /// What the agent occupies, by table (rows' stored size), sorted.
    async fn file_sizes(&self, id: &AgentId) -> Result<Vec<(String, u64)>> {
        let rows: Vec<(String, Option<i64>)> = sqlx::query_as(
            "SELECT 'agents', sum(pg_column_size(a.*))::bigint FROM agents a WHERE id = $1
             UNION ALL SELECT 'memories', sum(pg_column_size(m.*))::bigint FROM memories m WHERE agent_id = $1
             UNION ALL SELECT 'spills', sum(pg_column_size(s.*))::bigint FROM spills s WHERE agent_id = $1
             UNION ALL SELECT 'traces', sum(pg_column_size(t.*))::bigint FROM traces t WHERE agent_id = $1",
        )
        .bind(id.as_str())
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("measuring an agent"))?;
        if rows.first().is_none_or(|(_, bytes)| bytes.is_none()) {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(rows
            .into_iter()
            .filter_map(|(name, bytes)| Some((name, u64::try_from(bytes?).ok()?)))
            .collect())
    }
}

impl PgStore {
    /// Brings `slot` current without taking the agent's row lock: for
    /// reads. A cache behind the database is caught up in one snapshot
    /// (repeatable read), so it never takes half of a write.
    pub(crate) async fn current(&self, id: &str, slot: &mut Slot<'_>) -> Result<bool> {
        let mut conn = self.conn().await?;
        let fresh: Option<(uuid::Uuid, i64, i64)> =
            sqlx::query_as("SELECT incarnation, version, generation FROM agents WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(db("reading an agent"))?;
        match (&fresh, slot.as_ref()) {
            (None, _) => {
                **slot = None;
                return Ok(false);
            }
            (Some((i, v, g)), Some(c))
                if c.incarnation == *i && c.version == *v && c.generation == *g =>
            {
                return Ok(true);
            }
            _ => {}
        }
        drop(conn);
        let mut tx = self.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db("starting a snapshot"))?;
        let exists = refresh(&mut tx, id, slot, Lock::Read).await?;
        tx.commit().await.map_err(db("ending a snapshot"))?;
        Ok(exists)
    }

    /// Runs `f` over the current agent (NOT_FOUND if there is none).
    pub(crate) async fn read<T>(&self, id: &AgentId, f: impl FnOnce(&Cached) -> T) -> Result<T> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        if !self.current(id.as_str(), &mut slot).await? {
            drop(slot);
            self.forget(id.as_str());
            return Err(StoreError::NotFound(id.to_string()));
        }
        let cached = slot.as_ref().expect("current");
        Ok(f(cached))
    }
}

/// The prompt as the cache holds it.
pub(crate) fn context_of(c: &Cached) -> AgentContext {
    c.derived.context(crate::cache::bytes_of(&c.derived.traces))
}
