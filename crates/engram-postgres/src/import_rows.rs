//! The rows an import writes (`portable.rs` runs these in its
//! transaction, under the locks it takes), each kind in statements of
//! many rows (`UNNEST` of arrays) across the bundle's agents: an agent of
//! 100,000 traces is a few dozen statements, not a round trip per row.
//!
//! What a store derives from the records is derived here as its writers
//! would have: a trace's place, words and lexeme count, the agent's next
//! place and turn checkpoint, a memory's words and liveness, which facts
//! have version rows. The agent then answers as the one exported did.

use engram_core::RawTrace;
use engram_core::blocks::{Block, Scope};
use engram_core::bundle::{AgentRecords, UserRecords, fact_versions};
use engram_core::memory::{EpisodicItem, Origin, SemanticItem};
use engram_core::users::UserFact;
use engram_store::{Result, StoreError};
use sqlx::PgConnection;

use crate::db;
use crate::rows::{item_words, words_of};

/// Rows per statement at most.
const BATCH_ROWS: usize = 5_000;
/// About this much text per statement.
const BATCH_BYTES: usize = 8 << 20;
/// What a row costs besides its text (ids, columns, words).
const ROW_BYTES: usize = 256;

/// `items` cut into runs of at most [`BATCH_ROWS`] rows and about
/// [`BATCH_BYTES`] bytes (`size` of each): one statement each.
fn batches<'a, T>(
    items: &'a [T],
    size: impl Fn(&T) -> usize + 'a,
) -> impl Iterator<Item = (&'a [T], u64)> + 'a {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut n, mut bytes) = (0, 0);
        while n < rest.len() && n < BATCH_ROWS && bytes < BATCH_BYTES {
            bytes += size(&rest[n]) + ROW_BYTES;
            n += 1;
        }
        let (batch, tail) = rest.split_at(n);
        rest = tail;
        Some((batch, bytes as u64))
    })
}

fn version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Whether a fact's versions have rows of their own, as a client's change
/// stores them (`facts::store_version`, `user_managed`): a fact a client
/// wrote, or changed (which made a second version); one a compaction or
/// a fold wrote and nobody changed has its fact's row alone.
fn versioned<'a>(versions: impl IntoIterator<Item = &'a SemanticItem>) -> bool {
    let (mut n, mut client) = (0, false);
    for f in versions {
        n += 1;
        client |= f.managed.origin == Origin::Client;
    }
    n > 1 || client
}

/// Writes `agents` whole: their rows, traces, memories, fact versions,
/// stored results and blocks. None of them may exist (the caller deleted
/// those it replaces); one created meanwhile by another write is a
/// conflict, and nothing is imported.
pub(crate) async fn agents(tx: &mut PgConnection, agents: &[AgentRecords]) -> Result<()> {
    if agents.is_empty() {
        return Ok(());
    }
    agent_rows(tx, agents).await?;
    traces(tx, agents).await?;
    // Each agent's facts, each fact's versions together, ascending.
    let facts: Vec<Vec<SemanticItem>> = agents
        .iter()
        .map(|a| fact_versions(&a.facts, |f| f))
        .collect();
    memories(tx, agents, &facts).await?;
    versions(tx, agents, &facts).await?;
    results(tx, agents).await?;
    let versions_of_blocks: Vec<(String, Option<&str>, &Block)> = agents
        .iter()
        .flat_map(|a| {
            let scope = crate::scope_key(&Scope::Agent(a.id.clone()));
            a.blocks
                .iter()
                .map(move |b| (scope.clone(), Some(a.id.as_str()), b))
        })
        .collect();
    blocks(tx, &versions_of_blocks).await?;
    crate::compaction_log::import(tx, agents).await
}

