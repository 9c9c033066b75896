//! Embeddings on the database: every replica with a model runs an indexer
//! that claims items without a vector (a short claim, so replicas share the
//! work and one that dies mid-batch delays its items only until the claim
//! expires), embeds them off the write path, and stores each vector with
//! its item. A search scores the agent's vectors exactly in the replica,
//! from a copy kept per agent and caught up with the vectors numbered
//! since (`vector_seq`).

use std::sync::Arc;
use std::time::Duration;

use engram_core::embed::Embedder;
use engram_index::{Embedded, Item, Kind, Vectors};
use engram_store::{IndexState, Result, StoreError};
use sqlx::PgConnection;
use tokio::sync::Mutex as AsyncMutex;
use uuid::Uuid;

use crate::{PgStore, db};

/// Items per call to the model.
const BATCH: i64 = 32;
/// A claim older than this is another replica's that died: taken over.
const CLAIM_SECS: f64 = 120.0;
/// How often an idle indexer looks for work other replicas wrote.
const IDLE: Duration = Duration::from_millis(500);
/// Pause after the model failed before it is asked again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// A replica's copy of one agent's vectors.
#[derive(Debug)]
pub(crate) struct AgentVectors {
    incarnation: Uuid,
    /// The highest `vector_seq` folded in.
    seen: i64,
    pub vectors: Vectors,
}

/// A stored vector: key, kind (0 trace, 1 summary, 2 fact), place, time,
/// trace type, the vector, its number, and whether its item is live.
type VectorRow = (String, i16, i64, f64, i16, Vec<u8>, i64, bool);

