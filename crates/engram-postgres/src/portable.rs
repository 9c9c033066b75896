//! Export and import on PostgreSQL (`Portable`): an agent's or a user's
//! rows as the records of a bundle (`engram_core::bundle`), and a bundle
//! written back as rows.
//!
//! An export reads one snapshot (a repeatable-read transaction): every row
//! of the agent as one committed state, with no lock that a writer waits
//! on. The records are listed in the bundle's one order, whichever store
//! wrote them: traces archived then active, each by place; summaries by
//! place; each fact's and block's versions together (`fact_versions`,
//! `block_versions`). A fact's row is its last line (a compaction that
//! superseded it wrote it again at the same version), so it stands for its
//! version over that version's row in `fact_versions`.
//!
//! An import is one transaction (`import_rows.rs` writes its rows): the
//! users' scope locks, then the agents' rows, then their vectors' locks,
//! the order every writer takes them in. What exists is found under those
//! locks; refused, it wrote nothing. Replaced agents are deleted (their
//! rows cascade) and made again under a new incarnation, so every
//! replica's cache and copies of their vectors start over from the rows.
//! Rows are written with no vectors: the indexers embed them again.

use std::collections::HashMap;

use async_trait::async_trait;
use engram_core::blocks::{Block, Scope};
use engram_core::bundle::{
    AgentRecords, MemoryBundle, StoredResult, UserRecords, block_versions, fact_versions,
};
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::users::UserFact;
use engram_core::{AgentId, RawTrace, UserId};
use engram_store::{AgentMeta, Imported, Portable, Result, StoreError};
use sqlx::{PgConnection, Postgres, Transaction};

use crate::{PgStore, db};

#[async_trait]
impl Portable for PgStore {
    async fn export_agent(&self, id: &AgentId) -> Result<AgentRecords> {
        let mut tx = self.snapshot().await?;
        let records = agent_records(&mut tx, id).await?;
        tx.commit().await.map_err(db("ending a snapshot"))?;
        Ok(records)
    }

    async fn export_user(&self, user: &UserId) -> Result<UserRecords> {
        let mut tx = self.snapshot().await?;
        let records = user_records(&mut tx, user).await?;
        tx.commit().await.map_err(db("ending a snapshot"))?;
        Ok(records)
    }

    async fn import(&self, bundle: &MemoryBundle, replace: bool) -> Result<Imported> {
        bundle.check()?;
        let ids: Vec<&str> = bundle.agents.iter().map(|a| a.id.as_str()).collect();
        let mut tx = self.begin().await?;
        let written = write(&mut tx, bundle, replace).await;
        let committed = match written {
            Ok(()) => tx.commit().await.map_err(db("committing an import")),
            Err(e) => Err(e),
        };
        // This replica's caches of the agents (replaced, or committed or
        // not) are loaded again from the rows.
        for id in &ids {
            self.forget(id);
        }
        committed?;
        Ok(Imported::of(bundle))
    }
}

impl PgStore {
    /// A transaction that reads one committed state of every row.
    async fn snapshot(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db("starting a snapshot"))?;
        Ok(tx)
    }
}

/// The import's statements in `tx`: the locks, what exists checked (and,
/// with `replace`, deleted), then every row of the bundle.
async fn write(tx: &mut PgConnection, bundle: &MemoryBundle, replace: bool) -> Result<()> {
    // The users whose memory the import writes (the bundle's, its agents'),
    // in name order: two imports of overlapping users wait, never cross.
    let mut users: Vec<String> = bundle
        .agents
        .iter()
        .filter_map(|a| a.meta.user_id.clone())
        .chain(bundle.user.iter().map(|u| u.id.as_str().to_owned()))
        .collect();
    users.sort_unstable();
    users.dedup();
    for user in &users {
        crate::lock_scope(&mut *tx, &Scope::User(UserId::parse(user)?)).await?;
    }
    let ids: Vec<&str> = bundle.agents.iter().map(|a| a.id.as_str()).collect();
    let existing: Vec<String> =
        sqlx::query_scalar("SELECT id FROM agents WHERE id = ANY($1) ORDER BY id FOR UPDATE")
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(db("reading the agents to import"))?;
    let user_exists = match &bundle.user {
        Some(u) => has_memory(tx, &u.id).await?,
        None => false,
    };
    if !replace {
        if let Some(id) = existing.first() {
            return Err(StoreError::AlreadyExists(id.clone()));
        }
        if let Some(u) = bundle.user.as_ref().filter(|_| user_exists) {
            return Err(StoreError::AlreadyExists(crate::scope_key(&Scope::User(
                u.id.clone(),
            ))));
        }
    }
    // The agents' rows, then their vectors' lock, as delete_agent: the
    // cascade never waits on rows an indexer holds while it waits on us.
    crate::vectors::lock_vector_writes(&mut *tx, ids.clone()).await?;
    if !existing.is_empty() {
        crate::agents::delete_agent_rows(tx, &existing, "replacing agents").await?;
    }
    if let Some(u) = &bundle.user {
        crate::agents::delete_user_memory(tx, &u.id, "replacing a user's memory").await?;
    }
    crate::import_rows::agents(tx, &bundle.agents).await?;
    if let Some(u) = &bundle.user {
        crate::import_rows::user(tx, u).await?;
    }
    Ok(())
}

