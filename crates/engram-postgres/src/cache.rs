//! A replica's cache of an agent, and how a call brings it current: the
//! agent row says which incarnation, generation and version the database
//! holds; a cache of the same incarnation and generation catches up by
//! folding in the traces written since (`seq >= next_seq`), any other is
//! loaded afresh.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::{RawTrace, TurnTracker};
use engram_store::AgentMeta;
use engram_store::derived::Derived;
use engram_store::{Result, StoreError};
use sqlx::{PgConnection, Row};
use tokio::sync::{Mutex as AsyncMutex, MutexGuard};
use uuid::Uuid;

use crate::{PgStore, db};

/// One agent's cache; its lock keeps this replica's calls on the agent one
/// at a time (the database's row lock does so across replicas).
#[derive(Debug, Default)]
pub(crate) struct Handle {
    state: AsyncMutex<Option<Cached>>,
    /// Seconds since the store opened, at the last use (for eviction).
    pub last_used: AtomicU64,
    /// The agent's vectors, for searches.
    pub vectors: crate::vectors::VectorSlot,
    /// The cache's memory as last estimated.
    bytes: AtomicU64,
}

pub(crate) type Slot<'a> = MutexGuard<'a, Option<Cached>>;

/// What this replica knows of an agent, and as of which write.
#[derive(Debug)]
pub(crate) struct Cached {
    pub incarnation: Uuid,
    pub version: i64,
    pub generation: i64,
    /// The place of the next trace: everything before it is folded in.
    pub next_seq: i64,
    pub derived: Derived,
}

/// The agent row's counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row0 {
    pub incarnation: Uuid,
    pub version: i64,
    pub generation: i64,
    pub next_seq: i64,
}

/// Whether a call takes the agent row's lock (writes) or not (reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock {
    Update,
    Read,
}

impl PgStore {
    pub(crate) fn handle(&self, id: &str) -> Arc<Handle> {
        let mut agents = engram_store::lock(&self.inner.agents);
        let handle = Arc::clone(agents.entry(id.to_owned()).or_default());
        handle
            .last_used
            .store(self.inner.opened.elapsed().as_secs(), Ordering::Relaxed);
        handle
    }

    /// Drops the caches of agents unused for `idle` that nobody holds.
    pub(crate) fn evict_idle(&self, idle: std::time::Duration) {
        let now = self.inner.opened.elapsed().as_secs();
        let mut agents = engram_store::lock(&self.inner.agents);
        agents.retain(|_, h| {
            let fresh = now.saturating_sub(h.last_used.load(Ordering::Relaxed)) < idle.as_secs();
            fresh
                || Arc::strong_count(h) > 1
                || h.state.try_lock().is_err()
                || h.vectors.try_lock().is_err()
        });
    }

    /// The cached agents' memory, estimated (the engine's memory budget),
    /// and the vocabularies and word vectors of query expansion (bounded;
    /// unloading agents does not shrink them).
    pub(crate) fn memory_bytes(&self) -> u64 {
        let handles: Vec<Arc<Handle>> = engram_store::lock(&self.inner.agents)
            .values()
            .map(Arc::clone)
            .collect();
        let words = self
            .inner
            .words
            .as_ref()
            .map_or(0, |w| engram_store::read(w).memory_bytes() as u64);
        let expansion = words + self.inner.vocabulary.bytes();
        handles.iter().map(|h| h.memory()).sum::<u64>() + expansion
    }

