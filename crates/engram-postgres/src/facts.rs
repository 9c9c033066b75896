//! Facts that clients manage (`Facts`) on PostgreSQL, an agent's: each
//! fact's row in `memories` is its latest version (what prompts, search
//! and the indexer read), and `fact_versions` keeps every version a
//! client's change made (with the version before it, for a fact
//! compaction wrote). One change is one transaction under the agent's
//! row lock: the versions, the fact's row (its vector dropped when its
//! text changed, so it is embedded again), the snapshot's facts section,
//! and a new generation so that every replica's cache reloads the facts.
//! A delete leaves the id, the versions and the time, and no text in any
//! row.

use async_trait::async_trait;
use engram_core::blocks::Scope;
use engram_core::facts::{self, Applied, Op};
use engram_core::memory::SemanticItem;
use engram_store::{FactOwner, Facts, Result, StoreError, fact_owner, new_id, unix_now};
use sqlx::PgConnection;

use crate::cache::{Lock, refresh};
use crate::{PgStore, db};

#[async_trait]
impl Facts for PgStore {
    async fn facts(&self, scope: &Scope) -> Result<Vec<SemanticItem>> {
        let id = match fact_owner(scope)? {
            FactOwner::User(user) => {
                let mut conn = self.conn().await?;
                let facts = crate::user_fact_changes::load(&mut conn, user).await?;
                let facts = facts.into_iter().map(|f| f.fact);
                return Ok(facts.filter(|f| f.managed.deleted_at.is_none()).collect());
            }
            FactOwner::Agent(id) => id,
        };
        let live = |c: &crate::cache::Cached| {
            c.derived
                .semantic
                .iter()
                .filter(|f| f.managed.deleted_at.is_none())
                .cloned()
                .collect()
        };
        match self.read(id, live).await {
            Err(StoreError::NotFound(_)) => Ok(vec![]),
            read => read,
        }
    }

    async fn fact_history(&self, scope: &Scope, id: &str) -> Result<Vec<SemanticItem>> {
        let agent = match fact_owner(scope)? {
            FactOwner::User(user) => return self.user_fact_history(user, id).await,
            FactOwner::Agent(agent) => agent,
        };
        let mut conn = self.conn().await?;
        let mut versions = versions(&mut conn, agent.as_str(), id).await?;
        if versions.is_empty() {
            // Never changed by a client: its one version is its row.
            let body: Option<String> = sqlx::query_scalar(
                "SELECT body FROM memories WHERE agent_id = $1 AND kind = 's' AND id = $2",
            )
            .bind(agent.as_str())
            .bind(id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db("reading a fact"))?;
            if let Some(body) = body {
                versions.push(crate::parse(agent.as_str(), "fact", &body)?);
            }
        }
        Ok(versions)
    }

    async fn change_facts(&self, scope: &Scope, op: Op, limit: Option<u32>) -> Result<Applied> {
        let id = match fact_owner(scope)? {
            FactOwner::User(user) => return self.change_user_facts(user, op).await,
            FactOwner::Agent(id) => id,
        };
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let mut tx = self.begin().await?;
        if matches!(op, Op::Add(_)) {
            // An add may start the agent.
            self.bind_agent(&mut tx, id, &mut slot, None).await?;
        } else if !refresh(&mut tx, id.as_str(), &mut slot, Lock::Update).await? {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let cached = slot.as_mut().expect("current");
        let now = unix_now();
        let applied = facts::apply(&cached.derived.semantic, op, now, new_id)?;
        for line in &applied.lines {
            let before = cached.derived.semantic.iter().find(|f| f.id == line.id);
            store_version(&mut tx, id.as_str(), before, line).await?;
        }
        if let Some(gone) = &applied.erase {
            scrub(&mut tx, id.as_str(), gone).await?;
        }
        for line in &applied.lines {
            match cached.derived.semantic.iter_mut().find(|f| f.id == line.id) {
                Some(old) => *old = line.clone(),
                None => cached.derived.semantic.push(line.clone()),
            }
        }
        cached.derived.facts_changed(now);
        let meta = cached
            .derived
            .facts_meta(limit, now)
            .unwrap_or_else(|| cached.derived.meta.clone());
        // A new generation: every replica's cache reloads the facts (a
        // catch-up folds in traces only); this one is dropped and reloads.
        let stored = sqlx::query(
            "UPDATE agents SET meta = $2, version = version + 1, generation = generation + 1 WHERE id = $1",
        )
        .bind(id.as_str())
        .bind(crate::meta_json(&meta))
        .execute(&mut *tx)
        .await;
        *slot = None;
        stored.map_err(db("storing an agent's facts"))?;
        tx.commit().await.map_err(db("committing facts"))?;
        Ok(applied)
    }

    async fn purge_expired(&self) -> Result<usize> {
        let expired: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT agent_id, id, body FROM memories
             WHERE expires_at <= $1 AND live AND kind = 's' ORDER BY expires_at LIMIT 1000",
        )
        .bind(unix_now())
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("finding expired facts"))?;
        let mut found: Vec<(Scope, String, u64)> = vec![];
        for (agent, id, body) in expired {
            let Ok(agent) = engram_core::AgentId::parse(&agent) else {
                continue;
            };
            let version = crate::parse::<SemanticItem>(agent.as_str(), "fact", &body)?.version();
            found.push((Scope::Agent(agent), id, version));
        }
        let of_users = self.expired_user_facts().await?;
        found.extend(
            of_users
                .into_iter()
                .map(|(u, id, v)| (Scope::User(u), id, v)),
        );
        let mut purged = 0;
        for (scope, id, version) in found {
            purged += usize::from(engram_store::purge_fact(self, &scope, id, version).await?);
        }
        Ok(purged)
    }
}

