//! The active transcript of an epoch as structured messages.
//!
//! Messages are derived from the epoch's traces in file order and only ever
//! appended, so the rendered prefix of an epoch stays byte-identical between
//! calls and providers' prompt caches keep hitting.
//!
//! Tool pairing is guaranteed, whatever order events arrive in:
//! - consecutive tool calls (with the assistant text right before them) form
//!   one assistant message — one assistant step;
//! - a result of the current step becomes a `Tool` message after it;
//! - a call still without a result when the prompt is built gets a
//!   placeholder `Tool` message ([`PENDING_RESULT`]) at the end of the prompt
//!   (not stored: the real result replaces it next time);
//! - when the conversation moves on (a user or assistant message) before a
//!   call returned, the placeholder is committed in place, and a result that
//!   arrives later is delivered as a user note ([`late_result_note`]), since
//!   the provider would reject a tool message that far from its call.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use crate::{Media, RawTrace, TraceType};

/// Content of the tool message that stands for a result not yet returned.
pub const PENDING_RESULT: &str = "[tool result not available yet]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One tool call of an assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// One message of the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    /// For `Tool` messages: the call answered.
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    pub is_error: bool,
    pub media: Option<Media>,
    /// Who said it (a user or assistant message's participant), where the
    /// client gave a name.
    pub name: Option<String>,
}

impl Message {
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: vec![],
            tool_call_id: None,
            tool_name: None,
            is_error: false,
            media: None,
            name: None,
        }
    }

    fn tool(call_id: &str, name: &str, content: String, is_error: bool) -> Self {
        Self {
            tool_call_id: Some(call_id.to_owned()),
            tool_name: Some(name.to_owned()),
            is_error,
            ..Self::text(Role::Tool, content)
        }
    }
}

/// The text a tool result is shown as: a JSON string as itself, any other
/// JSON compact; an error's text first.
pub fn result_text(trace: &RawTrace) -> String {
    let result = match &trace.tool_result {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    };
    let result = result.or_else(|| (!trace.content.is_empty()).then(|| trace.content.clone()));
    match (
        trace.tool_error.as_deref().filter(|e| !e.is_empty()),
        result,
    ) {
        (Some(err), Some(r)) => format!("error: {err}\n{r}"),
        (Some(err), None) => format!("error: {err}"),
        (None, Some(r)) => r,
        (None, None) => String::new(),
    }
}

/// The user note that carries a result whose call's step is long closed.
pub fn late_result_note(trace: &RawTrace) -> String {
    format!(
        "[late tool result for call {} ({}) of {}]\n{}",
        trace.tool_call_id.as_deref().unwrap_or_default(),
        trace.tool_name.as_deref().unwrap_or("tool"),
        trace.turn_id,
        result_text(trace)
    )
}

/// The assistant step still open for results.
#[derive(Debug, Clone, Default)]
struct OpenStep {
    /// Index of its assistant message.
    index: usize,
    /// Calls without a result yet, in call order: (id, name).
    unanswered: Vec<(String, String)>,
    /// A result was appended: later calls start a new step.
    answered_any: bool,
}

/// The ids tool calls go out with in the prompt. An agent may reuse a call
/// id once its call has a result, but providers want each call of a
/// conversation to have its own (Anthropic, OpenAI Responses): a reused id
/// goes out with a suffix (`call_1_2`), and the results after it follow.
#[derive(Debug, Clone, Default)]
struct CallIds {
    /// Every id sent in this epoch's messages.
    sent: HashSet<String>,
    /// What each agent id went out as last.
    current: HashMap<String, String>,
}

impl CallIds {
    fn call(&mut self, id: &str) -> String {
        let mut out = id.to_owned();
        let mut n = 1;
        while self.sent.contains(&out) {
            n += 1;
            out = format!("{id}_{n}");
        }
        self.sent.insert(out.clone());
        if out != id {
            self.current.insert(id.to_owned(), out.clone());
        }
        out
    }

    fn result<'a>(&'a self, id: &'a str) -> &'a str {
        self.current.get(id).map_or(id, String::as_str)
    }
}

/// Identities of transcripts, so caches kept outside one can tell it from
/// another (a rebuilt epoch, another agent).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The committed messages of an epoch (after its base) and the open step.
#[derive(Debug)]
pub struct Transcript {
    id: u64,
    /// Shared with readers that render a prompt after the agent's lock is
    /// released; a change while one still holds them copies them first.
    messages: Arc<Vec<Message>>,
    open: Option<OpenStep>,
    ids: CallIds,
}

impl Default for Transcript {
    fn default() -> Self {
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            messages: Arc::default(),
            open: None,
            ids: CallIds::default(),
        }
    }
}

/// A clone is a transcript of its own identity: it may grow apart from the
/// original (the messages are copied on its first change).
impl Clone for Transcript {
    fn clone(&self) -> Self {
        Self {
            messages: Arc::clone(&self.messages),
            open: self.open.clone(),
            ids: self.ids.clone(),
            ..Self::default()
        }
    }
}

