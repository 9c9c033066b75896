//! Turn and seq assignment, tool-call pairing and idempotency.
//!
//! [`TurnTracker`] is the per-agent state these rules need. It is derived
//! from the stored traces: [`TurnTracker::apply`] is the one state
//! transition, used both when replaying files at load and after a batch is
//! written, so a restart rebuilds exactly the state that was acknowledged.
//! [`TurnTracker::plan`] validates a whole batch against that state without
//! changing it, so a refused batch changes nothing.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{CoreError, NewEvent, RawTrace, TraceType, Usage};

/// Longest client-chosen identifier (event_id, tool_call_id, tool_name, …).
pub const MAX_ID_LEN: usize = 256;
const MAX_TAGS: usize = 64;
const MAX_MEDIA_URLS: usize = 64;
const MAX_URL_LEN: usize = 8192;

/// Size limits of one Ingest, from config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestLimits {
    /// Events in one request (`limits.max_events_per_request`).
    pub max_events: usize,
    /// Bytes of one stored JSON line (`limits.max_trace_bytes`).
    pub max_trace_bytes: usize,
    /// Tool results longer than this many characters are stored aside with
    /// a preview in the trace (`policy.max_tool_result_chars`; 0: never).
    pub max_tool_result_chars: usize,
}

impl Default for IngestLimits {
    fn default() -> Self {
        Self {
            max_events: 1000,
            max_trace_bytes: 1024 * 1024,
            max_tool_result_chars: 20_000,
        }
    }
}

/// Formats turn number `n` as `turn_0001` (at least four digits).
pub fn turn_id(n: u32) -> String {
    format!("turn_{n:04}")
}

/// The number in a turn id, if it is one.
pub fn turn_number(id: &str) -> Option<u32> {
    let digits = id.strip_prefix("turn_")?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The latest tool call of an id. An id is reused once its call has a
/// result (providers number calls per response, or reuse ids across
/// turns), so this is the newest call's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CallInfo {
    turn: u32,
    /// The call's seq in its turn (0 in checkpoints written before it was
    /// kept).
    #[serde(default)]
    seq: u32,
    tool_name: String,
    answered: bool,
}

/// The per-agent state behind turn assignment. It serializes so a store
/// can checkpoint it instead of replaying every trace ever stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnTracker {
    /// Number of the latest turn; 0 before the first.
    last_turn: u32,
    /// Next seq of each turn (late tool results land in old turns).
    next_seq: HashMap<u32, u32>,
    calls: HashMap<String, CallInfo>,
    /// event_id → id of the trace stored for it.
    events: HashMap<String, String>,
    last_usage: Option<Usage>,
    last_model: Option<String>,
}

/// What happened to one event of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Stored as `new_traces[i]` of the plan.
    New(usize),
    /// A retry: the trace with this id was stored earlier.
    Existing(String),
}

/// A validated batch, ready to be written.
#[derive(Debug, Clone, Default)]
pub struct IngestPlan {
    /// One outcome per request event, in order.
    pub outcomes: Vec<Outcome>,
    /// The traces to append, in order.
    pub new_traces: Vec<RawTrace>,
    /// Their JSONL encoding, concatenated: what to append to the file.
    pub bytes: Vec<u8>,
    /// Large tool results to store in their own files first.
    pub spills: Vec<crate::spill::Spill>,
}

/// Changes a batch would make, layered over the tracker while planning.
#[derive(Default)]
struct Overlay {
    last_turn: Option<u32>,
    next_seq: HashMap<u32, u32>,
    /// Calls made or answered by the batch (they shadow the tracker's).
    calls: HashMap<String, CallInfo>,
    events: HashMap<String, usize>,
}

/// Where a planned event goes, and what it is paired with.
struct Placed {
    turn: u32,
    tool_name: Option<String>,
    tool_call_id: Option<String>,
}

impl TurnTracker {
    /// The latest turn id, if any turn was started.
    pub fn current_turn_id(&self) -> Option<String> {
        (self.last_turn > 0).then(|| turn_id(self.last_turn))
    }

    pub fn turn_count(&self) -> u32 {
        self.last_turn
    }

    pub fn last_usage(&self) -> Option<Usage> {
        self.last_usage
    }

    pub fn last_model(&self) -> Option<&str> {
        self.last_model.as_deref()
    }

    /// Id of the trace stored for `event_id`, if one was.
    pub fn trace_for_event(&self, event_id: &str) -> Option<&str> {
        self.events.get(event_id).map(String::as_str)
    }

