//! The embedded summarizer: no model, no network, same input → same output.
//!
//! Per turn it keeps the user's request and the assistant's final answer
//! (trimmed) and the tools used; facts are the user's sentences that state a
//! preference, identity, constraint or decision ("I prefer …", "my name is
//! …", "always …", "we decided …"). Everything it writes is tagged
//! [`EXTRACTIVE_TAG`](crate::EXTRACTIVE_TAG) so readers know no model wrote it.

use std::collections::{BTreeMap, HashSet};

use engram_core::compaction::normalize;
use engram_core::text::{fold_whitespace, shorten};
use engram_core::turns::turn_number;
use engram_core::{RawTrace, TraceType};

use crate::{EXTRACTIVE_TAG, NewFact, Summarizer, Summary, SummaryFuture, SummaryRequest};

/// Longest quote of a request or answer, in characters.
const QUOTE_CHARS: usize = 160;
/// Longest fact, in characters.
const FACT_CHARS: usize = 300;

/// Phrases that mark a sentence as a durable fact about the user or the work.
const FACT_MARKERS: &[&str] = &[
    "i prefer",
    "i like",
    "i love",
    "i hate",
    "i dislike",
    "i don't like",
    "i do not like",
    "i want",
    "i need",
    "my name is",
    "call me",
    "i am ",
    "i'm ",
    "i work",
    "i live",
    "remember that",
    "remember:",
    "always ",
    "never ",
    "we decided",
    "i decided",
    "let's use",
    "we will use",
    "we'll use",
    "please use",
    "don't use",
    "do not use",
    "must ",
    "should always",
];

/// The embedded extractive summarizer.
#[derive(Debug, Clone, Default)]
pub struct Extractive;

impl Summarizer for Extractive {
    fn name(&self) -> String {
        EXTRACTIVE_TAG.to_owned()
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        let summary = summarize(request);
        Box::pin(async move { Ok(summary) })
    }
}

/// The synchronous core, for callers without a runtime.
pub fn summarize(request: SummaryRequest<'_>) -> Summary {
    let mut turns: BTreeMap<u32, Vec<&RawTrace>> = BTreeMap::new();
    for trace in request.traces {
        turns
            .entry(turn_number(&trace.turn_id).unwrap_or(0))
            .or_default()
            .push(trace);
    }
    let mut lines = vec![];
    if let Some(focus) = request.focus.map(str::trim).filter(|f| !f.is_empty()) {
        lines.push(format!("Focus: {}", quote(focus)));
    }
    for (number, traces) in &turns {
        lines.push(turn_line(*number, traces));
    }

    let mut seen: HashSet<String> = request
        .known_facts
        .iter()
        .map(|f| normalize(&f.fact))
        .collect();
    let mut facts = vec![];
    for trace in request
        .traces
        .iter()
        .filter(|t| t.trace_type == TraceType::User)
    {
        for sentence in sentences(&trace.content) {
            let lower = format!("{} ", sentence.to_lowercase());
            if !FACT_MARKERS
                .iter()
                .any(|m| lower.starts_with(m) || lower.contains(&format!(" {m}")))
            {
                continue;
            }
            let fact = shorten(&sentence, FACT_CHARS);
            if seen.insert(normalize(&fact)) {
                facts.push(NewFact {
                    fact,
                    tags: vec![EXTRACTIVE_TAG.to_owned()],
                    confidence: 0.5,
                    salience: 0.6,
                });
            }
        }
    }
    Summary {
        episodic_summary: lines.join("\n"),
        tags: vec![EXTRACTIVE_TAG.to_owned()],
        salience: 0.5,
        semantic_facts: facts,
    }
}