impl Transcript {
    /// A transcript that starts from `base` (an epoch's snapshot message).
    pub fn with_base(base: Message) -> Self {
        Self {
            messages: Arc::new(vec![base]),
            ..Self::default()
        }
    }

    /// This transcript's identity. With [`messages`](Self::messages) it is
    /// all a cache needs: only the last committed message can still change,
    /// so a cache that saw `n` messages of this transcript knows the first
    /// `n - 1` of them as they are.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Folds the traces of an epoch, in file order.
    pub fn from_traces<'a>(traces: impl IntoIterator<Item = &'a RawTrace>) -> Self {
        let mut t = Self::default();
        for trace in traces {
            t.push(trace);
        }
        t
    }

    /// The committed messages, shared: a reader keeps them as they are now
    /// while the transcript goes on (see [`messages`](Self::messages)).
    pub fn shared(&self) -> Arc<Vec<Message>> {
        Arc::clone(&self.messages)
    }

    fn messages_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.messages)
    }

    /// Committed messages. Only the last one can still change (a tool call
    /// joining its step); every earlier one is final.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Placeholders for calls of the open step that have no result yet: to
    /// append when rendering, not to store.
    pub fn pending_tail(&self) -> Vec<Message> {
        self.open
            .iter()
            .flat_map(|s| &s.unanswered)
            .map(|(id, name)| Message::tool(id, name, PENDING_RESULT.to_owned(), false))
            .collect()
    }

    /// Appends what `trace` adds to the prompt. Returns the index of the
    /// first message that changed (for incremental token counts).
    pub fn push(&mut self, trace: &RawTrace) -> usize {
        let first_changed = self.messages.len();
        match trace.trace_type {
            TraceType::User => {
                self.close_step();
                self.messages_mut().push(Message {
                    media: trace.media.clone(),
                    name: trace.name.clone(),
                    ..Message::text(Role::User, trace.content.clone())
                });
            }
            TraceType::Assistant => {
                self.close_step();
                self.messages_mut().push(Message {
                    media: trace.media.clone(),
                    name: trace.name.clone(),
                    ..Message::text(Role::Assistant, trace.content.clone())
                });
            }
            TraceType::ToolCall => return self.push_call(trace),
            TraceType::ToolResult => {
                let call_id = self
                    .ids
                    .result(trace.tool_call_id.as_deref().unwrap_or_default());
                let open = self.open.as_mut().and_then(|s| {
                    let at = s.unanswered.iter().position(|(id, _)| id == call_id)?;
                    Some((s, at))
                });
                match open {
                    Some((step, at)) => {
                        let (id, name) = step.unanswered.remove(at);
                        step.answered_any = true;
                        let is_error = trace.tool_error.as_deref().is_some_and(|e| !e.is_empty());
                        let name = trace.tool_name.clone().unwrap_or(name);
                        Arc::make_mut(&mut self.messages).push(Message::tool(
                            &id,
                            &name,
                            result_text(trace),
                            is_error,
                        ));
                    }
                    None => {
                        self.close_step();
                        self.messages_mut()
                            .push(Message::text(Role::User, late_result_note(trace)));
                    }
                }
            }
        }
        first_changed
    }

    fn push_call(&mut self, trace: &RawTrace) -> usize {
        let call = ToolCall {
            id: self
                .ids
                .call(trace.tool_call_id.as_deref().unwrap_or_default()),
            name: trace.tool_name.clone().unwrap_or_default(),
            arguments: trace.tool_args.clone().unwrap_or_default(),
        };
        let entry = (call.id.clone(), call.name.clone());
        let last = self.messages.len().checked_sub(1);
        // Joins the open step while no result followed it yet.
        if let Some(step) = self
            .open
            .as_mut()
            .filter(|s| !s.answered_any && Some(s.index) == last)
        {
            step.unanswered.push(entry);
            Arc::make_mut(&mut self.messages)[step.index]
                .tool_calls
                .push(call);
            return step.index;
        }
        self.close_step();
        // Assistant text right before the calls is the same step.
        let last = self.messages.len().checked_sub(1);
        let joins_text = last.is_some_and(|i| {
            let m = &self.messages[i];
            m.role == Role::Assistant && m.tool_calls.is_empty()
        });
        let index = if joins_text {
            last.unwrap_or_default()
        } else {
            self.messages_mut().push(Message::text(Role::Assistant, ""));
            self.messages.len() - 1
        };
        self.messages_mut()[index].tool_calls.push(call);
        self.open = Some(OpenStep {
            index,
            unanswered: vec![entry],
            answered_any: false,
        });
        index
    }

    /// Commits placeholders for the open step's unanswered calls.
    fn close_step(&mut self) {
        let tail = self.pending_tail();
        if !tail.is_empty() {
            self.messages_mut().extend(tail);
        }
        self.open = None;
    }
}

#[cfg(test)]
pub(crate) mod tests;
