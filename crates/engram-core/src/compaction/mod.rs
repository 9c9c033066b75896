//! Compaction rules without I/O: which turns a summary may take, how the
//! snapshot reads, and how new facts merge into known ones.
//!
//! - [`select_window`]: whole turns older than the kept tail, oldest first,
//!   stopping before any turn with a call still waiting for its result (a
//!   summary never separates a call from its result). The current turn is
//!   never in the window.
//! - [`render_snapshot`]: the text that starts an epoch (DESIGN §1).
//! - [`carry`]: its carry-forward section, what the summaries in view do
//!   not hold.
//! - [`merge_facts`]: the same fact is never stored twice; a changed fact
//!   supersedes the old one, which is kept with `superseded_by`.
//! - [`trigger`]: the prompt's size ([`PromptSize`]), the [`Trigger`]s and
//!   [`decide`], which one fires now; the [`Tier`]s that answer it.
//! - [`plan`]: what a compaction commits (episodic item, facts, the new
//!   epoch's snapshot), decided without I/O.
//! - [`report`]: the [`CompactionReport`] of what a compaction did.
//! - [`log`]: the [`CompactionRecord`] an agent's compaction log keeps of it.
//! - [`strategy`]: what an agent's compactions may do ([`Strategy`]).

pub mod carry;
pub mod log;
pub mod merge;
pub mod plan;
pub mod report;
pub mod strategy;
pub mod trigger;
pub mod when;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::memory::{EpisodicItem, SemanticItem};
use crate::text::fold_whitespace;
use crate::transcript::result_text;
use crate::turns::turn_number;
use crate::{RawTrace, TraceType};

pub use log::CompactionRecord;
pub use merge::{
    FactMerge, FactUpdate, Named, Replacing, is_repeat, merge_facts, merge_summary, normalize,
    repeat_key,
};
pub(crate) use merge::{UPDATE_OVERLAP, words};
pub use report::{CompactionError, CompactionReport};
pub use strategy::{Strategy, UnknownStrategy};
pub use trigger::{PromptSize, Signals, Tier, Trigger, decide};

/// A summarizer's answer: what a compaction stores. Summarizers return it
/// (engram-llm) and the store commits it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub episodic_summary: String,
    pub tags: Vec<String>,
    pub salience: f32,
    /// New facts; [`merge_summary`] folds them into known ones.
    pub semantic_facts: Vec<NewFact>,
    /// Known facts the answer replaces, named by their handles.
    pub updates: Vec<FactUpdate>,
    /// Known facts the answer says are no longer true.
    pub invalidates: Vec<Named>,
    /// Handles the answer used that named no fact it was shown (ignored).
    pub unknown_handles: u32,
    /// Whether `semantic_facts` may replace known facts by their words.
    pub replacing: Replacing,
}

/// The turns a compaction may summarize.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// Turn ids, oldest first.
    pub turn_ids: Vec<String>,
    /// Indices (into the traces given) of every trace of those turns.
    pub trace_indices: Vec<usize>,
}

impl Window {
    pub fn is_empty(&self) -> bool {
        self.turn_ids.is_empty()
    }
}

/// Whole turns older than the last `keep_turns` turns before the current
/// (latest) one, oldest first, up to the first turn with an unanswered call.
/// The indices of the tool calls in `traces` that have no result yet. In
/// conversation order (turn, then seq; a late result lands in its call's
/// turn after it) a result answers the latest call of its id before it:
/// an id is reused once its call has a result.
fn pending_calls(traces: &[RawTrace]) -> HashSet<usize> {
    let mut order: Vec<usize> = (0..traces.len()).collect();
    order.sort_by_key(|&i| (turn_number(&traces[i].turn_id), traces[i].seq));
    let mut latest: HashMap<&str, usize> = HashMap::new();
    let mut pending = HashSet::new();
    for i in order {
        let t = &traces[i];
        let Some(id) = t.tool_call_id.as_deref() else {
            continue;
        };
        match t.trace_type {
            TraceType::ToolCall => {
                latest.insert(id, i);
                pending.insert(i);
            }
            TraceType::ToolResult => {
                if let Some(call) = latest.get(id) {
                    pending.remove(call);
                }
            }
            TraceType::User | TraceType::Assistant => {}
        }
    }
    pending
}

