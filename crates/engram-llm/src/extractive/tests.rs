use engram_core::NewEvent;
use engram_core::compaction::merge_facts;
use engram_core::memory::SemanticItem;
use engram_core::turns::assign_all;
use serde_json::json;

use super::sentences::split;
use super::*;

fn traces(events: Vec<NewEvent>) -> Vec<RawTrace> {
    assign_all(events)
}

fn run(t: &[RawTrace]) -> Summary {
    summarize(SummaryRequest {
        traces: t,
        known_facts: &[],
        focus: None,
        working_memory: None,
    })
}

fn facts_of(t: &[RawTrace]) -> Vec<String> {
    run(t).semantic_facts.into_iter().map(|f| f.fact).collect()
}

/// Each message a turn of its own, said by the user.
fn user_says(messages: &[&str]) -> Vec<String> {
    facts_of(&traces(
        messages.iter().map(|m| NewEvent::user(*m)).collect(),
    ))
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
fn summarizes_turns_deterministically() {
    let t = conversation();
    let req = SummaryRequest {
        traces: &t,
        known_facts: &[],
        focus: None,
        working_memory: None,
    };
    let a = summarize(req);
    assert_eq!(a, summarize(req), "same input, same output");
    assert_eq!(
        a.episodic_summary,
        "Turn 1: user: My name is Ada. I prefer answers in metric units. [tools: weather] assistant: It is 3 °C in Oslo.\n\
         Turn 2: user: We decided to deploy on Fridays never.",
        "a short window is kept nearly whole; greetings, thanks and acknowledgements are not"
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
        working_memory: None,
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
    let s = run(&t);
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
            working_memory: None,
        })
        .await
        .unwrap();
    assert_eq!(summarizer.name(), "extractive");
    assert!(!s.episodic_summary.is_empty());
}

/// Issue 29: possessive statements were not facts.
#[test]
fn the_summary_keeps_requests_decisions_and_outcomes_and_drops_small_talk() {
    let t = traces(vec![
        NewEvent::user("Hi!"),
        NewEvent::assistant("Hello! How can I help you today?"),
        NewEvent::user("Can you book a table for four at Sal Grosso on 11 September?"),
        NewEvent::tool_call(
            "b",
            "book_table",
            json!({"place": "Sal Grosso", "people": 4}),
        ),
        {
            let mut r = NewEvent::tool_result("b", json!(null));
            r.tool_error = Some("fully booked".into());
            r
        },
        NewEvent::tool_call(
            "b2",
            "book_table",
            json!({"place": "Boi-Cavalo", "people": 4}),
        ),
        NewEvent::tool_result("b2", json!({"ok": true, "time": "20:00"})),
        NewEvent::assistant(
            "Great question! Sal Grosso was fully booked, so I booked Boi-Cavalo for four at 20:00 instead. I hope this helps! Let me know if you need anything else.",
        ),
        NewEvent::user("Perfect, thanks! Let's go with Boi-Cavalo then."),
        NewEvent::assistant("You're welcome! Enjoy your dinner!"),
    ]);
    let s = run(&t).episodic_summary;
    assert_eq!(
        s,
        "Turn 2: user: Can you book a table for four at Sal Grosso on 11 September? [tools: book_table x2 (1 failed)] assistant: Sal Grosso was fully booked, so I booked Boi-Cavalo for four at 20:00 instead.\n\
         Turn 3: user: Let's go with Boi-Cavalo then."
    );
}

