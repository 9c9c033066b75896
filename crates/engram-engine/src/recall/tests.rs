//! The recall block: what goes in, how it reads, what fits.

use engram_core::NewEvent;
use engram_core::memory::{EpisodicItem, Provenance, SemanticItem};
use engram_core::turns::assign_all;
use engram_store::MatchedBy;

use super::*;

const MAY_8_2023: f64 = 1_683_554_160.0;

/// Six messages of three turns, all on 8 May 2023; Caroline speaks first.
fn talk() -> Vec<RawTrace> {
    let mut traces = assign_all([
        NewEvent::user("I went to the support group."),
        NewEvent::assistant("How did it feel?"),
        NewEvent::user("Powerful."),
        NewEvent::assistant("Glad to hear."),
        NewEvent::user("x ".repeat(2000)),
        NewEvent::assistant("Noted."),
    ]);
    for (i, t) in traces.iter_mut().enumerate() {
        t.ts = MAY_8_2023 + i as f64;
        if t.trace_type == TraceType::User {
            t.name = Some("Caroline".into());
        }
    }
    traces
}

fn hit(traces: &[RawTrace], i: usize, score: f32) -> Recalled {
    Recalled {
        agent_id: None,
        memory: Memory::Trace {
            trace: Box::new(traces[i].clone()),
            archived: true,
        },
        score,
        matched_by: MatchedBy::Lexical,
        before: traces[i.saturating_sub(1)..i].to_vec(),
        after: traces.get(i + 1).cloned().into_iter().collect(),
    }
}

fn memory(memory: Memory, score: f32) -> Recalled {
    Recalled {
        agent_id: None,
        memory,
        score,
        matched_by: MatchedBy::Semantic,
        before: vec![],
        after: vec![],
    }
}

/// The entries `memories` make for agent "agent", with the defaults: no
/// snapshot, the default floor, nothing later changed, no question words.
fn shown_to_agent(memories: Vec<Recalled>) -> Vec<Entry> {
    entries(
        memories,
        "",
        Floor::default(),
        "agent",
        &Later::default(),
        &[],
    )
    .0
}

fn summary(text: &str) -> EpisodicItem {
    EpisodicItem {
        id: "e1".into(),
        ts: MAY_8_2023 + 86_400.0 * 30.0,
        turn_ids: vec!["turn_0001".into(), "turn_0002".into()],
        summary: text.into(),
        tags: vec![],
        salience: 0.5,
        source: Provenance {
            trace_ids: vec!["t1".into(), "t4".into()],
            from_ts: Some(MAY_8_2023),
            to_ts: Some(MAY_8_2023 + 86_400.0 * 12.0),
        },
        rewriting: false,
        carrying: Default::default(),
    }
}

#[test]
fn entries_show_when_and_who_with_neighbours_once() {
    let t = talk();
    let fact = SemanticItem {
        turn_ids: vec!["turn_0001".into()],
        ..SemanticItem::new("f1", "Caroline goes to a support group")
    };
    let known = SemanticItem::new("f2", "Caroline likes tea");
    let (entries, report) = entries(
        vec![
            hit(&t, 0, 1.5),
            // Shown already as the first hit's neighbour.
            hit(&t, 1, 1.2),
            memory(Memory::Episodic(summary("Talked about the group.")), 0.9),
            memory(Memory::Semantic(fact), 0.8),
            // In the snapshot already.
            memory(Memory::Semantic(known), 0.7),
            hit(&t, 4, 0.6),
            // Below min_score.
            hit(&t, 2, 0.1),
        ],
        "[MEMORY:SEMANTIC]\n- Caroline likes tea\n",
        Floor {
            min_score: 0.5,
            relative: 0.0,
        },
        "agent",
        &Later::default(),
        &[],
    );
    let left = (report.below_floor, report.already_shown, report.floor);
    assert_eq!(left, (1, 2, 0.5), "{report:?}");
    let texts: Vec<&str> = entries.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(
        texts[..3],
        [
            "- (2023-05-08 13:56, turn_0001)\n  Caroline: I went to the support group.\n  Assistant: How did it feel?",
            "- (2023-05-08 to 2023-05-20, turn_0001 to turn_0002) Summary: Talked about the group.",
            "- (turn_0001) Fact: Caroline goes to a support group",
        ]
    );
    assert_eq!(texts.len(), 4);
    // A long message is cut.
    let long = texts[3];
    assert!(
        long.starts_with(
            "- (2023-05-08 13:56, turn_0003)\n  Assistant: Glad to hear.\n  Caroline: x x"
        ),
        "{long}"
    );
    assert!(long.ends_with("…\n  Assistant: Noted."), "{long}");
    assert!(long.len() < MAX_LINE + 100, "{}", long.len());
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| match &e.memory.memory {
            Memory::Trace { .. } => "trace",
            Memory::Episodic(_) => "episodic",
            Memory::Semantic(_) => "semantic",
        })
        .collect();
    assert_eq!(kinds, ["trace", "episodic", "semantic", "trace"]);
    let Memory::Episodic(summary) = &entries[1].memory.memory else {
        unreachable!()
    };
    assert_eq!(summary.source.trace_ids, ["t1", "t4"]);
}

