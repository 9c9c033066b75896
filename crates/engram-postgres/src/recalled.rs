//! What a ranking found, read back from the rows: each ranked trace,
//! summary and fact (of the agent, or of whichever of the user's agents
//! holds it), a trace with its neighbours, an expired fact left out.

use std::collections::HashMap;

use engram_core::RawTrace;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_index::{Kind, Ranked};
use engram_store::ranked::{MAX_CONTEXT, matched_by, split_key};
use engram_store::{Memory, Recalled, Result};
use sqlx::PgConnection;

use crate::covered::{Covered, PlaceOrigins};
use crate::{db, parse, parse_trace};

/// The memories `ranked` names, in order, each trace with up to `context`
/// neighbours each side (oldest first); each names its agent when `who`
/// is a user.
pub(crate) async fn materialize(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    places: &PlaceOrigins<'_>,
    ranked: &[Ranked],
    context: usize,
) -> Result<Vec<Recalled>> {
    let context = context.min(MAX_CONTEXT);
    // Where each hit is: (agent, ord) for traces, (agent, id) for memories.
    let mut at: Vec<Option<Spot>> = Vec::with_capacity(ranked.len());
    let (mut trace_agents, mut trace_ords) = (Vec::new(), Vec::new());
    let (mut memory_agents, mut memory_ids) = (Vec::new(), Vec::new());
    let mut own_ids: Vec<String> = Vec::new();
    for hit in ranked {
        let spot = match hit.kind {
            Kind::Trace => places.locate(who, hit.order).map(|(agent, ord)| {
                trace_agents.push(agent.clone());
                trace_ords.push(ord);
                Spot::Trace(agent, ord)
            }),
            _ => match (hit.key().map(split_key), who) {
                // The user's own fact (a client wrote it).
                (Some((None, id)), Covered::User(_)) => {
                    own_ids.push(id.to_owned());
                    Some(Spot::Own(id.to_owned()))
                }
                _ => hit.key().and_then(|k| who.unkey(k)).map(|(agent, id)| {
                    memory_agents.push(agent.clone());
                    memory_ids.push(id.clone());
                    Spot::Memory(agent, id)
                }),
            },
        };
        at.push(spot);
    }
    // Nothing to read, no round trip (Retrieve's summaries and facts
    // alone name no trace).
    let traces: Vec<(String, i64, bool, String)> = if trace_ords.is_empty() {
        vec![]
    } else {
        sqlx::query_as(
            "SELECT t.agent_id, t.ord, t.archived, t.body
             FROM unnest($1::text[], $2::bigint[]) AS k(a, o)
             JOIN traces t ON t.agent_id = k.a AND t.ord = k.o",
        )
        .bind(&trace_agents)
        .bind(&trace_ords)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading traces"))?
    };
    let mut traces: HashMap<(String, i64), (bool, String)> = traces
        .into_iter()
        .map(|(a, o, archived, body)| ((a, o), (archived, body)))
        .collect();
    let memories: Vec<(String, String, String)> = if memory_ids.is_empty() {
        vec![]
    } else {
        sqlx::query_as(
            "SELECT m.agent_id, m.id, m.body
             FROM unnest($1::text[], $2::text[]) AS k(a, id)
             JOIN memories m ON m.agent_id = k.a AND m.id = k.id",
        )
        .bind(&memory_agents)
        .bind(&memory_ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading memories"))?
    };
    let mut memories: HashMap<(String, String), String> = memories
        .into_iter()
        .map(|(a, id, body)| ((a, id), body))
        .collect();
    // In a user's search, a conversation's fact stands for the user's
    // fact it was folded into: replaced or ended there (by another
    // conversation, or a consolidation), it reads so, with its span, as
    // the file store's user index holds it.
    let mut folded = match who {
        Covered::User(placing) if !memory_ids.is_empty() => {
            folded_into(conn, &placing.user, &memory_agents, &memory_ids).await?
        }
        _ => HashMap::new(),
    };
    let mut own = match who {
        Covered::User(placing) if !own_ids.is_empty() => {
            own_facts(conn, &placing.user, &own_ids).await?
        }
        _ => HashMap::new(),
    };
    let mut around = around(conn, &trace_agents, &trace_ords, context).await?;
    let mut out = Vec::with_capacity(ranked.len());
    for (hit, spot) in ranked.iter().zip(at) {
        let (agent, memory, sides) = match spot {
            None => continue,
            Some(Spot::Trace(agent, ord)) => {
                let spot = (agent, ord);
                let Some((archived, body)) = traces.remove(&spot) else {
                    continue;
                };
                let trace = Box::new(parse_trace(&spot.0, &body)?);
                // A trace's place is its own; a memory's may equal one.
                let sides = around.remove(&spot).unwrap_or_default();
                (Some(spot.0), Memory::Trace { trace, archived }, sides)
            }
            // The user's own: of no conversation.
            Some(Spot::Own(id)) => match own.remove(&id) {
                Some(fact) => (None, Memory::Semantic(fact), Default::default()),
                None => continue,
            },
            Some(Spot::Memory(agent, id)) => {
                let Some(body) = memories.remove(&(agent.clone(), id.clone())) else {
                    continue;
                };
                let memory = if hit.kind == Kind::Episodic {
                    let summary: EpisodicItem = parse(&agent, "summary", &body)?;
                    // Hidden by a forget since it was ranked.
                    if !summary.is_shown() {
                        continue;
                    }
                    Memory::Episodic(summary)
                } else {
                    let fact: SemanticItem = parse(&agent, "fact", &body)?;
                    let fact = folded.remove(&(agent.clone(), id)).unwrap_or(fact);
                    // Expired: gone from search at once (upkeep purges it).
                    if fact.is_expired(engram_store::unix_now()) {
                        continue;
                    }
                    Memory::Semantic(fact)
                };
                (Some(agent), memory, Default::default())
            }
        };
        out.push(Recalled {
            agent_id: agent.filter(|_| who.agent().is_none()),
            memory,
            score: hit.score,
            matched_by: matched_by(hit),
            before: sides.0,
            after: sides.1,
        });
    }
    Ok(out)
}

type Sides = (Vec<RawTrace>, Vec<RawTrace>);

/// Where a hit's row is.
enum Spot {
    Trace(String, i64),
    Memory(String, String),
    /// A fact of the user's own, by id.
    Own(String),
}

/// The user's facts that the conversations' facts `(agents[i], ids[i])`
/// were folded into, by conversation fact.
async fn folded_into(
    conn: &mut PgConnection,
    user: &str,
    agents: &[String],
    ids: &[String],
) -> Result<HashMap<(String, String), SemanticItem>> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT s.agent_id, s.fact_id, uf.body FROM user_facts uf
         CROSS JOIN LATERAL jsonb_to_recordset(uf.body::jsonb -> 'sources')
             AS s(agent_id text, fact_id text)
         JOIN unnest($2::text[], $3::text[]) AS k(a, f) ON k.a = s.agent_id AND k.f = s.fact_id
         WHERE uf.user_id = $1",
    )
    .bind(user)
    .bind(agents)
    .bind(ids)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading what a user's facts were folded from"))?;
    let mut out = HashMap::new();
    for (agent, id, body) in rows {
        out.insert((agent, id), crate::user_fact_changes::parse(&body)?.fact);
    }
    Ok(out)
}

