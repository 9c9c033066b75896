//! Tool-call pairing while a batch is planned: a call's id (its own, or
//! one Engram gives a call that has none), and the call a result answers
//! (by id, or without one, the oldest waiting call of its tool).

use super::{CallInfo, Overlay, Placed, TurnTracker, turn_id};
use crate::{CoreError, NewEvent};

impl TurnTracker {
    /// The call of `id` as the batch so far leaves it.
    pub(super) fn call<'a>(&'a self, overlay: &'a Overlay, id: &str) -> Option<&'a CallInfo> {
        overlay.calls.get(id).or_else(|| self.calls.get(id))
    }

    /// A tool call in `turn`. Its id may be one an earlier call used once
    /// that call has its result; a call without an id (Gemini's function
    /// calls carry none) gets `call_<its trace id>`.
    pub(super) fn plan_call(
        &self,
        event: &NewEvent,
        trace_id: &str,
        turn: u32,
        overlay: &mut Overlay,
    ) -> Result<Placed, CoreError> {
        let call_id = match &event.tool_call_id {
            Some(id) => id.clone(),
            None => format!("call_{trace_id}"),
        };
        if self.call(overlay, &call_id).is_some_and(|c| !c.answered) {
            return Err(CoreError::invalid(format!(
                "tool_call_id {call_id:?} is used by a call still waiting for its result; ingest that result first, or give this call another id"
            )));
        }
        let tool_name = event.tool_name.clone();
        overlay.calls.insert(
            call_id.clone(),
            CallInfo {
                turn,
                seq: 0,
                tool_name: tool_name.clone().unwrap_or_default(),
                answered: false,
            },
        );
        Ok(Placed {
            turn,
            tool_name,
            tool_call_id: Some(call_id),
        })
    }

    /// A tool result, in the turn of its call: the call of its id, or
    /// without an id, the oldest call of its tool_name still waiting.
    pub(super) fn plan_result(
        &self,
        event: &NewEvent,
        explicit: Option<u32>,
        overlay: &mut Overlay,
    ) -> Result<Placed, CoreError> {
        let call_id = match &event.tool_call_id {
            Some(id) => id.clone(),
            None => self.waiting_call(overlay, event.tool_name.as_deref())?,
        };
        let call = self.call(overlay, &call_id).ok_or_else(|| {
            CoreError::invalid(format!(
                "tool_call_id {call_id:?} matches no tool call of this agent; ingest the tool_call first"
            ))
        })?;
        if call.answered {
            return Err(CoreError::invalid(format!(
                "tool call {call_id:?} already has a result; use event_id to retry safely"
            )));
        }
        if explicit.is_some_and(|t| t != call.turn) {
            return Err(CoreError::invalid(format!(
                "a tool result belongs to the turn of its call, {}; turn_id {:?} differs",
                turn_id(call.turn),
                event.turn_id.as_deref().unwrap_or_default()
            )));
        }
        let tool_name = match &event.tool_name {
            Some(name) if !call.tool_name.is_empty() && *name != call.tool_name => {
                return Err(CoreError::invalid(format!(
                    "tool_name {name:?} differs from the call's {:?}",
                    call.tool_name
                )));
            }
            None if !call.tool_name.is_empty() => Some(call.tool_name.clone()),
            name => name.clone(),
        };
        let answered = CallInfo {
            answered: true,
            ..call.clone()
        };
        let turn = answered.turn;
        overlay.calls.insert(call_id.clone(), answered);
        Ok(Placed {
            turn,
            tool_name,
            tool_call_id: Some(call_id),
        })
    }

    /// The id of the oldest call of `tool_name` still waiting for a
    /// result, for a result that carries no id.
    fn waiting_call(
        &self,
        overlay: &Overlay,
        tool_name: Option<&str>,
    ) -> Result<String, CoreError> {
        let name = tool_name.ok_or_else(|| {
            CoreError::invalid(
                "a tool_result needs tool_call_id, or without one, tool_name to pair it with the oldest call of that tool still waiting for its result",
            )
        })?;
        // The tracker's calls that the batch shadows are not the latest.
        overlay
            .calls
            .iter()
            .chain(&self.calls)
            .filter(|(id, c)| {
                !c.answered && c.tool_name == name && self.call(overlay, id) == Some(*c)
            })
            .map(|(id, c)| ((c.turn, c.seq), id))
            .min()
            .map(|(_, id)| id.clone())
            .ok_or_else(|| {
                CoreError::invalid(format!(
                    "no call of tool_name {name:?} is waiting for a result; a tool_result without tool_call_id pairs with one"
                ))
            })
    }
}