/// Whether the user has memory of its own: facts or blocks.
async fn has_memory(tx: &mut PgConnection, user: &UserId) -> Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM user_facts WHERE user_id = $1)
             OR EXISTS (SELECT 1 FROM blocks WHERE scope = $2)",
    )
    .bind(user.as_str())
    .bind(crate::scope_key(&Scope::User(user.clone())))
    .fetch_one(&mut *tx)
    .await
    .map_err(db("reading a user's memory"))
}

/// Every record of agent `id` in the snapshot `tx`; NOT_FOUND without it.
async fn agent_records(tx: &mut PgConnection, id: &AgentId) -> Result<AgentRecords> {
    let agent = id.as_str();
    let meta: Option<String> = sqlx::query_scalar("SELECT meta FROM agents WHERE id = $1")
        .bind(agent)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db("reading an agent"))?;
    let meta: AgentMeta = match meta {
        Some(meta) => crate::parse(agent, "settings", &meta)?,
        None => return Err(StoreError::NotFound(agent.to_owned())),
    };
    // A compaction or a forget commits whole here, so none is ever half
    // done (`forget.rs`): nothing to finish, and nothing a bundle may not
    // carry.
    let meta = AgentMeta {
        pending: None,
        forgetting: None,
        unpurged: vec![],
        ..meta
    };
    let rows: Vec<(bool, String)> = sqlx::query_as(
        "SELECT archived, body FROM traces WHERE agent_id = $1 ORDER BY archived DESC, seq",
    )
    .bind(agent)
    .fetch_all(&mut *tx)
    .await
    .map_err(db("reading traces"))?;
    let bytes = rows.iter().map(|(_, b)| b.len() as u64).sum();
    let (archived, active) = engram_store::offload_over(bytes, || {
        let (mut archived, mut active) = (vec![], vec![]);
        for (is_archived, body) in &rows {
            let trace = crate::parse_trace(agent, body)?;
            if *is_archived {
                archived.push(trace);
            } else {
                active.push(trace);
            }
        }
        Ok::<_, StoreError>((archived, active))
    })?;
    engram_store::drop_later(rows);
    let spills: Vec<(String, String)> =
        sqlx::query_as("SELECT path, body FROM spills WHERE agent_id = $1")
            .bind(agent)
            .fetch_all(&mut *tx)
            .await
            .map_err(db("reading tool results"))?;
    let results = results_in_order(spills, archived.iter().chain(&active));
    let memories: Vec<(i8, String)> =
        sqlx::query_as("SELECT kind, body FROM memories WHERE agent_id = $1 ORDER BY kind, seq")
            .bind(agent)
            .fetch_all(&mut *tx)
            .await
            .map_err(db("reading an agent's memories"))?;
    let mut summaries: Vec<EpisodicItem> = vec![];
    let mut rows: Vec<SemanticItem> = vec![];
    for (kind, body) in &memories {
        match *kind as u8 {
            b'e' => summaries.push(crate::parse(agent, "summary", body)?),
            _ => rows.push(crate::parse(agent, "fact", body)?),
        }
    }
    let versions: Vec<(String, String)> = sqlx::query_as(
        "SELECT id, body FROM fact_versions WHERE agent_id = $1 ORDER BY id, version",
    )
    .bind(agent)
    .fetch_all(&mut *tx)
    .await
    .map_err(db("reading facts' versions"))?;
    let mut older: HashMap<String, Vec<SemanticItem>> = HashMap::new();
    for (fact, body) in &versions {
        let version = crate::parse(agent, "fact", body)?;
        older.entry(fact.clone()).or_default().push(version);
    }
    let facts = with_versions(rows, older, |f| f);
    let blocks = blocks_of(tx, &Scope::Agent(id.clone())).await?;
    let compactions = crate::compaction_log::export(tx, agent).await?;
    Ok(AgentRecords {
        id: id.clone(),
        meta,
        archived,
        active,
        results,
        summaries,
        facts,
        blocks,
        compactions,
    })
}