/// The agents' rows: settings, a new incarnation, the next trace's place
/// (its traces are placed from 0, archived first) and the turn state of
/// the archive (what a compaction's checkpoint holds: a load then replays
/// the active traces only).
async fn agent_rows(tx: &mut PgConnection, agents: &[AgentRecords]) -> Result<()> {
    let bytes = agents
        .iter()
        .map(|a| crate::cache::bytes_of(&a.archived))
        .sum();
    let turns: Vec<Option<String>> = engram_store::offload_over(bytes, || {
        agents
            .iter()
            .map(|a| {
                (!a.archived.is_empty()).then(|| {
                    let mut tracker = engram_core::TurnTracker::default();
                    for t in &a.archived {
                        tracker.apply(t);
                    }
                    serde_json::to_string(&tracker).expect("the tracker serializes")
                })
            })
            .collect()
    });
    let ids: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    let incarnations: Vec<uuid::Uuid> = agents.iter().map(|_| uuid::Uuid::now_v7()).collect();
    let next: Vec<i64> = agents
        .iter()
        .map(|a| (a.archived.len() + a.active.len()) as i64)
        .collect();
    let metas: Vec<String> = agents.iter().map(|a| crate::meta_json(&a.meta)).collect();
    let users: Vec<Option<&str>> = agents.iter().map(|a| a.meta.user_id.as_deref()).collect();
    let created = sqlx::query(
        "INSERT INTO agents (id, incarnation, next_seq, meta, turns, user_id)
         SELECT * FROM UNNEST($1::text[], $2::uuid[], $3::bigint[], $4::text[], $5::text[], $6::text[])
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&ids)
    .bind(&incarnations)
    .bind(&next)
    .bind(&metas)
    .bind(&turns)
    .bind(&users)
    .execute(&mut *tx)
    .await
    .map_err(db("creating imported agents"))?
    .rows_affected();
    if created != agents.len() as u64 {
        // Found absent under the locks, created since by a first write
        // (which takes no user's lock): a retry finds it.
        return Err(StoreError::Conflict(
            "another write created an agent of the bundle meanwhile; nothing was imported".into(),
        ));
    }
    Ok(())
}

/// A trace of an agent, at its place.
struct Placed<'a> {
    agent: &'a str,
    seq: i64,
    archived: bool,
    trace: &'a RawTrace,
}

/// Every agent's traces, with their words, and each agent's lexeme count
/// (BM25's average length) summed from what was written.
async fn traces(tx: &mut PgConnection, agents: &[AgentRecords]) -> Result<()> {
    let placed: Vec<Placed> = agents
        .iter()
        .flat_map(|a| {
            let archived = a.archived.iter().map(|t| (true, t));
            let active = a.active.iter().map(|t| (false, t));
            archived
                .chain(active)
                .enumerate()
                .map(|(seq, (archived, trace))| Placed {
                    agent: a.id.as_str(),
                    seq: seq as i64,
                    archived,
                    trace,
                })
        })
        .collect();
    for (batch, bytes) in batches(&placed, |p| p.trace.content.len()) {
        let n = batch.len();
        let mut cols = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        engram_store::offload_over(bytes, || {
            for p in batch {
                let item = engram_store::trace_item(p.trace);
                cols.0.push(p.agent);
                cols.1.push(p.seq);
                cols.2.push(item.order as i64);
                cols.3.push(i16::from(item.trace_type));
                cols.4.push(p.trace.id.as_str());
                cols.5.push(p.trace.event_id.as_deref());
                cols.6.push(p.trace.ts);
                cols.7.push(p.archived);
                cols.8.push(item_words(&item));
                cols.9.push(item.body);
            }
        });
        sqlx::query(
            "WITH added AS (
               INSERT INTO traces (agent_id, seq, ord, trace_type, trace_id, event_id, ts, archived, words, body)
               SELECT u.agent_id, u.seq, u.ord, u.trace_type, u.trace_id, u.event_id, u.ts, u.archived,
                      to_tsvector('english', u.words), u.body
               FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::smallint[], $5::text[], $6::text[],
                           $7::float8[], $8::bool[], $9::text[], $10::text[])
                 AS u(agent_id, seq, ord, trace_type, trace_id, event_id, ts, archived, words, body)
               RETURNING agent_id, length(words) AS lexemes)
             UPDATE agents a SET words_total = a.words_total + s.lexemes
             FROM (SELECT agent_id, sum(lexemes) AS lexemes FROM added GROUP BY agent_id) s
             WHERE a.id = s.agent_id",
        )
        .bind(cols.0)
        .bind(cols.1)
        .bind(cols.2)
        .bind(cols.3)
        .bind(cols.4)
        .bind(cols.5)
        .bind(cols.6)
        .bind(cols.7)
        .bind(cols.8)
        .bind(cols.9)
        .execute(&mut *tx)
        .await
        .map_err(db("storing imported traces"))?;
    }
    Ok(())
}

/// A summary or fact of an agent, as its row stores it.
enum Memory<'a> {
    Summary(&'a EpisodicItem),
    /// A fact's last version.
    Fact(&'a SemanticItem),
}

impl Memory<'_> {
    fn size(&self) -> usize {
        match self {
            Memory::Summary(e) => e.summary.len(),
            Memory::Fact(f) => f.fact.len(),
        }
    }
}

