//! SearchHistory's and Retrieve(query)'s requests and matches between the
//! wire and the engine.

use engram_core::memory::Provenance;
use engram_engine::{EngineError, SearchRequest};
use engram_proto::pb;
use engram_store::{Hit, IndexState, MatchedBy, Memory, Recalled, SearchMode};

use super::{episodic_to_pb, semantic_to_pb, trace_into_pb, trace_type_from_pb};

pub fn search_from_pb(req: pb::SearchHistoryRequest) -> Result<SearchRequest, EngineError> {
    let mode = match pb::SearchMode::try_from(req.mode) {
        Ok(pb::SearchMode::Unspecified | pb::SearchMode::Ranked) => SearchMode::Ranked,
        Ok(pb::SearchMode::MatchAllWords) => SearchMode::AllWords,
        Err(_) => {
            return Err(EngineError::Invalid(format!(
                "mode {} is not a SearchMode",
                req.mode
            )));
        }
    };
    let trace_types = req
        .trace_types
        .iter()
        .map(|t| {
            trace_type_from_pb(*t).ok_or_else(|| {
                EngineError::Invalid(format!("trace_types: {t} is not a trace type"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SearchRequest {
        agent_id: req.agent_id,
        user_id: req.user_id,
        query: req.query,
        mode,
        trace_types,
        from_turn_id: req.from_turn_id,
        to_turn_id: req.to_turn_id,
        from_ts: req.from_ts,
        // As of a time: what had been said by then, the earlier bound
        // winning.
        to_ts: match (req.to_ts, req.as_of) {
            (Some(to), Some(at)) => Some(to.min(at)),
            (to, at) => to.or(at),
        },
        context_messages: req.context_messages,
        limit: req.limit,
        page_token: req.page_token,
        wait_for_index_ms: req.wait_for_index_ms,
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
        agent_id: h.agent_id.unwrap_or_default(),
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
        agent_id: r.agent_id.unwrap_or_default(),
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
