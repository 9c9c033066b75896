//! Views over an agent's active traces: the raw tail of whole turns and the
//! tool calls paired with their results.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use crate::turns::turn_number;
use crate::{RawTrace, TraceType};

/// The traces of the last `turns` turns (by turn number, so a late tool
/// result of an old turn does not pull that turn in), ordered by turn and
/// seq.
pub fn raw_tail(traces: &[RawTrace], turns: usize) -> Vec<&RawTrace> {
    let numbers: BTreeSet<u32> = traces
        .iter()
        .filter_map(|t| turn_number(&t.turn_id))
        .collect();
    let Some(&first) = numbers.iter().rev().take(turns).min() else {
        return vec![];
    };
    let mut tail: Vec<&RawTrace> = traces
        .iter()
        .filter(|t| turn_number(&t.turn_id).is_some_and(|n| n >= first))
        .collect();
    tail.sort_by_key(|t| (turn_number(&t.turn_id), t.seq));
    tail
}

/// Outcome of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolStatus {
    Pending,
    Success,
    Error,
}

/// A tool call and, once it arrived, its result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInteraction {
    pub tool_call_id: String,
    pub tool_name: String,
    pub turn_id: String,
    pub arguments: Option<Map<String, Value>>,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub status: ToolStatus,
    pub call_trace_id: String,
    pub result_trace_id: Option<String>,
}

/// Pairs every tool call in `traces` (in conversation order: by turn, then
/// seq) with its result by `tool_call_id`, in call order.
pub fn tool_interactions<'a>(
    traces: impl IntoIterator<Item = &'a RawTrace>,
) -> Vec<ToolInteraction> {
    let mut out: Vec<ToolInteraction> = vec![];
    // The latest call of each id so far: an id is reused once its call has
    // a result, and a result answers the call of its id before it.
    let mut by_call: HashMap<&str, usize> = HashMap::new();
    for trace in traces {
        let Some(call_id) = trace.tool_call_id.as_deref() else {
            continue;
        };
        match trace.trace_type {
            TraceType::ToolCall => {
                by_call.insert(call_id, out.len());
                out.push(ToolInteraction {
                    tool_call_id: call_id.to_owned(),
                    tool_name: trace.tool_name.clone().unwrap_or_default(),
                    turn_id: trace.turn_id.clone(),
                    arguments: trace.tool_args.clone(),
                    result: None,
                    error: None,
                    status: ToolStatus::Pending,
                    call_trace_id: trace.id.clone(),
                    result_trace_id: None,
                });
            }
            TraceType::ToolResult => {
                if let Some(&i) = by_call.get(call_id) {
                    let it = &mut out[i];
                    it.result.clone_from(&trace.tool_result);
                    it.error = trace.tool_error.clone().filter(|e| !e.is_empty());
                    it.status = if it.error.is_some() {
                        ToolStatus::Error
                    } else {
                        ToolStatus::Success
                    };
                    it.result_trace_id = Some(trace.id.clone());
                }
            }
            TraceType::User | TraceType::Assistant => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::NewEvent;
    use crate::turns::assign_all;

    fn store(events: Vec<NewEvent>) -> Vec<RawTrace> {
        assign_all(events)
    }

    fn conversation() -> Vec<RawTrace> {
        store(vec![
            NewEvent::user("one"),
            NewEvent::tool_call("slow", "fetch", json!({"url": "x"})),
            NewEvent::user("two"),
            NewEvent::tool_call("ok", "calc", json!({})),
            NewEvent::tool_result("ok", json!(42)),
            NewEvent::user("three"),
            NewEvent::tool_call("bad", "calc", json!({})),
            NewEvent {
                tool_error: Some("division by zero".into()),
                ..NewEvent::tool_result("bad", Value::Null)
            },
            NewEvent::tool_result("slow", json!("late")),
            NewEvent::tool_call("open", "wait", json!({})),
        ])
    }

    #[test]
    fn a_reused_call_id_pairs_each_result_with_its_own_call() {
        let traces = store(vec![
            NewEvent::user("one"),
            NewEvent::tool_call("call_1", "calc", json!({})),
            NewEvent::tool_result("call_1", json!(1)),
            NewEvent::user("two"),
            NewEvent::tool_call("call_1", "calc", json!({})),
        ]);
        let pairs: Vec<_> = tool_interactions(&traces)
            .iter()
            .map(|i| (i.turn_id.clone(), i.status, i.result.clone()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("turn_0001".into(), ToolStatus::Success, Some(json!(1))),
                ("turn_0002".into(), ToolStatus::Pending, None),
            ]
        );
    }

    #[test]
    fn tail_holds_whole_turns_in_turn_order() {
        let traces = conversation();
        let tail: Vec<_> = raw_tail(&traces, 2)
            .iter()
            .map(|t| (t.turn_id.as_str(), t.seq))
            .collect();
        assert_eq!(
            tail,
            [
                ("turn_0002", 0),
                ("turn_0002", 1),
                ("turn_0002", 2),
                ("turn_0003", 0),
                ("turn_0003", 1),
                ("turn_0003", 2),
                ("turn_0003", 3),
            ]
        );
        assert!(raw_tail(&traces, 0).is_empty());
        assert_eq!(raw_tail(&traces, 99).len(), traces.len());
        let first = raw_tail(&traces, 99)[..3]
            .iter()
            .map(|t| t.seq)
            .collect::<Vec<_>>();
        assert_eq!(
            first,
            [0, 1, 2],
            "the late result of turn 1 sorts into turn 1"
        );
    }

    #[test]
    fn interactions_pair_calls_and_results() {
        let got = tool_interactions(&conversation());
        let summary: Vec<_> = got
            .iter()
            .map(|i| (i.tool_call_id.as_str(), i.status, i.turn_id.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("slow", ToolStatus::Success, "turn_0001"),
                ("ok", ToolStatus::Success, "turn_0002"),
                ("bad", ToolStatus::Error, "turn_0003"),
                ("open", ToolStatus::Pending, "turn_0003"),
            ]
        );
        assert_eq!(got[1].result, Some(json!(42)));
        assert_eq!(got[2].error.as_deref(), Some("division by zero"));
        assert_eq!(got[0].arguments, json!({"url": "x"}).as_object().cloned());
        assert!(got[3].result_trace_id.is_none());
    }
}
