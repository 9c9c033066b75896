//! A replica's copy of a user's vectors, for one search across the user's
//! conversations: every agent's vectors placed in its own range (its
//! ordinal, kept while the agent is the user's), caught up in one
//! statement per search with the rows numbered since each agent's last
//! (`vector_seq` is drawn in order per agent only, so each agent keeps its
//! own high-water mark). An agent made again under the same id (another
//! incarnation), or no longer the user's, leaves its range empty first.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use engram_core::UserId;
use engram_index::{Embedded, Kind, Vectors};
use engram_store::ranked::{key_of, range};
use engram_store::{Result, StoreError};
use sqlx::PgConnection;
use tokio::sync::Mutex as AsyncMutex;
use uuid::Uuid;

use crate::covered::{Covered, UserOrdinals};
use crate::vectors::decode;
use crate::{PgStore, db};

/// What a replica holds of one user.
#[derive(Debug, Default)]
pub(crate) struct UserCopy {
    pub placing: UserOrdinals,
    /// Each agent's incarnation and the highest `vector_seq` folded in.
    seen: HashMap<String, (Uuid, i64)>,
    /// The vectors, placed (none without a model).
    pub vectors: Option<Vectors>,
    /// Where each vector's place came from: (agent, `ord`).
    pub places: HashMap<u64, (String, i64)>,
}

/// A user's copy and when it was last used (seconds since the store
/// opened), for eviction.
#[derive(Debug, Default)]
pub(crate) struct UserSlot {
    pub copy: AsyncMutex<UserCopy>,
    last_used: AtomicU64,
}

/// A stored vector: agent, key, kind (0 trace, 1 summary, 2 fact), place,
/// time, trace type, the vector, its number, and whether its item is live.
type Row = (String, String, i16, i64, f64, i16, Vec<u8>, i64, bool);

impl PgStore {
    /// The replica's slot for `user`.
    pub(crate) fn user_slot(&self, user: &UserId) -> Arc<UserSlot> {
        let mut users = engram_store::lock(&self.inner.users);
        let slot = Arc::clone(users.entry(user.to_string()).or_default());
        slot.last_used
            .store(self.inner.opened.elapsed().as_secs(), Ordering::Relaxed);
        slot
    }

    /// Drops the copies of users unused for `idle` that nobody holds.
    pub(crate) fn evict_idle_users(&self, idle: std::time::Duration) {
        let now = self.inner.opened.elapsed().as_secs();
        engram_store::lock(&self.inner.users).retain(|_, slot| {
            now.saturating_sub(slot.last_used.load(Ordering::Relaxed)) < idle.as_secs()
                || Arc::strong_count(slot) > 1
        });
    }

    /// Forgets the copy of an erased user.
    pub(crate) fn forget_user(&self, user: &UserId) {
        engram_store::lock(&self.inner.users).remove(user.as_str());
    }

