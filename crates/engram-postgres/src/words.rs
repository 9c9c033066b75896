//! The lexical half of a ranking on the database: PostgreSQL's full-text
//! search (`english` configuration: Snowball stemming and stop words) over
//! the GIN index of an agent's rows, or of a user's agents' rows, scored
//! with BM25 in the statement itself (term rarity counted in the rows
//! searched, document length from their lexeme totals): the word
//! primitives of the ranking (`source.rs`).
//! The database keeps no count of the rows a word is in, and the statement
//! sums over every word of every row it scores, so a search bounds both:
//! rarity is counted up to a cap (past it, the planner's statistics
//! estimate it), and only the rows the query's rarest words find, the
//! most recent of them, are scored.

use std::collections::HashMap;

use engram_index::{Around, Candidate, Filter, Kind};
use engram_store::ranked::key_of;
use engram_store::{Result, StoreError};
use sqlx::PgConnection;

use crate::covered::{Covered, PlaceOrigins, bind_covered};
use crate::db;

/// BM25's parameters (tantivy's, as the file store's index uses).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Characters of a query that are analyzed; a longer one is cut (its
/// first terms count, as `max_terms` does in the file store).
const MAX_QUERY_CHARS: usize = 4096;

/// Rows a term's rarity is counted to in one agent's rows: a term in
/// more is common (its weight near nothing; counted further, a word in
/// every message costs a pass over all of them, per search).
const DF_CAP: i64 = 1000;

/// The same across a user's conversations, where counting reads rows of
/// every conversation (the word index is not narrowed by agent): a term
/// in more is weighed by the planner's estimate of its rows, or as if in
/// this many.
const USER_DF_CAP: i64 = 100;

/// Rows scored at most per search (the most recent that match): BM25 is
/// summed over every word of every row scored, so this bounds a search's
/// work however many rows a query's words are in. A conversation of a
/// few hundred messages is scored whole, as the file store's index scores
/// it: at 500 (and 200 picked rows) LoCoMo's dev half ranked all@10 0.741
/// against the file store's 0.753; at 2,000, 0.755 (docs/BENCHMARKS.md).
const MAX_SCORED: i64 = 2_000;

/// Rows a search picks its candidates from, as the rarest of the query's
/// terms find them: terms are taken rarest first while the rows they are
/// in add up to at most this (the rarest always). A row with none of them
/// has only commoner words of the query, each worth less.
const PICKED_ROWS: i64 = 2_000;

/// The query's terms and their statistics over the rows searched.
pub(crate) struct Terms {
    /// `'lexeme'` quoted for tsquery input, and each one's IDF.
    quoted: Vec<String>,
    pub lexemes: Vec<String>,
    /// The rows holding each (counted up to a cap, or estimated past it).
    pub held: Vec<u64>,
    idf: Vec<f64>,
    /// Whether the term picks the rows to score ([`PICKED_ROWS`]).
    picks: Vec<bool>,
    /// The terms in fewer rows than rarity is counted to, and in at most
    /// half of them: those a sitting's score counts (`sittings.rs`).
    pub rare: Vec<String>,
    pub avgdl: f64,
}

/// BM25's rarity of a term in `df` of `n` rows.
fn idf(df: u64, n: f64) -> f64 {
    (1.0 + (n - df as f64 + 0.5) / (df as f64 + 0.5)).ln()
}

impl Terms {
    /// Terms of a query expansion, each `(lexeme, weight, rows holding
    /// it)`, among `docs` rows of average length `avgdl` (the question's):
    /// each term's rarity weighted, as a query of both would weigh it.
    /// Every term picks the rows to score: none is common (the expansion
    /// passes over a word in half of the rows), and one statement then
    /// finds them all.
    pub(crate) fn weighted(terms: &[(String, f32, u64)], docs: u64, avgdl: f64) -> Terms {
        let n = docs.max(1) as f64;
        Terms {
            quoted: terms.iter().map(|(l, _, _)| quote(l)).collect(),
            lexemes: terms.iter().map(|(l, _, _)| l.clone()).collect(),
            held: terms.iter().map(|(_, _, held)| *held).collect(),
            idf: terms
                .iter()
                .map(|(_, w, df)| idf(*df, n) * f64::from(*w))
                .collect(),
            picks: vec![true; terms.len()],
            rare: Vec::new(),
            avgdl,
        }
    }

