//! Request defaults and limits, in one place, and the checks that turn a
//! request's raw values into the store's validated queries.

use std::time::Duration;

use engram_core::blocks::Scope;
use engram_core::turns::turn_number;
use engram_core::{AgentId, UserId};
use engram_store::{MemoryQuery, Search};

use crate::api::{RetrieveRequest, ScopeRequest, SearchRequest};
use crate::error::{EngineError, Result};

/// Retrieve: summaries, facts and raw turns when the request names none.
pub const DEFAULT_MAX_EPISODIC: u32 = 3;
pub const DEFAULT_MAX_SEMANTIC: u32 = 20;
pub const DEFAULT_RAW_TAIL_TURNS: u32 = 4;
/// Retrieve(query): memories ranked.
pub const DEFAULT_MAX_RECALLED: u32 = 10;
pub const MAX_RECALLED: u32 = 100;
/// Neighbouring messages around a ranked trace, each side: the bound a
/// store holds to as well (one value, the store's).
pub const MAX_CONTEXT_MESSAGES: u32 = engram_store::ranked::MAX_CONTEXT as u32;
/// SearchHistory: matches per page.
pub const DEFAULT_SEARCH_LIMIT: u32 = 20;
pub const MAX_SEARCH_LIMIT: u32 = 200;
/// Read-your-writes for meaning: the longest wait for the indexer.
pub const MAX_WAIT_FOR_INDEX_MS: u32 = 60_000;
/// ListAgents: ids per page.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
pub const MAX_PAGE_SIZE: u32 = 1000;

/// `raw` as an agent id; a refusal names `field`.
pub fn agent_id(field: &str, raw: &str) -> Result<AgentId> {
    AgentId::parse(raw).map_err(|e| match field {
        "agent_id" => e.into(),
        _ => EngineError::Invalid(format!("{field}: {e}")),
    })
}

/// `raw` as a user id; a refusal names `field`.
pub fn user_id(field: &str, raw: &str) -> Result<UserId> {
    UserId::parse(raw).map_err(|e| match field {
        "user_id" => e.into(),
        _ => EngineError::Invalid(format!("{field}: {e}")),
    })
}

/// A request's optional `user_id`: `None` for unset or "".
pub fn optional_user(raw: Option<&str>) -> Result<Option<UserId>> {
    raw.filter(|u| !u.is_empty())
        .map(|u| user_id("user_id", u))
        .transpose()
}

/// Longest text ListAgents' `id_contains` may hold (an id is at most as
/// long).
pub const MAX_ID_FILTER_CHARS: usize = 128;

/// Longest fact id a request may name (the server's are 36 characters).
pub const MAX_FACT_ID_CHARS: usize = 128;

/// A fact id as a request names it: 1 to 128 characters, none of them a
/// control character (no store is asked about anything else).
pub fn fact_id(raw: &str) -> Result<&str> {
    let chars = raw.chars().count();
    if chars == 0 || chars > MAX_FACT_ID_CHARS || raw.chars().any(char::is_control) {
        return Err(EngineError::Invalid(format!(
            "id is a fact's id: 1 to {MAX_FACT_ID_CHARS} characters, no control characters"
        )));
    }
    Ok(raw)
}

/// A memory block's scope, checked.
pub fn scope(req: &ScopeRequest) -> Result<Scope> {
    Ok(match req {
        ScopeRequest::Agent(a) => Scope::Agent(agent_id("scope.agent_id", a)?),
        ScopeRequest::User(u) => Scope::User(user_id("scope.user_id", u)?),
        ScopeRequest::Global => Scope::Global,
    })
}

/// A SearchHistory request, checked.
pub fn search(req: &SearchRequest) -> Result<Search> {
    let ts = match (req.from_ts, req.to_ts) {
        (None, None) => None,
        (lo, hi) => {
            let (lo, hi) = (lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY));
            if lo.is_nan() || hi.is_nan() || lo > hi {
                return Err(EngineError::invalid(
                    "from_ts and to_ts must be times with from_ts <= to_ts",
                ));
            }
            Some((lo, hi))
        }
    };
    Ok(Search {
        query: req.query.clone(),
        mode: req.mode,
        trace_types: req.trace_types.clone(),
        turns: turn_range(&req.from_turn_id, &req.to_turn_id)?,
        ts,
        neighbours: req.context_messages as usize,
        limit: match req.limit {
            0 => DEFAULT_SEARCH_LIMIT,
            n => n.min(MAX_SEARCH_LIMIT),
        } as usize,
        page_token: Some(req.page_token.clone()).filter(|t| !t.is_empty()),
        wait_for_index: wait_for_index(req.wait_for_index_ms)?,
    })
}