#[test]
fn the_block_goes_on_the_current_user_message_and_fits_its_room() {
    let t = talk();
    let recall = TurnRecall {
        transcript: 1,
        epoch: 0,
        turn_id: "turn_0003".into(),
        floor: Floor::default(),
        as_of: None,
        at: 1,
        entries: entries(
            vec![
                hit(&t, 0, 1.0),
                memory(Memory::Episodic(summary("Talked about the group.")), 0.9),
            ],
            "",
            Floor::default(),
            "agent",
            &Later::default(),
            &[],
        )
        .0,
        report: Default::default(),
    };
    let messages = vec![
        Message::text(Role::System, "snapshot"),
        Message::text(Role::User, "How was the group?"),
        Message::text(Role::Assistant, "Let me look."),
    ];
    let encoding = tokens::encoding_for("gpt-4o");
    let mut entry_tokens = crate::caches::EntryTokens::default();
    let all = attach(&recall, &messages, encoding, 1500, &mut entry_tokens).unwrap();
    assert_eq!(all.at, 1);
    assert_eq!(
        all.message.content,
        format!(
            "How was the group?\n\n{HEADER}\n{}\n{}",
            recall.entries[1].text, recall.entries[0].text
        )
    );
    assert_eq!(all.recalled.len(), 2);
    let counted = tokens::count_text(encoding, &all.message.content)
        - tokens::count_text(encoding, "How was the group?");
    assert!(
        all.tokens.abs_diff(counted) <= 3,
        "{} vs {counted}",
        all.tokens
    );

    // Room for the first entry only; then for none.
    let first = attach(
        &recall,
        &messages,
        encoding,
        all.tokens - 1,
        &mut entry_tokens,
    )
    .unwrap();
    assert_eq!(first.recalled.len(), 1);
    assert!(first.tokens < all.tokens);
    assert!(attach(&recall, &messages, encoding, 5, &mut entry_tokens).is_none());
}

#[test]
fn an_entry_from_another_conversation_says_which() {
    let t = talk();
    let mut other = hit(&t, 0, 1.0);
    other.agent_id = Some("trip-2023".into());
    let mut own = hit(&t, 2, 0.9);
    own.agent_id = Some("agent".into());
    let shown = shown_to_agent(vec![other, own]);
    assert!(
        shown[0].text.starts_with("- (conversation trip-2023, "),
        "{}",
        shown[0].text
    );
    assert!(!shown[1].text.contains("conversation"), "{}", shown[1].text);
}