    /// The rows to score, as a tsquery: those with any of the terms that
    /// pick them (selecting by every term of a long query would take
    /// nearly every row, for words worth next to nothing), or with any
    /// term at all (`wide`).
    fn any(&self, wide: bool) -> String {
        let picks: Vec<&str> = self
            .quoted
            .iter()
            .zip(&self.picks)
            .filter(|(_, p)| wide || **p)
            .map(|(q, _)| q.as_str())
            .collect();
        picks.join(" | ")
    }

    /// Whether every term picks rows already.
    fn all_pick(&self) -> bool {
        self.picks.iter().all(|p| *p)
    }
}

/// Which terms pick the rows to score: the rarest first, while the rows
/// they are in add up to at most [`PICKED_ROWS`], and the rarest always.
fn picks(counts: &[i64]) -> Vec<bool> {
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by_key(|&i| counts[i]);
    let mut picks = vec![false; counts.len()];
    let mut rows = 0;
    for (n, i) in order.into_iter().enumerate() {
        rows += counts[i];
        if n > 0 && rows > PICKED_ROWS {
            break;
        }
        picks[i] = true;
    }
    picks
}

/// A tsquery lexeme in quotes (quotes and backslashes escaped).
pub(crate) fn quote(lexeme: &str) -> String {
    format!("'{}'", lexeme.replace('\\', "\\\\").replace('\'', "''"))
}

/// A trace `who` holds that no search of theirs returns: the current
/// conversation's active transcript, from `ord` on (a user's search).
pub(crate) type Hidden<'a> = Option<(&'a str, i64)>;

/// The query's terms (the database's analysis), each one's rarity in the
/// `docs` items searched, and their average length; `None` when no term
/// is left.
pub(crate) async fn terms(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    query: &str,
    max: usize,
    docs: u64,
) -> Result<Option<Terms>> {
    let query: String = query
        .chars()
        .take(MAX_QUERY_CHARS)
        .map(|c| if c == '\0' { ' ' } else { c })
        .collect();
    let lexemes: Vec<String> =
        sqlx::query_scalar("SELECT lexeme FROM unnest(to_tsvector('english', $1)) LIMIT $2")
            .bind(&query)
            .bind(max as i64)
            .fetch_all(&mut *conn)
            .await
            .map_err(db("analyzing a query"))?;
    if lexemes.is_empty() {
        return Ok(None);
    }
    let quoted: Vec<String> = lexemes.iter().map(|l| quote(l)).collect();
    // A word the planner's statistics say is in at least `cap` of these
    // rows is common: its rarity is that estimate, not counted (counting
    // a word in most of a user's 100,000 messages took most of a search).
    let cap = match who {
        Covered::Agent(_) => DF_CAP,
        Covered::User(_) => USER_DF_CAP,
    };
    // An estimate is a share of `docs`: below the cap, none can reach it
    // (most agents), and the statistics are not read.
    let estimated: Vec<Option<i64>> = if docs < cap.unsigned_abs() {
        vec![None; lexemes.len()]
    } else {
        common_words(conn, &lexemes, docs)
            .await?
            .into_iter()
            .map(|e| e.filter(|&e| e >= cap))
            .collect()
    };
    let counted: Vec<String> = quoted
        .iter()
        .zip(&estimated)
        .filter(|(_, e)| e.is_none())
        .map(|(q, _)| q.clone())
        .collect();
    let sql = format!(
        "SELECT (SELECT sum(a.words_total)::bigint FROM agents a WHERE {agents}),
                ARRAY(SELECT (SELECT count(*) FROM (SELECT FROM traces t WHERE {traces} AND t.words @@ q.t::tsquery LIMIT $3) c)
                           + (SELECT count(*) FROM (SELECT FROM memories m WHERE {memories} AND m.live AND m.words @@ q.t::tsquery LIMIT $3) c)
                      FROM unnest($2::text[]) WITH ORDINALITY AS q(t, i) ORDER BY q.i)",
        agents = who.clause("a.id", 1),
        traces = who.clause("t.agent_id", 1),
        memories = who.clause("m.agent_id", 1),
    );
    let (total, counted): (Option<i64>, Vec<i64>) = bind_covered!(sqlx::query_as(&sql), who)
        .bind(&counted)
        .bind(cap)
        .fetch_one(&mut *conn)
        .await
        .map_err(db("counting terms"))?;
    let total = match (total, who.agent()) {
        (Some(total), _) => total,
        // No row: the agent was deleted since the search began (no lock is
        // held across a search's statements); it answers as after it.
        (None, Some(id)) => return Err(StoreError::NotFound(id.to_owned())),
        (None, None) => 0,
    };
    let mut counted = counted.into_iter();
    let counts: Vec<i64> = estimated
        .iter()
        .map(|e| e.or_else(|| counted.next()).unwrap_or(0))
        .collect();
    let n = docs.max(1) as f64;
    let idf = counts.iter().map(|&df| idf(df.unsigned_abs(), n)).collect();
    let rare = lexemes
        .iter()
        .zip(&counts)
        .filter(|(_, df)| **df < cap && df.unsigned_abs() * 2 <= docs)
        .map(|(l, _)| l.clone())
        .collect();
    Ok(Some(Terms {
        quoted,
        lexemes,
        held: counts.iter().map(|c| c.unsigned_abs()).collect(),
        idf,
        picks: picks(&counts),
        rare,
        avgdl: (total as f64 / n).max(1.0),
    }))
}