    /// Folds one stored trace into the state. Tolerant: traces written by an
    /// older version or edited by hand never make replay fail.
    pub fn apply(&mut self, trace: &RawTrace) {
        let turn = turn_number(&trace.turn_id).unwrap_or(self.last_turn);
        self.last_turn = self.last_turn.max(turn);
        let next = self.next_seq.entry(turn).or_insert(0);
        *next = (*next).max(trace.seq.saturating_add(1));
        if let Some(call_id) = &trace.tool_call_id {
            match trace.trace_type {
                TraceType::ToolCall => {
                    // A result applied before its call (a replay in another
                    // order) sits later in the conversation than the call;
                    // an answered call that sits earlier is an old call
                    // whose id this one reuses.
                    let answered = self
                        .calls
                        .get(call_id)
                        .is_some_and(|c| c.answered && c.turn == turn && c.seq > trace.seq);
                    self.calls.insert(
                        call_id.clone(),
                        CallInfo {
                            turn,
                            seq: trace.seq,
                            tool_name: trace.tool_name.clone().unwrap_or_default(),
                            answered,
                        },
                    );
                }
                TraceType::ToolResult => {
                    let call = self
                        .calls
                        .entry(call_id.clone())
                        .or_insert_with(|| CallInfo {
                            turn,
                            // Its call is not seen yet: it comes before this.
                            seq: trace.seq,
                            tool_name: trace.tool_name.clone().unwrap_or_default(),
                            answered: true,
                        });
                    call.answered = true;
                }
                TraceType::User | TraceType::Assistant => {}
            }
        }
        if let Some(event_id) = &trace.event_id {
            self.events.insert(event_id.clone(), trace.id.clone());
        }
        if trace.usage.is_some() {
            self.last_usage = trace.usage;
        }
        if trace.model.is_some() {
            self.last_model.clone_from(&trace.model);
        }
    }

    /// Validates `events` and assigns ids, turns and seqs, without changing
    /// the tracker. `now` is the server clock in epoch seconds; `new_id`
    /// makes trace ids. Usage and model go on the batch's last new trace.
    pub fn plan(
        &self,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
        limits: IngestLimits,
        now: f64,
        mut new_id: impl FnMut() -> String,
    ) -> Result<IngestPlan, CoreError> {
        if events.is_empty() {
            return Err(CoreError::invalid(
                "events is empty; send at least one event",
            ));
        }
        if events.len() > limits.max_events {
            return Err(CoreError::TooLarge {
                what: "number of events".into(),
                actual: events.len(),
                limit: limits.max_events,
                setting: "limits.max_events_per_request",
            });
        }
        if let Some(m) = model {
            check_id("model", m)?;
        }
        let mut overlay = Overlay::default();
        let mut plan = IngestPlan::default();
        for (index, event) in events.iter().enumerate() {
            let outcome = self
                .plan_one(event, &mut overlay, &mut plan, now, &mut new_id)
                .map_err(|e| e.at_event(index))?;
            plan.outcomes.push(outcome);
        }
        if let Some(last) = plan.new_traces.last_mut() {
            last.usage = usage;
            last.model = model.map(str::to_owned);
        }
        plan.spills =
            crate::spill::spill_large_results(&mut plan.new_traces, limits.max_tool_result_chars);
        for (index, trace) in plan.new_traces.iter().enumerate() {
            let line = trace.to_line();
            if line.len() > limits.max_trace_bytes {
                let event = plan
                    .outcomes
                    .iter()
                    .position(|o| *o == Outcome::New(index))
                    .unwrap_or(index);
                return Err(CoreError::TooLarge {
                    what: "stored size of the event in bytes".into(),
                    actual: line.len(),
                    limit: limits.max_trace_bytes,
                    setting: "limits.max_trace_bytes",
                }
                .at_event(event));
            }
            plan.bytes.extend_from_slice(&line);
        }
        Ok(plan)
    }

