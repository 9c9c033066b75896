//! Group commit of Ingest's common case across agents.
//!
//! Each Ingest of an agent whose cache is current is one append: traces to
//! insert if the agent row is still the version the cache is of. Appends
//! that arrive while the writers are busy are written together, in one
//! statement and one commit: the database's fixed cost per statement and
//! per commit (parse, plan, snapshot, the commit record and its flush) is
//! then shared by every agent in the group, which is most of what an
//! Ingest costs it. Nobody waits for a group to fill: a writer takes what
//! is queued when it is free, so under light load a group is one append
//! and the latency is a single statement's.
//!
//! Each append keeps its own check: an agent another replica wrote
//! meanwhile is left out of the group's write (its caller takes the locked
//! path), the others are written. A unique violation (another replica
//! stored the same event) fails the whole statement; every caller then
//! takes the locked path, which finds out whose it was.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use engram_store::{Result, StoreError};
use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;

use crate::rows::{TraceColumns, insert_traces_sql};

/// Appends in one group at most, and their traces (rows) at most: a
/// statement's parameters stay moderate.
const MAX_APPENDS: usize = 64;
const MAX_ROWS: usize = 1_024;

/// One agent's append: its traces, placed from the cache's `next_seq`,
/// written only if the row still has this incarnation, version and
/// generation.
pub(crate) struct Append {
    pub agent: String,
    pub incarnation: Uuid,
    pub version: i64,
    pub generation: i64,
    /// `next_seq` after the traces.
    pub next: i64,
    pub cols: TraceColumns,
}

/// What became of an append.
pub(crate) enum Appended {
    /// Written and committed: the agent's new version.
    Written(i64),
    /// Not written: the row moved on, or the group met another replica's
    /// write of the same event. The caller takes the locked path.
    Stale,
}

type Job = (Append, oneshot::Sender<Result<Appended>>);

/// The queue of appends and the writers that empty it.
#[derive(Debug)]
pub(crate) struct Group {
    queue: mpsc::UnboundedSender<Job>,
    counts: Arc<Counts>,
}

/// Groups written, and appends in them (the metrics' and the tests' view).
#[derive(Debug, Default)]
struct Counts {
    groups: AtomicU64,
    appends: AtomicU64,
    /// Appends sent and not yet taken by a writer.
    queued: AtomicU64,
    /// While true, a writer that took an append waits before it takes
    /// what else is queued (tests: a group of a known size).
    #[cfg(feature = "fault-injection")]
    held: tokio::sync::watch::Sender<bool>,
}