/// For each of `lexemes`, its number of rows among `docs` as the planner's
/// statistics of the `words` column estimate it (`ANALYZE`'s most common
/// elements, over the whole table); `None` for a word they do not know
/// (rarer, or no statistics yet).
async fn common_words(
    conn: &mut PgConnection,
    lexemes: &[String],
    docs: u64,
) -> Result<Vec<Option<i64>>> {
    let stats: Option<(Vec<String>, Vec<f32>)> = sqlx::query_as(
        "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats
         WHERE schemaname = current_schema() AND tablename = 'traces' AND attname = 'words'
           AND most_common_elems IS NOT NULL",
    )
    .fetch_optional(&mut *conn)
    .await
    .map_err(db("reading the words' statistics"))?;
    let Some((elems, freqs)) = stats else {
        return Ok(vec![None; lexemes.len()]);
    };
    let freq: std::collections::HashMap<&str, f32> =
        elems.iter().map(String::as_str).zip(freqs).collect();
    Ok(lexemes
        .iter()
        .map(|l| Some((f64::from(*freq.get(l.as_str())?) * docs as f64) as i64))
        .collect())
}

/// The best `limit` items matching any term within `filter`, by BM25.
pub(crate) async fn candidates(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    terms: &Terms,
    filter: &Filter,
    limit: usize,
    hidden: Hidden<'_>,
    places: &mut PlaceOrigins<'_>,
) -> Result<Vec<Candidate>> {
    let kinds = |k: Kind| filter.kinds.is_empty() || filter.kinds.contains(&k);
    let memory_kinds: Vec<i8> = [(Kind::Episodic, b'e'), (Kind::Semantic, b's')]
        .into_iter()
        .filter(|(k, _)| kinds(*k))
        .map(|(_, c)| c as i8)
        .collect();
    let mut found: Vec<Candidate> = Vec::new();
    // The rows the rarest words find; all the query's words only when
    // those are fewer than asked for (a page of a search is filled).
    for wide in [false, true] {
        if wide && (terms.all_pick() || found.len() >= limit) {
            break;
        }
        let query = terms.any(wide);
        found.clear();
        if kinds(Kind::Trace) {
            let picked = (query.as_str(), hidden);
            found = trace_candidates(conn, who, terms, picked, filter, limit, places).await?;
        }
        if !memory_kinds.is_empty() {
            let memories = memory_candidates(conn, who, terms, &query, &memory_kinds, limit);
            found.extend(memories.await?);
            if let Covered::User(placing) = who
                && kinds(Kind::Semantic)
            {
                let own = user_fact_candidates(conn, &placing.user, terms, &query, limit);
                found.extend(own.await?);
            }
            found.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.order.cmp(&a.order)));
            found.truncate(limit);
        }
    }
    Ok(found)
}

/// BM25 of a matching row's `words` (`h`) for the query's `terms`, with
/// the average length bound as `$4`.
fn bm25_sql() -> String {
    format!(
        "sum(terms.idf * cardinality(w.positions) * {k1p} / (cardinality(w.positions) + {K1} * ({one_b} + {B} * length(h.words) / $4::float8)))",
        k1p = K1 + 1.0,
        one_b = 1.0 - B,
    )
}