#[test]
fn the_floor_is_a_share_of_the_best_score_of_the_same_question() {
    let t = talk();
    let floor = Floor {
        min_score: 0.05,
        relative: 0.2,
    };
    let ranked = |best: f32| {
        vec![
            hit(&t, 0, best),
            memory(Memory::Episodic(summary("Talked about the group.")), 0.4),
            hit(&t, 4, 0.1),
        ]
    };
    // A strong best match: the near-misses under a fifth of it go.
    let (kept, report) = entries(ranked(1.66), "", floor, "agent", &Later::default(), &[]);
    assert_eq!(kept.len(), 2, "{report:?}");
    assert_eq!(report.below_floor, 1);
    assert!((report.floor - 0.332).abs() < 1e-4, "{report:?}");
    assert_eq!((report.ranked, report.best_score), (3, 1.66));
    // A weak best match (0.4): the same entries are all there is, and stay
    // (min_score alone applies).
    let (kept, report) = entries(ranked(0.3), "", floor, "agent", &Later::default(), &[]);
    assert_eq!((kept.len(), report.below_floor), (3, 0), "{report:?}");
    assert!((report.floor - 0.08).abs() < 1e-6, "{report:?}");
    // No floor: everything.
    let (kept, _) = entries(
        ranked(1.66),
        "",
        Floor::default(),
        "agent",
        &Later::default(),
        &[],
    );
    assert_eq!(kept.len(), 3);
    // What did not fit is counted with the block.
    let left = report.showing(3, 1);
    assert_eq!(left.over_budget, 2);
}

#[test]
fn a_question_nobody_answered_is_left_out() {
    let traces = assign_all([
        NewEvent::user("Where do I live now?"),
        NewEvent::user("Where do I live now? I forgot."),
        NewEvent::user("Have you been to Oslo?"),
        NewEvent::assistant("Yes, in May."),
        NewEvent::user("Is it e.g. near the sea? Or inland?"),
    ]);
    let lone = Recalled {
        after: vec![],
        ..hit(&traces, 0, 2.0)
    };
    let told = Recalled {
        after: vec![],
        ..hit(&traces, 1, 1.9)
    };
    let answered = hit(&traces, 2, 1.8);
    let last = Recalled {
        after: vec![],
        ..hit(&traces, 4, 1.7)
    };
    let (shown, report) = entries(
        vec![lone, told, answered, last],
        "",
        Floor::default(),
        "a",
        &Later::default(),
        &[],
    );
    assert_eq!(report.unanswered, 2, "the first and the last only ask");
    let texts: Vec<&str> = shown.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(shown.len(), 2, "{texts:#?}");
    assert!(texts[0].contains("I forgot."), "a statement too: kept");
    assert!(
        texts[1].contains("Yes, in May."),
        "answered: kept with its answer"
    );
}

#[test]
fn a_question_nobody_answered_sets_no_floor() {
    let traces = assign_all([
        NewEvent::user("What is my job these days?"),
        NewEvent::user("I'm a nurse by trade."),
    ]);
    let question = Recalled {
        after: vec![],
        ..hit(&traces, 0, 2.0)
    };
    let fact = Recalled {
        before: vec![],
        after: vec![],
        ..hit(&traces, 1, 0.5)
    };
    let floor = Floor {
        min_score: 0.0,
        relative: 0.5,
    };
    let (shown, report) = entries(vec![question, fact], "", floor, "a", &Later::default(), &[]);
    assert_eq!((report.unanswered, report.below_floor), (1, 0));
    assert_eq!(report.best_score, 0.5);
    assert_eq!(shown.len(), 1);
    assert!(shown[0].text.contains("nurse"));
}

#[test]
fn a_fact_no_longer_true_reads_with_its_span() {
    let day = 86_400.0;
    let lisbon = SemanticItem {
        valid_from: Some(MAY_8_2023),
        superseded_by: Some("f2".into()),
        invalid_at: Some(MAY_8_2023 + 30.0 * day),
        ..SemanticItem::new("f1", "Lives in Lisbon")
    };
    let peanuts = SemanticItem {
        valid_from: Some(MAY_8_2023),
        invalid_at: Some(MAY_8_2023 + 60.0 * day),
        ..SemanticItem::new("f3", "Allergic to peanuts")
    };
    let berlin = SemanticItem {
        valid_from: Some(MAY_8_2023 + 30.0 * day),
        ..SemanticItem::new("f2", "Lives in Berlin")
    };
    let ranked = [lisbon, peanuts, berlin]
        .into_iter()
        .map(|f| memory(Memory::Semantic(f), 1.0))
        .collect();
    let (shown, _) = entries(ranked, "", Floor::default(), "a", &Later::default(), &[]);
    let texts: Vec<&str> = shown.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "- (2023-05-08 to 2023-06-07, since replaced) Fact: Lives in Lisbon",
            "- (2023-05-08 to 2023-07-07, no longer true) Fact: Allergic to peanuts",
            "- (2023-06-07) Fact: Lives in Berlin",
        ]
    );
}

