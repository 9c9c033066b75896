use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::NewEvent;
use crate::turns::assign_all;
use crate::turns::tests::{Step, step};

fn shape(t: &Transcript) -> Vec<String> {
    t.messages()
        .iter()
        .chain(&t.pending_tail())
        .map(|m| match m.role {
            Role::User => format!("user:{}", m.content.lines().next().unwrap_or_default()),
            Role::Assistant if m.tool_calls.is_empty() => format!("assistant:{}", m.content),
            Role::Assistant => format!(
                "assistant:{}+calls[{}]",
                m.content,
                m.tool_calls
                    .iter()
                    .map(|c| c.id.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Role::Tool => format!(
                "tool:{}={}",
                m.tool_call_id.as_deref().unwrap_or_default(),
                m.content
            ),
            Role::System => format!("system:{}", m.content),
        })
        .collect()
}

fn err_result(id: &str, error: &str) -> NewEvent {
    NewEvent {
        tool_error: Some(error.into()),
        ..NewEvent::tool_result(id, Value::Null)
    }
}

#[test]
fn a_tool_loop_renders_as_steps_with_their_results() {
    let traces = assign_all([
        NewEvent::user("weather in Oslo and Rome?"),
        NewEvent::assistant("Let me check."),
        NewEvent::tool_call("a", "weather", json!({"city": "Oslo"})),
        NewEvent::tool_call("b", "weather", json!({"city": "Rome"})),
        NewEvent::tool_result("b", json!({"temp": 20})),
        err_result("a", "timeout"),
        NewEvent::tool_call("c", "weather", json!({"city": "Oslo"})),
        NewEvent::tool_result("c", json!("3 degrees")),
        NewEvent::assistant("Oslo 3, Rome 20."),
    ]);
    let t = Transcript::from_traces(&traces);
    assert_eq!(
        shape(&t),
        [
            "user:weather in Oslo and Rome?",
            "assistant:Let me check.+calls[a,b]",
            "tool:b={\"temp\":20}",
            "tool:a=error: timeout",
            "assistant:+calls[c]",
            "tool:c=3 degrees",
            "assistant:Oslo 3, Rome 20.",
        ]
    );
    assert!(t.messages()[3].is_error);
    assert_eq!(t.messages()[1].tool_calls[0].arguments["city"], "Oslo");
}

#[test]
fn a_pending_call_gets_a_placeholder_that_is_not_stored() {
    let traces = assign_all([
        NewEvent::user("q"),
        NewEvent::tool_call("a", "slow", json!({})),
    ]);
    let mut t = Transcript::from_traces(&traces);
    assert_eq!(
        shape(&t).last().unwrap(),
        &format!("tool:a={PENDING_RESULT}")
    );
    assert_eq!(t.messages().len(), 2, "placeholder is not committed");
    let result = assign_all([
        NewEvent::user("q"),
        NewEvent::tool_call("a", "slow", json!({})),
        NewEvent::tool_result("a", json!("done")),
    ]);
    t.push(&result[2]);
    assert_eq!(shape(&t).last().unwrap(), "tool:a=done");
}

#[test]
fn a_result_after_the_conversation_moved_on_becomes_a_note() {
    let traces = assign_all([
        NewEvent::user("q1"),
        NewEvent::tool_call("a", "slow", json!({})),
        NewEvent::user("q2"),
        NewEvent::tool_result("a", json!("finally")),
        NewEvent::assistant("ok"),
    ]);
    let t = Transcript::from_traces(&traces);
    assert_eq!(
        shape(&t),
        [
            "user:q1".to_string(),
            "assistant:+calls[a]".to_string(),
            format!("tool:a={PENDING_RESULT}"),
            "user:q2".to_string(),
            "user:[late tool result for call a (slow) of turn_0001]".to_string(),
            "assistant:ok".to_string(),
        ]
    );
    assert!(t.messages()[4].content.ends_with("finally"));
}

#[test]
fn appends_never_change_earlier_messages() {
    let traces = assign_all([
        NewEvent::user("q"),
        NewEvent::assistant("thinking"),
        NewEvent::tool_call("a", "f", json!({})),
        NewEvent::tool_result("a", json!(1)),
        NewEvent::user("next"),
        NewEvent::tool_call("b", "f", json!({})),
        NewEvent::assistant("done"),
    ]);
    let mut t = Transcript::default();
    for trace in &traces {
        let before = t.messages().to_vec();
        let changed = t.push(trace);
        assert_eq!(&t.messages()[..changed], &before[..changed], "{trace:?}");
    }
}

/// Random valid event sequences, for this module's and the renderers'
/// property tests.
pub(crate) fn conversations() -> impl Strategy<Value = Vec<RawTrace>> {
    prop::collection::vec(step(), 1..60)
        .prop_map(|steps| {
            let mut pending: Vec<String> = vec![];
            let mut events = vec![];
            let mut n = 0;
            for s in steps {
                events.push(match s {
                    Step::User => NewEvent::user(format!("u{n}")),
                    Step::Assistant => NewEvent::assistant(format!("a{n}")),
                    Step::Call => {
                        n += 1;
                        pending.push(format!("call_{n}"));
                        NewEvent::tool_call(format!("call_{n}"), "tool", json!({"n": n}))
                    }
                    Step::Result(_) if pending.is_empty() => continue,
                    Step::Result(i) if i % 5 == 4 => {
                        err_result(&pending.remove(i % pending.len()), "failed")
                    }
                    Step::Result(i) => {
                        let id = pending.remove(i % pending.len());
                        NewEvent::tool_result(id, json!({"ok": true}))
                    }
                });
                n += 1;
            }
            assign_all(events)
        })
        // A prompt always has a message: an agent exists from its first trace.
        .prop_filter("at least one trace", |traces| !traces.is_empty())
}

proptest! {
    #[test]
    fn every_tool_message_follows_its_call_and_every_call_is_answered(traces in conversations()) {
        let t = Transcript::from_traces(&traces);
        let all: Vec<Message> = t.messages().iter().cloned().chain(t.pending_tail()).collect();
        let mut i = 0;
        while i < all.len() {
            let m = &all[i];
            prop_assert!(m.role != Role::Tool, "orphan tool message at {}", i);
            i += 1;
            if m.role == Role::Assistant && !m.tool_calls.is_empty() {
                let mut ids: Vec<&str> = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
                while i < all.len() && all[i].role == Role::Tool {
                    let id = all[i].tool_call_id.as_deref().unwrap_or_default();
                    let at = ids.iter().position(|c| *c == id);
                    prop_assert!(at.is_some(), "tool message {} answers no call of its step", id);
                    ids.remove(at.unwrap_or_default());
                    i += 1;
                }
                prop_assert!(ids.is_empty(), "unanswered calls {:?}", ids);
            }
        }
    }
}
