//! Listing, deleting and forking agents: each one statement or one
//! transaction.

use async_trait::async_trait;
use engram_core::{AgentId, CoreError, UserId};
use engram_store::{Admin, Result, StoreError, Visible, VisibleAgent};

use crate::{PgStore, db};

/// Ids read per round while a listing fills a page past ids its caller
/// may not see.
const LIST_BATCH: i64 = 1000;

#[async_trait]
impl Admin for PgStore {
    /// Keyset paging over the primary key: each page starts after the last
    /// id of the previous one.
    async fn list_agents(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: VisibleAgent<'_>,
    ) -> Result<(Vec<String>, Option<String>)> {
        self.list_ids(
            "SELECT id, user_id FROM agents WHERE id > $1 ORDER BY id LIMIT $2",
            "listing agents",
            (page_size, page_token),
            visible,
        )
        .await
    }

    /// The users with an agent bound, blocks, facts or a last
    /// conversation.
    async fn list_users(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: Visible<'_>,
    ) -> Result<(Vec<String>, Option<String>)> {
        self.list_ids(
            "SELECT u, NULL::text FROM (
               SELECT user_id AS u FROM agents WHERE user_id IS NOT NULL
               UNION SELECT user_id FROM user_facts
               UNION SELECT user_id FROM user_conversations
               UNION SELECT substr(scope, 6) FROM blocks WHERE scope LIKE 'user/%'
             ) users WHERE u > $1 ORDER BY u LIMIT $2",
            "listing users",
            (page_size, page_token),
            &|user, _| visible(user),
        )
        .await
    }

    /// Deletes the agent's row; its traces, memories, results and vectors
    /// go with it (foreign keys cascade) in the same transaction.
    async fn delete_agent(&self, id: &AgentId) -> Result<()> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        // The agent's row, then its vectors' lock, as a compaction takes
        // them: the cascade then never waits on rows an indexer holds
        // while that indexer waits on it.
        let mut tx = self.begin().await?;
        let found: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM agents WHERE id = $1 FOR UPDATE")
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db("deleting an agent"))?;
        let deleted = if found.is_some() {
            crate::vectors::lock_vector_writes(&mut tx, vec![id.as_str()]).await?;
            sqlx::query("DELETE FROM quiet_agents WHERE agent_id = $1")
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db("deleting an agent"))?;
            sqlx::query("DELETE FROM agents WHERE id = $1")
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db("deleting an agent"))?
                .rows_affected()
        } else {
            0
        };
        tx.commit().await.map_err(db("deleting an agent"))?;
        *slot = None;
        drop(slot);
        self.forget(id.as_str());
        if deleted == 0 {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(())
    }

    /// Copies every row of `source` under `target` in one transaction, the
    /// source row held (`FOR SHARE`) so no write of it lands halfway.
    async fn fork_agent(&self, source: &AgentId, target: &AgentId) -> Result<()> {
        if source == target {
            return Err(CoreError::Invalid(
                "target_agent_id must differ from source_agent_id".into(),
            )
            .into());
        }
        let mut tx = self.begin().await?;
        let found: Option<i64> =
            sqlx::query_scalar("SELECT next_seq FROM agents WHERE id = $1 FOR SHARE")
                .bind(source.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db("reading an agent"))?;
        if found.is_none() {
            return Err(StoreError::NotFound(source.to_string()));
        }
        let created = sqlx::query(
            "INSERT INTO agents (id, incarnation, next_seq, words_total, meta, turns, user_id)
             SELECT $2, $3, next_seq, words_total, meta, turns, user_id FROM agents WHERE id = $1
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(source.as_str())
        .bind(target.as_str())
        .bind(uuid::Uuid::now_v7())
        .execute(&mut *tx)
        .await
        .map_err(db("creating a fork"))?
        .rows_affected();
        if created == 0 {
            return Err(StoreError::AlreadyExists(target.to_string()));
        }
        for sql in [
            "INSERT INTO traces (agent_id, seq, ord, trace_type, trace_id, event_id, ts, archived, body, words, vector, vector_model, vector_seq)
             SELECT $2, seq, ord, trace_type, trace_id, event_id, ts, archived, body, words, vector, vector_model, vector_seq
             FROM traces WHERE agent_id = $1",
            "INSERT INTO memories (agent_id, kind, id, body, ord, ts, live, words, vector, vector_model, vector_seq, expires_at)
             SELECT $2, kind, id, body, ord, ts, live, words, vector, vector_model, vector_seq, expires_at
             FROM memories WHERE agent_id = $1 ORDER BY seq",
            "INSERT INTO spills (agent_id, path, body) SELECT $2, path, body FROM spills WHERE agent_id = $1",
            "INSERT INTO fact_versions (agent_id, id, version, body)
             SELECT $2, id, version, body FROM fact_versions WHERE agent_id = $1",
            "INSERT INTO blocks (scope, label, version, agent_id, body)
             SELECT 'agent/' || $2, label, version, $2, body FROM blocks WHERE agent_id = $1",
            "INSERT INTO compaction_log (agent_id, seq, body)
             SELECT $2, seq, body FROM compaction_log WHERE agent_id = $1",
        ] {
            sqlx::query(sql)
                .bind(source.as_str())
                .bind(target.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db("copying a fork"))?;
        }
        tx.commit().await.map_err(db("committing a fork"))?;
        Ok(())
    }

    async fn user_agents(&self, user: &UserId) -> Result<Vec<AgentId>> {
        let ids: Vec<String> =
            sqlx::query_scalar("SELECT id FROM agents WHERE user_id = $1 ORDER BY id")
                .bind(user.as_str())
                .fetch_all(&self.inner.pool)
                .await
                .map_err(db("listing a user's agents"))?;
        ids.iter().map(|id| Ok(AgentId::parse(id)?)).collect()
    }

    /// One transaction: the user's agent rows (their traces, memories,
    /// results, vectors and blocks cascade), the user's blocks, facts and
    /// last conversation. An
    /// agent bound meanwhile by a transaction that commits later is not
    /// seen by it, and stays: bound after.
    async fn delete_user(&self, user: &UserId) -> Result<usize> {
        let mut tx = self.begin().await?;
        let user_scope = engram_core::blocks::Scope::User(user.clone());
        // The user's lock before its agents' rows, the order a fold and a
        // forget take them in (the other order deadlocks against them).
        crate::lock_scope(&mut tx, &user_scope).await?;
        let ids: Vec<String> =
            sqlx::query_scalar("SELECT id FROM agents WHERE user_id = $1 ORDER BY id FOR UPDATE")
                .bind(user.as_str())
                .fetch_all(&mut *tx)
                .await
                .map_err(db("deleting a user"))?;
        // The agents' rows, then their vectors' lock, as delete_agent.
        crate::vectors::lock_vector_writes(&mut tx, ids.iter().map(String::as_str).collect())
            .await?;
        delete_agent_rows(&mut tx, &ids, "deleting a user").await?;
        delete_user_memory(&mut tx, user, "deleting a user").await?;
        tx.commit().await.map_err(db("deleting a user"))?;
        for id in &ids {
            self.forget(id);
        }
        self.forget_user(user);
        Ok(ids.len())
    }
}