/// An item claimed to embed: its agent, table, the item, and the text
/// it is read after (a trace's context, `engram_store::context_of`).
type Claimed = (String, &'static str, Item, Option<String>);

/// A claimed trace's row: its agent, body and time, and the body and time
/// of the trace before it.
type ClaimedTrace = (String, String, f64, Option<String>, Option<f64>);

/// Per agent, next to its cache.
pub(crate) type VectorSlot = AsyncMutex<Option<AgentVectors>>;

fn encode(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn decode(bytes: &[u8], dim: usize) -> Option<Vec<f32>> {
    (bytes.len() == dim * 4).then(|| {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    })
}

impl PgStore {
    pub(crate) fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.inner.config.embedder.as_ref()
    }

    /// Starts the indexer when there is a model.
    pub(crate) fn spawn_indexer(&self) {
        let Some(embedder) = self.embedder().cloned() else {
            return;
        };
        let store = self.clone();
        tokio::spawn(async move {
            let tag = engram_store::vector_model(embedder.model());
            if let Err(e) = store.forget_other_models(&tag).await {
                tracing::warn!(error = %e, "could not clear another model's vectors");
            }
            loop {
                match store.embed_some(embedder.as_ref()).await {
                    Ok(0) => tokio::time::sleep(IDLE).await,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "embedding failed; retrying");
                        tokio::time::sleep(RETRY_AFTER).await;
                    }
                }
            }
        });
    }

    /// Vectors of another model (or embedded otherwise: the tag
    /// `engram_store::vector_model` makes) are never compared with this
    /// one's: they are dropped, and their items embedded again (every
    /// replica of a deployment runs one model).
    async fn forget_other_models(&self, model: &str) -> Result<()> {
        for table in ["traces", "memories"] {
            let sql = format!(
                "UPDATE {table} SET vector = NULL, vector_model = NULL, vector_seq = nextval('vector_seq')
                 WHERE vector IS NOT NULL AND vector_model IS DISTINCT FROM $1"
            );
            let n = sqlx::query(&sql)
                .bind(model)
                .execute(&self.inner.pool)
                .await
                .map_err(db("dropping another model's vectors"))?
                .rows_affected();
            if n > 0 {
                tracing::info!(
                    table,
                    items = n,
                    model,
                    "the embedding model changed: re-embedding"
                );
            }
        }
        Ok(())
    }

    /// Claims, embeds and stores one batch; how many items it held.
    async fn embed_some(&self, embedder: &dyn Embedder) -> Result<usize> {
        let claimed = self.claim().await?;
        if claimed.is_empty() {
            return Ok(0);
        }
        let n = claimed.len();
        // Read for the model as `claim` made them: a trace with the text
        // before it.
        let items: Vec<(Item, Option<String>)> = claimed
            .iter()
            .map(|(_, _, item, before)| (item.clone(), before.clone()))
            .collect();
        let outcome = engram_store::embed_batch(embedder, items).await;
        if let Some(why) = &outcome.failed {
            // Released for a later try (by any replica).
            self.release(&claimed).await?;
            return Err(StoreError::Unavailable {
                detail: format!("the model is unavailable: {why}"),
                retry: true,
            });
        }
        let vectors: std::collections::HashMap<&str, &Embedded> = outcome
            .embedded
            .iter()
            .map(|e| (e.key.as_str(), e))
            .collect();
        // A refused text gets an empty vector: it is not asked again.
        let rows: Vec<(&str, &str, &str, Vec<u8>)> = claimed
            .iter()
            .map(|(agent, table, item, _)| {
                let vector = vectors
                    .get(item.key.as_str())
                    .map(|e| encode(&e.vector))
                    .unwrap_or_default();
                (agent.as_str(), *table, item.key.as_str(), vector)
            })
            .collect();
        let mut tx = self.begin().await?;
        let agents: Vec<&str> = rows.iter().map(|r| r.0).collect();
        lock_vector_writes(&mut tx, agents).await?;
        for table in ["traces", "memories"] {
            let of_table = rows.iter().filter(|r| r.1 == table);
            store_vectors(
                &mut tx,
                table,
                of_table,
                &engram_store::vector_model(embedder.model()),
            )
            .await?;
        }
        tx.commit().await.map_err(db("storing vectors"))?;
        Ok(n)
    }

    /// Up to [`BATCH`] items without a vector nobody is embedding: the
    /// agent, the table and the item each, and a trace's context (the
    /// full text of the trace before it in its sitting).
    async fn claim(&self) -> Result<Vec<Claimed>> {
        let mut out = Vec::new();
        // Each with the trace before it (its body and time): a trace is
        // embedded after it when they are of one sitting
        // (`engram_store::context_of`).
        let traces: Vec<ClaimedTrace> = sqlx::query_as(
            "WITH claimed AS (
                 UPDATE traces t SET embed_claimed = now()
                 FROM (SELECT agent_id, seq FROM traces
                       WHERE vector IS NULL
                         AND (embed_claimed IS NULL OR embed_claimed < now() - make_interval(secs => $2))
                       LIMIT $1 FOR UPDATE SKIP LOCKED) c
                 WHERE t.agent_id = c.agent_id AND t.seq = c.seq
                 RETURNING t.agent_id, t.body, t.ts, t.ord)
             SELECT c.agent_id, c.body, c.ts, p.body, p.ts FROM claimed c
             LEFT JOIN LATERAL (SELECT body, ts FROM traces
                                WHERE agent_id = c.agent_id AND ord < c.ord
                                ORDER BY ord DESC LIMIT 1) p ON true",
        )
        .bind(BATCH)
        .bind(CLAIM_SECS)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("claiming traces to embed"))?;
        let gap = self.inner.config.ranking.session_gap;
        for (agent, body, ts, before, then) in traces {
            let trace = crate::parse_trace(&agent, &body)?;
            let before = match (before, then) {
                // Unreadable, it is left out rather than hold this up.
                (Some(before), Some(then)) if (ts - then).abs() <= gap => {
                    crate::parse_trace(&agent, &before)
                        .ok()
                        .map(|before| engram_store::trace_item(&before).full_text())
                }
                _ => None,
            };
            let item = engram_store::for_embedding(engram_store::trace_item(&trace));
            out.push((agent, "traces", item, before));
        }
        let memories: Vec<(String, i8, String)> = sqlx::query_as(
            "UPDATE memories m SET embed_claimed = now()
             FROM (SELECT agent_id, kind, id FROM memories
                   WHERE vector IS NULL AND live
                     AND (embed_claimed IS NULL OR embed_claimed < now() - make_interval(secs => $2))
                   LIMIT $1 FOR UPDATE SKIP LOCKED) c
             WHERE m.agent_id = c.agent_id AND m.kind = c.kind AND m.id = c.id
             RETURNING m.agent_id, m.kind, m.body",
        )
        .bind(BATCH)
        .bind(CLAIM_SECS)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("claiming memories to embed"))?;
        for (agent, kind, body) in memories {
            let item = if kind as u8 == b'e' {
                engram_store::episodic_item(&crate::parse(&agent, "summary", &body)?)
            } else {
                engram_store::semantic_item(&crate::parse(&agent, "fact", &body)?)
            };
            out.push((agent, "memories", engram_store::for_embedding(item), None));
        }
        Ok(out)
    }

    async fn release(&self, claimed: &[Claimed]) -> Result<()> {
        for (agent, table, item, _) in claimed {
            let key = if *table == "traces" { "trace_id" } else { "id" };
            let sql = format!(
                "UPDATE {table} SET embed_claimed = NULL WHERE agent_id = $1 AND {key} = $2"
            );
            sqlx::query(&sql)
                .bind(agent)
                .bind(&item.key)
                .execute(&self.inner.pool)
                .await
                .map_err(db("releasing a claim"))?;
        }
        Ok(())
    }

    /// The agent's vectors as this replica holds them, caught up; `None`
    /// without a model.
    pub(crate) async fn vectors<'a>(
        &self,
        conn: &mut PgConnection,
        id: &str,
        incarnation: Uuid,
        slot: &'a VectorSlot,
    ) -> Result<Option<tokio::sync::MutexGuard<'a, Option<AgentVectors>>>> {
        let Some(embedder) = self.embedder() else {
            return Ok(None);
        };
        let mut held = slot.lock().await;
        if held.as_ref().is_none_or(|v| v.incarnation != incarnation) {
            *held = Some(AgentVectors {
                incarnation,
                seen: 0,
                vectors: Vectors::in_memory(embedder.model(), embedder.dim()),
            });
        }
        let copy = held.as_mut().expect("just made");
        let rows: Vec<VectorRow> = sqlx::query_as(
            "SELECT trace_id, 0::smallint, ord, ts, trace_type, vector, vector_seq, true FROM traces
             WHERE agent_id = $1 AND vector_seq > $2 AND vector_model = $3
             UNION ALL
             SELECT id, CASE WHEN kind = 'e' THEN 1::smallint ELSE 2::smallint END, ord, ts, 0::smallint, vector, vector_seq, live
             FROM memories WHERE agent_id = $1 AND vector_seq > $2 AND vector_model = $3",
        )
        .bind(id)
        .bind(copy.seen)
        .bind(engram_store::vector_model(embedder.model()))
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading vectors"))?;
        let dim = embedder.dim();
        let mut add = Vec::new();
        let mut gone = Vec::new();
        for (key, kind, ord, ts, trace_type, vector, seq, live) in rows {
            copy.seen = copy.seen.max(seq);
            let kind = match kind {
                1 => Kind::Episodic,
                2 => Kind::Semantic,
                _ => Kind::Trace,
            };
            match decode(&vector, dim).filter(|_| live) {
                Some(vector) => add.push(Embedded {
                    key,
                    kind,
                    trace_type: u8::try_from(trace_type).unwrap_or(0),
                    order: ord as u64,
                    ts,
                    vector,
                }),
                None => gone.push(key),
            }
        }
        if !add.is_empty() || !gone.is_empty() {
            let gone: Vec<&str> = gone.iter().map(String::as_str).collect();
            engram_store::offload_over((add.len() * dim * 4) as u64, || {
                copy.vectors.write(&add, &gone)
            })
            .map_err(|e| StoreError::Index(e.to_string()))?;
        }
        Ok(Some(held))
    }

    /// Waits until the agent has nothing waiting for the model, or until
    /// `deadline`.
    pub(crate) async fn wait_embedded(&self, id: &str, deadline: std::time::Instant) -> Result<()> {
        if self.embedder().is_none() {
            return Ok(());
        }
        let _waiting = engram_core::load::Load::global().waiting();
        loop {
            let mut conn = self.conn().await?;
            if pending(&mut conn, id).await? == 0 || std::time::Instant::now() >= deadline {
                return Ok(());
            }
            drop(conn);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The index state with the vectors' counts.
    pub(crate) async fn with_vectors(
        &self,
        conn: &mut PgConnection,
        id: &str,
        mut state: IndexState,
        embedded: usize,
    ) -> Result<IndexState> {
        if let Some(embedder) = self.embedder() {
            state.pending = u64::try_from(pending(conn, id).await?).unwrap_or(0);
            state.embedded = embedded as u64;
            state.model = embedder.model().to_owned();
        }
        Ok(state)
    }
}

/// Items of the agent waiting for the model.
async fn pending(conn: &mut PgConnection, id: &str) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM traces WHERE agent_id = $1 AND vector IS NULL)
              + (SELECT count(*) FROM memories WHERE agent_id = $1 AND vector IS NULL AND live)",
    )
    .bind(id)
    .fetch_one(&mut *conn)
    .await
    .map_err(db("counting items to embed"))
}

