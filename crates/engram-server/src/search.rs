//! SearchHistory's request and matches between the wire and the store.

use engram_core::CoreError;
use engram_core::turns::turn_number;
use engram_proto::pb;
use engram_store::{Hit, MatchedBy, Search, SearchMode};

use crate::convert::{non_empty, trace_into_pb, trace_type_from_pb};

const DEFAULT_SEARCH_LIMIT: u32 = 20;
const MAX_SEARCH_LIMIT: u32 = 200;
const MAX_WAIT_FOR_INDEX_MS: u32 = 60_000;

pub fn search_from_pb(req: &pb::SearchHistoryRequest) -> Result<Search, CoreError> {
    let mode = match pb::SearchMode::try_from(req.mode) {
        Ok(pb::SearchMode::Unspecified | pb::SearchMode::Ranked) => SearchMode::Ranked,
        Ok(pb::SearchMode::MatchAllWords) => SearchMode::AllWords,
        Err(_) => {
            return Err(CoreError::Invalid(format!(
                "mode {} is not a SearchMode",
                req.mode
            )));
        }
    };
    let trace_types = req
        .trace_types
        .iter()
        .map(|t| {
            trace_type_from_pb(*t)
                .ok_or_else(|| CoreError::Invalid(format!("trace_types: {t} is not a trace type")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ts = match (req.from_ts, req.to_ts) {
        (None, None) => None,
        (lo, hi) => {
            let (lo, hi) = (lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY));
            if lo.is_nan() || hi.is_nan() || lo > hi {
                return Err(CoreError::Invalid(
                    "from_ts and to_ts must be times with from_ts <= to_ts".into(),
                ));
            }
            Some((lo, hi))
        }
    };
    Ok(Search {
        query: req.query.clone(),
        mode,
        trace_types,
        turns: turn_range(&req.from_turn_id, &req.to_turn_id)?,
        ts,
        context: req.context_messages as usize,
        limit: match req.limit {
            0 => DEFAULT_SEARCH_LIMIT,
            n => n.min(MAX_SEARCH_LIMIT),
        } as usize,
        page_token: non_empty(req.page_token.as_str()).map(str::to_owned),
        wait_for_index: match req.wait_for_index_ms {
            0 => None,
            ms if ms > MAX_WAIT_FOR_INDEX_MS => {
                return Err(CoreError::Invalid(format!(
                    "wait_for_index_ms is at most {MAX_WAIT_FOR_INDEX_MS}"
                )));
            }
            ms => Some(std::time::Duration::from_millis(u64::from(ms))),
        },
    })
}

pub fn hit_into_pb(h: Hit) -> pb::SearchMatch {
    let matched_by = match h.matched_by {
        MatchedBy::AllWords => pb::MatchedBy::AllWords,
        MatchedBy::Lexical => pb::MatchedBy::Lexical,
        MatchedBy::Semantic => pb::MatchedBy::Semantic,
        MatchedBy::Both => pb::MatchedBy::Both,
        MatchedBy::Context => pb::MatchedBy::Context,
    };
    pb::SearchMatch {
        turn_id: h.trace.turn_id.clone(),
        trace: Some(trace_into_pb(h.trace)),
        archived: h.archived,
        score: h.score,
        matched_by: matched_by.into(),
        context_before: h.before.into_iter().map(trace_into_pb).collect(),
        context_after: h.after.into_iter().map(trace_into_pb).collect(),
    }
}

/// The turn numbers of a "turn_0003"-style range; empty ends are open.
fn turn_range(from: &str, to: &str) -> std::result::Result<Option<(u32, u32)>, CoreError> {
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
