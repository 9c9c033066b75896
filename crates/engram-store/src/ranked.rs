//! SearchHistory's ranked mode: the agent's index, caught up with every
//! acknowledged write, ranks its traces for the query — by their words,
//! and by meaning over what the indexer has embedded so far.

use std::time::Instant;

use engram_core::{AgentId, CoreError, RawTrace};
use engram_index::lexical::Placed;
use engram_index::{Filter, Kind, Matched, Params, Semantic};

use crate::index::{MAX_EMBEDDED_CHARS, blocking, capped_at, index_error, trace_type_code};
use crate::{FileStore, Hit, IndexState, MatchedBy, Result, Search, SearchPage, StoreError};

/// How deep ranked pages go: further than anyone reads, and a bound on the
/// work of one request.
const MAX_RANKED: usize = 1000;

/// Neighbours returned on each side of a match, at most.
const MAX_CONTEXT: usize = 10;

fn offset(token: Option<&str>) -> std::result::Result<usize, CoreError> {
    let Some(token) = token else { return Ok(0) };
    token
        .strip_prefix('k')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            CoreError::Invalid(
                "page_token is not one this server issued for a ranked search; pass next_page_token unchanged, with the same mode"
                    .into(),
            )
        })
}

impl FileStore {
    pub(crate) async fn ranked_search(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        let from = offset(search.page_token.as_deref())?;
        let end = from + search.limit;
        if end > MAX_RANKED {
            return Err(CoreError::Invalid(format!(
                "ranked results end at {MAX_RANKED}; narrow the query or the filters"
            ))
            .into());
        }
        if let Some(wait) = search.wait_for_index {
            self.wait_embedded(id, Instant::now() + wait).await?;
        }
        // An unknown agent is refused before its query costs an embedding.
        self.existing_handle(id)?;
        let query_vector = self.query_vector(&search.query).await;
        let mut current = self.caught_up(id).await?;
        let search = search.clone();
        blocking(move || {
            let first_active = current.first_active;
            let index = current.index();
            let state = index_state(index);
            let semantic = match (&index.vectors, &query_vector) {
                (Some(vectors), Some(query)) => Some(Semantic {
                    vectors,
                    query: query.as_slice(),
                }),
                _ => None,
            };
            let lexical = &mut index.lexical;
            let filter = Filter {
                kinds: vec![Kind::Trace],
                trace_types: search
                    .trace_types
                    .iter()
                    .map(|t| trace_type_code(*t))
                    .collect(),
                order: search.turns.map(|(lo, hi)| {
                    (
                        engram_index::order(lo, 0),
                        engram_index::order(hi, u32::MAX),
                    )
                }),
                ts: search.ts,
            };
            let ranked = engram_index::rank(
                lexical,
                semantic,
                &search.query,
                &filter,
                end + 1,
                &Params::default(),
            )
            .map_err(index_error)?;
            let more = ranked.len() > end;
            let context = search.context.min(MAX_CONTEXT);
            // Neighbours come nearest first; a hit shows them in order.
            let traces_at = |placed: Vec<Placed>| -> Result<Vec<RawTrace>> {
                let mut out = Vec::with_capacity(placed.len());
                for (order, _) in placed {
                    if let Some(body) = lexical.body_at(order).map_err(index_error)? {
                        out.push(parse(&body)?);
                    }
                }
                Ok(out)
            };
            let mut hits = Vec::new();
            for r in ranked.iter().take(end).skip(from) {
                let Some(body) = r.body(lexical).map_err(index_error)? else {
                    continue;
                };
                let (before, after) = lexical.neighbours(r.order, context);
                let mut before = traces_at(before)?;
                before.reverse();
                let after = traces_at(after)?;
                hits.push(Hit {
                    trace: parse(&body)?,
                    archived: first_active.is_none_or(|first| r.order < first),
                    score: r.score,
                    matched_by: match r.matched() {
                        Matched::Lexical => MatchedBy::Lexical,
                        Matched::Semantic => MatchedBy::Semantic,
                        Matched::Both => MatchedBy::Both,
                        Matched::Context => MatchedBy::Context,
                    },
                    before,
                    after,
                });
            }
            Ok(SearchPage {
                hits,
                next_page_token: more.then(|| format!("k{end}")),
                index: state,
            })
        })
        .await
    }

    /// The query's vector, or `None` (no model, an empty query, or a model
    /// that failed: the search is then lexical, and says so in its
    /// index state's counts).
    async fn query_vector(&self, query: &str) -> Option<Vec<f32>> {
        let indexer = self.inner.indexer.as_ref()?;
        if query.trim().is_empty() {
            return None;
        }
        let text = capped_at(query.to_owned(), MAX_EMBEDDED_CHARS);
        let started = Instant::now();
        match indexer.embedder.embed_query(&text).await {
            Ok(mut v) if v.len() == 1 && v[0].len() == indexer.model.dim => {
                metrics::histogram!("engram_embed_query_seconds").record(started.elapsed());
                v.pop()
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "query not embedded; searching by words only");
                metrics::counter!("engram_embed_query_failures_total").increment(1);
                None
            }
        }
    }
}

pub(crate) fn index_state(index: &crate::index::AgentIndex) -> IndexState {
    IndexState {
        items: index.lexical.len(),
        embedded: index.vectors.as_ref().map_or(0, |v| v.len() as u64),
        pending: index.pending.len() as u64,
        model: index
            .vectors
            .as_ref()
            .map(|v| v.model().to_owned())
            .unwrap_or_default(),
    }
}

fn parse(body: &str) -> Result<RawTrace> {
    RawTrace::from_line(body.as_bytes())
        .map_err(|e| StoreError::Index(format!("search index holds an unreadable trace: {e}")))
}