/// The user's own facts `ids` that are shown now (live, not expired), by id.
async fn own_facts(
    conn: &mut PgConnection,
    user: &str,
    ids: &[String],
) -> Result<HashMap<String, SemanticItem>> {
    let bodies: Vec<String> =
        sqlx::query_scalar("SELECT body FROM user_facts WHERE user_id = $1 AND id = ANY($2)")
            .bind(user)
            .bind(ids)
            .fetch_all(&mut *conn)
            .await
            .map_err(db("reading a user's facts"))?;
    let now = engram_store::unix_now();
    let mut out = HashMap::new();
    for body in bodies {
        let fact = crate::user_fact_changes::parse(&body)?.fact;
        if fact.is_shown(now) {
            out.insert(fact.id.clone(), fact);
        }
    }
    Ok(out)
}

/// Up to `n` traces each side of each trace (`agents[i]`, `ords[i]`),
/// oldest first.
async fn around(
    conn: &mut PgConnection,
    agents: &[String],
    ords: &[i64],
    n: usize,
) -> Result<HashMap<(String, i64), Sides>> {
    let mut out: HashMap<(String, i64), Sides> = HashMap::new();
    if ords.is_empty() || n == 0 {
        return Ok(out);
    }
    let rows: Vec<(String, i64, bool, String)> = sqlx::query_as(
        "SELECT c.a, c.o, n.after, n.body FROM unnest($1::text[], $2::bigint[]) AS c(a, o)
         CROSS JOIN LATERAL (
           (SELECT * FROM (SELECT false AS after, ord, body FROM traces WHERE agent_id = c.a AND ord < c.o
                           ORDER BY ord DESC LIMIT $3) b ORDER BY ord)
           UNION ALL
           (SELECT true, ord, body FROM traces WHERE agent_id = c.a AND ord > c.o ORDER BY ord LIMIT $3)) n",
    )
    .bind(agents)
    .bind(ords)
    .bind(n as i64)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading neighbours"))?;
    for (agent, of, after, body) in rows {
        let t = parse_trace(&agent, &body)?;
        let sides = out.entry((agent, of)).or_default();
        if after {
            sides.1.push(t);
        } else {
            sides.0.push(t);
        }
    }
    Ok(out)
}