fn turn_line(number: u32, traces: &[&RawTrace]) -> String {
    let mut ordered = traces.to_vec();
    ordered.sort_by_key(|t| t.seq);
    let asked = ordered
        .iter()
        .find(|t| t.trace_type == TraceType::User && !t.content.trim().is_empty())
        .map(|t| quote(&t.content));
    let answered = ordered
        .iter()
        .rev()
        .find(|t| t.trace_type == TraceType::Assistant && !t.content.trim().is_empty())
        .map(|t| quote(&t.content));
    let mut tools: BTreeMap<&str, usize> = BTreeMap::new();
    for t in ordered
        .iter()
        .filter(|t| t.trace_type == TraceType::ToolCall)
    {
        *tools
            .entry(t.tool_name.as_deref().unwrap_or("tool"))
            .or_default() += 1;
    }
    let errors = ordered
        .iter()
        .filter(|t| {
            t.trace_type == TraceType::ToolResult
                && t.tool_error.as_deref().is_some_and(|e| !e.is_empty())
        })
        .count();
    let mut parts = vec![];
    if let Some(a) = asked {
        parts.push(format!("user asked {a}"));
    }
    if !tools.is_empty() {
        let list: Vec<String> = tools
            .iter()
            .map(|(name, n)| {
                if *n > 1 {
                    format!("{name} x{n}")
                } else {
                    (*name).to_owned()
                }
            })
            .collect();
        let failed = if errors > 0 {
            format!(" ({errors} failed)")
        } else {
            String::new()
        };
        parts.push(format!("tools: {}{failed}", list.join(", ")));
    }
    if let Some(a) = answered {
        parts.push(format!("assistant answered {a}"));
    }
    if parts.is_empty() {
        parts.push("no text".to_owned());
    }
    format!("Turn {number}: {}.", parts.join("; "))
}

/// One line, trimmed to [`QUOTE_CHARS`], in double quotes.
fn quote(text: &str) -> String {
    let flat = fold_whitespace(text);
    format!("\"{}\"", shorten(&flat, QUOTE_CHARS))
}

fn sentences(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(['.', '!', '?', '\n', ';'])
        .map(fold_whitespace)
        .filter(|s| s.len() >= 8)
}

#[cfg(test)]
mod tests {
    use engram_core::NewEvent;
    use engram_core::memory::SemanticItem;
    use engram_core::turns::assign_all;
    use serde_json::json;

    use super::*;

    fn traces(events: Vec<NewEvent>) -> Vec<RawTrace> {
        assign_all(events)
    }

    fn conversation() -> Vec<RawTrace> {
        traces(vec![
            NewEvent::user("Hi! My name is Ada. I prefer answers in metric units."),
            NewEvent::tool_call("c1", "weather", json!({"city": "Oslo"})),
            NewEvent::tool_result("c1", json!({"temp_c": 3})),
            NewEvent::assistant("It is 3 °C in Oslo."),
            NewEvent::user("We decided to deploy on Fridays never. Thanks"),
            NewEvent::assistant("Noted."),
        ])
    }

    #[test]
    fn summarizes_each_turn_deterministically() {
        let t = conversation();
        let req = SummaryRequest {
            traces: &t,
            known_facts: &[],
            focus: None,
        };
        let a = summarize(req);
        assert_eq!(a, summarize(req), "same input, same output");
        assert_eq!(
            a.episodic_summary,
            "Turn 1: user asked \"Hi! My name is Ada. I prefer answers in metric units.\"; tools: weather; assistant answered \"It is 3 °C in Oslo.\".\n\
             Turn 2: user asked \"We decided to deploy on Fridays never. Thanks\"; assistant answered \"Noted.\"."
        );
        assert_eq!(a.tags, [EXTRACTIVE_TAG]);
    }

    #[test]
    fn facts_are_marked_sentences_new_to_memory() {
        let t = conversation();
        let known = [SemanticItem::new("f", "my name is ADA")];
        let s = summarize(SummaryRequest {
            traces: &t,
            known_facts: &known,
            focus: Some("deploys"),
        });
        let facts: Vec<_> = s.semantic_facts.iter().map(|f| f.fact.as_str()).collect();
        assert_eq!(
            facts,
            [
                "I prefer answers in metric units",
                "We decided to deploy on Fridays never"
            ]
        );
        assert!(s.semantic_facts.iter().all(|f| f.tags == [EXTRACTIVE_TAG]));
        assert!(s.episodic_summary.starts_with("Focus: \"deploys\"\n"));
    }

    #[test]
    fn long_text_is_trimmed_on_char_boundaries() {
        let t = traces(vec![NewEvent::user("é".repeat(500))]);
        let s = summarize(SummaryRequest {
            traces: &t,
            known_facts: &[],
            focus: None,
        });
        assert!(
            s.episodic_summary.chars().count() < 200,
            "{}",
            s.episodic_summary
        );
        assert!(s.episodic_summary.contains('…'));
    }

    #[tokio::test]
    async fn serves_through_the_trait() {
        let t = conversation();
        let summarizer: Box<dyn Summarizer> = Box::new(Extractive);
        let s = summarizer
            .summarize(SummaryRequest {
                traces: &t,
                known_facts: &[],
                focus: None,
            })
            .await
            .unwrap();
        assert_eq!(summarizer.name(), "extractive");
        assert!(!s.episodic_summary.is_empty());
    }
}