pub fn select_window(traces: &[RawTrace], keep_turns: usize) -> Window {
    let mut turns: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in traces.iter().enumerate() {
        if let Some(n) = turn_number(&t.turn_id) {
            turns.entry(n).or_default().push(i);
        }
    }
    // The current turn plus the kept tail stay.
    let candidates = turns.len().saturating_sub(keep_turns + 1);
    let pending = pending_calls(traces);
    let mut window = Window::default();
    for (_, indices) in turns.into_iter().take(candidates) {
        if indices.iter().any(|i| pending.contains(i)) {
            break;
        }
        window.turn_ids.push(traces[indices[0]].turn_id.clone());
        window.trace_indices.extend(indices);
    }
    window.trace_indices.sort_unstable();
    window
}

/// The snapshot text of DESIGN §1: memory bundle (the summaries in view,
/// the carry-forward section, the facts), then the recent turns.
pub fn render_snapshot(
    episodic: &[EpisodicItem],
    carried: &str,
    semantic: &[SemanticItem],
    tail: &[RawTrace],
) -> String {
    let mut out = String::from("[MEMORY:EPISODIC]\n");
    for (i, e) in episodic.iter().enumerate() {
        out.push_str(&format!("{}) {}\n", i + 1, fold_whitespace(&e.summary)));
    }
    out.push_str(carried);
    out.push_str("[MEMORY:SEMANTIC]\n");
    for f in semantic.iter().filter(|f| f.is_live()) {
        out.push_str(&fact_line(f));
    }
    out.push_str("[RECENT TURNS]\n");
    out.push_str(&render_turns(tail));
    out
}

/// A current fact as the snapshot lists it, on one line with the date it
/// became true: `- (since 2026-10-03) Lives in Berlin`.
pub fn fact_line(f: &SemanticItem) -> String {
    match crate::dates::date(f.valid_since()) {
        Some(date) => format!("- (since {date}) {}\n", fold_whitespace(&f.fact)),
        None => format!("- {}\n", fold_whitespace(&f.fact)),
    }
}

/// `snapshot` with its facts section showing `facts` now (a client
/// changed one, or one expired): the section's lines replaced, or a
/// section added at the end when the snapshot has none (a conversation
/// that has not compacted yet has a snapshot of its facts only). Nothing
/// else changes, so the rest of the prompt's prefix stays as it was.
pub fn with_facts(snapshot: Option<&str>, facts: &[SemanticItem]) -> Option<String> {
    const HEADER: &str = "[MEMORY:SEMANTIC]";
    let lines: String = facts.iter().map(fact_line).collect();
    let Some(snapshot) = snapshot else {
        return (!facts.is_empty()).then(|| format!("{HEADER}\n{lines}"));
    };
    // The header is a line of its own; the section's lines all start with
    // "- " (a fact is folded onto one line), so it ends at the first line
    // that does not.
    let mut at = 0;
    let start = loop {
        let Some(found) = snapshot[at..].find(HEADER) else {
            break None;
        };
        let i = at + found;
        let whole_line = (i == 0 || snapshot.as_bytes()[i - 1] == b'\n')
            && snapshot[i + HEADER.len()..].starts_with('\n');
        if whole_line {
            break Some(i + HEADER.len() + 1);
        }
        at = i + HEADER.len();
    };
    let Some(start) = start else {
        if facts.is_empty() {
            return Some(snapshot.to_owned());
        }
        let sep = if snapshot.is_empty() || snapshot.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        return Some(format!("{snapshot}{sep}{HEADER}\n{lines}"));
    };
    let mut end = start;
    while snapshot[end..].starts_with("- ") {
        end += snapshot[end..]
            .find('\n')
            .map_or(snapshot.len() - end, |n| n + 1);
    }
    Some(format!("{}{lines}{}", &snapshot[..start], &snapshot[end..]))
}

