//! Sittings scored as wholes on PostgreSQL (`engram_index::rank::sittings`
//! says why and how). Each agent's sittings (where each starts, and its
//! length in lexemes) come from one window statement over its traces, and
//! are kept by this replica while the agent's version stands (every
//! committed write moves it). A question's terms are then counted by
//! sitting in the rows that hold them. The terms the search found common
//! (in half of the rows, or in more than it counts rarity to) are passed
//! over, as the file store passes over a word most messages hold: they
//! weigh next to nothing, and the rows read stay bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use engram_index::{Coverage, Params, Sittings, Vectors, sitting_scores};
use engram_store::Result;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db;
use crate::who::{Who, bind_who};

/// Agents whose sittings a replica keeps at most (past it, it starts
/// over: a search reads an agent's again in one statement).
const MAX_KEPT: usize = 4096;

/// Rows a question's terms are counted in, at most (the rarest terms'
/// rows are few; this bounds a search's work however the counts went).
const MAX_ROWS: i64 = 20_000;

/// One agent's sittings as of a version.
#[derive(Debug)]
struct AgentSittings {
    incarnation: Uuid,
    version: i64,
    /// Where each sitting starts (`ord`), ascending, and its length.
    starts: Vec<i64>,
    lengths: Vec<u64>,
}

/// A replica's agents' sittings.
#[derive(Debug, Default)]
pub(crate) struct SittingCache {
    agents: Mutex<HashMap<String, Arc<AgentSittings>>>,
}

impl SittingCache {
    /// The sittings of `agents`, read again for those written since.
    async fn of(
        &self,
        conn: &mut PgConnection,
        agents: &[String],
        gap: f64,
    ) -> Result<Vec<(String, Arc<AgentSittings>)>> {
        let versions: Vec<(String, Uuid, i64)> =
            sqlx::query_as("SELECT id, incarnation, version FROM agents WHERE id = ANY($1)")
                .bind(agents)
                .fetch_all(&mut *conn)
                .await
                .map_err(db("reading the agents' versions"))?;
        let mut out = Vec::with_capacity(versions.len());
        let mut stale = HashMap::new();
        {
            let held = engram_store::lock(&self.agents);
            for (id, incarnation, version) in versions {
                match held.get(&id) {
                    Some(s) if s.incarnation == incarnation && s.version == version => {
                        out.push((id, Arc::clone(s)));
                    }
                    _ => {
                        stale.insert(id, (incarnation, version));
                    }
                }
            }
        }
        if stale.is_empty() {
            return Ok(out);
        }
        let ids: Vec<&String> = stale.keys().collect();
        // A sitting starts at an agent's first trace and after each gap;
        // its number is the starts so far. Rows read after the version:
        // at least as new as it (a later write moves the version again).
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT agent_id, min(ord), sum(len)::bigint FROM (
                SELECT agent_id, ord, len,
                       sum(starts::int) OVER (PARTITION BY agent_id ORDER BY ord) AS sitting
                FROM (SELECT agent_id, ord, length(words) AS len,
                             coalesce(abs(ts - lag(ts) OVER (PARTITION BY agent_id ORDER BY ord)) > $2, true) AS starts
                      FROM traces WHERE agent_id = ANY($1)) a) b
             GROUP BY agent_id, sitting ORDER BY agent_id, 2",
        )
        .bind(&ids)
        .bind(gap)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("reading the agents' sittings"))?;
        let mut read: HashMap<String, (Vec<i64>, Vec<u64>)> = HashMap::new();
        for (agent, start, length) in rows {
            let (starts, lengths) = read.entry(agent).or_default();
            starts.push(start);
            lengths.push(u64::try_from(length).unwrap_or(0));
        }
        let mut held = engram_store::lock(&self.agents);
        if held.len() + stale.len() > MAX_KEPT {
            held.clear();
        }
        for (id, (incarnation, version)) in stale {
            let (starts, lengths) = read.remove(&id).unwrap_or_default();
            let sittings = Arc::new(AgentSittings {
                incarnation,
                version,
                starts,
                lengths,
            });
            held.insert(id.clone(), Arc::clone(&sittings));
            out.push((id, sittings));
        }
        Ok(out)
    }
}

/// The question's score for each sitting of `who`'s conversations, by
/// its `lexemes` (those the search did not find common) and, with
/// vectors, its vector `query`; `None` when sittings are not scored.
pub(crate) async fn scores(
    conn: &mut PgConnection,
    cache: &SittingCache,
    who: &Who<'_>,
    lexemes: &[String],
    semantic: Option<(&Vectors, &[f32])>,
    params: &Params,
) -> Result<Option<(Arc<Sittings>, Arc<Vec<f32>>)>> {
    if params.sitting_weight <= 0.0 {
        return Ok(None);
    }
    let agents = match who {
        Who::Agent(id) => vec![(*id).to_owned()],
        Who::User(p) => p.agents.clone(),
    };
    let by_agent = cache.of(conn, &agents, params.session_gap).await?;
    // Every agent's sittings in one order, by place (a user's agents each
    // in a range of its own).
    let mut placed: Vec<(u64, u64)> = by_agent
        .iter()
        .flat_map(|(agent, s)| {
            s.starts
                .iter()
                .zip(&s.lengths)
                .map(|(ord, length)| (who.place(agent, *ord), *length))
        })
        .collect();
    placed.sort_unstable();
    placed.dedup_by_key(|(place, _)| *place);
    let sittings = Sittings::from_starts(placed.iter().map(|(p, _)| *p).collect());
    let lengths: Vec<u64> = placed.iter().map(|(_, l)| *l).collect();
    let mut coverage = Coverage::new(&lengths);
    if !lexemes.is_empty() && !coverage.is_empty() {
        let any = lexemes
            .iter()
            .map(|l| crate::words::quote(l))
            .collect::<Vec<_>>()
            .join(" | ");
        let sql = format!(
            "SELECT t.agent_id, t.ord, w.lexeme, cardinality(w.positions)::int
             FROM (SELECT agent_id, ord, words FROM traces
                   WHERE {who} AND words @@ $2::tsquery LIMIT $4) t
             CROSS JOIN LATERAL unnest(t.words) w
             WHERE w.lexeme = ANY($3)",
            who = who.clause("agent_id", 1),
        );
        let rows: Vec<(String, i64, String, i32)> = bind_who!(sqlx::query_as(&sql), who)
            .bind(&any)
            .bind(lexemes)
            .bind(MAX_ROWS)
            .fetch_all(&mut *conn)
            .await
            .map_err(db("counting a question's words by sitting"))?;
        let mut by_lexeme: HashMap<&str, Vec<(usize, u32)>> = HashMap::new();
        for (agent, ord, lexeme, tf) in &rows {
            if let Some(s) = sittings.of(who.place(agent, *ord)) {
                let tf = u32::try_from(*tf).unwrap_or(0);
                by_lexeme.entry(lexeme).or_default().push((s, tf));
            }
        }
        for lexeme in lexemes {
            let mut counts = coverage.term(1.0);
            for (s, tf) in by_lexeme.get(lexeme.as_str()).into_iter().flatten() {
                counts.add(*s, *tf);
            }
            counts.done();
        }
    }
    let words = coverage.scores();
    let cosines = semantic.map(|(vectors, query)| vectors.sitting_cosines(query, &sittings));
    let scores = sitting_scores(&words, cosines.as_deref(), params);
    Ok(Some((Arc::new(sittings), Arc::new(scores))))
}