    /// Drops the caches nobody holds, least recently used first, until the
    /// estimates sum to at most `target`; their next call loads them again.
    pub(crate) fn shrink_to(&self, target: u64) -> Vec<engram_core::AgentId> {
        let mut cached: Vec<(String, Arc<Handle>, u64, u64)> =
            engram_store::lock(&self.inner.agents)
                .iter()
                .map(|(id, h)| {
                    (
                        id.clone(),
                        Arc::clone(h),
                        h.last_used.load(Ordering::Relaxed),
                        0,
                    )
                })
                .collect();
        for entry in &mut cached {
            entry.3 = entry.1.memory();
        }
        let mut total: u64 = cached.iter().map(|e| e.3).sum();
        cached.sort_by_key(|e| e.2);
        let mut dropped = vec![];
        let mut agents = engram_store::lock(&self.inner.agents);
        for (id, handle, _, bytes) in cached {
            if total <= target {
                break;
            }
            // Only the map and this list hold it, and nothing is locked:
            // no call or background work uses it.
            let unused = agents.get(&id).is_some_and(|h| Arc::ptr_eq(h, &handle))
                && Arc::strong_count(&handle) == 2
                && handle.state.try_lock().is_ok()
                && handle.vectors.try_lock().is_ok();
            if unused && let Ok(agent) = engram_core::AgentId::parse(&id) {
                agents.remove(&id);
                total = total.saturating_sub(bytes);
                dropped.push(agent);
            }
        }
        if !dropped.is_empty() {
            metrics::counter!("engram_memory_unloads_total").increment(dropped.len() as u64);
        }
        dropped
    }

    /// Forgets the cache of `id` (after its deletion).
    pub(crate) fn forget(&self, id: &str) {
        engram_store::lock(&self.inner.agents).remove(id);
        self.inner.vocabulary.forget(id);
    }
}

impl Handle {
    pub async fn lock(&self) -> Slot<'_> {
        self.state.lock().await
    }

    /// The cache's memory, estimated: refreshed when it is free, else as
    /// last seen (it is in use, so not dropped anyway).
    fn memory(&self) -> u64 {
        /// A cached agent with nothing in it.
        const BASE: u64 = 16 << 10;
        /// Per trace: the struct, its ids, its stored body's fields.
        const PER_TRACE: u64 = 640;
        /// Per byte of the traces' text: the text, the transcript's copy.
        const PER_TEXT_BYTE: u64 = 3;
        let state = self.state.try_lock().ok().map(|s| {
            s.as_ref().map_or(0, |c| {
                let traces = &c.derived.traces;
                BASE + PER_TRACE * traces.len() as u64 + PER_TEXT_BYTE * bytes_of(traces)
            })
        });
        let vectors = self
            .vectors
            .try_lock()
            .ok()
            .map(|v| v.as_ref().map_or(0, |v| v.vectors.memory_bytes() as u64));
        if let (Some(state), Some(vectors)) = (state, vectors) {
            self.bytes.store(state + vectors, Ordering::Relaxed);
        }
        self.bytes.load(Ordering::Relaxed)
    }
}

/// Brings `slot` to what the database holds for `id`, on `conn` (in a
/// transaction for [`Lock::Update`], which takes the agent row's lock
/// first). Returns whether the agent exists; the slot is `None` when it
/// does not.
pub(crate) async fn refresh(
    conn: &mut PgConnection,
    id: &str,
    slot: &mut Option<Cached>,
    lock: Lock,
) -> Result<bool> {
    let sql = match lock {
        Lock::Update => {
            "SELECT incarnation, version, generation, next_seq, meta FROM agents WHERE id = $1 FOR UPDATE"
        }
        Lock::Read => {
            "SELECT incarnation, version, generation, next_seq, meta FROM agents WHERE id = $1"
        }
    };
    let row = sqlx::query(sql)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("reading an agent"))?;
    let Some(row) = row else {
        *slot = None;
        return Ok(false);
    };
    let now = Row0 {
        incarnation: row.get(0),
        version: row.get(1),
        generation: row.get(2),
        next_seq: row.get(3),
    };
    // The settings are parsed only when the cache is behind them.
    let meta = || crate::parse(id, "settings", &row.get::<String, _>(4));
    match slot {
        Some(c) if c.incarnation == now.incarnation && c.generation == now.generation => {
            if c.version != now.version {
                catch_up(conn, id, c, now, meta()?).await?;
            }
        }
        _ => *slot = Some(load(conn, id, now, meta()?).await?),
    }
    Ok(true)
}

