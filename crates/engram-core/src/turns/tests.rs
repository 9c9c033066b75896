use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use serde_json::json;

use super::*;

fn ids() -> impl FnMut() -> String {
    || format!("id-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// Plans and applies like the store does; returns the stored traces.
fn ingest(t: &mut TurnTracker, events: Vec<NewEvent>) -> Result<Vec<RawTrace>, CoreError> {
    let plan = t.plan(&events, None, None, IngestLimits::default(), 100.0, ids())?;
    for trace in &plan.new_traces {
        t.apply(trace);
    }
    Ok(plan.new_traces)
}

fn ingest_one(t: &mut TurnTracker, e: NewEvent) -> RawTrace {
    ingest(t, vec![e]).unwrap().remove(0)
}

#[test]
fn turn_ids_have_four_digits_and_parse_back() {
    assert_eq!(turn_id(1), "turn_0001");
    assert_eq!(turn_id(12345), "turn_12345");
    assert_eq!(turn_number("turn_0042"), Some(42));
    assert_eq!(turn_number("turn_12345"), Some(12345));
    assert_eq!(turn_number("turn_42"), None);
    assert_eq!(turn_number("turn_00x1"), None);
    assert_eq!(turn_number("0001"), None);
}

#[test]
fn user_messages_start_turns_and_answers_join_them() {
    let mut t = TurnTracker::default();
    let u1 = ingest_one(&mut t, NewEvent::user("hi"));
    let a1 = ingest_one(&mut t, NewEvent::assistant("hello"));
    let u2 = ingest_one(&mut t, NewEvent::user("again"));
    let c2 = ingest_one(&mut t, NewEvent::tool_call("c1", "search", json!({"q": 1})));
    assert_eq!((u1.turn_id.as_str(), u1.seq), ("turn_0001", 0));
    assert_eq!((a1.turn_id.as_str(), a1.seq), ("turn_0001", 1));
    assert_eq!((u2.turn_id.as_str(), u2.seq), ("turn_0002", 0));
    assert_eq!((c2.turn_id.as_str(), c2.seq), ("turn_0002", 1));
    assert_eq!(t.current_turn_id().as_deref(), Some("turn_0002"));
}

#[test]
fn assistant_before_any_user_opens_the_first_turn() {
    let mut t = TurnTracker::default();
    let a = ingest_one(&mut t, NewEvent::assistant("welcome"));
    assert_eq!((a.turn_id.as_str(), a.seq), ("turn_0001", 0));
    let u = ingest_one(&mut t, NewEvent::user("thanks"));
    assert_eq!(u.turn_id, "turn_0002");
}

#[test]
fn tool_result_inherits_its_calls_turn_after_the_next_user_message() {
    let mut t = TurnTracker::default();
    ingest_one(&mut t, NewEvent::user("q1"));
    ingest_one(&mut t, NewEvent::tool_call("slow", "fetch", json!({})));
    ingest_one(&mut t, NewEvent::user("q2"));
    ingest_one(&mut t, NewEvent::assistant("a2"));
    let r = ingest_one(&mut t, NewEvent::tool_result("slow", json!("done")));
    assert_eq!(r.turn_id, "turn_0001");
    assert_eq!(r.seq, 2, "next seq of turn 1");
    assert_eq!(
        r.tool_name.as_deref(),
        Some("fetch"),
        "name comes from the call"
    );
}

#[test]
fn replay_rebuilds_the_call_map() {
    let mut t = TurnTracker::default();
    let stored = vec![
        ingest_one(&mut t, NewEvent::user("q1")),
        ingest_one(&mut t, NewEvent::tool_call("c", "f", json!({}))),
        ingest_one(&mut t, NewEvent::user("q2")),
    ];
    let mut restarted = TurnTracker::default();
    for trace in &stored {
        restarted.apply(trace);
    }
    let r = ingest_one(&mut restarted, NewEvent::tool_result("c", json!(1)));
    assert_eq!((r.turn_id.as_str(), r.seq), ("turn_0001", 2));
    let u = ingest_one(&mut restarted, NewEvent::user("q3"));
    assert_eq!(u.turn_id, "turn_0003");
}

#[test]
fn event_id_makes_retries_idempotent_within_and_across_batches() {
    let mut t = TurnTracker::default();
    let first = ingest_one(&mut t, NewEvent::user("hi").with_event_id("e1"));
    let plan = t
        .plan(
            &[
                NewEvent::user("hi").with_event_id("e1"),
                NewEvent::assistant("yo").with_event_id("e2"),
                NewEvent::assistant("yo").with_event_id("e2"),
            ],
            None,
            None,
            IngestLimits::default(),
            1.0,
            ids(),
        )
        .unwrap();
    assert_eq!(
        plan.outcomes,
        vec![
            Outcome::Existing(first.id.clone()),
            Outcome::New(0),
            Outcome::New(0)
        ]
    );
    assert_eq!(plan.new_traces.len(), 1);
    assert_eq!(
        plan.new_traces[0].turn_id, "turn_0001",
        "retry started no turn"
    );
    // After a replay the key is still known.
    let mut restarted = TurnTracker::default();
    restarted.apply(&first);
    assert_eq!(restarted.trace_for_event("e1"), Some(first.id.as_str()));
}

#[test]
fn a_refused_batch_changes_nothing() {
    let mut t = TurnTracker::default();
    ingest_one(&mut t, NewEvent::user("q"));
    let before = format!("{t:?}");
    let err = ingest(
        &mut t,
        vec![
            NewEvent::user("next"),
            NewEvent::tool_call("c1", "f", json!({})),
            NewEvent::tool_result("nope", json!(1)),
        ],
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("events[2]: "), "{err}");
    assert_eq!(format!("{t:?}"), before);
}

#[test]
fn bad_events_are_refused_with_a_reason() {
    let mut t = TurnTracker::default();
    ingest_one(&mut t, NewEvent::user("q"));
    ingest_one(&mut t, NewEvent::tool_call("c1", "f", json!({})));
    ingest_one(&mut t, NewEvent::tool_result("c1", json!(1)));
    ingest_one(&mut t, NewEvent::tool_call("c2", "f", json!({})));
    let unspecified = NewEvent {
        content: "x".into(),
        ..NewEvent::default()
    };
    let no_call_id = NewEvent {
        tool_call_id: None,
        tool_name: None,
        ..NewEvent::tool_result("x", json!(1))
    };
    let call_without_name = NewEvent {
        tool_name: None,
        ..NewEvent::tool_call("c9", "f", json!({}))
    };
    let args_on_user = NewEvent {
        tool_args: json!({"a": 1}).as_object().cloned(),
        ..NewEvent::user("x")
    };
    let future_turn = NewEvent {
        turn_id: Some("turn_0009".into()),
        ..NewEvent::assistant("x")
    };
    let bad_ts = NewEvent {
        ts: Some(f64::NAN),
        ..NewEvent::user("x")
    };
    let cases = [
        (unspecified, "trace_type is unspecified"),
        (no_call_id, "needs tool_call_id, or without one, tool_name"),
        (call_without_name, "needs tool_name"),
        (NewEvent::tool_call("c2", "f", json!({})), "still waiting"),
        (
            NewEvent::tool_result("c1", json!(2)),
            "already has a result",
        ),
        (
            NewEvent::tool_result("zz", json!(2)),
            "matches no tool call",
        ),
        (NewEvent::user(""), "need content or media"),
        (args_on_user, "only for tool_call"),
        (future_turn, "does not exist yet"),
        (bad_ts, "epoch seconds"),
        (
            NewEvent::user("x").with_event_id("e".repeat(257)),
            "at most 256",
        ),
    ];
    for (event, expected) in cases {
        let err = ingest(&mut t, vec![event]).unwrap_err();
        assert!(matches!(err, CoreError::Invalid(_)), "{err:?}");
        assert!(
            err.to_string().contains(expected),
            "{err} should say {expected}"
        );
    }
    assert!(
        ingest(&mut t, vec![])
            .unwrap_err()
            .to_string()
            .contains("empty")
    );
}

#[test]
fn limits_are_resource_errors_naming_the_setting() {
    let t = TurnTracker::default();
    let limits = IngestLimits {
        max_events: 2,
        max_trace_bytes: 300,
        ..IngestLimits::default()
    };
    let many = vec![NewEvent::user("a"); 3];
    let err = t.plan(&many, None, None, limits, 1.0, ids()).unwrap_err();
    assert!(
        matches!(err, CoreError::TooLarge { limit: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("limits.max_events_per_request"));
    let big = vec![NewEvent::user("a"), NewEvent::assistant("b".repeat(400))];
    let err = t.plan(&big, None, None, limits, 1.0, ids()).unwrap_err();
    assert!(err.to_string().starts_with("events[1]: "), "{err}");
    assert!(err.to_string().contains("limits.max_trace_bytes"), "{err}");
}

#[test]
fn usage_and_model_ride_on_the_last_new_trace_and_survive_replay() {
    let mut t = TurnTracker::default();
    let usage = Usage {
        prompt_tokens: 900,
        completion_tokens: 10,
        total_tokens: 910,
        ..Usage::default()
    };
    let plan = t
        .plan(
            &[NewEvent::user("q"), NewEvent::assistant("a")],
            Some(usage),
            Some("gpt-4o"),
            IngestLimits::default(),
            1.0,
            ids(),
        )
        .unwrap();
    assert_eq!(plan.new_traces[0].usage, None);
    assert_eq!(plan.new_traces[1].usage, Some(usage));
    let mut replayed = TurnTracker::default();
    for trace in &plan.new_traces {
        t.apply(trace);
        replayed.apply(&RawTrace::from_line(&trace.to_line()).unwrap());
    }
    assert_eq!(replayed.last_usage(), Some(usage));
    assert_eq!(replayed.last_model(), Some("gpt-4o"));
}

/// One step of a random conversation (shared with the transcript tests).
#[derive(Debug, Clone)]
pub(crate) enum Step {
    User,
    Assistant,
    Call,
    /// Answer the pending call at this position (modulo their number).
    Result(usize),
}

pub(crate) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::User),
        2 => Just(Step::Assistant),
        3 => Just(Step::Call),
        3 => (0usize..8).prop_map(Step::Result),
    ]
}

/// The events of a random conversation: calls numbered `call-1`, … and
/// results that answer a pending call (results with none pending dropped).
fn events_of(steps: Vec<Step>) -> Vec<NewEvent> {
    let mut pending: Vec<String> = vec![];
    let mut events = vec![];
    let mut n = 0;
    for s in steps {
        let e = match s {
            Step::User => NewEvent::user("u"),
            Step::Assistant => NewEvent::assistant("a"),
            Step::Call => {
                n += 1;
                pending.push(format!("call-{n}"));
                NewEvent::tool_call(format!("call-{n}"), "tool", json!({"n": n}))
            }
            Step::Result(_) if pending.is_empty() => continue,
            Step::Result(i) => {
                let id = pending.remove(i % pending.len());
                NewEvent::tool_result(id, json!("ok"))
            }
        };
        events.push(e);
    }
    events
}

proptest! {
    #[test]
    fn tool_results_carry_their_calls_turn_and_turns_are_consecutive(
        steps in prop::collection::vec(step(), 1..80),
        batch in 1usize..5,
    ) {
        let mut t = TurnTracker::default();
        let events = events_of(steps);
        let mut stored = vec![];
        for chunk in events.chunks(batch) {
            stored.extend(ingest(&mut t, chunk.to_vec()).unwrap());
        }
        let mut call_turn = HashMap::new();
        let mut seqs: HashMap<String, Vec<u32>> = HashMap::new();
        let mut max_turn = 0;
        for trace in &stored {
            let turn = turn_number(&trace.turn_id).unwrap();
            seqs.entry(trace.turn_id.clone()).or_default().push(trace.seq);
            match trace.trace_type {
                TraceType::User => {
                    prop_assert_eq!(turn, max_turn + 1, "a user message opens the next turn");
                    max_turn = turn;
                }
                TraceType::ToolCall => {
                    call_turn.insert(trace.tool_call_id.clone().unwrap(), turn);
                }
                TraceType::ToolResult => {
                    let id = trace.tool_call_id.clone().unwrap();
                    prop_assert_eq!(Some(&turn), call_turn.get(&id), "result of {} in its call's turn", id);
                }
                TraceType::Assistant => {}
            }
            prop_assert!(turn >= 1 && turn <= max_turn.max(1));
            max_turn = max_turn.max(turn);
        }
        // Seqs within each turn are 0, 1, 2, … in storage order.
        for (turn, s) in seqs {
            let expected: Vec<u32> = (0..s.len() as u32).collect();
            prop_assert_eq!(s, expected, "seqs of {}", turn);
        }
    }

    #[test]
    fn a_checkpoint_plus_the_active_traces_rebuilds_the_same_state(
        steps in prop::collection::vec(step(), 1..60),
        cut in 0.0f64..=1.0,
        archived in 0.0f64..=1.0,
    ) {
        // A store checkpoints the tracker at a compaction (after `cut`
        // traces, the first `archived` share of them moved to the archive)
        // and at load applies the active traces on top of it: that must
        // rebuild the tracker a full replay builds.
        let mut t = TurnTracker::default();
        let mut stored = vec![];
        for (i, mut e) in events_of(steps).into_iter().enumerate() {
            e.event_id = Some(format!("event-{i}"));
            let usage = (i % 3 == 0).then_some(Usage { prompt_tokens: i as u32, ..Usage::default() });
            let plan = t.plan(&[e], usage, Some("m"), IngestLimits::default(), 1.0, ids()).unwrap();
            for trace in plan.new_traces {
                t.apply(&trace);
                stored.push(trace);
            }
        }
        let k = (stored.len() as f64 * cut) as usize;
        let m = (k as f64 * archived) as usize;
        let mut checkpoint = TurnTracker::default();
        for trace in &stored[..k] {
            checkpoint.apply(trace);
        }
        let json = serde_json::to_string(&checkpoint).unwrap();
        let mut loaded: TurnTracker = serde_json::from_str(&json).unwrap();
        for trace in &stored[m..] {
            loaded.apply(trace);
        }
        prop_assert_eq!(loaded, t);
    }
}

/// A call id is unique among calls still waiting for a result, not
/// forever: agents that number calls per response reuse them.
#[test]
fn a_call_id_is_reused_once_its_call_has_a_result() {
    let mut t = TurnTracker::default();
    let mut stored = vec![];
    for e in [
        NewEvent::user("q1"),
        NewEvent::tool_call("call_1", "f", json!({})),
        NewEvent::tool_result("call_1", json!(1)),
        NewEvent::user("q2"),
    ] {
        stored.push(ingest_one(&mut t, e));
    }
    let again = ingest_one(&mut t, NewEvent::tool_call("call_1", "g", json!({})));
    assert_eq!(again.turn_id, "turn_0002");
    stored.push(again);
    let waiting = ingest(&mut t, vec![NewEvent::tool_call("call_1", "g", json!({}))]);
    assert!(
        waiting.unwrap_err().to_string().contains("still waiting"),
        "a waiting call's id is not reused"
    );
    let result = ingest_one(&mut t, NewEvent::tool_result("call_1", json!(2)));
    stored.push(result.clone());
    assert_eq!(
        (result.turn_id.as_str(), result.tool_name.as_deref()),
        ("turn_0002", Some("g")),
        "the result pairs with the newest call of its id"
    );
    // In one batch too: a call, its result, the id again.
    let batch = ingest(
        &mut t,
        vec![
            NewEvent::tool_result("call_1", json!(3)),
            NewEvent::tool_call("call_1", "h", json!({})),
        ],
    );
    assert!(
        batch
            .unwrap_err()
            .to_string()
            .contains("already has a result")
    );
    let batch = ingest(
        &mut t,
        vec![
            NewEvent::tool_call("call_1", "h", json!({})),
            NewEvent::tool_result("call_1", json!(3)),
            NewEvent::tool_call("call_1", "k", json!({})),
        ],
    )
    .unwrap();
    assert_eq!(batch.len(), 3);
    stored.extend(batch);
    // Replayed from its traces, the tracker is the same: call_1 waits.
    let mut replayed = TurnTracker::default();
    for trace in &stored {
        replayed.apply(trace);
    }
    assert_eq!(replayed, t);
    let refused = ingest(
        &mut replayed,
        vec![NewEvent::tool_call("call_1", "x", json!({}))],
    );
    assert!(refused.unwrap_err().to_string().contains("still waiting"));
}

/// Gemini's function calls and responses carry no id: a call gets one,
/// and a result pairs with the oldest call of its tool still waiting.
#[test]
fn calls_without_ids_get_one_and_results_pair_by_tool_name() {
    let mut t = TurnTracker::default();
    ingest_one(&mut t, NewEvent::user("weather in two cities"));
    let no_id = |name: &str| NewEvent {
        tool_call_id: None,
        ..NewEvent::tool_call("", name, json!({}))
    };
    let result = |name: &str, v| NewEvent {
        tool_call_id: None,
        tool_name: Some(name.into()),
        ..NewEvent::tool_result("", v)
    };
    let calls = ingest(
        &mut t,
        vec![no_id("weather"), no_id("weather"), no_id("time")],
    )
    .unwrap();
    for c in &calls {
        assert_eq!(
            c.tool_call_id.as_deref(),
            Some(format!("call_{}", c.id).as_str())
        );
    }
    let results = ingest(
        &mut t,
        vec![
            result("weather", json!("sun")),
            result("time", json!("noon")),
        ],
    )
    .unwrap();
    assert_eq!(
        results[0].tool_call_id, calls[0].tool_call_id,
        "the oldest waiting"
    );
    assert_eq!(results[1].tool_call_id, calls[2].tool_call_id);
    let second = ingest_one(&mut t, result("weather", json!("rain")));
    assert_eq!(second.tool_call_id, calls[1].tool_call_id);
    let none_left = ingest(&mut t, vec![result("weather", json!("?"))]).unwrap_err();
    assert!(
        none_left
            .to_string()
            .contains("no call of tool_name \"weather\" is waiting"),
        "{none_left}"
    );
}