#[test]
fn a_message_a_replaced_fact_came_from_says_so() {
    let mut traces = assign_all([
        NewEvent::user("I live in Lisbon."),
        NewEvent::assistant("Lovely city."),
    ]);
    for t in &mut traces {
        t.ts = MAY_8_2023;
    }
    let berlin = SemanticItem {
        valid_from: Some(MAY_8_2023 + 86_400.0 * 30.0),
        turn_ids: vec!["turn_0004".into()],
        ..SemanticItem::new("f2", "Lives in Berlin")
    };
    let lisbon = SemanticItem {
        valid_from: Some(MAY_8_2023),
        turn_ids: vec!["turn_0001".into()],
        ..SemanticItem::new("f1", "Lives in Lisbon")
    }
    .replaced_by(&berlin);
    let later = Later::of_agent("a", &[lisbon, berlin]);
    let (shown, _) = entries(
        vec![hit(&traces, 0, 1.0)],
        "",
        Floor::default(),
        "a",
        &later,
        &[],
    );
    assert_eq!(
        shown[0].text,
        "- (2023-05-08 13:56, turn_0001)\n  User: I live in Lisbon.\n  (later changed: Lives in Berlin, 2023-06-07)\n  Assistant: Lovely city.",
    );
    // Another conversation's message of the same turn is not its source.
    let other = Recalled {
        agent_id: Some("b".into()),
        ..hit(&traces, 0, 1.0)
    };
    let (shown, _) = entries(vec![other], "", Floor::default(), "a", &later, &[]);
    assert!(
        !shown[0].text.contains("later changed"),
        "{}",
        shown[0].text
    );
}

/// A recalled message longer than an entry shows the part that names the
/// question's words, and says which characters those are.
#[test]
fn a_long_message_is_cut_around_what_the_question_names() {
    let output = format!(
        "{}\nFAILED tests/test_refunds.py::test_partial_refund - AssertionError",
        "PASSED tests/test_orders.py::test_listing\n".repeat(40)
    );
    let summary_text = format!(
        "{} the refund bug was traced to rounding.",
        "Ran the suite. ".repeat(60)
    );
    let t = vec![RawTrace {
        content: output.clone(),
        ..talk()[0].clone()
    }];
    let words = engram_core::compaction::merge::content_words("Which refund test failed?");
    let (shown, _) = entries(
        vec![
            Recalled {
                before: vec![],
                after: vec![],
                ..hit(&t, 0, 1.0)
            },
            memory(Memory::Episodic(summary(&summary_text)), 0.9),
        ],
        "",
        Floor::default(),
        "agent",
        &Later::default(),
        &words,
    );
    let message = &shown[0].text;
    assert!(
        message.contains("test_partial_refund - AssertionError"),
        "{message}"
    );
    let of = output
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .count();
    assert!(message.contains(&format!(" of {of}) …")), "{message}");
    assert!(message.len() < MAX_LINE + 120, "{}", message.len());
    assert!(
        shown[1].text.contains("refund bug was traced"),
        "{}",
        shown[1].text
    );
    // Without the question's words, cut from the start as before.
    let plain = shown_to_agent(vec![hit(&t, 0, 1.0)]);
    assert!(
        plain[0]
            .text
            .contains("Caroline: PASSED tests/test_orders.py"),
        "{}",
        plain[0].text
    );
    assert!(!plain[0].text.contains("characters"), "{}", plain[0].text);
}
