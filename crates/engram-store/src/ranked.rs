//! SearchHistory's ranked mode: the agent's index, caught up with every
//! acknowledged write, ranks its traces for the query.

use engram_core::{AgentId, CoreError, RawTrace};
use engram_index::lexical::Placed;
use engram_index::{Filter, Kind, Params};

use crate::index::{blocking, index_error, trace_type_code};
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
        let mut current = self.caught_up(id).await?;
        let search = search.clone();
        blocking(move || {
            let first_active = current.first_active;
            let lexical = &mut current.index().lexical;
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
                None,
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
                    matched_by: if r.lexical > 0.0 {
                        MatchedBy::Lexical
                    } else {
                        MatchedBy::Context
                    },
                    before,
                    after,
                });
            }
            Ok(SearchPage {
                hits,
                next_page_token: more.then(|| format!("k{end}")),
                index: IndexState {
                    items: lexical.len(),
                },
            })
        })
        .await
    }
}

fn parse(body: &str) -> Result<RawTrace> {
    RawTrace::from_line(body.as_bytes())
        .map_err(|e| StoreError::Index(format!("search index holds an unreadable trace: {e}")))
}
