//! When a fact became true: the event time of the statement it came from,
//! not the time of the compaction that drew it out (DESIGN §15). A
//! summarizer answers with facts for a whole window and does not say
//! which message each came from, so the statement is the window's trace
//! that shares the most of the fact's words, rarer words weighing more
//! (a word in every trace of the window tells nothing). Linear in the
//! window's text: each trace's words are read once.

use std::collections::{HashMap, HashSet};

use crate::RawTrace;
use crate::TraceType;
use crate::compaction::words;
use crate::transcript::result_text;

/// Words too common to place a statement.
const STOP: &[&str] = &[
    "the",
    "and",
    "for",
    "that",
    "this",
    "with",
    "was",
    "are",
    "has",
    "have",
    "not",
    "but",
    "you",
    "your",
    "user",
    "assistant",
    "from",
    "they",
    "she",
    "his",
    "her",
    "its",
    "our",
    "who",
    "what",
    "when",
    "will",
    "would",
    "can",
    "about",
    "into",
];

/// The window's traces, each as the set of its telling words.
pub struct Statements {
    traces: Vec<(f64, HashSet<String>)>,
    /// In how many traces each word occurs.
    df: HashMap<String, usize>,
}

impl Statements {
    /// The statements of `traces` (a compaction's window): messages and
    /// tool results, with their event times.
    pub fn of(traces: &[&RawTrace]) -> Self {
        let mut df: HashMap<String, usize> = HashMap::new();
        let traces: Vec<(f64, HashSet<String>)> = traces
            .iter()
            .filter(|t| t.ts.is_finite())
            .map(|t| {
                let text = match t.trace_type {
                    TraceType::ToolResult => result_text(t),
                    _ => t.content.clone(),
                };
                let set: HashSet<String> = telling(&text).collect();
                for w in &set {
                    *df.entry(w.clone()).or_default() += 1;
                }
                (t.ts, set)
            })
            .collect();
        Self { traces, df }
    }

    /// The event time of the statement `fact` most likely came from; `None`
    /// when no trace shares a telling word with it. Ties go to the later
    /// statement (a fact restated is as true as of its last saying).
    pub fn time_of(&self, fact: &str) -> Option<f64> {
        let n = self.traces.len() as f64;
        let wanted: Vec<(String, f64)> = telling(fact)
            .collect::<HashSet<_>>()
            .into_iter()
            .filter_map(|w| {
                let df = *self.df.get(&w)? as f64;
                Some((w, (1.0 + n / df).ln()))
            })
            .collect();
        if wanted.is_empty() {
            return None;
        }
        let mut best: Option<(f64, f64)> = None;
        for (ts, set) in &self.traces {
            let score: f64 = wanted
                .iter()
                .filter(|(w, _)| set.contains(w))
                .map(|(_, weight)| weight)
                .sum();
            if score > 0.0 && best.is_none_or(|(s, t)| score > s || (score == s && *ts >= t)) {
                best = Some((score, *ts));
            }
        }
        best.map(|(_, ts)| ts)
    }
}

fn telling(text: &str) -> impl Iterator<Item = String> + '_ {
    words(text).filter(|w| w.chars().count() >= 3 && !STOP.contains(&w.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewEvent;
    use crate::turns::assign_all;

    #[test]
    fn a_fact_is_dated_by_the_message_that_said_it() {
        let mut traces = assign_all([
            NewEvent::user("I live in Lisbon and work as a nurse"),
            NewEvent::assistant("Lisbon is lovely. What do you need?"),
            NewEvent::user("I moved to Berlin last month"),
            NewEvent::assistant("Noted, you are in Berlin now."),
            NewEvent::user("What should I cook tonight?"),
        ]);
        for (i, t) in traces.iter_mut().enumerate() {
            t.ts = 1_000.0 + 10.0 * i as f64;
        }
        let refs: Vec<&RawTrace> = traces.iter().collect();
        let s = Statements::of(&refs);
        assert_eq!(s.time_of("User works as a nurse"), Some(1_000.0));
        // Said twice: as of the later saying.
        assert_eq!(s.time_of("The user lives in Berlin"), Some(1_030.0));
        assert_eq!(s.time_of("The user likes tea"), None);
        assert_eq!(s.time_of(""), None);
    }
}