/// What Retrieve ranks for its (non-empty, trimmed) `query`, with room
/// for `episodic` summaries and `semantic` facts of each kind alone.
pub fn memory_query(
    req: &RetrieveRequest,
    query: &str,
    episodic: usize,
    semantic: usize,
) -> Result<MemoryQuery> {
    let limit = req.max_recalled.unwrap_or(DEFAULT_MAX_RECALLED);
    if limit > MAX_RECALLED {
        return Err(EngineError::Invalid(format!(
            "max_recalled is at most {MAX_RECALLED}"
        )));
    }
    if req.context_messages > MAX_CONTEXT_MESSAGES {
        return Err(EngineError::Invalid(format!(
            "context_messages is at most {MAX_CONTEXT_MESSAGES}"
        )));
    }
    Ok(MemoryQuery {
        query: query.to_owned(),
        limit: limit as usize,
        neighbours: req.context_messages as usize,
        wait_for_index: wait_for_index(req.wait_for_index_ms)?,
        archived_only: false,
        episodic,
        semantic,
        as_of: req.as_of,
    })
}

/// A ListAgents page size: the default for 0, capped.
pub fn page_size(requested: u32) -> usize {
    let size = match requested {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    size as usize
}

fn wait_for_index(ms: u32) -> Result<Option<Duration>> {
    match ms {
        0 => Ok(None),
        ms if ms > MAX_WAIT_FOR_INDEX_MS => Err(EngineError::Invalid(format!(
            "wait_for_index_ms is at most {MAX_WAIT_FOR_INDEX_MS}"
        ))),
        ms => Ok(Some(Duration::from_millis(u64::from(ms)))),
    }
}

/// The turn numbers of a "turn_0003"-style range; empty ends are open.
fn turn_range(from: &str, to: &str) -> Result<Option<(u32, u32)>> {
    let end = |field: &str, v: &str, open: u32| -> Result<u32> {
        if v.is_empty() {
            return Ok(open);
        }
        turn_number(v).ok_or_else(|| {
            EngineError::Invalid(format!("{field} {v:?} is not a turn id like turn_0001"))
        })
    };
    if from.is_empty() && to.is_empty() {
        return Ok(None);
    }
    let lo = end("from_turn_id", from, 0)?;
    let hi = end("to_turn_id", to, u32::MAX)?;
    if lo > hi {
        return Err(EngineError::Invalid(format!(
            "from_turn_id {from} is after to_turn_id {to}"
        )));
    }
    Ok(Some((lo, hi)))
}

/// ForgetEvents names this many ids at most.
pub const MAX_FORGET_IDS: usize = 1000;

/// ForgetTurn's turn: `turn_` and a number, as Ingest answers them.
pub fn forget_turn(turn_id: &str) -> Result<engram_core::forget::Forget> {
    if engram_core::turns::turn_number(turn_id).is_none() {
        return Err(EngineError::Invalid(
            "turn_id is a turn's id as Ingest answers it (turn_0007)".into(),
        ));
    }
    Ok(engram_core::forget::Forget::Turn(turn_id.to_owned()))
}

/// ForgetEvents' ids: trace ids or the clients' event ids.
pub fn forget_events(ids: &[String]) -> Result<engram_core::forget::Forget> {
    if ids.is_empty() || ids.len() > MAX_FORGET_IDS {
        return Err(EngineError::Invalid(format!(
            "ids: 1 to {MAX_FORGET_IDS} trace ids or event ids"
        )));
    }
    for id in ids {
        fact_id(id).map_err(|_| {
            EngineError::Invalid(format!(
                "ids: each is 1 to {MAX_FACT_ID_CHARS} characters, no control characters"
            ))
        })?;
    }
    Ok(engram_core::forget::Forget::Events(ids.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_caps_and_refusals() {
        let s = search(&SearchRequest::default()).unwrap();
        assert_eq!(s.limit, DEFAULT_SEARCH_LIMIT as usize);
        assert!(s.turns.is_none() && s.ts.is_none() && s.page_token.is_none());
        let s = search(&SearchRequest {
            limit: 10_000,
            from_turn_id: "turn_0002".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.limit, MAX_SEARCH_LIMIT as usize);
        assert_eq!(s.turns, Some((2, u32::MAX)));
        for bad in [
            SearchRequest {
                from_turn_id: "turn_0005".into(),
                to_turn_id: "turn_0002".into(),
                ..Default::default()
            },
            SearchRequest {
                to_turn_id: "five".into(),
                ..Default::default()
            },
            SearchRequest {
                from_ts: Some(f64::NAN),
                ..Default::default()
            },
            SearchRequest {
                wait_for_index_ms: MAX_WAIT_FOR_INDEX_MS + 1,
                ..Default::default()
            },
        ] {
            assert!(
                matches!(search(&bad), Err(EngineError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert_eq!(page_size(0), DEFAULT_PAGE_SIZE as usize);
        assert_eq!(page_size(5_000), MAX_PAGE_SIZE as usize);
        let over = RetrieveRequest {
            max_recalled: Some(MAX_RECALLED + 1),
            ..Default::default()
        };
        assert!(memory_query(&over, "q", 0, 0).is_err());
        let err = agent_id("source_agent_id", "").unwrap_err();
        assert!(err.to_string().starts_with("source_agent_id: "), "{err}");
    }
}
