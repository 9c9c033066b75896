//! Ranked SearchHistory and Retrieve(query) on the database: the words
//! are PostgreSQL's full-text search (`english` configuration: Snowball
//! stemming and stop words) over a GIN index per agent, scored with BM25 in
//! the query itself (term rarity counted in the agent's own items, document
//! length from the agent's lexeme total); then the file store's own
//! ranking steps — neighbours' share, recency as tie-breaker — run on the
//! candidates (`engram_index::from_candidates`).

use std::collections::HashMap;

use async_trait::async_trait;
use engram_core::{AgentId, RawTrace};
use engram_index::Placed;
use engram_index::{Candidate, Filter, Kind, Params, Ranked, Words};
use engram_store::ranked::{MAX_CONTEXT, MAX_RANKED, Want, matched_by, memory_wants};
use engram_store::{
    Hit, IndexState, Memory, MemoryQuery, RankedMemories, Ranks, Recalled, Result, Search,
    SearchPage, StoreError,
};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{PgStore, db, parse, parse_trace};

/// BM25's parameters (tantivy's, as the file store's index uses).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Characters of a query that are analyzed; a longer one is cut (its
/// first terms count, as `max_terms` does in the file store).
const MAX_QUERY_CHARS: usize = 4096;

/// One agent's word statistics and query terms.
struct Terms {
    /// `'lexeme'` quoted for tsquery input, and each one's IDF.
    quoted: Vec<String>,
    lexemes: Vec<String>,
    idf: Vec<f64>,
    avgdl: f64,
}

impl Terms {
    /// Any of the terms, as a tsquery.
    fn any(&self) -> String {
        self.quoted.join(" | ")
    }
}

/// A tsquery lexeme in quotes (quotes and backslashes escaped).
fn quote(lexeme: &str) -> String {
    format!("'{}'", lexeme.replace('\\', "\\\\").replace('\'', "''"))
}

#[async_trait]
impl Ranks for PgStore {
    async fn rank_memories(&self, id: &AgentId, query: &MemoryQuery) -> Result<RankedMemories> {
        let mut conn = self.conn().await?;
        let first_active: Option<i64> =
            sqlx::query_scalar("SELECT min(ord) FROM traces WHERE agent_id = $1 AND NOT archived")
                .bind(id.as_str())
                .fetch_one(&mut *conn)
                .await
                .map_err(db("reading an agent"))?;
        let mut wants = memory_wants(query, first_active.map(|o| o as u64));
        for want in &mut wants {
            want.1 = want.1.min(MAX_RANKED);
        }
        let (ranked, state) = self
            .ranking(
                &mut conn,
                id.as_str(),
                &query.query,
                wants,
                query.wait_for_index,
            )
            .await?;
        let mut ranked = ranked.into_iter();
        let (all, episodic, semantic) = (
            ranked.next().unwrap_or_default(),
            ranked.next().unwrap_or_default(),
            ranked.next().unwrap_or_default(),
        );
        let memories = materialize(&mut conn, id.as_str(), &all, query.neighbours).await?;
        let only = |r: Vec<Recalled>| r.into_iter().map(|r| r.memory);
        let episodic = only(materialize(&mut conn, id.as_str(), &episodic, 0).await?)
            .filter_map(|m| match m {
                Memory::Episodic(e) => Some(e),
                _ => None,
            })
            .collect();
        let semantic = only(materialize(&mut conn, id.as_str(), &semantic, 0).await?)
            .filter_map(|m| match m {
                Memory::Semantic(s) => Some(s),
                _ => None,
            })
            .collect();
        Ok(RankedMemories {
            memories,
            episodic,
            semantic,
            index: state,
        })
    }

    async fn rank_user_memories(
        &self,
        user: &engram_core::UserId,
        query: &MemoryQuery,
        current: Option<&AgentId>,
    ) -> Result<RankedMemories> {
        self.user_ranking(user, query, current).await
    }

    fn expect_query(&self, text: &str) {
        if let Some(embedder) = self.embedder() {
            engram_store::expect_query(std::sync::Arc::clone(embedder), text);
        }
    }