    /// One event of a batch: its outcome, and its trace added to `plan`.
    fn plan_one(
        &self,
        event: &NewEvent,
        overlay: &mut Overlay,
        plan: &mut IngestPlan,
        now: f64,
        new_id: &mut impl FnMut() -> String,
    ) -> Result<Outcome, CoreError> {
        if let Some(seen) = self.seen_event(event, overlay)? {
            return Ok(seen);
        }
        let trace_type = event.trace_type.ok_or_else(|| {
            CoreError::invalid(
                "trace_type is unspecified; use user, assistant, tool_call or tool_result",
            )
        })?;
        check_fields(trace_type, event)?;
        let last_turn = overlay.last_turn.unwrap_or(self.last_turn);
        let explicit = explicit_turn(event)?;
        let id = new_id();
        let placed = match trace_type {
            TraceType::User => Placed {
                turn: user_turn(event, explicit, last_turn)?,
                tool_name: None,
                tool_call_id: None,
            },
            TraceType::Assistant => Placed {
                turn: answer_turn(explicit, last_turn)?,
                tool_name: event.tool_name.clone(),
                tool_call_id: None,
            },
            TraceType::ToolCall => {
                let turn = answer_turn(explicit, last_turn)?;
                self.plan_call(event, &id, turn, overlay)?
            }
            TraceType::ToolResult => self.plan_result(event, explicit, overlay)?,
        };
        overlay.last_turn = Some(last_turn.max(placed.turn));
        let seq = self.next_seq_of(placed.turn, overlay);
        if trace_type == TraceType::ToolCall
            && let Some(call) = placed
                .tool_call_id
                .as_ref()
                .and_then(|c| overlay.calls.get_mut(c))
        {
            call.seq = seq;
        }
        let index = plan.new_traces.len();
        if let Some(eid) = &event.event_id {
            overlay.events.insert(eid.clone(), index);
        }
        let trace = new_trace(event, trace_type, id, placed, seq, now);
        plan.new_traces.push(trace);
        Ok(Outcome::New(index))
    }

    /// The outcome of an event already stored, or already planned in this
    /// batch, under its `event_id` (a retry).
    fn seen_event(
        &self,
        event: &NewEvent,
        overlay: &Overlay,
    ) -> Result<Option<Outcome>, CoreError> {
        let Some(eid) = &event.event_id else {
            return Ok(None);
        };
        check_id("event_id", eid)?;
        if let Some(id) = self.events.get(eid) {
            return Ok(Some(Outcome::Existing(id.clone())));
        }
        Ok(overlay.events.get(eid).map(|i| Outcome::New(*i)))
    }

    /// The next seq of `turn`, taken.
    fn next_seq_of(&self, turn: u32, overlay: &mut Overlay) -> u32 {
        let seq = *overlay
            .next_seq
            .entry(turn)
            .or_insert_with(|| self.next_seq.get(&turn).copied().unwrap_or(0));
        overlay.next_seq.insert(turn, seq + 1);
        seq
    }
}

/// The turn an event names (`turn_id`), if it names one.
fn explicit_turn(event: &NewEvent) -> Result<Option<u32>, CoreError> {
    event
        .turn_id
        .as_deref()
        .map(|t| {
            turn_number(t).ok_or_else(|| {
                CoreError::invalid(format!("turn_id {t:?} is not a turn id like turn_0001"))
            })
        })
        .transpose()
}

/// The trace an accepted event becomes.
fn new_trace(
    event: &NewEvent,
    trace_type: TraceType,
    id: String,
    placed: Placed,
    seq: u32,
    now: f64,
) -> RawTrace {
    RawTrace {
        id,
        ts: event.ts.unwrap_or(now),
        turn_id: turn_id(placed.turn),
        seq,
        trace_type,
        content: event.content.clone(),
        source_event: event.source_event.clone(),
        tool_name: placed.tool_name,
        tool_call_id: placed.tool_call_id,
        tool_args: event.tool_args.clone(),
        tool_result: event.tool_result.clone(),
        tool_error: event.tool_error.clone(),
        correlation_id: event.correlation_id.clone(),
        tags: event.tags.clone(),
        media: event.media.clone().filter(|m| !m.is_empty()),
        event_id: event.event_id.clone(),
        tool_result_ref: None,
        usage: None,
        model: None,
        name: event.name.clone(),
    }
}

/// The turn a user event starts: the next one.
fn user_turn(event: &NewEvent, explicit: Option<u32>, last_turn: u32) -> Result<u32, CoreError> {
    let next = last_turn + 1;
    if explicit.is_some_and(|t| t != next) {
        return Err(CoreError::invalid(format!(
            "a user event starts the next turn, {}; turn_id {:?} is not it (leave turn_id empty)",
            turn_id(next),
            event.turn_id.as_deref().unwrap_or_default()
        )));
    }
    Ok(next)
}