/// Every stored version of fact `id`, oldest first.
async fn versions(conn: &mut PgConnection, agent: &str, id: &str) -> Result<Vec<SemanticItem>> {
    let bodies: Vec<String> = sqlx::query_scalar(
        "SELECT body FROM fact_versions WHERE agent_id = $1 AND id = $2 ORDER BY version",
    )
    .bind(agent)
    .bind(id)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading a fact's versions"))?;
    bodies
        .iter()
        .map(|b| crate::parse(agent, "fact", b))
        .collect()
}

/// Stores `line` (the version a change made of the fact `before` was, if
/// any) as a version and as the fact's row.
pub(crate) async fn store_version(
    tx: &mut PgConnection,
    agent: &str,
    before: Option<&SemanticItem>,
    line: &SemanticItem,
) -> Result<()> {
    let insert = "INSERT INTO fact_versions (agent_id, id, version, body) VALUES ($1, $2, $3, $4)
                  ON CONFLICT (agent_id, id, version) DO NOTHING";
    // The version a compaction wrote has no row of its own yet.
    for v in before.into_iter().chain([line]) {
        sqlx::query(insert)
            .bind(agent)
            .bind(&v.id)
            .bind(i64::try_from(v.version()).unwrap_or(i64::MAX))
            .bind(serde_json::to_string(v).expect("a fact serializes"))
            .execute(&mut *tx)
            .await
            .map_err(db("storing a fact's version"))?;
    }
    let item = engram_store::semantic_item(line);
    let reembed = before.is_none_or(|b| b.fact != line.fact);
    sqlx::query(
        "INSERT INTO memories (agent_id, kind, id, body, ord, ts, live, words, expires_at)
         VALUES ($1, 's', $2, $3, $4, $5, $6, to_tsvector('english', $7), $9)
         ON CONFLICT (agent_id, kind, id) DO UPDATE
         SET body = excluded.body, ord = excluded.ord, ts = excluded.ts, live = excluded.live,
             words = excluded.words, expires_at = excluded.expires_at,
             -- New words: embedded again; deleted: no vector (replicas'
             -- copies drop the old one either way).
             vector = CASE WHEN $8 OR NOT excluded.live THEN NULL ELSE memories.vector END,
             vector_model = CASE WHEN $8 OR NOT excluded.live THEN NULL ELSE memories.vector_model END,
             vector_seq = CASE WHEN $8 OR NOT excluded.live THEN nextval('vector_seq') ELSE memories.vector_seq END",
    )
    .bind(agent)
    .bind(&item.key)
    .bind(&item.body)
    .bind(item.order as i64)
    .bind(item.ts)
    // Searchable unless deleted (a replaced fact is found with its span).
    .bind(line.managed.deleted_at.is_none())
    .bind(if line.managed.deleted_at.is_none() {
        crate::rows::item_words(&item)
    } else {
        String::new()
    })
    .bind(reembed)
    .bind(line.managed.expires_at.filter(|_| !line.managed.pinned))
    .execute(&mut *tx)
    .await
    .map_err(db("storing a fact"))?;
    Ok(())
}

/// Every version of the deleted fact `id` loses its text.
pub(crate) async fn scrub(tx: &mut PgConnection, agent: &str, id: &str) -> Result<()> {
    for v in versions(tx, agent, id).await? {
        sqlx::query(
            "UPDATE fact_versions SET body = $4 WHERE agent_id = $1 AND id = $2 AND version = $3",
        )
        .bind(agent)
        .bind(id)
        .bind(i64::try_from(v.version()).unwrap_or(i64::MAX))
        .bind(serde_json::to_string(&facts::scrubbed(&v)).expect("a fact serializes"))
        .execute(&mut *tx)
        .await
        .map_err(db("erasing a fact's text"))?;
    }
    Ok(())
}

/// Renders the snapshot's facts again, in `tx`, when one expired since
/// the cache last rendered them (a prompt shows an expired fact no more,
/// from the first request after it): a new generation, as any change of
/// the facts.
pub(crate) async fn expire_facts(
    tx: &mut PgConnection,
    id: &str,
    cached: &mut crate::cache::Cached,
) -> Result<()> {
    let now = unix_now();
    if !cached.derived.facts_due(now) {
        return Ok(());
    }
    cached.derived.facts_changed(now);
    let Some(meta) = cached.derived.facts_meta(None, now) else {
        return Ok(());
    };
    let (version, generation): (i64, i64) = sqlx::query_as(
        "UPDATE agents SET meta = $2, version = version + 1, generation = generation + 1
         WHERE id = $1 RETURNING version, generation",
    )
    .bind(id)
    .bind(crate::meta_json(&meta))
    .fetch_one(&mut *tx)
    .await
    .map_err(db("storing an agent's facts"))?;
    cached.derived.meta = meta;
    engram_store::drop_later(cached.derived.rebuild_epoch());
    cached.version = version;
    cached.generation = generation;
    Ok(())
}