    async fn index_state(&self, id: &AgentId) -> Result<IndexState> {
        let mut conn = self.conn().await?;
        let (state, incarnation) = state(&mut conn, id.as_str()).await?;
        let handle = self.handle(id.as_str());
        let embedded = self
            .vectors(&mut conn, id.as_str(), incarnation, &handle.vectors)
            .await?
            .map_or(0, |v| v.as_ref().map_or(0, |v| v.vectors.len()));
        self.with_vectors(&mut conn, id.as_str(), state, embedded)
            .await
    }
}

impl PgStore {
    pub(crate) async fn ranked_search(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        let (from, end) = engram_store::ranked::page_bounds(search)?;
        let mut conn = self.conn().await?;
        let filter = engram_store::ranked::search_filter(search);
        let (mut ranked, state) = self
            .ranking(
                &mut conn,
                id.as_str(),
                &search.query,
                vec![(filter, end + 1)],
                search.wait_for_index,
            )
            .await?;
        let ranked = ranked.pop().unwrap_or_default();
        let more = ranked.len() > end;
        let page: Vec<Ranked> = ranked.into_iter().take(end).skip(from).collect();
        let recalled = materialize(&mut conn, id.as_str(), &page, search.neighbours).await?;
        let hits = recalled.into_iter().filter_map(Hit::of).collect();
        Ok(SearchPage {
            hits,
            next_page_token: more.then(|| engram_store::ranked::page_token(end)),
            index: state,
        })
    }

    /// The rankings `wants` asks for, and the index state. The query is
    /// embedded while the database ranks its words.
    async fn ranking(
        &self,
        conn: &mut PgConnection,
        id: &str,
        query: &str,
        wants: Vec<Want>,
        wait: Option<std::time::Duration>,
    ) -> Result<(Vec<Vec<Ranked>>, IndexState)> {
        if let Some(wait) = wait {
            self.wait_embedded(id, std::time::Instant::now() + wait)
                .await?;
        }
        let (state, incarnation) = state(conn, id).await?;
        let (query_vector, words) = tokio::join!(
            self.query_vector(query),
            by_words(conn, id, query, wants, state.items)
        );
        let words = words?;
        let handle = self.handle(id);
        let vectors = self.vectors(conn, id, incarnation, &handle.vectors).await?;
        let copy = vectors.as_ref().and_then(|v| v.as_ref());
        let ranked = engram_index::fuse_each(
            words,
            copy.map(|c| &c.vectors),
            query_vector.as_deref(),
            &Params::default(),
        );
        let embedded = copy.map_or(0, |c| c.vectors.len());
        drop(vectors);
        let state = self.with_vectors(conn, id, state, embedded).await?;
        Ok((ranked, state))
    }

    /// The query's vector, or `None` (no model; see
    /// [`engram_store::query_vector`]).
    async fn query_vector(&self, query: &str) -> Option<Vec<f32>> {
        engram_store::query_vector(self.embedder()?.as_ref(), query).await
    }
}