/// Turns as text, one line per event under `Turn N:` (the snapshot's raw
/// tail, and what a summarizer is shown), in turn and seq order.
pub fn render_turns(traces: &[RawTrace]) -> String {
    let mut out = String::new();
    let mut current = None;
    let mut ordered: Vec<&RawTrace> = traces.iter().collect();
    ordered.sort_by_key(|t| (turn_number(&t.turn_id), t.seq));
    for t in ordered {
        if current != Some(t.turn_id.as_str()) {
            current = Some(t.turn_id.as_str());
            let n = turn_number(&t.turn_id).map_or_else(|| t.turn_id.clone(), |n| n.to_string());
            out.push_str(&format!("Turn {n}:\n"));
        }
        // "User (Caroline): …" where the client named who spoke.
        let who = |role: &str| match t.name.as_deref().map(str::trim) {
            Some(name) if !name.is_empty() => format!("{role} ({})", fold_whitespace(name)),
            _ => role.to_owned(),
        };
        let line = match t.trace_type {
            TraceType::User => format!("{}: {}", who("User"), fold_whitespace(&t.content)),
            TraceType::Assistant => {
                format!("{}: {}", who("Assistant"), fold_whitespace(&t.content))
            }
            TraceType::ToolCall => format!(
                "Tool call: {}({})",
                t.tool_name.as_deref().unwrap_or("tool"),
                t.tool_args
                    .as_ref()
                    .map(|a| serde_json::Value::Object(a.clone()).to_string())
                    .unwrap_or_default()
            ),
            TraceType::ToolResult => format!("Tool result: {}", fold_whitespace(&result_text(t))),
        };
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A fact a summarizer proposed.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFact {
    pub fact: String,
    pub tags: Vec<String>,
    pub confidence: f32,
    pub salience: f32,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::NewEvent;
    use crate::memory::Provenance;
    use crate::turns::assign_all;

    fn conversation() -> Vec<RawTrace> {
        assign_all([
            NewEvent::user("t1"),
            NewEvent::tool_call("a", "f", json!({})),
            NewEvent::user("t2"),
            NewEvent::tool_result("a", json!("late")),
            NewEvent::user("t3"),
            NewEvent::assistant("a3"),
            NewEvent::user("t4"),
            NewEvent::tool_call("p", "slow", json!({})),
            NewEvent::user("t5"),
            NewEvent::user("t6"),
            NewEvent::user("t7"),
        ])
    }

    #[test]
    fn the_window_takes_whole_old_turns_and_stops_at_a_pending_call() {
        let traces = conversation();
        let w = select_window(&traces, 1);
        // Turns 6 (tail) and 7 (current) stay; turn 4 waits for "p".
        assert_eq!(w.turn_ids, ["turn_0001", "turn_0002", "turn_0003"]);
        let contents: Vec<_> = w
            .trace_indices
            .iter()
            .map(|&i| traces[i].turn_id.as_str())
            .collect();
        assert_eq!(
            contents.iter().filter(|t| **t == "turn_0001").count(),
            3,
            "the late result goes with its call"
        );
        assert!(select_window(&traces, 10).is_empty());
        assert!(select_window(&[], 0).is_empty());
        let all_answered = assign_all([
            NewEvent::user("1"),
            NewEvent::user("2"),
            NewEvent::user("3"),
        ]);
        assert_eq!(
            select_window(&all_answered, 0).turn_ids,
            ["turn_0001", "turn_0002"],
            "never the current turn"
        );
    }

    #[test]
    fn a_reused_call_id_waiting_in_a_later_turn_stops_the_window_there() {
        let traces = assign_all([
            NewEvent::user("1"),
            NewEvent::tool_call("call_1", "f", json!({})),
            NewEvent::tool_result("call_1", json!(1)),
            NewEvent::user("2"),
            NewEvent::tool_call("call_1", "f", json!({})),
            NewEvent::user("3"),
            NewEvent::user("4"),
        ]);
        // Turn 2's call_1 waits, although turn 1's call_1 has a result.
        assert_eq!(select_window(&traces, 0).turn_ids, ["turn_0001"]);
    }

    #[test]
    fn the_snapshot_reads_as_the_design_shows() {
        let tail = assign_all([
            NewEvent::user("weather?"),
            NewEvent::tool_call("c", "weather", json!({"city": "Oslo"})),
            NewEvent::tool_result("c", json!("3 degrees")),
            NewEvent::assistant("It is\n3 degrees."),
        ]);
        let episodic = [EpisodicItem {
            id: "e".into(),
            ts: 0.0,
            turn_ids: vec![],
            summary: "Talked about travel.".into(),
            tags: vec![],
            salience: 0.5,
            source: Provenance::default(),
            rewriting: false,
            carrying: Default::default(),
        }];
        let semantic = [SemanticItem::new("f", "Lives in Oslo")];
        assert_eq!(
            render_snapshot(&episodic, "", &semantic, &tail),
            "[MEMORY:EPISODIC]\n1) Talked about travel.\n[MEMORY:SEMANTIC]\n- Lives in Oslo\n[RECENT TURNS]\nTurn 1:\n  User: weather?\n  Tool call: weather({\"city\":\"Oslo\"})\n  Tool result: 3 degrees\n  Assistant: It is 3 degrees.\n"
        );
    }

    #[test]
    fn a_snapshots_facts_are_replaced_in_place() {
        let facts = |texts: &[&str]| -> Vec<SemanticItem> {
            texts.iter().map(|t| SemanticItem::new("f", *t)).collect()
        };
        let snapshot = render_snapshot(&[], "", &facts(&["Lives in Oslo", "Likes tea"]), &[]);
        let now = with_facts(Some(&snapshot), &facts(&["Lives in\nBerlin"])).unwrap();
        assert_eq!(
            now,
            "[MEMORY:EPISODIC]\n[MEMORY:SEMANTIC]\n- Lives in Berlin\n[RECENT TURNS]\n"
        );
        // The same facts give the same bytes.
        let same = facts(&["Lives in Oslo", "Likes tea"]);
        assert_eq!(with_facts(Some(&snapshot), &same).unwrap(), snapshot);
        // No snapshot: the facts alone; none, nothing.
        assert_eq!(
            with_facts(None, &facts(&["Likes tea"])).unwrap(),
            "[MEMORY:SEMANTIC]\n- Likes tea\n"
        );
        assert_eq!(with_facts(None, &[]), None);
        // A summary that quotes the header is not the section.
        let quoting = "[MEMORY:PREVIOUS CONVERSATION]\nsaid [MEMORY:SEMANTIC]\nhi";
        assert_eq!(
            with_facts(Some(quoting), &facts(&["Likes tea"])).unwrap(),
            format!("{quoting}\n[MEMORY:SEMANTIC]\n- Likes tea\n")
        );
    }

    #[test]
    fn turns_name_who_spoke_where_the_client_said() {
        let mut t = assign_all([
            NewEvent::user("hi"),
            NewEvent::assistant("hello"),
            NewEvent::user("and me"),
        ]);
        t[0].name = Some("Caroline".into());
        t[1].name = Some(" Mel\n ".into());
        t[2].name = Some("  ".into());
        assert_eq!(
            render_turns(&t),
            "Turn 1:\n  User (Caroline): hi\n  Assistant (Mel): hello\nTurn 2:\n  User: and me\n"
        );
    }

    proptest! {
        #[test]
        fn windows_hold_whole_turns_and_whole_tool_pairs(
            traces in crate::transcript::tests::conversations(),
            keep in 0usize..5,
        ) {
            let w = select_window(&traces, keep);
            let in_window: HashSet<usize> = w.trace_indices.iter().copied().collect();
            let turns: HashSet<&str> = w.turn_ids.iter().map(String::as_str).collect();
            for (i, t) in traces.iter().enumerate() {
                prop_assert_eq!(in_window.contains(&i), turns.contains(t.turn_id.as_str()), "whole turns only");
            }
            let calls: HashSet<&str> = w.trace_indices.iter().filter(|&&i| traces[i].trace_type == TraceType::ToolCall).filter_map(|&i| traces[i].tool_call_id.as_deref()).collect();
            let results: HashSet<&str> = w.trace_indices.iter().filter(|&&i| traces[i].trace_type == TraceType::ToolResult).filter_map(|&i| traces[i].tool_call_id.as_deref()).collect();
            prop_assert_eq!(calls, results, "every call with its result");
            let mut all: Vec<u32> = traces.iter().filter_map(|t| turn_number(&t.turn_id)).collect();
            all.sort_unstable();
            all.dedup();
            for kept in all.iter().rev().take(keep + 1) {
                prop_assert!(!w.turn_ids.contains(&crate::turns::turn_id(*kept)), "tail and current turn kept");
            }
        }
    }
}
