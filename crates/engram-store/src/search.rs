//! SearchHistory's all-words mode: which traces match, the same for both
//! backends.

use engram_core::{CoreError, RawTrace};
use serde_json::Value;

use crate::Search;

/// The refusal of a search without words.
pub const EMPTY_QUERY: &str = "query is empty; give one or more keywords";

/// Lower-cased terms that must all occur in a trace, and the request's
/// filters.
#[derive(Debug, Clone)]
pub struct Query {
    terms: Vec<String>,
    search: Search,
}

impl Query {
    pub fn parse(search: &Search) -> std::result::Result<Self, CoreError> {
        let terms: Vec<String> = search
            .query
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        if terms.is_empty() {
            return Err(CoreError::Invalid(EMPTY_QUERY.into()));
        }
        Ok(Self {
            terms,
            search: search.clone(),
        })
    }

    fn accepts(&self, t: &RawTrace) -> bool {
        let s = &self.search;
        (s.trace_types.is_empty() || s.trace_types.contains(&t.trace_type))
            && s.turns.is_none_or(|(lo, hi)| {
                engram_core::turns::turn_number(&t.turn_id).is_some_and(|n| (lo..=hi).contains(&n))
            })
            && s.ts.is_none_or(|(lo, hi)| (lo..=hi).contains(&t.ts))
    }

    pub fn matches(&self, t: &RawTrace) -> bool {
        if !self.accepts(t) {
            return false;
        }
        let mut text = t.content.to_lowercase();
        for extra in [&t.tool_name, &t.tool_error].into_iter().flatten() {
            text.push('\n');
            text.push_str(&extra.to_lowercase());
        }
        if let Some(args) = &t.tool_args {
            text.push('\n');
            text.push_str(&Value::Object(args.clone()).to_string().to_lowercase());
        }
        if let Some(result) = &t.tool_result {
            text.push('\n');
            text.push_str(&result.to_string().to_lowercase());
        }
        self.terms.iter().all(|term| text.contains(term.as_str()))
    }
}