/// The stored results in the order of the traces that name them. A row no
/// trace names (none is written so: a result and its trace are written
/// and erased together) is left out: nothing reads it, and a bundle may
/// not carry it.
fn results_in_order<'a>(
    spills: Vec<(String, String)>,
    traces: impl Iterator<Item = &'a RawTrace>,
) -> Vec<StoredResult> {
    let mut bodies: HashMap<String, String> = spills.into_iter().collect();
    traces
        .filter_map(|t| t.tool_result_ref.as_deref())
        .filter_map(|path| {
            let json = bodies.remove(path)?;
            Some(StoredResult {
                path: path.to_owned(),
                json,
            })
        })
        .collect()
}

/// Every version of each fact: `rows` are the facts' rows (the last line
/// written of each, in the order facts first appeared), `older` the
/// version rows of the facts a client changed, by id. A fact's row comes
/// after its version rows, so it stands for its own version.
fn with_versions<T: Clone>(
    rows: Vec<T>,
    mut older: HashMap<String, Vec<T>>,
    fact: impl Fn(&T) -> &SemanticItem,
) -> Vec<T> {
    let mut lines = Vec::with_capacity(rows.len() + older.values().map(Vec::len).sum::<usize>());
    for row in rows {
        if let Some(versions) = older.remove(&fact(&row).id) {
            lines.extend(versions);
        }
        lines.push(row);
    }
    fact_versions(&lines, fact)
}

/// Every version of the scope's blocks, labels in the order they were
/// first written (as the file store's lines are): by their first
/// version's time, then by label.
async fn blocks_of(tx: &mut PgConnection, scope: &Scope) -> Result<Vec<Block>> {
    let bodies: Vec<String> =
        sqlx::query_scalar("SELECT body FROM blocks WHERE scope = $1 ORDER BY label, version")
            .bind(crate::scope_key(scope))
            .fetch_all(&mut *tx)
            .await
            .map_err(db("reading memory blocks"))?;
    let mut labels: Vec<Vec<Block>> = vec![];
    for body in &bodies {
        let block = crate::blocks::parse(body)?;
        match labels.last_mut() {
            Some(versions) if versions[0].label == block.label => versions.push(block),
            _ => labels.push(vec![block]),
        }
    }
    labels.sort_by(|a, b| {
        a[0].updated_at
            .total_cmp(&b[0].updated_at)
            .then_with(|| a[0].label.cmp(&b[0].label))
    });
    let lines: Vec<Block> = labels.into_iter().flatten().collect();
    Ok(block_versions(&lines))
}

/// The user's own records in the snapshot `tx`; none for an unknown user.
async fn user_records(tx: &mut PgConnection, user: &UserId) -> Result<UserRecords> {
    let rows = crate::user_fact_changes::load(&mut *tx, user).await?;
    let versions: Vec<(String, String)> = sqlx::query_as(
        "SELECT id, body FROM user_fact_versions WHERE user_id = $1 ORDER BY id, version",
    )
    .bind(user.as_str())
    .fetch_all(&mut *tx)
    .await
    .map_err(db("reading a user's facts' versions"))?;
    let mut older: HashMap<String, Vec<UserFact>> = HashMap::new();
    for (fact, body) in &versions {
        let version = crate::user_fact_changes::parse(body)?;
        older.entry(fact.clone()).or_default().push(version);
    }
    let facts = with_versions(rows, older, |f| &f.fact);
    let blocks = blocks_of(tx, &Scope::User(user.clone())).await?;
    let last = crate::user_facts::read_last(&mut *tx, user).await?;
    Ok(UserRecords {
        id: user.clone(),
        facts,
        blocks,
        last,
    })
}
