//! The prompt-only tiers: what old turns show of their traces, never what
//! is stored. Each tier moves a turn boundary forward in the agent's
//! settings (a new epoch, since the prompt's prefix changes); the raw
//! traces stay as they were.
//!
//! - **Snip** (`snip_before`): messages that carry nothing for the model
//!   leave the prompt: an assistant message with no text, no media and no
//!   call (a model's empty turn), and a tool result that repeats, word for
//!   word, an earlier result of the same tool still shown whole (it shows
//!   as a reference to that call). A call and its result are never
//!   separated: a result is replaced, never dropped.
//! - **Microcompact** (`microcompact_before`): tool results show as a
//!   placeholder keeping the tool's name, the call id and the size.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::{AgentMeta, Derived};
use crate::transcript::result_text;
use crate::turns::turn_number;
use crate::{RawTrace, TraceType};

/// A prompt-only tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hiding {
    Snip,
    Microcompact,
}

impl Hiding {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snip => "snip",
            Self::Microcompact => "microcompact",
        }
    }
}

/// Results shorter than this are kept even when repeated: the reference
/// would save nothing.
const MIN_REPEATED_CHARS: usize = 80;

/// How an old trace shows in the prompt.
#[derive(Debug)]
pub(crate) enum Shown {
    Whole,
    /// Snipped: not shown at all.
    Nothing,
    /// Shown as this trace instead (a placeholder or a reference).
    As(Box<RawTrace>),
}

/// The results shown whole so far in the epoch, by tool and text, with
/// the call that showed each first (what a repeat refers to).
#[derive(Debug, Default)]
pub(crate) struct Shown1st {
    results: HashMap<(u64, usize), String>,
}

impl Shown1st {
    pub(crate) fn clear(&mut self) {
        self.results.clear();
    }

    /// How `trace` shows under `meta`'s tiers, noting a result shown whole.
    pub(crate) fn show(&mut self, meta: &AgentMeta, trace: &RawTrace) -> Shown {
        let turn = turn_number(&trace.turn_id);
        let before = |limit: Option<u32>| limit.is_some_and(|b| turn.is_some_and(|n| n < b));
        let snipped = before(meta.snip_before);
        match trace.trace_type {
            TraceType::Assistant if snipped && is_empty_assistant(trace) => Shown::Nothing,
            TraceType::ToolResult if before(meta.microcompact_before) => {
                Shown::As(Box::new(microcompacted(trace)))
            }
            // Only an agent that snipped looks for repeats: the others'
            // results are not copied and hashed as they are folded in.
            TraceType::ToolResult if meta.snip_before.is_some() => {
                let text = result_text(trace);
                let key = (fingerprint(trace.tool_name.as_deref(), &text), text.len());
                match self.results.get(&key) {
                    Some(first) if snipped && text.chars().count() >= MIN_REPEATED_CHARS => {
                        Shown::As(Box::new(repeated(trace, first)))
                    }
                    Some(_) => Shown::Whole,
                    None => {
                        let call = trace.tool_call_id.clone().unwrap_or_default();
                        self.results.insert(key, call);
                        Shown::Whole
                    }
                }
            }
            _ => Shown::Whole,
        }
    }
}

fn is_empty_assistant(trace: &RawTrace) -> bool {
    trace.content.trim().is_empty() && trace.media.as_ref().is_none_or(|m| m.is_empty())
}

fn fingerprint(tool: Option<&str>, text: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    tool.hash(&mut hasher);
    text.hash(&mut hasher);
    hasher.finish()
}

/// A tool result as microcompact shows it: name, call id and size only.
pub fn microcompacted(trace: &RawTrace) -> RawTrace {
    let size = result_text(trace).chars().count();
    shown_as(
        trace,
        format!(
            "[tool result of {size} characters omitted: {} ({}); the raw trace keeps it]",
            trace.tool_name.as_deref().unwrap_or("tool"),
            trace.tool_call_id.as_deref().unwrap_or_default()
        ),
    )
}

/// A tool result that repeats the result of call `first`, as snip shows it.
fn repeated(trace: &RawTrace, first: &str) -> RawTrace {
    shown_as(
        trace,
        format!("[same result as call {first} above; the raw trace keeps it]"),
    )
}

fn shown_as(trace: &RawTrace, text: String) -> RawTrace {
    RawTrace {
        tool_result: Some(serde_json::Value::String(text)),
        tool_error: None,
        content: String::new(),
        ..trace.clone()
    }
}