/// What the agent's search covers by words: every trace and live memory
/// (the database indexes a row's words as it is written); and which
/// incarnation of the agent it is.
async fn state(conn: &mut PgConnection, id: &str) -> Result<(IndexState, Uuid)> {
    let row: Option<(i64, Uuid)> = sqlx::query_as(
        "SELECT a.next_seq + (SELECT count(*) FROM memories m WHERE m.agent_id = $1 AND m.live), a.incarnation
         FROM agents a WHERE a.id = $1",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db("reading an agent"))?;
    let (items, incarnation) = row.ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
    let state = IndexState {
        items: u64::try_from(items).unwrap_or(0),
        ..IndexState::default()
    };
    Ok((state, incarnation))
}

/// The lexical half of each ranking `wants` asks for (`None` for a limit
/// of 0).
async fn by_words(
    conn: &mut PgConnection,
    id: &str,
    query: &str,
    wants: Vec<Want>,
    docs: u64,
) -> Result<Vec<Option<Words>>> {
    let params = Params::default();
    let terms = terms(conn, id, query, params.max_terms, docs).await?;
    let mut out = Vec::with_capacity(wants.len());
    for (filter, limit) in wants {
        if limit == 0 {
            out.push(None);
            continue;
        }
        let Some(terms) = &terms else {
            // No word to look for: meaning alone ranks.
            out.push(Some(engram_index::from_candidates(
                Vec::new(),
                &|_, _| Default::default(),
                &filter,
                limit,
                &params,
            )));
            continue;
        };
        let want = params.candidates.max(limit);
        let candidates = candidates(conn, id, terms, &filter, want).await?;
        let placed = neighbours(conn, id, &candidates, params.neighbour_span).await?;
        let around = |order: u64, n: usize| {
            placed.get(&order).map_or_else(Default::default, |(b, a)| {
                (
                    b.iter().take(n).copied().collect(),
                    a.iter().take(n).copied().collect(),
                )
            })
        };
        out.push(Some(engram_index::from_candidates(
            candidates, &around, &filter, limit, &params,
        )));
    }
    Ok(out)
}

/// The query's terms (the database's analysis), each one's rarity in the
/// agent's `docs` items, and their average length; `None` when no term is
/// left.
async fn terms(
    conn: &mut PgConnection,
    id: &str,
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
    // No row: the agent was deleted since the search began (no lock is
    // held across a search's statements); it answers as after the delete.
    let row: Option<(i64, Vec<i64>)> = sqlx::query_as(
        "SELECT a.words_total,
                ARRAY(SELECT (SELECT count(*) FROM traces t WHERE t.agent_id = $1 AND t.words @@ q.t::tsquery)
                           + (SELECT count(*) FROM memories m WHERE m.agent_id = $1 AND m.live AND m.words @@ q.t::tsquery)
                      FROM unnest($2::text[]) WITH ORDINALITY AS q(t, i) ORDER BY q.i)
         FROM agents a WHERE a.id = $1",
    )
    .bind(id)
    .bind(&quoted)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db("counting terms"))?;
    let (total, counts) = row.ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
    let n = docs.max(1) as f64;
    let idf = counts
        .iter()
        .map(|&df| (1.0 + (n - df as f64 + 0.5) / (df as f64 + 0.5)).ln())
        .collect();
    Ok(Some(Terms {
        quoted,
        lexemes,
        idf,
        avgdl: (total as f64 / n).max(1.0),
    }))
}

/// The best `limit` items matching any term within `filter`, by BM25.
async fn candidates(
    conn: &mut PgConnection,
    id: &str,
    terms: &Terms,
    filter: &Filter,
    limit: usize,
) -> Result<Vec<Candidate>> {
    let kinds = |k: Kind| filter.kinds.is_empty() || filter.kinds.contains(&k);
    let memory_kinds: Vec<i8> = [(Kind::Episodic, b'e'), (Kind::Semantic, b's')]
        .into_iter()
        .filter(|(k, _)| kinds(*k))
        .map(|(_, c)| c as i8)
        .collect();
    let mut found: Vec<Candidate> = Vec::new();
    if kinds(Kind::Trace) {
        found = trace_candidates(conn, id, terms, filter, limit).await?;
    }
    if !memory_kinds.is_empty() {
        found.extend(memory_candidates(conn, id, terms, &memory_kinds, limit).await?);
        found.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.order.cmp(&a.order)));
        found.truncate(limit);
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
    id: &str,
    terms: &Terms,
    filter: &Filter,
    limit: usize,
) -> Result<Vec<Candidate>> {
    let types: Option<Vec<i16>> = (!filter.trace_types.is_empty())
        .then(|| filter.trace_types.iter().map(|&t| i16::from(t)).collect());
    let (lo, hi) = filter
        .order
        .map_or((None, None), |(lo, hi)| (Some(lo as i64), Some(hi as i64)));
    let (from, to) = filter.ts.map_or((None, None), |(a, b)| (Some(a), Some(b)));
    let sql = format!(
        "WITH terms(lexeme, idf) AS (SELECT * FROM unnest($2::text[], $3::float8[]))
         SELECT h.trace_id, h.ord, h.ts, {score}::float4
         FROM (SELECT trace_id, ord, ts, words FROM traces
               WHERE agent_id = $1 AND words @@ $5::tsquery
                 AND ($6::smallint[] IS NULL OR trace_type = ANY($6))
                 AND ($7::bigint IS NULL OR ord >= $7) AND ($8::bigint IS NULL OR ord <= $8)
                 AND ($9::float8 IS NULL OR ts >= $9) AND ($10::float8 IS NULL OR ts <= $10)
                 AND ($11::bigint IS NULL OR ord < $11)) h
         CROSS JOIN LATERAL unnest(h.words) w
         JOIN terms ON terms.lexeme = w.lexeme
         GROUP BY h.trace_id, h.ord, h.ts
         ORDER BY 4 DESC, h.ord DESC LIMIT $12",
        score = bm25_sql()
    );
    let rows: Vec<(String, i64, f64, f32)> = sqlx::query_as(&sql)
        .bind(id)
        .bind(&terms.lexemes)
        .bind(&terms.idf)
        .bind(terms.avgdl)
        .bind(terms.any())
        .bind(types)
        .bind(lo)
        .bind(hi)
        .bind(from)
        .bind(to)
        .bind(filter.traces_before.map(|o| o.min(i64::MAX as u64) as i64))
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("ranking traces"))?;
    Ok(rows
        .into_iter()
        .map(|(key, ord, ts, s)| Candidate::new(key, Kind::Trace, ord as u64, ts, s))
        .collect())
}

