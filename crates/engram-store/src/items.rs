//! Search items as an index holds them: what of a trace, a summary or a
//! fact is searched by its words and embedded for its meaning. Both
//! backends index the same items.

use engram_core::memory::{EpisodicItem, Provenance, SemanticItem};
use engram_core::text::cut;
use engram_core::transcript::result_text;
use engram_core::turns::turn_number;
use engram_core::{RawTrace, TraceType};
use engram_index::{Item, Kind};
use serde_json::Value;

/// Text given to the embedding model per item or query: models read a few
/// hundred tokens (all-MiniLM-L6-v2: 256), so more is tokenized for nothing.
pub const MAX_EMBEDDED_CHARS: usize = 2048;

/// Text of one item that is indexed; the rest of a huge tool result adds
/// little to ranking and much to the index.
const MAX_INDEXED_CHARS: usize = 32 * 1024;

/// An item as the embedding queue keeps it: its text capped, no body.
pub fn for_embedding(mut item: Item) -> Item {
    item.text = cut(item.full_text(), MAX_EMBEDDED_CHARS);
    item.name = None;
    item.body = String::new();
    item
}

/// Characters of the trace before it that a trace is read after at most:
/// the end of its text, what a reply answers.
pub const CONTEXT_CHARS: usize = 300;

/// What a trace is read after when it is embedded: the end of `before`,
/// the full text (name and words) of the trace before it in its sitting.
/// A message is seldom understood alone: "Super good! Rich and creamy."
/// answers "How was the coconut ice cream?", and its vector should say so,
/// as its words gain their neighbours' share in the word ranking. The
/// model reads both and averages the trace's own tokens only
/// (`Embedder::embed_after`), so a reply that says nothing of its own
/// ("That sounds great!") does not take the meaning of what it answers
/// and compete with it (LoCoMo's dev half and the paraphrase test:
/// docs/BENCHMARKS.md). Memories stand alone.
pub fn context_of(before: &str) -> String {
    let start = before
        .char_indices()
        .rev()
        .nth(CONTEXT_CHARS - 1)
        .map_or(0, |(i, _)| i);
    before[start..].to_owned()
}

/// How a store tags the vectors it keeps: the model's name, and that
/// traces are read in context ([`context_of`]), so that vectors an
/// earlier version embedded otherwise are dropped and embedded again, as
/// another model's are.
pub fn vector_model(model: &str) -> String {
    format!("{model}{IN_CONTEXT}")
}

/// The model's name from a tag [`vector_model`] made (what a client is
/// told its vectors are of).
pub fn model_of_vectors(tag: &str) -> &str {
    tag.strip_suffix(IN_CONTEXT).unwrap_or(tag)
}

const IN_CONTEXT: &str = "; traces in context";

/// The conversation order of a trace: its turn, then its seq.
pub fn trace_order(t: &RawTrace) -> u64 {
    engram_index::order(turn_number(&t.turn_id).unwrap_or(0), t.seq)
}

/// Those of `traces` (new, as written) placed before a trace the agent
/// held, whose latest turn was `latest_turn`, or one written before them:
/// a late tool result, placed in its call's turn. The trace after such a
/// place was embedded after another text ([`context_of`]) and is embedded
/// again. Every other trace is placed after all the agent holds.
pub fn placed_before(latest_turn: u32, traces: &[RawTrace]) -> Vec<&RawTrace> {
    let mut latest = latest_turn;
    traces
        .iter()
        .filter(|t| {
            let turn = turn_number(&t.turn_id).unwrap_or(0);
            let before = turn < latest;
            latest = latest.max(turn);
            before
        })
        .collect()
}

pub fn trace_type_code(t: TraceType) -> u8 {
    match t {
        TraceType::User => 1,
        TraceType::Assistant => 2,
        TraceType::ToolCall => 3,
        TraceType::ToolResult => 4,
    }
}

/// The words of a trace: what was said (a tool's result and error, as the
/// transcript shows them), and for tools their name and arguments.
fn trace_text(t: &RawTrace) -> String {
    let mut text = result_text(t);
    let mut add = |s: &str| {
        if !s.is_empty() {
            text.push('\n');
            text.push_str(s);
        }
    };
    add(t.tool_name.as_deref().unwrap_or_default());
    if let Some(args) = &t.tool_args {
        add(&Value::Object(args.clone()).to_string());
    }
    capped(text)
}

fn capped(text: String) -> String {
    cut(text, MAX_INDEXED_CHARS)
}

pub fn trace_item(t: &RawTrace) -> Item {
    let body = t.to_line();
    Item {
        key: t.id.clone(),
        kind: Kind::Trace,
        trace_type: trace_type_code(t.trace_type),
        order: trace_order(t),
        ts: t.ts,
        text: trace_text(t),
        name: t.name.clone(),
        body: String::from_utf8(body).expect("JSON is UTF-8"),
    }
}

/// The words an item is searched by (its speaker, what it says, a
/// memory's tags), from its stored body: a trace's JSON line, a summary's
/// or a fact's JSON. `None` for a body that does not parse as `kind`.
pub fn searched_text(kind: Kind, body: &str) -> Option<String> {
    let (text, name) = match kind {
        Kind::Trace => {
            let t: RawTrace = serde_json::from_str(body).ok()?;
            (trace_text(&t), t.name)
        }
        Kind::Episodic => {
            let e: EpisodicItem = serde_json::from_str(body).ok()?;
            (memory_words(&e.summary, &e.tags), None)
        }
        Kind::Semantic => {
            let f: SemanticItem = serde_json::from_str(body).ok()?;
            (memory_words(&f.fact, &f.tags), None)
        }
    };
    Some(match name {
        Some(name) => format!("{name}: {text}"),
        None => text,
    })
}