/// The summaries and each fact's row (its last version), each agent's in
/// stored order (the rows' `seq`, which a load reads them by): a hidden
/// summary or a fact not live has no words, as their writers store them.
async fn memories(
    tx: &mut PgConnection,
    agents: &[AgentRecords],
    facts: &[Vec<SemanticItem>],
) -> Result<()> {
    let rows: Vec<(&str, Memory)> = agents
        .iter()
        .zip(facts)
        .flat_map(|(a, facts)| {
            let summaries = a.summaries.iter().map(Memory::Summary);
            let facts = facts
                .chunk_by(|x, y| x.id == y.id)
                .filter_map(|versions| versions.last())
                .map(Memory::Fact);
            summaries.chain(facts).map(|m| (a.id.as_str(), m))
        })
        .collect();
    for (batch, bytes) in batches(&rows, |(_, m)| m.size()) {
        let n = batch.len();
        let (mut agent, mut kind, mut id, mut body) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut ord, mut ts, mut live, mut words, mut expires) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        engram_store::offload_over(bytes, || {
            for (a, m) in batch {
                let (item, k, is_live, expires_at) = match m {
                    Memory::Summary(e) => (engram_store::episodic_item(e), "e", e.is_shown(), None),
                    Memory::Fact(f) => {
                        let expires_at = f.managed.expires_at.filter(|_| !f.managed.pinned);
                        let kept = f.managed.deleted_at.is_none();
                        (engram_store::semantic_item(f), "s", kept, expires_at)
                    }
                };
                agent.push(*a);
                kind.push(k);
                id.push(item.key.clone());
                ord.push(item.order as i64);
                ts.push(item.ts);
                live.push(is_live);
                words.push(if is_live {
                    item_words(&item)
                } else {
                    String::new()
                });
                expires.push(expires_at);
                body.push(item.body);
            }
        });
        sqlx::query(
            "INSERT INTO memories (agent_id, kind, id, body, ord, ts, live, words, expires_at)
             SELECT u.agent_id, u.kind::\"char\", u.id, u.body, u.ord, u.ts, u.live,
                    to_tsvector('english', u.words), u.expires_at
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::float8[],
                         $7::bool[], $8::text[], $9::float8[]) WITH ORDINALITY
               AS u(agent_id, kind, id, body, ord, ts, live, words, expires_at, n)
             ORDER BY u.n",
        )
        .bind(agent)
        .bind(kind)
        .bind(id)
        .bind(body)
        .bind(ord)
        .bind(ts)
        .bind(live)
        .bind(words)
        .bind(expires)
        .execute(&mut *tx)
        .await
        .map_err(db("storing imported memories"))?;
    }
    Ok(())
}

/// The version rows of the facts that have them ([`versioned`]).
async fn versions(
    tx: &mut PgConnection,
    agents: &[AgentRecords],
    facts: &[Vec<SemanticItem>],
) -> Result<()> {
    let rows: Vec<(&str, &SemanticItem)> = agents
        .iter()
        .zip(facts)
        .flat_map(|(a, facts)| {
            facts
                .chunk_by(|x, y| x.id == y.id)
                .filter(|versions| versioned(*versions))
                .flatten()
                .map(|f| (a.id.as_str(), f))
        })
        .collect();
    for (batch, bytes) in batches(&rows, |(_, f)| f.fact.len()) {
        let (agent, id, v, body): (Vec<&str>, Vec<&str>, Vec<i64>, Vec<String>) =
            engram_store::offload_over(bytes, || {
                let mut cols = (vec![], vec![], vec![], vec![]);
                for (a, f) in batch {
                    cols.0.push(*a);
                    cols.1.push(f.id.as_str());
                    cols.2.push(version(f.version()));
                    cols.3
                        .push(serde_json::to_string(f).expect("a fact serializes"));
                }
                cols
            });
        sqlx::query(
            "INSERT INTO fact_versions (agent_id, id, version, body)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[])",
        )
        .bind(agent)
        .bind(id)
        .bind(v)
        .bind(body)
        .execute(&mut *tx)
        .await
        .map_err(db("storing imported facts' versions"))?;
    }
    Ok(())
}

/// The whole tool results the traces name.
async fn results(tx: &mut PgConnection, agents: &[AgentRecords]) -> Result<()> {
    let rows: Vec<(&str, &engram_core::bundle::StoredResult)> = agents
        .iter()
        .flat_map(|a| a.results.iter().map(|r| (a.id.as_str(), r)))
        .collect();
    for (batch, _) in batches(&rows, |(_, r)| r.json.len()) {
        let agent: Vec<&str> = batch.iter().map(|(a, _)| *a).collect();
        let path: Vec<&str> = batch.iter().map(|(_, r)| r.path.as_str()).collect();
        // As Ingest stores them (a NUL has no place in a text column).
        let body: Vec<String> = batch.iter().map(|(_, r)| words_of(&r.json)).collect();
        sqlx::query(
            "INSERT INTO spills (agent_id, path, body)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[])",
        )
        .bind(agent)
        .bind(path)
        .bind(body)
        .execute(&mut *tx)
        .await
        .map_err(db("storing imported tool results"))?;
    }
    Ok(())
}

