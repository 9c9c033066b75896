//! Memory blocks in the database: one row per version. Writers of a scope
//! go one at a time: an agent's under its row lock, a shared scope's
//! under a transaction-scoped advisory lock on its name.

use async_trait::async_trait;
use engram_core::blocks::{self, Block, Change, Scope};
use engram_core::{AgentId, UserId};
use engram_store::{Blocks, Result, SeenBlocks, unix_now};
use sqlx::PgConnection;

use crate::{PgStore, db};

/// The scope's key in `blocks.scope`.
pub(crate) use crate::scope_key as key;

pub(crate) fn parse(body: &str) -> Result<Block> {
    serde_json::from_str(body)
        .map_err(|e| crate::broken(format!("a stored memory block does not parse: {e}")))
}

/// The last version of each label of each scope in `scopes`, by scope and
/// label (tombstones included).
async fn latest(conn: &mut PgConnection, scopes: &[String]) -> Result<Vec<(String, Block)>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT DISTINCT ON (scope, label) scope, body FROM blocks
         WHERE scope = ANY($1) ORDER BY scope, label, version DESC",
    )
    .bind(scopes)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading memory blocks"))?;
    rows.into_iter()
        .map(|(scope, body)| Ok((scope, parse(&body)?)))
        .collect()
}

impl PgStore {
    /// The blocks an agent of `user` sees, and the user's pinned facts, in
    /// one statement (read after its prompt's transaction: a block is a
    /// document of its own, not part of it).
    pub(crate) async fn seen_blocks(&self, id: &AgentId, user: Option<&str>) -> Result<SeenBlocks> {
        let (global, user_key, agent) = (
            "global".to_owned(),
            user.map(|u| format!("user/{u}")),
            key(&Scope::Agent(id.clone())),
        );
        let mut scopes = vec![global.clone(), agent.clone()];
        scopes.extend(user_key.clone());
        // The pinned facts' rows have an empty scope (no scope's key is).
        let found: Vec<(String, String)> = sqlx::query_as(
            "SELECT * FROM (SELECT DISTINCT ON (scope, label) scope, body FROM blocks
                            WHERE scope = ANY($1) ORDER BY scope, label, version DESC) b
             UNION ALL
             SELECT '', body FROM user_facts WHERE user_id = $2 AND pinned",
        )
        .bind(&scopes)
        .bind(user)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("reading memory blocks"))?;
        let (pinned, blocks): (Vec<_>, Vec<_>) = found.into_iter().partition(|(s, _)| s.is_empty());
        let user_pinned = crate::user_fact_changes::pinned(pinned.iter().map(|(_, b)| b.as_str()))?;
        let rows = blocks
            .into_iter()
            .map(|(scope, body)| Ok((scope, parse(&body)?)))
            .collect::<Result<Vec<_>>>()?;
        let of = |want: &str| {
            std::sync::Arc::new(
                rows.iter()
                    .filter(|(s, b)| s == want && !b.deleted)
                    .map(|(_, b)| b.clone())
                    .collect::<Vec<_>>(),
            )
        };
        Ok(SeenBlocks {
            global: of(&global),
            user: user_key.as_deref().map(of).unwrap_or_default(),
            agent: of(&agent),
            user_pinned: std::sync::Arc::new(user_pinned),
        })
    }
}

#[async_trait]
impl Blocks for PgStore {
    async fn list_blocks(&self, scope: &Scope) -> Result<Vec<Block>> {
        let mut conn = self.conn().await?;
        let rows = latest(&mut conn, &[key(scope)]).await?;
        Ok(rows
            .into_iter()
            .map(|(_, b)| b)
            .filter(|b| !b.deleted)
            .collect())
    }

    async fn block_history(&self, scope: &Scope, label: &str) -> Result<Vec<Block>> {
        let mut conn = self.conn().await?;
        let bodies: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM blocks WHERE scope = $1 AND label = $2 ORDER BY version",
        )
        .bind(key(scope))
        .bind(label)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading a block's history"))?;
        bodies.iter().map(|b| parse(b)).collect()
    }

    async fn write_block(
        &self,
        scope: &Scope,
        label: &str,
        change: Change,
        expected_version: Option<u64>,
        user: Option<&UserId>,
    ) -> Result<Block> {
        let scope_key = key(scope);
        let agent = match scope {
            Scope::Agent(id) => Some(id),
            _ => None,
        };
        // An agent's row lock serializes its writers (and creates it, with
        // its user); a shared scope has no row to lock.
        let handle = agent.map(|id| self.handle(id.as_str()));
        let mut slot = match &handle {
            Some(h) => Some(h.lock().await),
            None => None,
        };
        let mut tx = self.begin().await?;
        if let (Some(id), Some(slot)) = (agent, slot.as_mut()) {
            self.bind_agent(&mut tx, id, slot, user).await?;
        } else {
            crate::lock_scope(&mut tx, scope).await?;
        }
        let body: Option<String> = sqlx::query_scalar(
            "SELECT body FROM blocks WHERE scope = $1 AND label = $2 ORDER BY version DESC LIMIT 1",
        )
        .bind(&scope_key)
        .bind(label)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db("reading a memory block"))?;
        let last = body.as_deref().map(parse).transpose()?;
        let next = blocks::apply(
            scope,
            label,
            last.as_ref(),
            change,
            expected_version,
            unix_now(),
        )?;
        let json = serde_json::to_string(&next).expect("blocks serialize");
        sqlx::query("INSERT INTO blocks (scope, label, version, agent_id, body) VALUES ($1, $2, $3, $4, $5)")
            .bind(&scope_key)
            .bind(label)
            .bind(next.version as i64)
            .bind(agent.map(AgentId::as_str))
            .bind(json)
            .execute(&mut *tx)
            .await
            .map_err(db("storing a memory block"))?;
        if let Some(slot) = slot.as_mut() {
            self.commit(tx, slot).await?;
        } else {
            tx.commit().await.map_err(db("committing a memory block"))?;
        }
        Ok(next)
    }
}

impl PgStore {
    /// Locks agent `id`'s row in `tx`, creating the agent when new, and
    /// binds `user` to it as an Ingest would.
    pub(crate) async fn bind_agent(
        &self,
        tx: &mut PgConnection,
        id: &AgentId,
        slot: &mut crate::cache::Slot<'_>,
        user: Option<&UserId>,
    ) -> Result<()> {
        loop {
            if crate::cache::refresh(tx, id.as_str(), slot, crate::cache::Lock::Update).await? {
                let cached = slot.as_mut().expect("current");
                if let Some(meta) = cached.derived.settings_for(user, None)? {
                    crate::write::save_meta(tx, id.as_str(), cached, meta).await?;
                }
                return Ok(());
            }
            let meta = engram_store::AgentMeta {
                user_id: user.map(|u| u.as_str().to_owned()),
                ..Default::default()
            };
            if let Some(created) = self.create(tx, id, meta).await? {
                **slot = Some(created);
                return Ok(());
            }
            // Created by another replica meanwhile: lock that one.
        }
    }
}