/// Deletes the agents' rows (their traces, memories, results, vectors and
/// blocks cascade) and their places on the quiet list; the caller holds
/// their rows and their vectors' locks.
pub(crate) async fn delete_agent_rows(
    tx: &mut sqlx::PgConnection,
    ids: &[String],
    context: &'static str,
) -> Result<()> {
    for sql in [
        "DELETE FROM quiet_agents WHERE agent_id = ANY($1)",
        "DELETE FROM agents WHERE id = ANY($1)",
    ] {
        sqlx::query(sql)
            .bind(ids)
            .execute(&mut *tx)
            .await
            .map_err(db(context))?;
    }
    Ok(())
}

/// Deletes a user's own memory: its blocks, facts with their versions and
/// last conversation (its agents stay); the caller holds the user's lock.
pub(crate) async fn delete_user_memory(
    tx: &mut sqlx::PgConnection,
    user: &UserId,
    context: &'static str,
) -> Result<()> {
    let scope = crate::scope_key(&engram_core::blocks::Scope::User(user.clone()));
    sqlx::query("DELETE FROM blocks WHERE scope = $1")
        .bind(&scope)
        .execute(&mut *tx)
        .await
        .map_err(db(context))?;
    for sql in [
        "DELETE FROM user_facts WHERE user_id = $1",
        "DELETE FROM user_fact_versions WHERE user_id = $1",
        "DELETE FROM user_conversations WHERE user_id = $1",
        "DELETE FROM user_consolidations WHERE user_id = $1",
    ] {
        sqlx::query(sql)
            .bind(user.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db(context))?;
    }
    Ok(())
}

impl PgStore {
    /// A page of the ids `query` lists (`$1`: after, `$2`: how many; each
    /// with its user, or NULL), of those `visible` accepts, read in
    /// batches so that pages stay full.
    async fn list_ids(
        &self,
        query: &'static str,
        what: &'static str,
        (page_size, page_token): (usize, Option<&str>),
        visible: VisibleAgent<'_>,
    ) -> Result<(Vec<String>, Option<String>)> {
        let mut after = page_token.unwrap_or_default().to_owned();
        let mut page = Vec::new();
        loop {
            let ids: Vec<(String, Option<String>)> = sqlx::query_as(query)
                .bind(&after)
                .bind(LIST_BATCH)
                .fetch_all(&self.inner.pool)
                .await
                .map_err(db(what))?;
            let exhausted = (ids.len() as i64) < LIST_BATCH;
            for (id, owner) in ids {
                after.clone_from(&id);
                if !visible(&id, owner.as_deref()) {
                    continue;
                }
                if page.len() == page_size {
                    // One more visible id exists: the page has a successor.
                    let next = page.last().cloned();
                    return Ok((page, next));
                }
                page.push(id);
            }
            if exhausted {
                return Ok((page, None));
            }
        }
    }
}