/// Folds in the traces written since the cache was current, and the
/// settings as they are now (appends change no setting a trace's place in
/// the transcript depends on: those change with the generation).
async fn catch_up(
    conn: &mut PgConnection,
    id: &str,
    cached: &mut Cached,
    now: Row0,
    meta: AgentMeta,
) -> Result<()> {
    let traces = traces_where(
        conn,
        id,
        "seq >= $2 AND seq < $3",
        cached.next_seq,
        now.next_seq,
    )
    .await?;
    cached.derived.meta = meta;
    fold(cached, traces, now.version, now.next_seq);
    Ok(())
}

/// Takes traces committed (or about to be, by the caller's transaction)
/// into the cache, now at `version` with `next` the place of the next
/// trace.
pub(crate) fn fold(cached: &mut Cached, traces: Vec<RawTrace>, version: i64, next: i64) {
    engram_store::offload_over(bytes_of(&traces), || {
        for trace in traces {
            cached.derived.note(&trace);
            cached.derived.traces.push(trace);
        }
    });
    cached.version = version;
    cached.next_seq = next;
}

/// About how much text `traces` hold: work over more runs off the async
/// workers.
pub(crate) fn bytes_of(traces: &[RawTrace]) -> u64 {
    traces.iter().map(|t| t.content.len() as u64).sum()
}

/// The agent as its rows are: settings, the turn state of the archive, the
/// active traces, summaries and facts.
async fn load(conn: &mut PgConnection, id: &str, now: Row0, meta: AgentMeta) -> Result<Cached> {
    // No row: deleted since its version was read; as after the delete.
    let turns: Option<String> = sqlx::query_scalar("SELECT turns FROM agents WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("reading an agent's turn state"))?
        .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
    let tracker = match turns {
        Some(turns) => crate::parse(id, "turn state", &turns)?,
        None => {
            // No compaction yet, or a checkpoint lost by hand: the archive
            // (if any) is replayed.
            let archived = traces_where(
                conn,
                id,
                "archived AND seq >= $2 AND seq < $3",
                0,
                now.next_seq,
            )
            .await?;
            let mut tracker = TurnTracker::default();
            for t in &archived {
                tracker.apply(t);
            }
            tracker
        }
    };
    let traces = traces_where(
        conn,
        id,
        "NOT archived AND seq >= $2 AND seq < $3",
        0,
        now.next_seq,
    )
    .await?;
    let memories =
        sqlx::query("SELECT kind, body FROM memories WHERE agent_id = $1 ORDER BY kind, seq")
            .bind(id)
            .fetch_all(&mut *conn)
            .await
            .map_err(db("reading an agent's memories"))?;
    let mut episodic: Vec<EpisodicItem> = Vec::new();
    let mut semantic: Vec<SemanticItem> = Vec::new();
    for row in memories {
        let kind: i8 = row.get(0);
        let body: String = row.get(1);
        match kind as u8 {
            b'e' => episodic.push(crate::parse(id, "summary", &body)?),
            _ => semantic.push(crate::parse(id, "fact", &body)?),
        }
    }
    let derived = engram_store::offload_over(bytes_of(&traces), || {
        let mut derived = Derived::new(meta, tracker);
        for trace in &traces {
            derived.note(trace);
        }
        derived.traces = traces;
        derived.episodic = episodic;
        derived.semantic = semantic;
        derived.facts_changed(engram_store::unix_now());
        derived
    });
    Ok(Cached {
        incarnation: now.incarnation,
        version: now.version,
        generation: now.generation,
        next_seq: now.next_seq,
        derived,
    })
}

/// The agent's traces matching `filter` (over `$2`, `$3`), in order.
pub(crate) async fn traces_where(
    conn: &mut PgConnection,
    id: &str,
    filter: &str,
    a: i64,
    b: i64,
) -> Result<Vec<RawTrace>> {
    let sql = format!("SELECT body FROM traces WHERE agent_id = $1 AND {filter} ORDER BY seq");
    let rows: Vec<String> = sqlx::query_scalar(&sql)
        .bind(id)
        .bind(a)
        .bind(b)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading traces"))?;
    let bytes = rows.iter().map(|r| r.len() as u64).sum::<u64>();
    engram_store::offload_over(bytes, || {
        rows.iter().map(|r| crate::parse_trace(id, r)).collect()
    })
}