/// The turn an assistant message or a tool call joins: the latest, or an
/// earlier one named.
fn answer_turn(explicit: Option<u32>, last_turn: u32) -> Result<u32, CoreError> {
    match explicit {
        Some(t) if t == 0 || t > last_turn => Err(CoreError::invalid(format!(
            "turn_id {} does not exist yet; the latest turn is {}",
            turn_id(t),
            if last_turn == 0 {
                "none".into()
            } else {
                turn_id(last_turn)
            }
        ))),
        Some(t) => Ok(t),
        // An assistant speaking first opens a turn of its own.
        None => Ok(last_turn.max(1)),
    }
}

fn check_id(field: &str, value: &str) -> Result<(), CoreError> {
    if value.len() > MAX_ID_LEN {
        return Err(CoreError::invalid(format!(
            "{field} is {} bytes long; at most {MAX_ID_LEN} are allowed",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(CoreError::invalid(format!(
            "{field} contains a control character"
        )));
    }
    Ok(())
}

/// Per-type field rules that need no agent state.
fn check_fields(trace_type: TraceType, event: &NewEvent) -> Result<(), CoreError> {
    let kind = trace_type.as_str();
    let is_tool = matches!(trace_type, TraceType::ToolCall | TraceType::ToolResult);
    match (&event.tool_call_id, is_tool) {
        // Engram names a call that has no id; a result without one pairs
        // by its tool_name (`plan_result`).
        (None, true) => {}
        (Some(_), false) => {
            return Err(CoreError::invalid(format!(
                "tool_call_id is only for tool_call and tool_result, not {kind}"
            )));
        }
        (Some(id), true) => check_id("tool_call_id", id)?,
        (None, false) => {}
    }
    if trace_type == TraceType::ToolCall && event.tool_name.is_none() {
        return Err(CoreError::invalid("a tool_call needs tool_name"));
    }
    if event.tool_args.is_some() && trace_type != TraceType::ToolCall {
        return Err(CoreError::invalid(format!(
            "tool_args is only for tool_call, not {kind}"
        )));
    }
    if (event.tool_result.is_some() || event.tool_error.is_some())
        && trace_type != TraceType::ToolResult
    {
        return Err(CoreError::invalid(format!(
            "tool_result and tool_error are only for tool_result, not {kind}"
        )));
    }
    let has_media = event.media.as_ref().is_some_and(|m| !m.is_empty());
    if matches!(trace_type, TraceType::User | TraceType::Assistant)
        && event.content.is_empty()
        && !has_media
    {
        return Err(CoreError::invalid(format!(
            "{kind} events need content or media"
        )));
    }
    if let Some(ts) = event.ts
        && !(ts.is_finite() && ts >= 0.0)
    {
        return Err(CoreError::invalid(format!(
            "ts {ts} is not a time; use epoch seconds >= 0"
        )));
    }
    for (field, value) in [
        ("tool_name", &event.tool_name),
        ("correlation_id", &event.correlation_id),
        ("name", &event.name),
    ] {
        if let Some(v) = value {
            check_id(field, v)?;
        }
    }
    if event.source_event.len() > MAX_ID_LEN {
        check_id("source_event", &event.source_event)?;
    }
    if event.tags.len() > MAX_TAGS {
        return Err(CoreError::invalid(format!(
            "{} tags; at most {MAX_TAGS} are allowed",
            event.tags.len()
        )));
    }
    for tag in &event.tags {
        check_id("tag", tag)?;
    }
    if let Some(media) = &event.media {
        if media.url_count() > MAX_MEDIA_URLS {
            return Err(CoreError::invalid(format!(
                "{} media URLs; at most {MAX_MEDIA_URLS} are allowed",
                media.url_count()
            )));
        }
        if media.longest_url() > MAX_URL_LEN {
            return Err(CoreError::invalid(format!(
                "a media URL is {} bytes; at most {MAX_URL_LEN} are allowed (store large media elsewhere and send its URL)",
                media.longest_url()
            )));
        }
    }
    Ok(())
}

/// Assigns and applies `events` one by one, as a store would, with ids
/// `t1`, `t2`, …; panics on a refused event. For tests and benchmarks only
/// (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub fn assign_all(events: impl IntoIterator<Item = NewEvent>) -> Vec<RawTrace> {
    let mut tracker = TurnTracker::default();
    let mut n = 0;
    let mut out = vec![];
    for event in events {
        let plan = tracker
            .plan(&[event], None, None, IngestLimits::default(), 1.0, || {
                n += 1;
                format!("t{n}")
            })
            .expect("a valid event");
        for trace in plan.new_traces {
            tracker.apply(&trace);
            out.push(trace);
        }
    }
    out
}

mod calls;
#[cfg(test)]
pub(crate) mod tests;
