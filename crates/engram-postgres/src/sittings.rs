//! Sittings scored as wholes on PostgreSQL (`engram_index::rank::sittings`
//! says why and how). Each agent's sittings (where each starts, and its
//! length in lexemes) are read from its traces once and kept by this
//! replica; a write moves the agent's version, and the traces written
//! since are read on from the last one (all of them again after a
//! compaction or a forget, which move its generation). Recall asks for a
//! ranking after every message: it reads the new ones, not the whole
//! conversation. A question's terms are then counted by sitting in the
//! rows that hold them (the ranking's sittings primitive, `source.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use engram_index::{SittingCounts, Sittings};
use engram_store::Result;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::covered::{Covered, bind_covered};
use crate::db;

/// Sittings a replica keeps at most, over all agents (16 bytes each):
/// past it, it starts over (a search reads an agent's again).
const MAX_KEPT: usize = 1_000_000;

/// Rows a question's terms are counted in, at most (the rarest terms'
/// rows are few; this bounds a search's work however the counts went).
const MAX_ROWS: i64 = 20_000;

/// One agent's sittings as of a version.
#[derive(Debug, Clone)]
struct AgentSittings {
    incarnation: Uuid,
    /// Compactions and forgets move it: what is kept is then read again.
    generation: i64,
    version: i64,
    /// Where each sitting starts (`ord`), ascending, and its length.
    starts: Vec<i64>,
    lengths: Vec<u64>,
    /// The last trace read (`seq`), the latest in conversation order, and
    /// the latest in event time (its time and `ord`).
    seq: i64,
    last: Option<(i64, f64)>,
    newest: Option<(f64, i64)>,
}

impl AgentSittings {
    fn new(incarnation: Uuid, generation: i64, version: i64) -> Self {
        Self {
            incarnation,
            generation,
            version,
            starts: Vec::new(),
            lengths: Vec::new(),
            seq: -1,
            last: None,
            newest: None,
        }
    }

    /// A trace read (in the order written): a new sitting after a gap of
    /// more than `gap` seconds; a late tool result (placed in its call's
    /// turn, before the latest) counts in the sitting it is placed in.
    fn add(&mut self, (seq, ord, ts, length): (i64, i64, f64, i64), gap: f64) {
        self.seq = self.seq.max(seq);
        if self.newest.is_none_or(|(t, _)| ts >= t) {
            self.newest = Some((ts, ord));
        }
        if self.last.is_none_or(|(latest, _)| ord > latest) {
            if self.last.is_none_or(|(_, t)| (ts - t).abs() > gap) {
                self.starts.push(ord);
                self.lengths.push(0);
            }
            self.last = Some((ord, ts));
        }
        let at = self.starts.partition_point(|s| *s <= ord).saturating_sub(1);
        if let Some(l) = self.lengths.get_mut(at) {
            *l += u64::try_from(length).unwrap_or(0);
        }
    }
}

/// A replica's agents' sittings, and how many it holds in all.
#[derive(Debug, Default)]
pub(crate) struct SittingCache {
    held: Mutex<(HashMap<String, Arc<AgentSittings>>, usize)>,
}

/// An agent as a read finds it, with one trace written after the last
/// kept, if any (its place, time and length).
#[derive(sqlx::FromRow)]
struct Read {
    id: String,
    incarnation: Uuid,
    generation: i64,
    version: i64,
    seq: Option<i64>,
    ord: Option<i64>,
    ts: Option<f64>,
    length: Option<i64>,
}

impl Read {
    /// The trace read, if any: ((seq, ord), (time, length)).
    fn trace(&self) -> Option<((i64, i64), (f64, i64))> {
        self.seq.zip(self.ord).zip(self.ts.zip(self.length))
    }
}

/// Each of `agents` with the traces it holds after `after` (its `seq`):
/// one statement, so the version and the traces are of one moment.
async fn read(conn: &mut PgConnection, agents: &[String], after: &[i64]) -> Result<Vec<Read>> {
    sqlx::query_as(
        "SELECT a.id, a.incarnation, a.generation, a.version,
                t.seq, t.ord, t.ts, length(t.words)::bigint AS length
         FROM unnest($1::text[], $2::bigint[]) AS s(agent, after)
         JOIN agents a ON a.id = s.agent
         LEFT JOIN traces t ON t.agent_id = s.agent AND t.seq > s.after
         ORDER BY a.id, t.seq",
    )
    .bind(agents)
    .bind(after)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading the agents' sittings"))
}