/// The best `limit` live summaries and facts (of `kinds`) for `terms`.
async fn memory_candidates(
    conn: &mut PgConnection,
    id: &str,
    terms: &Terms,
    kinds: &[i8],
    limit: usize,
) -> Result<Vec<Candidate>> {
    let sql = format!(
        "WITH terms(lexeme, idf) AS (SELECT * FROM unnest($2::text[], $3::float8[]))
         SELECT h.id, h.kind, h.ord, h.ts, {score}::float4
         FROM (SELECT id, kind, ord, ts, words FROM memories
               WHERE agent_id = $1 AND live AND words @@ $5::tsquery AND kind = ANY($6)) h
         CROSS JOIN LATERAL unnest(h.words) w
         JOIN terms ON terms.lexeme = w.lexeme
         GROUP BY h.id, h.kind, h.ord, h.ts
         ORDER BY 5 DESC, h.ord DESC LIMIT $7",
        score = bm25_sql()
    );
    let rows: Vec<(String, i8, i64, f64, f32)> = sqlx::query_as(&sql)
        .bind(id)
        .bind(&terms.lexemes)
        .bind(&terms.idf)
        .bind(terms.avgdl)
        .bind(terms.any())
        .bind(kinds)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("ranking memories"))?;
    Ok(rows
        .into_iter()
        .map(|(key, kind, ord, ts, s)| {
            let kind = if kind as u8 == b'e' {
                Kind::Episodic
            } else {
                Kind::Semantic
            };
            Candidate::new(key, kind, ord as u64, ts, s)
        })
        .collect())
}

/// Up to `span` traces each side of every trace among `candidates`, nearest
/// first, by place.
async fn neighbours(
    conn: &mut PgConnection,
    id: &str,
    candidates: &[Candidate],
    span: usize,
) -> Result<HashMap<u64, (Vec<Placed>, Vec<Placed>)>> {
    let orders: Vec<i64> = candidates
        .iter()
        .filter(|c| c.kind == Kind::Trace)
        .map(|c| c.order as i64)
        .collect();
    let mut out: HashMap<u64, (Vec<Placed>, Vec<Placed>)> = HashMap::new();
    if orders.is_empty() || span == 0 {
        return Ok(out);
    }
    let rows: Vec<(i64, bool, i64, f64)> = sqlx::query_as(
        "SELECT c.o, n.after, n.ord, n.ts FROM unnest($2::bigint[]) AS c(o)
         CROSS JOIN LATERAL (
           (SELECT false AS after, ord, ts FROM traces WHERE agent_id = $1 AND ord < c.o ORDER BY ord DESC LIMIT $3)
           UNION ALL
           (SELECT true, ord, ts FROM traces WHERE agent_id = $1 AND ord > c.o ORDER BY ord LIMIT $3)) n",
    )
    .bind(id)
    .bind(&orders)
    .bind(span as i64)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading neighbours"))?;
    for (of, after, ord, ts) in rows {
        let sides = out.entry(of as u64).or_default();
        let side = if after { &mut sides.1 } else { &mut sides.0 };
        side.push((ord as u64, ts));
    }
    Ok(out)
}