/// The compaction test of engram-server's suite, replayed here: the focus
/// line then turn 1, and a preference restated each turn merges into its
/// latest version.
#[test]
fn the_servers_manual_compaction_reads_as_it_expects() {
    let t = traces(
        (1..=3)
            .flat_map(|t| {
                [
                    NewEvent::user(format!("I prefer answer number {t}. What is {t} squared?")),
                    NewEvent::assistant(format!(
                        "{} it is. {}",
                        t * t,
                        "Squaring multiplies a number by itself. ".repeat(20)
                    )),
                ]
            })
            .collect(),
    );
    let s = summarize(SummaryRequest {
        traces: &t,
        known_facts: &[],
        focus: Some("numbers"),
        working_memory: None,
    });
    assert!(
        s.episodic_summary
            .starts_with("Focus: \"numbers\"\nTurn 1: "),
        "{}",
        s.episodic_summary
    );
    let mut n = 0;
    let merged = merge_facts(&[], &s.semantic_facts, 0.0, || {
        n += 1;
        n.to_string()
    });
    let facts: Vec<_> = merged.new_items.iter().map(|f| f.fact.as_str()).collect();
    assert_eq!(facts, ["I prefer answer number 3"]);
    assert_eq!(
        s.episodic_summary
            .matches("Squaring multiplies a number by itself.")
            .count(),
        1,
        "a sentence is quoted once"
    );
}

/// Issue 29: a 55-turn window was summarized into ~15,000 characters and
/// the prompt shrank by a fifth. See docs/BENCHMARKS.md.
#[test]
fn a_long_conversation_compacts_to_a_fraction() {
    let chat = fixture::life_chat();
    let m = measure::compact(&chat);
    let summary = &m.summary.episodic_summary;
    let facts: Vec<&str> = m
        .summary
        .semantic_facts
        .iter()
        .map(|f| f.fact.as_str())
        .collect();
    eprintln!(
        "{} turns summarized; prompt {} -> {} tokens ({:+.0}%); the window's messages {} tokens; \
         summary {} chars, {} tokens; {} facts\n{summary}\n{facts:#?}",
        m.window_turns,
        m.prompt_before,
        m.prompt_after,
        (f64::from(m.prompt_after) / f64::from(m.prompt_before) - 1.0) * 100.0,
        m.window_tokens,
        summary.chars().count(),
        m.summary_tokens,
        facts.len(),
    );
    assert_eq!(m.window_turns, 55);
    assert!(
        m.prompt_after * 100 <= m.prompt_before * 30,
        "the prompt shrinks by 70% or more: {} -> {}",
        m.prompt_before,
        m.prompt_after
    );
    let text_chars: usize = chat
        .iter()
        .filter(|t| matches!(t.trace_type, TraceType::User | TraceType::Assistant))
        .filter(|t| turn_number(&t.turn_id).is_some_and(|n| n <= 55))
        .map(|t| t.content.chars().count())
        .sum();
    assert!(summary.chars().count() <= budget(text_chars));
    for fact in [
        "My favourite colour is teal",
        "My dog is called Biscuit and he's a three-year-old beagle",
        "My sister Ottoline is getting married in Lisbon on 14 September",
        "I'm allergic to peanuts, by the way, so when you suggest restaurants in Lisbon keep that in mind",
        "My birthday is 3 March, in case you need it for anything",
    ] {
        assert!(facts.contains(&fact), "{fact}: {facts:#?}");
    }
    for question in ["Who can look after him", "I love it", "How much"] {
        assert!(!facts.iter().any(|f| f.contains(question)), "{question}");
    }
    // Requests, decisions and outcomes are there too, in turn order.
    for quoted in [
        "Turn 1: user: I'm Maya",
        "[tools: flight_search] assistant: I found two direct options on 11 September",
        "Let's go with the easyJet one at 13:40.",
        "I booked Stitch & Mend for 5 August at 10am.",
    ] {
        assert!(summary.contains(quoted), "{quoted}");
    }
    assert!(!summary.contains("Hope") && !summary.contains("Thanks"));
    assert!(
        m.snapshot
            .starts_with("[MEMORY:EPISODIC]\n1) Turn 1: user: I'm Maya")
    );
    assert_eq!(measure::compact(&chat).summary, m.summary, "deterministic");
}