/// Every version of blocks: (scope key, the agent of an agent's scope,
/// the block).
async fn blocks(tx: &mut PgConnection, rows: &[(String, Option<&str>, &Block)]) -> Result<()> {
    for (batch, _) in batches(rows, |(_, _, b)| b.value.len()) {
        let scope: Vec<&str> = batch.iter().map(|(s, _, _)| s.as_str()).collect();
        let agent: Vec<Option<&str>> = batch.iter().map(|(_, a, _)| *a).collect();
        let label: Vec<&str> = batch.iter().map(|(_, _, b)| b.label.as_str()).collect();
        let v: Vec<i64> = batch.iter().map(|(_, _, b)| version(b.version)).collect();
        let body: Vec<String> = batch
            .iter()
            .map(|(_, _, b)| serde_json::to_string(b).expect("blocks serialize"))
            .collect();
        sqlx::query(
            "INSERT INTO blocks (scope, label, version, agent_id, body)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[])",
        )
        .bind(scope)
        .bind(label)
        .bind(v)
        .bind(agent)
        .bind(body)
        .execute(&mut *tx)
        .await
        .map_err(db("storing imported memory blocks"))?;
    }
    Ok(())
}

/// The user's own records (the caller deleted what it had): each fact's
/// row (its last version, in the order facts first appeared, with what
/// prompts, search and the upkeep look it up by: `looked_up`, as
/// `store_row` writes it), the version rows of the facts that have them, its blocks and its
/// last conversation.
pub(crate) async fn user(tx: &mut PgConnection, u: &UserRecords) -> Result<()> {
    let user = u.id.as_str();
    let facts = fact_versions(&u.facts, |f: &UserFact| &f.fact);
    let grouped: Vec<&[UserFact]> = facts.chunk_by(|x, y| x.fact.id == y.fact.id).collect();
    let latest: Vec<&UserFact> = grouped.iter().filter_map(|v| v.last()).collect();
    for (batch, bytes) in batches(&latest, |f| f.fact.fact.len()) {
        let n = batch.len();
        let mut cols = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        engram_store::offload_over(bytes, || {
            for fact in batch {
                let f = &fact.fact;
                let looked = crate::user_fact_changes::looked_up(f);
                cols.0.push(f.id.as_str());
                cols.1
                    .push(serde_json::to_string(*fact).expect("facts serialize"));
                cols.2.push(looked.pinned);
                cols.3.push(looked.expires_at);
                cols.4.push(looked.words);
            }
        });
        sqlx::query(
            "INSERT INTO user_facts (user_id, id, body, pinned, expires_at, words)
             SELECT $1, u.id, u.body, u.pinned, u.expires_at, to_tsvector('english', u.words)
             FROM UNNEST($2::text[], $3::text[], $4::bool[], $5::float8[], $6::text[]) WITH ORDINALITY
               AS u(id, body, pinned, expires_at, words, n)
             ORDER BY u.n",
        )
        .bind(user)
        .bind(cols.0)
        .bind(cols.1)
        .bind(cols.2)
        .bind(cols.3)
        .bind(cols.4)
        .execute(&mut *tx)
        .await
        .map_err(db("storing an imported user's facts"))?;
    }
    let versions: Vec<&UserFact> = grouped
        .iter()
        .filter(|v| versioned(v.iter().map(|f| &f.fact)))
        .flat_map(|v| v.iter())
        .collect();
    for (batch, _) in batches(&versions, |f| f.fact.fact.len()) {
        let id: Vec<&str> = batch.iter().map(|f| f.fact.id.as_str()).collect();
        let v: Vec<i64> = batch.iter().map(|f| version(f.fact.version())).collect();
        let body: Vec<String> = batch
            .iter()
            .map(|f| serde_json::to_string(*f).expect("facts serialize"))
            .collect();
        sqlx::query(
            "INSERT INTO user_fact_versions (user_id, id, version, body)
             SELECT $1, u.* FROM UNNEST($2::text[], $3::bigint[], $4::text[]) AS u",
        )
        .bind(user)
        .bind(id)
        .bind(v)
        .bind(body)
        .execute(&mut *tx)
        .await
        .map_err(db("storing an imported user's facts' versions"))?;
    }
    let scope = crate::scope_key(&Scope::User(u.id.clone()));
    let rows: Vec<(String, Option<&str>, &Block)> =
        u.blocks.iter().map(|b| (scope.clone(), None, b)).collect();
    blocks(tx, &rows).await?;
    if let Some(last) = &u.last {
        sqlx::query("INSERT INTO user_conversations (user_id, last) VALUES ($1, $2)")
            .bind(user)
            .bind(serde_json::to_string(last).expect("summaries serialize"))
            .execute(&mut *tx)
            .await
            .map_err(db("storing an imported user's last conversation"))?;
    }
    Ok(())
}