/// The best `limit` traces for `terms` that pass `filter`.
async fn trace_candidates(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    terms: &Terms,
    (query, hidden): (&str, Hidden<'_>),
    filter: &Filter,
    limit: usize,
    places: &mut PlaceOrigins<'_>,
) -> Result<Vec<Candidate>> {
    let types: Option<Vec<i16>> = (!filter.trace_types.is_empty())
        .then(|| filter.trace_types.iter().map(|&t| i16::from(t)).collect());
    let (lo, hi) = filter
        .order
        .map_or((None, None), |(lo, hi)| (Some(lo as i64), Some(hi as i64)));
    let (from, to) = filter.ts.map_or((None, None), |(a, b)| (Some(a), Some(b)));
    let sql = format!(
        "WITH terms(lexeme, idf) AS (SELECT * FROM unnest($2::text[], $3::float8[]))
         SELECT h.agent_id, h.trace_id, h.ord, h.ts, {score}::float4
         FROM (SELECT agent_id, trace_id, ord, ts, words FROM traces
               WHERE {who} AND words @@ $5::tsquery
                 AND ($6::smallint[] IS NULL OR trace_type = ANY($6))
                 AND ($7::bigint IS NULL OR ord >= $7) AND ($8::bigint IS NULL OR ord <= $8)
                 AND ($9::float8 IS NULL OR ts >= $9) AND ($10::float8 IS NULL OR ts <= $10)
                 AND ($11::bigint IS NULL OR ord < $11)
                 AND ($13::text IS NULL OR agent_id <> $13 OR ord < $14)
               ORDER BY ts DESC LIMIT $15) h
         CROSS JOIN LATERAL unnest(h.words) w
         JOIN terms ON terms.lexeme = w.lexeme
         GROUP BY h.agent_id, h.trace_id, h.ord, h.ts
         ORDER BY 5 DESC, h.ord DESC LIMIT $12",
        score = bm25_sql(),
        who = who.clause("agent_id", 1),
    );
    let rows: Vec<(String, String, i64, f64, f32)> = bind_covered!(sqlx::query_as(&sql), who)
        .bind(&terms.lexemes)
        .bind(&terms.idf)
        .bind(terms.avgdl)
        .bind(query)
        .bind(types)
        .bind(lo)
        .bind(hi)
        .bind(from)
        .bind(to)
        .bind(filter.traces_before.map(|o| o.min(i64::MAX as u64) as i64))
        .bind(limit as i64)
        .bind(hidden.map(|h| h.0))
        .bind(hidden.map(|h| h.1))
        .bind(MAX_SCORED.max(limit as i64))
        .fetch_all(&mut *conn)
        .await
        .map_err(db("ranking traces"))?;
    Ok(rows
        .into_iter()
        .map(|(agent, key, ord, ts, s)| {
            let place = who.place(&agent, ord);
            places.note(place, &agent, ord);
            Candidate::new(who.key(&agent, key), Kind::Trace, place, ts, s)
        })
        .collect())
}

/// The best `limit` live summaries and facts (of `kinds`) for `terms`.
async fn memory_candidates(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    terms: &Terms,
    query: &str,
    kinds: &[i8],
    limit: usize,
) -> Result<Vec<Candidate>> {
    let sql = format!(
        "WITH terms(lexeme, idf) AS (SELECT * FROM unnest($2::text[], $3::float8[]))
         SELECT h.agent_id, h.id, h.kind, h.ord, h.ts, {score}::float4
         FROM (SELECT agent_id, id, kind, ord, ts, words FROM memories
               WHERE {who} AND live AND words @@ $5::tsquery AND kind = ANY($6)
               ORDER BY ts DESC LIMIT $8) h
         CROSS JOIN LATERAL unnest(h.words) w
         JOIN terms ON terms.lexeme = w.lexeme
         GROUP BY h.agent_id, h.id, h.kind, h.ord, h.ts
         ORDER BY 6 DESC, h.ord DESC LIMIT $7",
        score = bm25_sql(),
        who = who.clause("agent_id", 1),
    );
    let rows: Vec<(String, String, i8, i64, f64, f32)> = bind_covered!(sqlx::query_as(&sql), who)
        .bind(&terms.lexemes)
        .bind(&terms.idf)
        .bind(terms.avgdl)
        .bind(query)
        .bind(kinds)
        .bind(limit as i64)
        .bind(MAX_SCORED.max(limit as i64))
        .fetch_all(&mut *conn)
        .await
        .map_err(db("ranking memories"))?;
    Ok(rows
        .into_iter()
        .map(|(agent, key, kind, ord, ts, s)| {
            let kind = if kind as u8 == b'e' {
                Kind::Episodic
            } else {
                Kind::Semantic
            };
            let place = who.place(&agent, ord);
            Candidate::new(who.key(&agent, key), kind, place, ts, s)
        })
        .collect())
}

/// The best `limit` live facts a client wrote in `user`'s scope for
/// `terms`, keyed as the user's own (`~/<id>`), placed after every
/// conversation.
async fn user_fact_candidates(
    conn: &mut PgConnection,
    user: &str,
    terms: &Terms,
    query: &str,
    limit: usize,
) -> Result<Vec<Candidate>> {
    let sql = format!(
        "WITH terms(lexeme, idf) AS (SELECT * FROM unnest($2::text[], $3::float8[]))
         SELECT h.id, {score}::float4
         FROM (SELECT id, seq, words FROM user_facts
               WHERE user_id = $1 AND words @@ $5::tsquery
               ORDER BY seq DESC LIMIT $7) h
         CROSS JOIN LATERAL unnest(h.words) w
         JOIN terms ON terms.lexeme = w.lexeme
         GROUP BY h.id, h.seq
         ORDER BY 2 DESC, h.seq DESC LIMIT $6",
        score = bm25_sql(),
    );
    let rows: Vec<(String, f32)> = sqlx::query_as(&sql)
        .bind(user)
        .bind(&terms.lexemes)
        .bind(&terms.idf)
        .bind(terms.avgdl)
        .bind(query)
        .bind(limit as i64)
        .bind(MAX_SCORED.max(limit as i64))
        .fetch_all(&mut *conn)
        .await
        .map_err(db("ranking a user's facts"))?;
    let place = engram_store::ranked::place(u32::MAX, 0);
    Ok(rows
        .into_iter()
        .map(|(id, s)| Candidate::new(key_of("~", &id), Kind::Semantic, place, 0.0, s))
        .collect())
}

/// Up to `span` traces each side of each of `at` (places of traces), nearest
/// first, by place (each in its own agent).
pub(crate) async fn neighbours(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    at: &[u64],
    span: usize,
    places: &mut PlaceOrigins<'_>,
) -> Result<Around> {
    let (mut agents, mut orders, mut of) = (Vec::new(), Vec::new(), Vec::new());
    for &place in at {
        if let Some((agent, ord)) = places.locate(who, place) {
            agents.push(agent);
            orders.push(ord);
            of.push(place as i64);
        }
    }
    let mut out: Around = HashMap::new();
    if orders.is_empty() || span == 0 {
        return Ok(out);
    }
    let rows: Vec<(i64, String, bool, i64, f64)> = sqlx::query_as(
        "SELECT c.p, c.a, n.after, n.ord, n.ts FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS c(a, o, p)
         CROSS JOIN LATERAL (
           (SELECT false AS after, ord, ts FROM traces WHERE agent_id = c.a AND ord < c.o ORDER BY ord DESC LIMIT $4)
           UNION ALL
           (SELECT true, ord, ts FROM traces WHERE agent_id = c.a AND ord > c.o ORDER BY ord LIMIT $4)) n",
    )
    .bind(&agents)
    .bind(&orders)
    .bind(&of)
    .bind(span as i64)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading neighbours"))?;
    for (of, agent, after, ord, ts) in rows {
        let place = who.place(&agent, ord);
        places.note(place, &agent, ord);
        let sides = out.entry(of as u64).or_default();
        let side = if after { &mut sides.1 } else { &mut sides.0 };
        side.push((place, ts));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{PICKED_ROWS, picks};

    #[test]
    fn the_rarest_terms_pick_the_rows_up_to_the_budget() {
        // Rarest first: 5, 10, 60 (75 rows); the next would pass the budget.
        let over = PICKED_ROWS - 74;
        assert_eq!(
            picks(&[5, 20 * PICKED_ROWS, 10, 60, over]),
            [true, false, true, true, false]
        );
        // The rarest always, however common.
        assert_eq!(picks(&[5 * PICKED_ROWS, 3 * PICKED_ROWS]), [false, true]);
        // Few rows: every term, as before there was a budget.
        assert_eq!(picks(&[3, 0, 9]), [true, true, true]);
    }
}
