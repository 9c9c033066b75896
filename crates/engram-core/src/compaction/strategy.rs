//! How an agent's transcript is kept inside its window (`policy.strategy`):
//! the application chooses per conversation type, since a short flow needs
//! no memory management and a long one needs summaries.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::Trigger;

/// What a compaction may do to an agent's transcript.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Cheapest first: snip, microcompact, then a summary of the oldest
    /// turns (episodic summary and facts), the rest archived.
    #[default]
    Summarize,
    /// The oldest whole turns are archived with no summary, keeping the
    /// last `policy.keep_last_turns`: no model is called, and the
    /// archive keeps them searchable and recallable.
    Trim,
    /// Old tool results become placeholders (microcompact) and nothing
    /// more: every turn stays; a prompt still over the window is served
    /// with a warning.
    CompactToolResults,
    /// Nothing is ever compacted: the application handles overflow (a
    /// prompt over the window is served with a warning).
    None,
}

impl Strategy {
    pub const ALL: [Self; 4] = [
        Self::Summarize,
        Self::Trim,
        Self::CompactToolResults,
        Self::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Summarize => "summarize",
            Self::Trim => "trim",
            Self::CompactToolResults => "compact_tool_results",
            Self::None => "none",
        }
    }

    /// The strategy may call a summarizer.
    pub fn summarizes(self) -> bool {
        self == Self::Summarize
    }

    /// Whether its compactions can do anything for `trigger`: `none`
    /// never; `compact_tool_results` for the prompt's size and a manual
    /// Compact, not a turn count (it keeps every turn, so the count would
    /// fire again at every prompt).
    pub fn answers(self, trigger: Trigger) -> bool {
        match self {
            Self::Summarize | Self::Trim => true,
            Self::CompactToolResults => trigger.is_about_size() || trigger == Trigger::Manual,
            Self::None => false,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a strategy; it says which are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compaction strategy {0:?}: one of summarize, trim, compact_tool_results, none")]
pub struct UnknownStrategy(pub String);

impl FromStr for Strategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownStrategy(s.chars().take(64).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_say_what_is_allowed() {
        for s in Strategy::ALL {
            assert_eq!(s.as_str().parse::<Strategy>(), Ok(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
        let e = "sometimes".parse::<Strategy>().unwrap_err();
        assert!(
            e.to_string()
                .contains("summarize, trim, compact_tool_results, none")
        );
        assert_eq!(Strategy::default(), Strategy::Summarize);
    }
}
