//! An agent's compaction log in the database (`compaction_log`, migration
//! 0008): one row per record, numbered per agent. A record is written in
//! one statement that numbers it, checks that the agent exists and drops
//! the rows past the last [`KEEP`]; two replicas numbering one agent's
//! records at once (rare: compactions of an agent are leased) retry.

use engram_core::AgentId;
use engram_core::bundle::AgentRecords;
use engram_core::compaction::CompactionRecord;
use engram_core::compaction::log::KEEP;
use engram_store::{Result, StoreError};
use sqlx::PgConnection;

use crate::{PgStore, db};

impl PgStore {
    pub(crate) async fn append_compaction(
        &self,
        id: &AgentId,
        record: &CompactionRecord,
    ) -> Result<u64> {
        let body = serde_json::to_string(record).expect("compaction records serialize");
        for _ in 0..3 {
            let seq: std::result::Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(
                "WITH next AS (
                     SELECT coalesce(max(seq), 0) + 1 AS seq FROM compaction_log WHERE agent_id = $1
                 ), added AS (
                     INSERT INTO compaction_log (agent_id, seq, body)
                     SELECT a.id, next.seq, $2 FROM agents a, next WHERE a.id = $1
                     RETURNING seq
                 ), cut AS (
                     DELETE FROM compaction_log
                     WHERE agent_id = $1 AND seq <= (SELECT seq FROM added) - $3
                 )
                 SELECT seq FROM added",
            )
            .bind(id.as_str())
            .bind(&body)
            .bind(KEEP as i64)
            .fetch_optional(&self.inner.pool)
            .await;
            match seq {
                Ok(Some(seq)) => return Ok(seq as u64),
                Ok(None) => return Err(StoreError::NotFound(id.to_string())),
                // Another replica took that number first: the next one.
                Err(sqlx::Error::Database(d)) if d.is_unique_violation() => continue,
                // Deleted between the read of the agent and the insert.
                Err(sqlx::Error::Database(d)) if d.is_foreign_key_violation() => {
                    return Err(StoreError::NotFound(id.to_string()));
                }
                Err(e) => return Err(db("storing a compaction record")(e)),
            }
        }
        Err(StoreError::Unavailable {
            detail: "the compaction log was written by others meanwhile".into(),
            retry: true,
        })
    }

    pub(crate) async fn read_compaction_log(
        &self,
        id: &AgentId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<CompactionRecord>> {
        let mut conn = self.conn().await?;
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT seq, body FROM compaction_log WHERE agent_id = $1 AND seq < $2
             ORDER BY seq DESC LIMIT $3",
        )
        .bind(id.as_str())
        .bind(before)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading the compaction log"))?;
        rows.iter()
            .map(|(seq, body)| parse(id.as_str(), *seq, body))
            .collect()
    }
}

fn parse(agent: &str, seq: i64, body: &str) -> Result<CompactionRecord> {
    let mut record: CompactionRecord = crate::parse(agent, "compaction record", body)?;
    record.seq = seq as u64;
    Ok(record)
}

/// Every record of agent `id`, oldest first (an export's snapshot).
pub(crate) async fn export(tx: &mut PgConnection, id: &str) -> Result<Vec<CompactionRecord>> {
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT seq, body FROM compaction_log WHERE agent_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(&mut *tx)
            .await
            .map_err(db("reading the compaction log"))?;
    rows.iter()
        .map(|(seq, body)| parse(id, *seq, body))
        .collect()
}

/// The imported agents' logs (their rows are new).
pub(crate) async fn import(tx: &mut PgConnection, agents: &[AgentRecords]) -> Result<()> {
    let (mut agent, mut seq, mut body) = (vec![], vec![], vec![]);
    for a in agents {
        for r in &a.compactions {
            agent.push(a.id.as_str());
            seq.push(i64::try_from(r.seq).unwrap_or(i64::MAX));
            body.push(serde_json::to_string(r).expect("compaction records serialize"));
        }
    }
    if agent.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO compaction_log (agent_id, seq, body)
         SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[])",
    )
    .bind(agent)
    .bind(seq)
    .bind(body)
    .execute(&mut *tx)
    .await
    .map_err(db("storing imported compaction records"))?;
    Ok(())
}