/// A memory's words: its text, then its tags ("devops", "travel").
fn memory_words(text: &str, tags: &[String]) -> String {
    let mut words = text.to_owned();
    if !tags.is_empty() {
        words = format!("{words}\n{}", tags.join(" "));
    }
    capped(words)
}

fn first_turn(turn_ids: &[String]) -> u64 {
    let turn = turn_ids
        .iter()
        .filter_map(|t| turn_number(t))
        .min()
        .unwrap_or(0);
    engram_index::order(turn, 0)
}

/// A summary or fact as the index holds it: its words and tags, placed at
/// its first turn, dated when what it stands for was said (the last
/// summarized trace's event time, or for items without provenance when it
/// was written).
fn memory_item(
    kind: Kind,
    (id, ts, turn_ids, source): (&str, f64, &[String], &Provenance),
    (text, tags): (&str, &[String]),
    body: String,
) -> Item {
    Item {
        key: id.to_owned(),
        kind,
        trace_type: 0,
        order: first_turn(turn_ids),
        ts: source.to_ts.unwrap_or(ts),
        text: memory_words(text, tags),
        name: None,
        body,
    }
}

pub fn episodic_item(e: &EpisodicItem) -> Item {
    memory_item(
        Kind::Episodic,
        (&e.id, e.ts, &e.turn_ids, &e.source),
        (&e.summary, &e.tags),
        serde_json::to_string(e).expect("a summary serializes"),
    )
}

pub fn semantic_item(f: &SemanticItem) -> Item {
    memory_item(
        Kind::Semantic,
        (&f.id, f.ts, &f.turn_ids, &f.source),
        (&f.fact, &f.tags),
        serde_json::to_string(f).expect("a fact serializes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::NewEvent;

    /// A backend that reads an item's words back from its stored body
    /// finds those the index was given.
    #[test]
    fn the_searched_text_of_a_body_is_the_items_own() {
        let named = NewEvent {
            name: Some("Caroline".into()),
            ..NewEvent::user("I adopted a puppy")
        };
        let call = NewEvent::tool_call("c1", "weather", serde_json::json!({"city": "Lisbon"}));
        for trace in engram_core::turns::assign_all([named, call]) {
            let item = trace_item(&trace);
            let text = searched_text(Kind::Trace, &item.body);
            assert_eq!(text.as_deref(), Some(item.full_text().as_str()));
        }
        let fact = SemanticItem {
            id: "f1".into(),
            ts: 0.0,
            fact: "Caroline has a puppy".into(),
            tags: vec!["pets".into()],
            confidence: 1.0,
            salience: 1.0,
            superseded_by: None,
            valid_from: None,
            invalid_at: None,
            replaces: None,
            turn_ids: vec![],
            source: Provenance::default(),
            managed: Default::default(),
        };
        let item = semantic_item(&fact);
        let text = searched_text(Kind::Semantic, &item.body);
        assert_eq!(text.as_deref(), Some(item.full_text().as_str()));
        assert_eq!(searched_text(Kind::Episodic, "not json"), None);
    }

    /// The index's messages (what the question prior weighs) are the user's
    /// and the assistant's traces, as numbered here; a message's indexed
    /// text is its content, what PostgreSQL reads for the prior.
    #[test]
    fn messages_are_the_user_and_assistant_traces_and_their_text_is_the_content() {
        let types = [TraceType::User, TraceType::Assistant].map(trace_type_code);
        assert_eq!(types, engram_index::MESSAGE_TYPES);
        for t in [TraceType::ToolCall, TraceType::ToolResult] {
            assert!(!engram_index::MESSAGE_TYPES.contains(&trace_type_code(t)));
        }
        let asks = "What do you play? Which one?";
        for trace in
            engram_core::turns::assign_all([NewEvent::user(asks), NewEvent::assistant(asks)])
        {
            let item = trace_item(&trace);
            assert_eq!(item.text, trace.content);
            assert!(item.asks());
        }
    }

    /// A trace is read after the end of the one before it, at most
    /// [`CONTEXT_CHARS`] of it.
    #[test]
    fn a_trace_is_read_after_the_end_of_the_one_before_it() {
        let asked = "Melanie: We made coconut milk ice cream. How did it taste?";
        assert_eq!(context_of(asked), asked);
        let long = format!(
            "{}{}",
            "é".repeat(5 * CONTEXT_CHARS),
            "x".repeat(CONTEXT_CHARS)
        );
        assert_eq!(context_of(&long), "x".repeat(CONTEXT_CHARS));
        assert_eq!(context_of(""), "");
    }

    /// A late tool result is placed in its call's turn, before the next
    /// turn's traces: its place is one the trace after it was embedded
    /// without. Appended traces are placed after everything.
    #[test]
    fn a_late_tool_result_is_placed_before_the_traces_after_it() {
        let traces = engram_core::turns::assign_all([
            NewEvent::user("Preheat the oven."),
            NewEvent::tool_call("c1", "oven", serde_json::json!({})),
            NewEvent::user("What next?"),
            NewEvent::tool_result("c1", serde_json::json!("220 degrees")),
            NewEvent::assistant("Knead the dough."),
        ]);
        let late = &traces[3];
        assert_eq!(late.turn_id, "turn_0001");
        assert!(trace_order(late) < trace_order(&traces[2]));
        assert_eq!(placed_before(0, &traces), [late]);
        assert_eq!(placed_before(2, &traces[3..4]), [late]);
        assert!(placed_before(2, &traces[4..]).is_empty(), "appended");
        assert!(placed_before(0, &traces[..3]).is_empty());
    }
}
