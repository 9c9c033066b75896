//! SearchHistory's and Retrieve(query)'s requests and matches between the
//! wire and the store.

use engram_core::CoreError;
use engram_core::memory::Provenance;
use engram_core::turns::turn_number;
use engram_proto::pb;
use engram_store::{Hit, IndexState, MatchedBy, Memory, MemoryQuery, Recalled, Search, SearchMode};

use crate::convert::{
    episodic_to_pb, non_empty, semantic_to_pb, trace_into_pb, trace_type_from_pb,
};

const DEFAULT_SEARCH_LIMIT: u32 = 20;
const MAX_SEARCH_LIMIT: u32 = 200;
const MAX_WAIT_FOR_INDEX_MS: u32 = 60_000;
const DEFAULT_MAX_RECALLED: u32 = 10;
const MAX_RECALLED: u32 = 100;
const MAX_CONTEXT_MESSAGES: u32 = 10;

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
        wait_for_index: wait_for_index(req.wait_for_index_ms)?,
    })
}

fn wait_for_index(ms: u32) -> Result<Option<std::time::Duration>, CoreError> {
    match ms {
        0 => Ok(None),
        ms if ms > MAX_WAIT_FOR_INDEX_MS => Err(CoreError::Invalid(format!(
            "wait_for_index_ms is at most {MAX_WAIT_FOR_INDEX_MS}"
        ))),
        ms => Ok(Some(std::time::Duration::from_millis(u64::from(ms)))),
    }
}

/// What Retrieve ranks for a non-empty `query`.
pub fn memory_query_from_pb(
    req: &pb::RetrieveRequest,
    query: &str,
    episodic: usize,
    semantic: usize,
) -> Result<MemoryQuery, CoreError> {
    let limit = req.max_recalled.unwrap_or(DEFAULT_MAX_RECALLED);
    if limit > MAX_RECALLED {
        return Err(CoreError::Invalid(format!(
            "max_recalled is at most {MAX_RECALLED}"
        )));
    }
    if req.context_messages > MAX_CONTEXT_MESSAGES {
        return Err(CoreError::Invalid(format!(
            "context_messages is at most {MAX_CONTEXT_MESSAGES}"
        )));
    }
    Ok(MemoryQuery {
        query: query.to_owned(),
        limit: limit as usize,
        context: req.context_messages as usize,
        wait_for_index: wait_for_index(req.wait_for_index_ms)?,
        archived_only: false,
        episodic,
        semantic,
    })
}

fn matched_by_pb(m: MatchedBy) -> i32 {
    match m {
        MatchedBy::AllWords => pb::MatchedBy::AllWords,
        MatchedBy::Lexical => pb::MatchedBy::Lexical,
        MatchedBy::Semantic => pb::MatchedBy::Semantic,
        MatchedBy::Both => pb::MatchedBy::Both,
        MatchedBy::Context => pb::MatchedBy::Context,
    }
    .into()
}

pub fn hit_into_pb(h: Hit) -> pb::SearchMatch {
    pb::SearchMatch {
        turn_id: h.trace.turn_id.clone(),
        trace: Some(trace_into_pb(h.trace)),
        archived: h.archived,
        score: h.score,
        matched_by: matched_by_pb(h.matched_by),
        context_before: h.before.into_iter().map(trace_into_pb).collect(),
        context_after: h.after.into_iter().map(trace_into_pb).collect(),
    }
}

/// A recalled memory with its provenance: a trace stands for itself; a
/// summary or fact for the turns and traces it was drawn from.
pub fn recalled_into_pb(r: Recalled) -> pb::RecalledMemory {
    let mut out = pb::RecalledMemory {
        score: r.score,
        matched_by: matched_by_pb(r.matched_by),
        context_before: r.before.into_iter().map(trace_into_pb).collect(),
        context_after: r.after.into_iter().map(trace_into_pb).collect(),
        ..Default::default()
    };
    match r.memory {
        Memory::Trace { trace, archived } => {
            out.kind = pb::MemoryKind::Trace.into();
            out.archived = archived;
            out.turn_ids = vec![trace.turn_id.clone()];
            out.trace_ids = vec![trace.id.clone()];
            out.from_ts = Some(trace.ts);
            out.to_ts = Some(trace.ts);
            out.trace = Some(trace_into_pb(*trace));
        }
        Memory::Episodic(e) => {
            out.kind = pb::MemoryKind::Episodic.into();
            drawn_from(&mut out, &e.turn_ids, &e.source);
            out.episodic = Some(episodic_to_pb(&e));
        }
        Memory::Semantic(f) => {
            out.kind = pb::MemoryKind::Semantic.into();
            drawn_from(&mut out, &f.turn_ids, &f.source);
            out.semantic = Some(semantic_to_pb(&f));
        }
    }
    out
}

/// A summary's or fact's provenance on a recalled memory.
fn drawn_from(out: &mut pb::RecalledMemory, turn_ids: &[String], source: &Provenance) {
    out.turn_ids = turn_ids.to_vec();
    out.trace_ids.clone_from(&source.trace_ids);
    (out.from_ts, out.to_ts) = (source.from_ts, source.to_ts);
}

pub fn index_state_into_pb(i: IndexState) -> pb::IndexState {
    pb::IndexState {
        items: i.items,
        embedded: i.embedded,
        pending: i.pending,
        model: i.model,
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

/// `relevant`, then the `usual` picks not among them: `n` in all.
pub fn relevant_first<T>(
    relevant: Vec<T>,
    usual: Vec<T>,
    n: usize,
    id: impl Fn(&T) -> String,
) -> Vec<T> {
    let seen: std::collections::HashSet<String> = relevant.iter().map(&id).collect();
    relevant
        .into_iter()
        .chain(usual.into_iter().filter(|t| !seen.contains(&id(t))))
        .take(n)
        .collect()
}
