//! What recall leaves out, and the report of it: the floor under which a
//! memory is not recalled, and how many each rule left out.

/// The score under which a memory is not recalled: `min_score`, or
/// `relative` × the best score of the same question when that is higher.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Floor {
    pub min_score: f32,
    pub relative: f32,
}

impl Floor {
    pub fn under(&self, best: f32) -> f32 {
        self.min_score.max(self.relative * best)
    }
}

/// What recall ranked for a prompt and what it left out, and why.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    /// Memories ranked for the current user message.
    pub ranked: u32,
    /// The best score among them, and the floor it set.
    pub best_score: f32,
    pub floor: f32,
    /// Left out for scoring under the floor.
    pub below_floor: u32,
    /// Left out as already in the prompt: the snapshot shows it, or it is
    /// a neighbour of a better entry.
    pub already_shown: u32,
    /// Left out for want of room (`recall.max_tokens`, the input budget).
    pub over_budget: u32,
    /// Left out as questions nobody answered: a message that only asks,
    /// with no answer after it, holds nothing to remember (an earlier
    /// conversation's question would push out what answers this one).
    pub unanswered: u32,
}

impl Report {
    /// This report for a block that holds `shown` of the entries.
    pub fn showing(self, entries: usize, shown: usize) -> Self {
        Self {
            over_budget: entries.saturating_sub(shown) as u32,
            ..self
        }
    }
}
