//! Ranked search, the parts both backends share: page tokens and bounds,
//! the filters of a request, the rankings Retrieve(query) asks for, and
//! how a ranked item matched.

use engram_core::CoreError;
use engram_index::{Filter, Kind, Matched, Ranked};

use crate::items::trace_type_code;
use crate::{MatchedBy, Search};

/// How deep ranked pages go: further than anyone reads, and a bound on the
/// work of one request.
pub const MAX_RANKED: usize = 1000;

/// Neighbours returned on each side of a match, at most.
pub const MAX_CONTEXT: usize = 10;

/// The token of the ranked page that starts at `offset` (read back by
/// [`offset`]).
pub fn page_token(offset: usize) -> String {
    format!("k{offset}")
}

/// A search of a user's conversations: ranked, with a query, and no turn
/// range (turns are numbered per conversation).
pub fn check_user_search(search: &Search) -> std::result::Result<(), CoreError> {
    if search.mode != crate::SearchMode::Ranked {
        return Err(CoreError::Invalid(
            "a search by user_id is RANKED: MATCH_ALL_WORDS searches one agent_id".into(),
        ));
    }
    if search.query.trim().is_empty() {
        return Err(CoreError::Invalid(crate::search::EMPTY_QUERY.into()));
    }
    if search.turns.is_some() {
        return Err(CoreError::Invalid(
            "from_turn_id and to_turn_id are one conversation's; with user_id, narrow by from_ts and to_ts".into(),
        ));
    }
    Ok(())
}

/// Where a ranked page starts, from its token.
pub fn offset(token: Option<&str>) -> std::result::Result<usize, CoreError> {
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

/// Where a ranked page starts and ends (exclusive), from its token and
/// limit; refused past [`MAX_RANKED`].
pub fn page_bounds(search: &Search) -> std::result::Result<(usize, usize), CoreError> {
    let from = offset(search.page_token.as_deref())?;
    let end = from + search.limit;
    if end > MAX_RANKED {
        return Err(CoreError::Invalid(format!(
            "ranked results end at {MAX_RANKED}; narrow the query or the filters"
        )));
    }
    Ok((from, end))
}

/// The items a ranked SearchHistory may return: traces, as its filters
/// say.
pub fn search_filter(search: &Search) -> Filter {
    Filter {
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
        traces_before: None,
        traces_hidden: None,
    }
}

/// Why a ranked item matched, as the store says it.
pub fn matched_by(r: &Ranked) -> MatchedBy {
    match r.matched() {
        Matched::Lexical => MatchedBy::Lexical,
        Matched::Semantic => MatchedBy::Semantic,
        Matched::Both => MatchedBy::Both,
        Matched::Context => MatchedBy::Context,
    }
}

/// Where an item of conversation `ordinal` at `order` (an agent's turn and
/// seq) sits in a ranking of a user's conversations: 24 bits of ordinal,
/// 24 of turn, 16 of seq (a turn past 16 million or a seq past 65,535
/// shares the last place).
pub fn place(ordinal: u32, order: u64) -> u64 {
    let turn = (order >> 32).min(0xFF_FFFF);
    let seq = (order & 0xFFFF_FFFF).min(0xFFFF);
    (u64::from(ordinal.min(0xFF_FFFF)) << CONVERSATION_BITS) | (turn << 16) | seq
}

/// Where a place's conversation starts, in bits: a place's bits from
/// here up are its conversation's ordinal.
pub const CONVERSATION_BITS: u32 = 40;

/// The places of conversation `ordinal`, inclusive.
pub fn range(ordinal: u32) -> (u64, u64) {
    let lo = u64::from(ordinal.min(0xFF_FFFF)) << CONVERSATION_BITS;
    (lo, lo | ((1 << CONVERSATION_BITS) - 1))
}

/// The key of an agent's item in a ranking of a user's conversations.
pub fn key_of(agent: &str, key: &str) -> String {
    format!("{agent}/{key}")
}

/// The agent (none: the user's own facts, `~/`) and the agent's key of an
/// item of a ranking of a user's conversations.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some(("~", key)) => (None, key),
        Some((agent, key)) => (Some(agent), key),
        None => (None, key),
    }
}
