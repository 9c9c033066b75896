//! SearchHistory's ranked mode: the agent's index, caught up with every
//! acknowledged write, ranks its traces for the query.

use engram_core::turns::turn_number;
use engram_core::{AgentId, CoreError, RawTrace};
use engram_index::{Filter, Kind, Params};

use crate::index::{blocking, index_error, trace_type_code};
use crate::{FileStore, Hit, IndexState, MatchedBy, Result, Search, SearchPage, StoreError};

/// How deep ranked pages go: further than anyone reads, and a bound on the
/// work of one request.
pub const MAX_RANKED: usize = 1000;

/// Neighbours returned on each side of a match, at most.
pub const MAX_CONTEXT: usize = 10;

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
            let ranked =
                engram_index::rank(lexical, &search.query, &filter, end + 1, &Params::default())
                    .map_err(index_error)?;
            let more = ranked.len() > end;
            let context = search.context.min(MAX_CONTEXT);
            let trace_at = |order: u64| -> Result<Option<RawTrace>> {
                lexical
                    .body_at(order)
                    .map_err(index_error)?
                    .map(|b| parse(&b))
                    .transpose()
            };
            let mut hits = Vec::new();
            for r in ranked.iter().take(end).skip(from) {
                let Some(body) = r.body(lexical).map_err(index_error)? else {
                    continue;
                };
                let (before, after) = lexical.neighbours(r.order, context);
                let mut before = before
                    .into_iter()
                    .filter_map(|(o, _)| trace_at(o).transpose())
                    .collect::<Result<Vec<_>>>()?;
                before.reverse();
                let after = after
                    .into_iter()
                    .filter_map(|(o, _)| trace_at(o).transpose())
                    .collect::<Result<Vec<_>>>()?;
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

/// The turn numbers of a "turn_0003"-style range; empty ends are open.
pub fn turn_range(from: &str, to: &str) -> std::result::Result<Option<(u32, u32)>, CoreError> {
    let end = |field: &str, v: &str, open: u32| -> std::result::Result<u32, CoreError> {
        if v.is_empty() {
            return Ok(open);
        }
        turn_number(v).ok_or_else(|| {
            CoreError::Invalid(format!("{field} {v:?} is not a turn id like turn_0001"))
        })
    };
    if from.is_empty() && to.is_empty() {
        return Ok(None);
    }
    let lo = end("from_turn_id", from, 0)?;
    let hi = end("to_turn_id", to, u32::MAX)?;
    if lo > hi {
        return Err(CoreError::Invalid(format!(
            "from_turn_id {from} is after to_turn_id {to}"
        )));
    }
    Ok(Some((lo, hi)))
}
