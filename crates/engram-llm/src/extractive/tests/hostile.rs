//! Generated hostile input: the summarizer never panics and its output
//! stays bounded.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// Words and characters a hostile client might send: combining marks,
/// right-to-left and zero-width characters, letters whose lowercase is
/// longer (İ), emoji, lone punctuation, fences, the triggers themselves.
const PIECES: &[&str] = &[
    "my",
    "My",
    "I'm",
    "I",
    "is",
    "called",
    "dog",
    "Biscuit",
    "if",
    "?",
    ".",
    "!",
    "…",
    ";",
    ":",
    ",",
    " ",
    "  ",
    "\n",
    "\r\n",
    "\t",
    "```",
    "- ",
    "'s",
    "’",
    "İ",
    "ß",
    "ﬃ",
    "e\u{301}",
    "\u{200b}",
    "\u{200f}",
    "\u{202e}",
    "\u{fe0f}",
    "👩‍👩‍👧",
    "🇵🇹",
    "\u{0}",
    "\u{7f}",
    "ǅ",
    "Σ",
    "ς",
    "Dr.",
    "e.g.",
    "3.5",
    "14",
    "September",
    "Lisbon",
    "love",
    "hate",
    "we",
    "decided",
    "always",
    "never",
    "Turn 1:",
    "\"",
    "(",
    ")",
    "tools:",
    "a",
    "the",
    "thanks",
    "ok",
    "'d",
    "I've",
    "have",
    "never",
    "remember:",
    "and",
    "our",
    "…",
    "...",
    "?!",
    "x",
];

fn hostile_text(rng: &mut StdRng) -> String {
    let pieces = rng.random_range(0..60);
    let mut s = String::new();
    for _ in 0..pieces {
        if rng.random_bool(0.1) {
            // Any scalar value at all.
            s.push(rng.random::<char>());
        } else {
            s.push_str(PIECES[rng.random_range(0..PIECES.len())]);
            if rng.random_bool(0.6) {
                s.push(' ');
            }
        }
    }
    s
}

/// A seeded stand-in for a property test (the crate has no proptest):
/// 1,000 generated windows of hostile text, roles, names and tools. The
/// traces are written after assignment, so they hold what validation
/// would refuse too (control characters in tool names, odd turn ids).
#[test]
fn hostile_windows_never_panic_and_stay_bounded() {
    let mut rng = StdRng::seed_from_u64(29);
    for case in 0..1000 {
        let mut events = vec![];
        for call in 0..rng.random_range(0..12) {
            match rng.random_range(0..5) {
                0 | 1 => events.push(NewEvent::user("u")),
                2 | 3 => events.push(NewEvent::assistant("a")),
                _ => {
                    let id = format!("c{call}");
                    events.push(NewEvent::tool_call(&id, "t", json!({})));
                    events.push(NewEvent::tool_result(&id, json!("r")));
                }
            }
        }
        let mut t = traces(events);
        for trace in &mut t {
            trace.content = hostile_text(&mut rng);
            if trace.trace_type == TraceType::ToolCall {
                trace.tool_name = Some(hostile_text(&mut rng));
            }
            if trace.trace_type == TraceType::ToolResult && rng.random_bool(0.3) {
                trace.tool_error = Some(hostile_text(&mut rng));
            }
            if rng.random_bool(0.2) {
                trace.name = Some(hostile_text(&mut rng));
            }
            if rng.random_bool(0.05) {
                trace.turn_id = hostile_text(&mut rng);
            }
        }
        let focus = rng.random_bool(0.3).then(|| hostile_text(&mut rng));
        let known = [SemanticItem::new("k", hostile_text(&mut rng))];
        let request = SummaryRequest {
            traces: &t,
            known_facts: &known,
            focus: focus.as_deref(),
            working_memory: None,
        };
        let s = summarize(request);
        assert_eq!(s, summarize(request), "case {case}: deterministic");
        let text_chars: usize = t
            .iter()
            .filter(|t| matches!(t.trace_type, TraceType::User | TraceType::Assistant))
            .map(|t| t.content.chars().count())
            .sum();
        let focus_line = focus.map_or(0, |_| QUOTE_CHARS + 10);
        // The fallback line of a window with nothing to quote lists tools.
        let fallback = 200 * t.len();
        assert!(
            s.episodic_summary.chars().count() <= budget(text_chars) + focus_line + fallback,
            "case {case}: {}",
            s.episodic_summary
        );
        assert!(!s.episodic_summary.is_empty());
        for f in &s.semantic_facts {
            assert!(f.fact.chars().count() <= FACT_CHARS, "case {case}");
            assert!(!normalize(&f.fact).is_empty(), "case {case}");
        }
    }
}

#[test]
fn huge_input_stays_linear_and_bounded() {
    // One message of 2 MB without punctuation, one of 20,000 facts, and
    // 2 MB of one character (no sentence end at all).
    let blob = "word ".repeat(400_000);
    let many: String = (0..20_000)
        .map(|i| format!("My dog number {i} is called Biscuit. "))
        .collect();
    let run_of_one = "é".repeat(1_000_000);
    // Written after assignment: Ingest would refuse events this large.
    let mut t = traces(vec![
        NewEvent::user("a"),
        NewEvent::assistant("Done."),
        NewEvent::user("b"),
        NewEvent::assistant("c"),
    ]);
    t[0].content = blob;
    t[2].content = many;
    t[3].content = run_of_one;
    let started = std::time::Instant::now();
    let s = run(&t);
    let took = started.elapsed();
    assert_eq!(s.semantic_facts.len(), MAX_FACTS);
    assert_eq!(
        s.semantic_facts.last().unwrap().fact,
        "My dog number 19999 is called Biscuit",
        "the latest are kept"
    );
    assert!(s.episodic_summary.chars().count() <= MAX_BUDGET);
    // Generous (a debug build takes ~4 s, a release build ~0.6 s on a busy
    // 2-core VM): quadratic work on this input would take hours.
    assert!(took.as_secs() < 30, "{took:?}");
}
