//! What a compaction did, or why it did not.

use std::fmt;

use super::strategy::Strategy;
use super::trigger::{Tier, Trigger};

/// The account of one compaction, as reports and metrics give it.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionReport {
    pub trigger: Trigger,
    /// The agent's strategy it followed.
    pub strategy: Strategy,
    /// The tiers that ran, cheapest first.
    pub steps: Vec<Tier>,
    /// The prompt got smaller: a tier changed something.
    pub performed: bool,
    /// Summarized turns.
    pub turn_ids: Vec<String>,
    pub episodic_id: String,
    pub semantic_added: u32,
    pub semantic_updated: u32,
    pub traces_pruned: u32,
    /// The snapshot's carry-forward section: essentials it shows, and
    /// those that did not fit its budget.
    pub carried: u32,
    pub carry_dropped: u32,
    pub tokens_before: u32,
    pub tokens_after: u32,
    pub error: Option<CompactionError>,
    /// The summary was written in the background before the trigger, this
    /// long before it was committed.
    pub prepared_ago: Option<std::time::Duration>,
}

impl CompactionReport {
    pub fn new(trigger: Trigger, tokens_before: u32) -> Self {
        Self {
            trigger,
            strategy: Strategy::default(),
            steps: vec![],
            performed: false,
            turn_ids: vec![],
            episodic_id: String::new(),
            semantic_added: 0,
            semantic_updated: 0,
            traces_pruned: 0,
            carried: 0,
            carry_dropped: 0,
            tokens_before,
            tokens_after: tokens_before,
            error: None,
            prepared_ago: None,
        }
    }

    /// The same report, ended by `error`.
    pub fn failed(mut self, error: CompactionError) -> Self {
        self.error = Some(error);
        self
    }

    /// The metric label of how it ended.
    pub fn outcome(&self) -> &'static str {
        match &self.error {
            _ if self.performed && self.steps.contains(&Tier::Summarize) => "summarized",
            _ if self.performed && self.steps.contains(&Tier::Trim) => "trimmed",
            _ if self.performed && self.steps.contains(&Tier::Microcompact) => "microcompacted",
            _ if self.performed => "snipped",
            Some(
                CompactionError::NothingToCompact { .. }
                | CompactionError::Busy
                | CompactionError::Paused { .. }
                | CompactionError::Off
                | CompactionError::NothingToHide
                | CompactionError::StrategyExhausted(_),
            ) => "skipped",
            _ => "failed",
        }
    }
}

/// Why a compaction did not (fully) happen. Nothing was pruned in any case.
#[derive(Debug, Clone, PartialEq)]
pub enum CompactionError {
    /// Every finished turn is in the kept raw tail, or the oldest waits for
    /// a tool result.
    NothingToCompact { raw_tail_turns: usize },
    /// Another compaction of the agent holds its turns (another replica).
    Busy,
    /// The agent's last compactions failed; automatic ones wait.
    Paused { failures: u32, resumes_in_secs: u64 },
    /// The summarizer gave no usable summary.
    Summarizer {
        message: String,
        consecutive_failures: u32,
        /// False when the summarizer was not asked at all (its endpoint's
        /// circuit was open).
        tried: bool,
    },
    /// Storage refused (a message without paths or OS errors).
    Storage(String),
    /// A bug (a panic) ended it.
    Unexpected,
    /// The strategy is `none` (the request's or the agent's): nothing is
    /// compacted.
    Off,
    /// `compact_tool_results` asked outside a size trigger found no old
    /// tool result to hide.
    NothingToHide,
    /// The prompt is still over the trigger after all the strategy may do
    /// (`compact_tool_results`: no old tool result left to hide).
    StrategyExhausted(Strategy),
}

impl fmt::Display for CompactionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NothingToCompact { raw_tail_turns } => write!(
                f,
                "nothing to compact: every finished turn is within the last {raw_tail_turns} turns, which are kept as they are, or the oldest waits for a tool result"
            ),
            Self::Busy => f.write_str(
                "another compaction of this agent is running (on another replica); this one did not start",
            ),
            Self::Paused {
                failures,
                resumes_in_secs,
            } => write!(
                f,
                "compaction paused: this agent's last {failures} compactions failed; automatic compaction resumes in {resumes_in_secs}s (a manual Compact tries at once)"
            ),
            Self::Summarizer {
                message,
                consecutive_failures,
                ..
            } => write!(
                f,
                "{message} (consecutive failures: {consecutive_failures}); nothing was pruned"
            ),
            Self::Storage(message) => f.write_str(message),
            Self::Unexpected => {
                f.write_str("the compaction failed unexpectedly; nothing was pruned")
            }
            Self::Off => f.write_str(
                "compaction is off: the strategy is none (the request's strategy, or else the agent's policy.strategy); nothing was compacted, and a request may name another strategy",
            ),
            Self::NothingToHide => f.write_str(
                "nothing to compact: no tool result older than the raw tail is left to hide, and the strategy compact_tool_results does nothing else",
            ),
            Self::StrategyExhausted(strategy) => write!(
                f,
                "the prompt is still over the compaction trigger and the strategy {strategy} has nothing more to do (old tool results are placeholders already; it summarizes and trims nothing)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_follow_what_ran_and_why_it_stopped() {
        let mut r = CompactionReport::new(Trigger::Estimate, 10);
        assert_eq!(r.outcome(), "failed");
        r.steps.push(Tier::Microcompact);
        r.performed = true;
        assert_eq!(r.outcome(), "microcompacted");
        r.steps.push(Tier::Summarize);
        assert_eq!(r.outcome(), "summarized");
        let skipped = CompactionReport::new(Trigger::Manual, 0)
            .failed(CompactionError::NothingToCompact { raw_tail_turns: 4 });
        assert_eq!(skipped.outcome(), "skipped");
        let busy = CompactionReport::new(Trigger::Estimate, 0).failed(CompactionError::Busy);
        assert_eq!(busy.outcome(), "skipped");
        assert!(
            skipped
                .error
                .unwrap()
                .to_string()
                .starts_with("nothing to compact")
        );
    }
}