/// The memories `ranked` names, in order, each trace with up to `context`
/// neighbours each side (oldest first).
async fn materialize(
    conn: &mut PgConnection,
    id: &str,
    ranked: &[Ranked],
    context: usize,
) -> Result<Vec<Recalled>> {
    let context = context.min(MAX_CONTEXT);
    let orders: Vec<i64> = ranked
        .iter()
        .filter(|r| r.kind == Kind::Trace)
        .map(|r| r.order as i64)
        .collect();
    let keys: Vec<String> = ranked
        .iter()
        .filter(|r| r.kind != Kind::Trace)
        .filter_map(|r| r.key().map(str::to_owned))
        .collect();
    let traces: Vec<(i64, bool, String)> = sqlx::query_as(
        "SELECT ord, archived, body FROM traces WHERE agent_id = $1 AND ord = ANY($2)",
    )
    .bind(id)
    .bind(&orders)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading traces"))?;
    let mut traces: HashMap<u64, (bool, String)> = traces
        .into_iter()
        .map(|(o, a, b)| (o as u64, (a, b)))
        .collect();
    let memories: Vec<(String, String)> =
        sqlx::query_as("SELECT id, body FROM memories WHERE agent_id = $1 AND id = ANY($2)")
            .bind(id)
            .bind(&keys)
            .fetch_all(&mut *conn)
            .await
            .map_err(db("reading memories"))?;
    let mut memories: HashMap<String, String> = memories.into_iter().collect();
    let mut around = around(conn, id, &orders, context).await?;
    let mut out = Vec::with_capacity(ranked.len());
    for hit in ranked {
        let memory = match hit.kind {
            Kind::Trace => match traces.remove(&hit.order) {
                Some((archived, body)) => Memory::Trace {
                    trace: Box::new(parse_trace(id, &body)?),
                    archived,
                },
                None => continue,
            },
            kind => match hit.key().and_then(|k| memories.remove(k)) {
                Some(body) if kind == Kind::Episodic => {
                    Memory::Episodic(parse(id, "summary", &body)?)
                }
                Some(body) => {
                    let fact: engram_core::memory::SemanticItem = parse(id, "fact", &body)?;
                    // Expired: gone from search at once (upkeep purges it).
                    if fact.is_expired(engram_store::unix_now()) {
                        continue;
                    }
                    Memory::Semantic(fact)
                }
                None => continue,
            },
        };
        // A trace's order is its own; a memory's may equal one.
        let (before, after) = match hit.kind {
            Kind::Trace => around.remove(&hit.order).unwrap_or_default(),
            _ => Default::default(),
        };
        out.push(Recalled {
            agent_id: None,
            memory,
            score: hit.score,
            matched_by: matched_by(hit),
            before,
            after,
        });
    }
    Ok(out)
}

/// Up to `n` traces each side of each of `orders`, oldest first.
async fn around(
    conn: &mut PgConnection,
    id: &str,
    orders: &[i64],
    n: usize,
) -> Result<HashMap<u64, (Vec<RawTrace>, Vec<RawTrace>)>> {
    let mut out: HashMap<u64, (Vec<RawTrace>, Vec<RawTrace>)> = HashMap::new();
    if orders.is_empty() || n == 0 {
        return Ok(out);
    }
    let rows: Vec<(i64, bool, String)> = sqlx::query_as(
        "SELECT c.o, n.after, n.body FROM unnest($2::bigint[]) AS c(o)
         CROSS JOIN LATERAL (
           (SELECT * FROM (SELECT false AS after, ord, body FROM traces WHERE agent_id = $1 AND ord < c.o
                           ORDER BY ord DESC LIMIT $3) b ORDER BY ord)
           UNION ALL
           (SELECT true, ord, body FROM traces WHERE agent_id = $1 AND ord > c.o ORDER BY ord LIMIT $3)) n",
    )
    .bind(id)
    .bind(orders)
    .bind(n as i64)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading neighbours"))?;
    for (of, after, body) in rows {
        let sides = out.entry(of as u64).or_default();
        let t = parse_trace(id, &body)?;
        if after {
            sides.1.push(t);
        } else {
            sides.0.push(t);
        }
    }
    Ok(out)
}