    /// `user`'s copy in `slot`, locked and caught up with the user's agents
    /// as they are now (one statement reads them, their incarnations and
    /// how many traces each holds) and their vectors as stored; and how
    /// many traces the user's agents hold.
    pub(crate) async fn caught_up_user<'s>(
        &self,
        conn: &mut PgConnection,
        slot: &'s UserSlot,
        user: &UserId,
    ) -> Result<(tokio::sync::MutexGuard<'s, UserCopy>, u64)> {
        let agents: Vec<(String, Uuid, i64)> = sqlx::query_as(
            "SELECT id, incarnation, next_seq FROM agents WHERE user_id = $1 ORDER BY id",
        )
        .bind(user.as_str())
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading a user's agents"))?;
        let traces = agents.iter().map(|a| a.2.max(0).unsigned_abs()).sum();
        let mut copy = slot.copy.lock().await;
        copy.placing.user = user.to_string();
        self.catch_up(conn, &mut copy, agents).await?;
        Ok((copy, traces))
    }

    /// Brings `copy` to the user's `agents` (id, incarnation; sorted) and
    /// their vectors as stored.
    async fn catch_up(
        &self,
        conn: &mut PgConnection,
        copy: &mut UserCopy,
        agents: Vec<(String, Uuid, i64)>,
    ) -> Result<()> {
        let ids = agents.iter().map(|a| a.0.clone()).collect();
        for ordinal in copy.placing.update(ids) {
            forget_range(copy, ordinal)?;
        }
        let placing = &copy.placing;
        copy.seen.retain(|a, _| placing.ordinal(a).is_some());
        let Some(embedder) = self.embedder() else {
            return Ok(());
        };
        // The store's model is fixed: a copy is made with it once.
        copy.vectors
            .get_or_insert_with(|| Vectors::in_memory(embedder.model(), embedder.dim()));
        for (agent, incarnation, _) in agents {
            let known = copy.seen.get(&agent).map(|(was, _)| *was);
            if known == Some(incarnation) {
                continue;
            }
            if known.is_some() {
                // Made again under the same id: its old vectors go.
                if let Some(ordinal) = copy.placing.ordinal(&agent) {
                    forget_range(copy, ordinal)?;
                }
            }
            copy.seen.insert(agent, (incarnation, 0));
        }
        let (agents, seen): (Vec<&str>, Vec<i64>) =
            copy.seen.iter().map(|(a, (_, s))| (a.as_str(), *s)).unzip();
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT t.agent_id, t.trace_id, 0::smallint, t.ord, t.ts, t.trace_type, t.vector, t.vector_seq, true
             FROM unnest($1::text[], $2::bigint[]) AS s(a, seen)
             JOIN traces t ON t.agent_id = s.a AND t.vector_seq > s.seen
             WHERE t.vector_model = $3
             UNION ALL
             SELECT m.agent_id, m.id, CASE WHEN m.kind = 'e' THEN 1::smallint ELSE 2::smallint END,
                    m.ord, m.ts, 0::smallint, m.vector, m.vector_seq, m.live
             FROM unnest($1::text[], $2::bigint[]) AS s(a, seen)
             JOIN memories m ON m.agent_id = s.a AND m.vector_seq > s.seen
             WHERE m.vector_model = $3",
        )
        .bind(&agents)
        .bind(&seen)
        .bind(engram_store::vector_model(embedder.model()))
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading a user's vectors"))?;
        let dim = embedder.dim();
        let who = Covered::User(&copy.placing);
        let (mut add, mut gone) = (Vec::new(), Vec::new());
        for (agent, key, kind, ord, ts, trace_type, vector, seq, live) in rows {
            if let Some(s) = copy.seen.get_mut(&agent) {
                s.1 = s.1.max(seq);
            }
            let kind = match kind {
                1 => Kind::Episodic,
                2 => Kind::Semantic,
                _ => Kind::Trace,
            };
            let key = key_of(&agent, &key);
            let place = who.place(&agent, ord);
            match decode(&vector, dim).filter(|_| live) {
                Some(vector) => {
                    if kind == Kind::Trace {
                        copy.places.insert(place, (agent, ord));
                    }
                    add.push(Embedded {
                        key,
                        kind,
                        trace_type: u8::try_from(trace_type).unwrap_or(0),
                        order: place,
                        ts,
                        vector,
                    });
                }
                None => gone.push(key),
            }
        }
        if !add.is_empty() || !gone.is_empty() {
            let gone: Vec<&str> = gone.iter().map(String::as_str).collect();
            let vectors = copy.vectors.as_mut().expect("made above");
            engram_store::offload_over((add.len() * dim * 4) as u64, || vectors.write(&add, &gone))
                .map_err(|e| StoreError::Index(e.to_string()))?;
        }
        Ok(())
    }
}

/// Empties the range of conversation `ordinal` (an agent gone, or made
/// again).
fn forget_range(copy: &mut UserCopy, ordinal: u32) -> Result<()> {
    let (lo, hi) = range(ordinal);
    copy.places.retain(|p, _| *p < lo || *p > hi);
    if let Some(vectors) = copy.vectors.as_mut() {
        let keys = vectors.keys_between(lo, hi);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        vectors
            .write(&[], &keys)
            .map_err(|e| StoreError::Index(e.to_string()))?;
    }
    Ok(())
}