impl SittingCache {
    /// The sittings of `agents`, in one statement that reads each one's
    /// version and the traces written since its kept sittings (every
    /// trace of an agent not kept). After a compaction or a forget the
    /// kept sittings are void: those agents are read again in full.
    async fn of(
        &self,
        conn: &mut PgConnection,
        agents: &[String],
        gap: f64,
    ) -> Result<Vec<(String, Arc<AgentSittings>)>> {
        let kept: HashMap<&str, Arc<AgentSittings>> = {
            let held = engram_store::lock(&self.held);
            agents
                .iter()
                .filter_map(|a| Some((a.as_str(), Arc::clone(held.0.get(a)?))))
                .collect()
        };
        let after: Vec<i64> = agents
            .iter()
            .map(|a| kept.get(a.as_str()).map_or(-1, |s| s.seq))
            .collect();
        let mut out = Vec::with_capacity(agents.len());
        let mut fresh: HashMap<String, AgentSittings> = HashMap::new();
        let mut again = Vec::new();
        for row in read(conn, agents, &after).await? {
            let trace = row.trace();
            let Read {
                id,
                incarnation,
                generation,
                version,
                ..
            } = row;
            if !fresh.contains_key(&id) {
                match kept.get(id.as_str()) {
                    Some(s) if s.incarnation != incarnation || s.generation != generation => {
                        if !again.contains(&id) {
                            again.push(id);
                        }
                        continue;
                    }
                    Some(s) if s.version == version && trace.is_none() => {
                        out.push((id, Arc::clone(s)));
                        continue;
                    }
                    Some(s) => {
                        let mut s = AgentSittings::clone(s);
                        s.version = version;
                        fresh.insert(id.clone(), s);
                    }
                    None => {
                        let s = AgentSittings::new(incarnation, generation, version);
                        fresh.insert(id.clone(), s);
                    }
                }
            }
            if let (Some(s), Some(((seq, ord), (ts, length)))) = (fresh.get_mut(&id), trace) {
                s.add((seq, ord, ts, length), gap);
            }
        }
        if !again.is_empty() {
            let all = vec![-1; again.len()];
            for row in read(conn, &again, &all).await? {
                let trace = row.trace();
                let s = fresh.entry(row.id).or_insert_with(|| {
                    AgentSittings::new(row.incarnation, row.generation, row.version)
                });
                if let Some(((seq, ord), (ts, length))) = trace {
                    s.add((seq, ord, ts, length), gap);
                }
            }
        }
        let mut held = engram_store::lock(&self.held);
        let (agents, count) = &mut *held;
        for (id, sittings) in fresh {
            if *count + sittings.starts.len() > MAX_KEPT {
                agents.clear();
                *count = 0;
            }
            let sittings = Arc::new(sittings);
            *count += sittings.starts.len();
            if let Some(old) = agents.insert(id.clone(), Arc::clone(&sittings)) {
                *count = count.saturating_sub(old.starts.len());
            }
            out.push((id, sittings));
        }
        Ok(out)
    }
}

/// The sittings of `who`'s conversations split by `gap`, each one's
/// length, and where each of `lexemes` falls in them (counted in at most
/// [`MAX_ROWS`] rows; those `passed` over have no counts).
pub(crate) async fn counts(
    conn: &mut PgConnection,
    cache: &SittingCache,
    who: &Covered<'_>,
    lexemes: &[&str],
    passed: &(dyn Fn(&str) -> bool + Sync),
    gap: f64,
) -> Result<SittingCounts> {
    let agents = match who {
        Covered::Agent(id) => vec![(*id).to_owned()],
        Covered::User(p) => p.agents.clone(),
    };
    let by_agent = cache.of(conn, &agents, gap).await?;
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
    // The sitting in progress: the latest event's, of all the agents.
    let newest = by_agent
        .iter()
        .filter_map(|(agent, s)| s.newest.map(|(ts, ord)| (ts, who.place(agent, ord))))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, place)| place);
    let sittings =
        Sittings::from_starts(placed.iter().map(|(p, _)| *p).collect()).with_latest(newest);
    let lengths: Vec<u64> = placed.iter().map(|(_, l)| *l).collect();
    let mut counts = vec![Vec::new(); lexemes.len()];
    let counted: Vec<&str> = lexemes.iter().copied().filter(|l| !passed(l)).collect();
    if !counted.is_empty() && lengths.iter().any(|l| *l > 0) {
        let any = counted
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
        let rows: Vec<(String, i64, String, i32)> = bind_covered!(sqlx::query_as(&sql), who)
            .bind(&any)
            .bind(&counted)
            .bind(MAX_ROWS)
            .fetch_all(&mut *conn)
            .await
            .map_err(db("counting a question's words by sitting"))?;
        let at: HashMap<&str, usize> = lexemes.iter().enumerate().map(|(i, l)| (*l, i)).collect();
        for (agent, ord, lexeme, tf) in &rows {
            if let (Some(s), Some(&i)) =
                (sittings.of(who.place(agent, *ord)), at.get(lexeme.as_str()))
            {
                counts[i].push((s, u32::try_from(*tf).unwrap_or(0)));
            }
        }
    }
    Ok(SittingCounts {
        sittings: Arc::new(sittings),
        lengths: Arc::new(lengths),
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_read_in_the_order_written_make_sittings_by_their_gaps() {
        let mut s = AgentSittings::new(Uuid::nil(), 0, 0);
        let turn = |t: i64, seq: i64| (t << 32) | seq;
        s.add((0, turn(1, 0), 0.0, 4), 3600.0);
        s.add((1, turn(1, 1), 60.0, 3), 3600.0);
        s.add((2, turn(2, 0), 10_000.0, 5), 3600.0);
        // A late tool result, placed in turn 1: counts there, starts none.
        s.add((3, turn(1, 2), 20_000.0, 2), 3600.0);
        s.add((4, turn(2, 1), 10_060.0, 1), 3600.0);
        assert_eq!(s.starts, [turn(1, 0), turn(2, 0)]);
        assert_eq!(s.lengths, [9, 6]);
        assert_eq!(s.seq, 4);
        assert_eq!(s.newest, Some((20_000.0, turn(1, 2))));
    }
}