impl Derived {
    /// The settings that apply `hiding` to turns older than the last
    /// `keep_turns` (and the current one), and how many traces it changes
    /// that showed before; `None` when it would change none. A new epoch,
    /// unless the agent is still at the one an earlier tier of the same
    /// compaction `opened`.
    pub fn hide_meta(
        &self,
        hiding: Hiding,
        keep_turns: usize,
        opened: Option<u32>,
    ) -> Option<(AgentMeta, u32)> {
        let latest = self.tracker.turn_count();
        let before = latest.saturating_sub(u32::try_from(keep_turns).unwrap_or(u32::MAX));
        let mut meta = self.meta.clone();
        let already = match hiding {
            Hiding::Snip => meta.snip_before.replace(before),
            Hiding::Microcompact => meta.microcompact_before.replace(before),
        }
        .unwrap_or(0);
        if before <= already {
            return None;
        }
        // What shows now against what would show: the traces the new
        // boundary changes.
        let (mut now, mut then) = (Shown1st::default(), Shown1st::default());
        let shown: Vec<&RawTrace> = self
            .traces
            .iter()
            .filter(|t| !self.meta.snapshot_trace_ids.contains(&t.id))
            .collect();
        let changed = shown
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                let was = now.show(&self.meta, t);
                let will = then.show(&meta, t);
                // Empty text before a call is the call's message either
                // way: the prompt does not change.
                let before_a_call = shown
                    .get(i + 1)
                    .is_some_and(|next| next.trace_type == TraceType::ToolCall);
                let differs = match (&was, &will) {
                    (Shown::As(a), Shown::As(b)) => a.tool_result != b.tool_result,
                    _ => std::mem::discriminant(&was) != std::mem::discriminant(&will),
                };
                differs && !(matches!(will, Shown::Nothing) && before_a_call)
            })
            .count();
        if changed == 0 {
            return None;
        }
        if opened != Some(self.meta.epoch) {
            meta.epoch += 1;
        }
        meta.compaction_required = false;
        meta.epoch_start_trace = self.traces.last().map(|t| t.id.clone());
        Some((meta, u32::try_from(changed).unwrap_or(u32::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::NewEvent;
    use crate::transcript::Role;
    use crate::turns::assign_all;

    fn agent(events: Vec<NewEvent>) -> Derived {
        let mut agent = Derived::default();
        for trace in assign_all(events) {
            agent.traces.push(trace.clone());
            agent.note(&trace);
        }
        agent
    }

    fn adopt(agent: &mut Derived, meta: AgentMeta) {
        agent.meta = meta;
        let _ = agent.rebuild_epoch();
    }

    /// Snip changes what old turns show, never the traces: a blank
    /// assistant message goes (unless a call follows it, whose message it
    /// is anyway), a result repeating one shown whole becomes a reference
    /// to that call, a short repeat stays. The count is what changed in
    /// the prompt, and a second snip of the same turns changes nothing.
    #[test]
    fn snip_hides_blank_answers_and_repeated_results_of_old_turns() {
        let page = "the same long status page ".repeat(10);
        let mut a = agent(vec![
            NewEvent::user("one"),
            NewEvent::tool_call("c1", "status", json!({})),
            NewEvent::tool_result("c1", json!(page)),
            NewEvent::assistant(" \n"),
            NewEvent::assistant("fine"),
            NewEvent::user("two"),
            NewEvent::assistant("\t"),
            NewEvent::tool_call("c2", "status", json!({})),
            NewEvent::tool_result("c2", json!(page)),
            NewEvent::tool_call("c3", "other", json!({})),
            NewEvent::tool_result("c3", json!(page)),
            NewEvent::tool_call("c4", "status", json!({})),
            NewEvent::tool_result("c4", json!("ok")),
            NewEvent::tool_call("c5", "status", json!({})),
            NewEvent::tool_result("c5", json!("ok")),
            NewEvent::user("three"),
            NewEvent::tool_call("c6", "status", json!({})),
            NewEvent::tool_result("c6", json!(page)),
        ]);
        let traces = a.traces.clone();
        let before = a.transcript.messages().len();
        // Turn 3 is the current one; none kept before it.
        let (meta, changed) = a.hide_meta(Hiding::Snip, 0, None).unwrap();
        assert_eq!(meta.snip_before, Some(3));
        assert_eq!(meta.epoch, 1);
        // The blank answer of turn 1, and c2's repeat (not c3's: another
        // tool; not c5's: too short to be worth a reference).
        assert_eq!(changed, 2);
        adopt(&mut a, meta);
        let messages = a.transcript.messages();
        assert_eq!(messages.len(), before - 1, "one message fewer");
        let shown = |id: &str| {
            messages
                .iter()
                .find(|m| m.tool_call_id.as_deref() == Some(id))
                .map(|m| m.content.clone())
                .unwrap()
        };
        assert_eq!(shown("c1"), page);
        assert_eq!(
            shown("c2"),
            "[same result as call c1 above; the raw trace keeps it]"
        );
        assert_eq!(shown("c3"), page, "another tool's");
        assert_eq!(shown("c5"), "ok", "short");
        assert_eq!(shown("c6"), page, "the current turn is not snipped");
        assert!(
            !messages.iter().any(|m| m.role == Role::Assistant
                && m.content.trim().is_empty()
                && m.tool_calls.is_empty()),
            "no blank answer left"
        );
        assert_eq!(a.traces, traces, "the traces are as they were");
        assert!(a.hide_meta(Hiding::Snip, 0, None).is_none(), "nothing new");
        // Microcompact after it, in the same epoch: every old result is a
        // placeholder, the reference too.
        let (meta, hidden) = a.hide_meta(Hiding::Microcompact, 0, Some(1)).unwrap();
        assert_eq!((meta.epoch, hidden), (1, 5));
        // Another epoch started meanwhile: a new one after it.
        let (meta, _) = a.hide_meta(Hiding::Microcompact, 0, Some(0)).unwrap();
        assert_eq!(meta.epoch, 2);
    }
}