impl Group {
    /// Starts `writers` writers on `pool` (each holds one connection while
    /// it writes a group).
    pub(crate) fn start(pool: PgPool, writers: usize) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        let counts = Arc::new(Counts::default());
        for _ in 0..writers.max(1) {
            tokio::spawn(writer(pool.clone(), Arc::clone(&rx), Arc::clone(&counts)));
        }
        Self { queue, counts }
    }

    /// Groups written so far, and the appends in them.
    pub(crate) fn written(&self) -> (u64, u64) {
        (
            self.counts.groups.load(Ordering::Relaxed),
            self.counts.appends.load(Ordering::Relaxed),
        )
    }

    /// Appends waiting for a writer.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn queued(&self) -> u64 {
        self.counts.queued.load(Ordering::SeqCst)
    }

    /// Holds (true) or lets go (false) the next group: see `Counts::held`.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn hold(&self, held: bool) {
        self.counts.held.send_replace(held);
    }

    /// Writes `append` with whatever else is queued; returns once its
    /// group is committed (or failed).
    pub(crate) async fn append(&self, append: Append) -> Result<Appended> {
        let (tx, rx) = oneshot::channel();
        let gone = || StoreError::Unavailable {
            retry: true,
            detail: "database: the group writer stopped".into(),
        };
        self.counts.queued.fetch_add(1, Ordering::SeqCst);
        self.queue.send((append, tx)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// Takes what is queued (at least one append, waiting for it) and writes
/// it as one group, until the store is gone.
async fn writer(pool: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>, counts: Arc<Counts>) {
    loop {
        let mut group: Vec<Job> = vec![];
        {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            counts.queued.fetch_sub(1, Ordering::SeqCst);
            #[cfg(feature = "fault-injection")]
            {
                let mut held = counts.held.subscribe();
                let _ = held.wait_for(|held| !held).await;
            }
            let mut rows = first.0.cols.len();
            let mut agents = HashSet::from([first.0.agent.clone()]);
            group.push(first);
            while group.len() < MAX_APPENDS && rows < MAX_ROWS {
                let Ok(job) = rx.try_recv() else { break };
                counts.queued.fetch_sub(1, Ordering::SeqCst);
                // Two appends of one agent (a caller that went away left
                // one behind): the later one takes the locked path.
                if !agents.insert(job.0.agent.clone()) {
                    let _ = job.1.send(Ok(Appended::Stale));
                    continue;
                }
                rows += job.0.cols.len();
                group.push(job);
            }
        }
        counts.groups.fetch_add(1, Ordering::Relaxed);
        counts
            .appends
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        metrics::histogram!("engram_pg_ingest_group_appends").record(group.len() as f64);
        let (appends, answers): (Vec<Append>, Vec<_>) = group.into_iter().unzip();
        match write(&pool, appends).await {
            Ok(outcomes) => {
                for (answer, outcome) in answers.into_iter().zip(outcomes) {
                    let _ = answer.send(Ok(outcome));
                }
            }
            Err(e) => {
                for answer in answers {
                    let _ = answer.send(Err(e.clone().into()));
                }
            }
        }
    }
}

/// A failure shared by the group's callers.
#[derive(Clone)]
struct Failed {
    retry: bool,
    detail: String,
}

impl From<Failed> for StoreError {
    fn from(f: Failed) -> Self {
        StoreError::Unavailable {
            retry: f.retry,
            detail: f.detail,
        }
    }
}

/// The group in one statement: the rows still at the expected versions
/// locked (in id order, as every writer of several agents takes them),
/// their traces inserted, their versions and counters moved on.
async fn write(
    pool: &PgPool,
    mut appends: Vec<Append>,
) -> std::result::Result<Vec<Appended>, Failed> {
    if appends.len() == 1 {
        let one = appends.pop().expect("one");
        return Ok(vec![write_one(pool, one).await?]);
    }
    let n = appends.len();
    let mut ids = Vec::with_capacity(n);
    let mut incarnations = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut generations = Vec::with_capacity(n);
    let mut nexts = Vec::with_capacity(n);
    let mut owners = vec![];
    let mut cols = TraceColumns::default();
    for a in appends {
        owners.extend(std::iter::repeat_n(a.agent.clone(), a.cols.len()));
        cols.extend(a.cols);
        ids.push(a.agent);
        incarnations.push(a.incarnation);
        versions.push(a.version);
        generations.push(a.generation);
        nexts.push(a.next);
    }
    let statement = sqlx::query_as::<_, (String, i64)>(
        "WITH want AS (
           SELECT * FROM UNNEST($10::text[], $11::uuid[], $12::bigint[], $13::bigint[], $14::bigint[])
             AS w(id, incarnation, version, generation, next)),
         current AS (
           SELECT a.id, w.next FROM agents a
           JOIN want w ON a.id = w.id AND a.incarnation = w.incarnation
             AND a.version = w.version AND a.generation = w.generation
           ORDER BY a.id
           FOR UPDATE OF a),
         added AS (
           INSERT INTO traces (agent_id, seq, ord, trace_type, trace_id, event_id, ts, body, words)
           SELECT u.agent_id, u.seq, u.ord, u.trace_type, u.trace_id, u.event_id, u.ts, u.body,
                  to_tsvector('english', u.words)
           FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::smallint[], $5::text[],
                       $6::text[], $7::float8[], $8::text[], $9::text[])
             AS u(agent_id, seq, ord, trace_type, trace_id, event_id, ts, body, words)
           WHERE u.agent_id IN (SELECT id FROM current)
           RETURNING agent_id, length(words) AS lexemes),
         counted AS (
           SELECT agent_id, sum(lexemes) AS lexemes FROM added GROUP BY agent_id)
         UPDATE agents
         SET version = agents.version + 1, next_seq = c.next,
             words_total = agents.words_total + coalesce(counted.lexemes, 0)
         FROM current c LEFT JOIN counted ON counted.agent_id = c.id
         WHERE agents.id = c.id
         RETURNING agents.id, agents.version",
    )
    .bind(owners);
    let written: std::result::Result<Vec<(String, i64)>, sqlx::Error> = cols
        .bind(statement)
        .bind(&ids)
        .bind(incarnations)
        .bind(versions)
        .bind(generations)
        .bind(nexts)
        .fetch_all(pool)
        .await;
    let written = match written {
        Ok(rows) => rows,
        Err(sqlx::Error::Database(d)) if d.is_unique_violation() => {
            return Ok((0..n).map(|_| Appended::Stale).collect());
        }
        Err(e) => return Err(Failed::from(e)),
    };
    let versions: std::collections::HashMap<String, i64> = written.into_iter().collect();
    Ok(ids
        .iter()
        .map(|id| match versions.get(id) {
            Some(&version) => Appended::Written(version),
            None => Appended::Stale,
        })
        .collect())
}

/// A group of one (light load): the same write in the statement made for
/// one agent, which costs the database less than the group's joins.
async fn write_one(pool: &PgPool, one: Append) -> std::result::Result<Appended, Failed> {
    let statement = sqlx::query_as::<_, (i64,)>(concat!(
        "WITH current AS (
           SELECT 1 FROM agents
           WHERE id = $1 AND incarnation = $10 AND version = $11 AND generation = $12
           FOR UPDATE),
         added AS (",
        insert_traces_sql!(),
        " WHERE EXISTS (SELECT 1 FROM current)
           RETURNING length(words) AS lexemes)
         UPDATE agents
         SET version = version + 1, next_seq = $13,
             words_total = words_total + (SELECT coalesce(sum(lexemes), 0) FROM added)
         WHERE id = $1 AND EXISTS (SELECT 1 FROM current)
         RETURNING version",
    ))
    .bind(one.agent);
    let written = one
        .cols
        .bind(statement)
        .bind(one.incarnation)
        .bind(one.version)
        .bind(one.generation)
        .bind(one.next)
        .fetch_optional(pool)
        .await;
    match written {
        Ok(Some((version,))) => Ok(Appended::Written(version)),
        Ok(None) => Ok(Appended::Stale),
        Err(sqlx::Error::Database(d)) if d.is_unique_violation() => Ok(Appended::Stale),
        Err(e) => Err(Failed::from(e)),
    }
}

impl From<sqlx::Error> for Failed {
    fn from(e: sqlx::Error) -> Self {
        Failed {
            retry: crate::transient(&e),
            detail: format!("database: storing traces: {e}"),
        }
    }
}
