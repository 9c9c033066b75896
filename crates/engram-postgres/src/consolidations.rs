//! A user's consolidation in the database: one transaction under the
//! user's advisory lock (the one folds and clients' changes take) that
//! stores the facts the plan changed and the run's row in
//! `user_consolidations`, so a run is stored whole or not at all.

use engram_core::UserId;
use engram_core::blocks::Scope;
use engram_core::users::consolidate::{self, Consolidated, ConsolidationRecord, LOG_KEEP, Plan};
use engram_store::Result;

use crate::user_fact_changes::{load, store_row};
use crate::{PgStore, db};

impl PgStore {
    pub(crate) async fn consolidate(
        &self,
        user: &UserId,
        plan: &Plan,
        mut record: ConsolidationRecord,
    ) -> Result<(Consolidated, ConsolidationRecord)> {
        let mut tx = self.begin().await?;
        crate::lock_scope(&mut tx, &Scope::User(user.clone())).await?;
        let known = load(&mut tx, user).await?;
        let bytes: usize = known.iter().map(|f| f.fact.fact.len()).sum();
        let done = engram_store::offload_over(bytes as u64, || consolidate::apply(&known, plan));
        for fact in &done.changed {
            store_row(&mut tx, user, fact).await?;
        }
        let last: Option<i64> =
            sqlx::query_scalar("SELECT max(seq) FROM user_consolidations WHERE user_id = $1")
                .bind(user.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(db("reading a user's consolidation log"))?;
        record.seq = last.unwrap_or(0) as u64 + 1;
        record.counts = done.counts;
        record.done = done.done.clone();
        let body = serde_json::to_string(&record).expect("a record serializes");
        sqlx::query("INSERT INTO user_consolidations (user_id, seq, body) VALUES ($1, $2, $3)")
            .bind(user.as_str())
            .bind(record.seq as i64)
            .bind(body)
            .execute(&mut *tx)
            .await
            .map_err(db("logging a consolidation"))?;
        sqlx::query("DELETE FROM user_consolidations WHERE user_id = $1 AND seq <= $2")
            .bind(user.as_str())
            .bind(record.seq as i64 - LOG_KEEP as i64)
            .execute(&mut *tx)
            .await
            .map_err(db("cutting a user's consolidation log"))?;
        tx.commit().await.map_err(db("storing a consolidation"))?;
        Ok((done, record))
    }

    pub(crate) async fn read_consolidations(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ConsolidationRecord>> {
        let bodies: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM user_consolidations WHERE user_id = $1 ORDER BY seq DESC LIMIT $2",
        )
        .bind(user.as_str())
        .bind(limit.min(i64::MAX as usize) as i64)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("reading a user's consolidation log"))?;
        bodies
            .iter()
            .map(|b| {
                serde_json::from_str(b).map_err(|e| {
                    crate::broken(format!("a consolidation record does not parse: {e}"))
                })
            })
            .collect()
    }
}
