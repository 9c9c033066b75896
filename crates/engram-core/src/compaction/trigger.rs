//! When to compact: the prompt's size, the triggers, and the one decision.

use crate::budget::TokenBudget;

/// Why a compaction runs. The wire names (`as_str`) appear only in reports
/// and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// A size the provider reported passed the trigger at Ingest.
    TokenPressure,
    /// The client asked for it (`force_compaction`), e.g. after the
    /// provider refused a prompt as too long.
    Reactive,
    /// Our own count of the next prompt passes the trigger.
    Estimate,
    /// More finished turns are active than `policy.max_active_turns`.
    TurnCount,
    /// A `Compact` call.
    Manual,
    /// A user's conversation went quiet with turns not yet summarized
    /// (`users.summarize_idle_after_secs`).
    Idle,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TokenPressure => "token_pressure",
            Self::Reactive => "reactive",
            Self::Estimate => "estimate",
            Self::TurnCount => "turn_count",
            Self::Manual => "manual",
            Self::Idle => "idle",
        }
    }

    /// Triggers about the prompt's size: hiding old tool results (which
    /// shrinks the prompt but keeps every turn) may answer them.
    pub fn is_about_size(self) -> bool {
        matches!(self, Self::TokenPressure | Self::Estimate | Self::Reactive)
    }
}

/// The steps of a compaction, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Old messages that carry nothing for the model leave the prompt
    /// (empty assistant messages, a tool result repeating an earlier one).
    Snip,
    /// Old tool results become placeholders.
    Microcompact,
    /// Old turns are archived with no summary (the `trim` strategy).
    Trim,
    /// Old turns become an episodic summary and facts, and are archived.
    Summarize,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snip => "snip",
            Self::Microcompact => "microcompact",
            Self::Trim => "trim",
            Self::Summarize => "summarize",
        }
    }
}

/// The size of the prompt an agent would send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptSize {
    /// Our own count of the whole prompt.
    pub estimate: u32,
    /// The size the provider last reported, and our count of what was
    /// added since.
    pub reported: Option<(u32, u32)>,
}

impl PromptSize {
    /// The best guess: the provider's last report plus what came since, or
    /// our own count when there is no report.
    pub fn tokens(&self) -> u32 {
        self.reported
            .map_or(self.estimate, |(r, since)| r.saturating_add(since))
    }
}

/// What, besides the prompt's size, decides a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Signals {
    /// A reported size passed the trigger at Ingest.
    pub compaction_required: bool,
    /// The client asks for a compaction.
    pub force: bool,
    /// Active turns, the current one not counted.
    pub finished_turns: usize,
    /// `policy.max_active_turns` (0: no turn-count trigger).
    pub max_active_turns: usize,
}

/// The trigger a prompt of `size` under `budget` fires now, if any; the
/// first that applies, in the order of [`Trigger`].
pub fn decide(size: PromptSize, budget: &TokenBudget, signals: Signals) -> Option<Trigger> {
    if signals.compaction_required {
        Some(Trigger::TokenPressure)
    } else if signals.force {
        Some(Trigger::Reactive)
    } else if size.tokens() > budget.trigger_tokens {
        Some(Trigger::Estimate)
    } else if signals.max_active_turns > 0 && signals.finished_turns > signals.max_active_turns {
        Some(Trigger::TurnCount)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{BudgetPolicy, ModelLimits};

    fn budget() -> TokenBudget {
        TokenBudget::compute(
            ModelLimits {
                context_tokens: 10_000,
                max_output_tokens: 1_000,
            },
            None,
            BudgetPolicy {
                safety_margin_tokens: 0,
                compaction_ratio: 0.5,
            },
        )
    }

    #[test]
    fn the_reported_size_counts_before_our_estimate() {
        let size = PromptSize {
            estimate: 100,
            reported: Some((4_000, 200)),
        };
        assert_eq!(size.tokens(), 4_200);
        assert_eq!(
            PromptSize {
                estimate: 100,
                reported: None
            }
            .tokens(),
            100
        );
    }

    #[test]
    fn triggers_in_their_order() {
        let b = budget();
        let small = PromptSize {
            estimate: 10,
            reported: None,
        };
        let big = PromptSize {
            estimate: b.trigger_tokens + 1,
            reported: None,
        };
        let turns = Signals {
            finished_turns: 5,
            max_active_turns: 4,
            ..Signals::default()
        };
        assert_eq!(decide(small, &b, Signals::default()), None);
        assert_eq!(decide(small, &b, turns), Some(Trigger::TurnCount));
        assert_eq!(
            decide(
                small,
                &b,
                Signals {
                    max_active_turns: 0,
                    ..turns
                }
            ),
            None,
            "0 turns: off"
        );
        assert_eq!(decide(big, &b, turns), Some(Trigger::Estimate));
        let forced = Signals {
            force: true,
            ..turns
        };
        assert_eq!(decide(big, &b, forced), Some(Trigger::Reactive));
        let pressed = Signals {
            compaction_required: true,
            ..forced
        };
        assert_eq!(decide(big, &b, pressed), Some(Trigger::TokenPressure));
    }
}