/// The advisory-lock class of an agent's vector writes; the second key
/// is the agent's `hashtext`.
pub(crate) const VECTOR_WRITES: i32 = 0x656e_6776;

/// Holds, until `tx` ends, the right to draw `vector_seq` for `agents`:
/// one writer per agent at a time, so an agent's vector rows commit in
/// `vector_seq` order. A replica that has read an agent's vectors up to N
/// then never finds a row below N later; with two writers at once, the
/// higher number could commit first and the lower one be skipped by that
/// replica for good. Taken in name order (one statement, the array's
/// order), after the agent's own row where a writer locks that too.
pub(crate) async fn lock_vector_writes(tx: &mut PgConnection, mut agents: Vec<&str>) -> Result<()> {
    agents.sort_unstable();
    agents.dedup();
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext(a)) FROM unnest($2::text[]) AS a")
        .bind(VECTOR_WRITES)
        .bind(&agents)
        .execute(&mut *tx)
        .await
        .map_err(db("locking the agents' vectors"))?;
    Ok(())
}

/// Stores a batch's vectors for the rows of `table`, in one statement;
/// only on rows still claimed: a writer that changes a row's text voids
/// its claim (a forget hiding a summary), and a vector of the old text is
/// not stored over it.
async fn store_vectors<'a>(
    tx: &mut PgConnection,
    table: &str,
    rows: impl Iterator<Item = &'a (&'a str, &'a str, &'a str, Vec<u8>)>,
    model: &str,
) -> Result<()> {
    let (mut agents, mut keys, mut vectors) = (Vec::new(), Vec::new(), Vec::new());
    for (agent, _, key, vector) in rows {
        agents.push(*agent);
        keys.push(*key);
        vectors.push(vector.as_slice());
    }
    if agents.is_empty() {
        return Ok(());
    }
    let column = if table == "traces" { "trace_id" } else { "id" };
    let sql = format!(
        "UPDATE {table} t SET vector = v.vector, vector_model = $4, vector_seq = nextval('vector_seq'), embed_claimed = NULL
         FROM unnest($1::text[], $2::text[], $3::bytea[]) AS v(agent_id, key, vector)
         WHERE t.agent_id = v.agent_id AND t.{column} = v.key AND t.embed_claimed IS NOT NULL"
    );
    sqlx::query(&sql)
        .bind(&agents)
        .bind(&keys)
        .bind(&vectors)
        .bind(model)
        .execute(&mut *tx)
        .await
        .map_err(db("storing vectors"))?;
    Ok(())
}