#[test]
fn a_focus_brings_its_topic_into_the_summary() {
    let chat = fixture::life_chat();
    let toast = "I want to give a short toast in Portuguese at the wedding.";
    let with = |focus| {
        summarize(SummaryRequest {
            traces: &chat,
            known_facts: &[],
            focus,
            working_memory: None,
        })
        .episodic_summary
    };
    assert!(!with(None).contains(toast));
    let focused = with(Some("the toast"));
    assert!(focused.starts_with("Focus: \"the toast\"\n"));
    assert!(focused.contains(toast), "{focused}");
}

#[test]
fn the_budget_grows_sublinearly() {
    assert_eq!(budget(0), 600);
    assert_eq!(budget(10_000), 2000);
    assert_eq!(budget(40_000), 4000);
    assert_eq!(budget(usize::MAX), 4000);
    // Windows of 10 to 640 turns of the long conversation's kind: the
    // summary stays within its budget, a shrinking share of the window.
    let chat = fixture::life_chat();
    let window: Vec<&RawTrace> = chat
        .iter()
        .filter(|t| turn_number(&t.turn_id).is_some_and(|n| n <= 55))
        .collect();
    let mut last_share = f64::MAX;
    for copies in [1usize, 4, 16] {
        let mut events = vec![];
        for _ in 0..copies {
            for t in &window {
                events.push(match t.trace_type {
                    TraceType::User => NewEvent::user(&t.content),
                    TraceType::Assistant => NewEvent::assistant(&t.content),
                    _ => continue,
                });
            }
        }
        let t = traces(events);
        let chars: usize = t.iter().map(|t| t.content.chars().count()).sum();
        let s = run(&t).episodic_summary;
        let share = s.chars().count() as f64 / chars as f64;
        assert!(s.chars().count() <= budget(chars), "{copies}");
        assert!(
            share < last_share / 1.5,
            "{copies}: {share} vs {last_share}"
        );
        last_share = share;
    }
}

#[test]
fn empty_windows_and_silent_turns() {
    let s = run(&[]);
    assert_eq!(s.episodic_summary, "No turns.");
    assert!(s.semantic_facts.is_empty());
    let t = traces(vec![
        NewEvent::user("   "),
        NewEvent::tool_call("c", "ping", json!({})),
        NewEvent::tool_result("c", json!("pong")),
        NewEvent::user("ok"),
        NewEvent::assistant("Thanks!"),
    ]);
    assert_eq!(
        run(&t).episodic_summary,
        "Turns 1–2: small talk only; tools: ping."
    );
}

#[test]
fn sentences_end_where_a_reader_would_end_them() {
    let texts: Vec<(String, bool)> = split(
        "Dr. Smith moved to St. Ives on 3 Sept. 2021, e.g. for work! Is 3.5 kg ok? Mail priya.n@example.com. \
         She said \"I'm done.\" Then left\n- a list item here\n```\nmy code = is; here\n```\n1. Numbered item here; and more… tail end",
    )
    .into_iter()
    .map(|s| (s.text, s.question))
    .collect();
    let expected = [
        (
            "Dr. Smith moved to St. Ives on 3 Sept. 2021, e.g. for work!",
            false,
        ),
        ("Is 3.5 kg ok?", true),
        ("Mail priya.n@example.com.", false),
        ("She said \"I'm done.\"", false),
        ("Then left", false),
        ("a list item here", false),
        ("Numbered item here; and more…", false),
        ("tail end", false),
    ];
    let expected: Vec<(String, bool)> = expected
        .iter()
        .map(|(t, q)| ((*t).to_owned(), *q))
        .collect();
    assert_eq!(texts, expected);
}

#[test]
fn spread_visits_every_position_once() {
    for len in 0..200 {
        let mut seen: Vec<usize> = spread(len).collect();
        if len >= 3 {
            assert_eq!(seen[..2], [0, len.next_power_of_two() / 2], "{len}");
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..len).collect::<Vec<_>>());
    }
}

mod facts;
mod hostile;
