//! Conversions between the wire types (`engram_proto::pb`) and the
//! domain (`engram_core`, the engine's requests and answers). Empty
//! strings on the wire are absent values here.

use engram_core::budget::TokenBudget;
use engram_core::compaction::CompactionReport;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::render::Format;
use engram_core::retrieve::{ToolInteraction, ToolStatus};
use engram_core::transcript::{Message, Role};
use engram_core::{Media, NewEvent, RawTrace, TraceType, Usage};
use engram_engine::EngineError;
use engram_proto::pb;
use prost_types::value::Kind;
use serde_json::{Map, Number, Value};

mod blocks;
pub mod facts;
mod requests;
mod search;

pub use blocks::*;
pub use requests::*;
pub use search::*;

pub fn json_from_value(v: prost_types::Value) -> Value {
    match v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::ListValue(l)) => {
            Value::Array(l.values.into_iter().map(json_from_value).collect())
        }
        Some(Kind::StructValue(s)) => Value::Object(json_from_struct(s)),
    }
}

/// Protobuf numbers are doubles; whole ones become JSON integers so `3`
/// stays `3` in the files rather than `3.0`.
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        Value::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

pub fn json_from_struct(s: prost_types::Struct) -> Map<String, Value> {
    s.fields
        .into_iter()
        .map(|(k, v)| (k, json_from_value(v)))
        .collect()
}

pub fn value_from_json(v: &Value) -> prost_types::Value {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(value_from_json).collect(),
        }),
        Value::Object(o) => Kind::StructValue(struct_from_json(o)),
    };
    prost_types::Value { kind: Some(kind) }
}

pub fn struct_from_json(o: &Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: o
            .iter()
            .map(|(k, v)| (k.clone(), value_from_json(v)))
            .collect(),
    }
}

/// `None` for an empty string: proto3 cannot tell unset from empty.
pub fn non_empty<S: AsRef<str>>(s: S) -> Option<S> {
    (!s.as_ref().is_empty()).then_some(s)
}

pub fn trace_type_from_pb(raw: i32) -> Option<TraceType> {
    match pb::TraceType::try_from(raw).ok()? {
        pb::TraceType::Unspecified => None,
        pb::TraceType::User => Some(TraceType::User),
        pb::TraceType::Assistant => Some(TraceType::Assistant),
        pb::TraceType::ToolCall => Some(TraceType::ToolCall),
        pb::TraceType::ToolResult => Some(TraceType::ToolResult),
    }
}

pub fn trace_type_to_pb(t: TraceType) -> pb::TraceType {
    match t {
        TraceType::User => pb::TraceType::User,
        TraceType::Assistant => pb::TraceType::Assistant,
        TraceType::ToolCall => pb::TraceType::ToolCall,
        TraceType::ToolResult => pb::TraceType::ToolResult,
    }
}

fn media_from_pb(m: pb::Media) -> Media {
    Media {
        images: m.images,
        audio: m.audio,
        video: m.video,
    }
}

fn media_to_pb(m: &Media) -> pb::Media {
    pb::Media {
        images: m.images.clone(),
        audio: m.audio.clone(),
        video: m.video.clone(),
    }
}

pub fn event_from_pb(e: pb::TraceEvent) -> NewEvent {
    NewEvent {
        trace_type: trace_type_from_pb(e.trace_type),
        content: e.content,
        source_event: e.source_event,
        turn_id: non_empty(e.turn_id),
        event_id: non_empty(e.event_id),
        ts: e.ts,
        tool_name: non_empty(e.tool_name),
        tool_call_id: non_empty(e.tool_call_id),
        tool_args: e.tool_args.map(json_from_struct),
        tool_result: e.tool_result.map(json_from_value),
        tool_error: non_empty(e.tool_error),
        correlation_id: non_empty(e.correlation_id),
        tags: e.tags,
        media: e.media.map(media_from_pb),
        name: non_empty(e.name),
    }
}

/// The event a client would send for `e` (clients and benchmarks in Rust).
pub fn event_to_pb(e: &NewEvent) -> pb::TraceEvent {
    pb::TraceEvent {
        trace_type: e
            .trace_type
            .map_or(pb::TraceType::Unspecified, trace_type_to_pb)
            .into(),
        content: e.content.clone(),
        source_event: e.source_event.clone(),
        turn_id: e.turn_id.clone().unwrap_or_default(),
        event_id: e.event_id.clone().unwrap_or_default(),
        ts: e.ts,
        tool_name: e.tool_name.clone().unwrap_or_default(),
        tool_call_id: e.tool_call_id.clone().unwrap_or_default(),
        tool_args: e.tool_args.as_ref().map(struct_from_json),
        tool_result: e.tool_result.as_ref().map(value_from_json),
        tool_error: e.tool_error.clone().unwrap_or_default(),
        correlation_id: e.correlation_id.clone().unwrap_or_default(),
        tags: e.tags.clone(),
        media: e.media.as_ref().map(media_to_pb),
        name: e.name.clone().unwrap_or_default(),
    }
}

pub fn usage_from_pb(u: pb::Usage) -> Usage {
    Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
        // The engine's to say, from the prompt it served.
        engram_added_tokens: 0,
    }
}

pub fn trace_to_pb(t: &RawTrace) -> pb::RawTrace {
    trace_into_pb(t.clone())
}

pub fn trace_into_pb(t: RawTrace) -> pb::RawTrace {
    pb::RawTrace {
        id: t.id,
        ts: t.ts,
        turn_id: t.turn_id,
        seq: t.seq,
        trace_type: trace_type_to_pb(t.trace_type).into(),
        content: t.content,
        source_event: t.source_event,
        tool_name: t.tool_name.unwrap_or_default(),
        tool_call_id: t.tool_call_id.unwrap_or_default(),
        tool_args: t.tool_args.as_ref().map(struct_from_json),
        tool_result: t.tool_result.as_ref().map(value_from_json),
        tool_error: t.tool_error.unwrap_or_default(),
        correlation_id: t.correlation_id.unwrap_or_default(),
        tags: t.tags,
        media: t.media.as_ref().map(media_to_pb),
        event_id: t.event_id.unwrap_or_default(),
        tool_result_ref: t.tool_result_ref.unwrap_or_default(),
        name: t.name.unwrap_or_default(),
    }
}

pub fn episodic_to_pb(e: &EpisodicItem) -> pb::EpisodicItem {
    pb::EpisodicItem {
        id: e.id.clone(),
        ts: e.ts,
        turn_ids: e.turn_ids.clone(),
        summary: e.summary.clone(),
        tags: e.tags.clone(),
        salience: e.salience,
        trace_ids: e.source.trace_ids.clone(),
        from_ts: e.source.from_ts,
        to_ts: e.source.to_ts,
    }
}

pub fn semantic_to_pb(s: &SemanticItem) -> pb::SemanticItem {
    pb::SemanticItem {
        id: s.id.clone(),
        ts: s.ts,
        fact: s.fact.clone(),
        tags: s.tags.clone(),
        confidence: s.confidence,
        salience: s.salience,
        superseded_by: s.superseded_by.clone().unwrap_or_default(),
        turn_ids: s.turn_ids.clone(),
        trace_ids: s.source.trace_ids.clone(),
        from_ts: s.source.from_ts,
        to_ts: s.source.to_ts,
        origin: facts::origin_to_pb(s.managed.origin).into(),
        pinned: s.managed.pinned,
        expires_at: s.managed.expires_at,
        version: s.version(),
        metadata: s
            .managed
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        deleted_at: s.managed.deleted_at,
        valid_from: (s.managed.deleted_at.is_none()).then(|| s.valid_since()),
        invalid_at: s.invalid_at,
        // Set for a user's facts only (convert/facts.rs).
        sources: Vec::new(),
    }
}

pub fn interaction_to_pb(i: &ToolInteraction) -> pb::ToolInteraction {
    pb::ToolInteraction {
        tool_call_id: i.tool_call_id.clone(),
        tool_name: i.tool_name.clone(),
        turn_id: i.turn_id.clone(),
        arguments: i.arguments.as_ref().map(struct_from_json),
        result: i.result.as_ref().map(value_from_json),
        error: i.error.clone().unwrap_or_default(),
        status: match i.status {
            ToolStatus::Pending => pb::ToolStatus::Pending,
            ToolStatus::Success => pb::ToolStatus::Success,
            ToolStatus::Error => pb::ToolStatus::Error,
        }
        .into(),
        call_trace_id: i.call_trace_id.clone(),
        result_trace_id: i.result_trace_id.clone().unwrap_or_default(),
    }
}

pub fn message_to_pb(m: &Message) -> pb::Message {
    pb::Message {
        role: match m.role {
            Role::System => pb::Role::System,
            Role::User => pb::Role::User,
            Role::Assistant => pb::Role::Assistant,
            Role::Tool => pb::Role::Tool,
        }
        .into(),
        content: m.content.clone(),
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| pb::ToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: Some(struct_from_json(&c.arguments)),
            })
            .collect(),
        tool_call_id: m.tool_call_id.clone().unwrap_or_default(),
        tool_name: m.tool_name.clone().unwrap_or_default(),
        is_error: m.is_error,
        media: m.media.as_ref().map(media_to_pb),
        name: m.name.clone().unwrap_or_default(),
    }
}

pub fn report_to_pb(r: &CompactionReport) -> pb::CompactionReport {
    pb::CompactionReport {
        performed: r.performed,
        trigger: r.trigger.as_str().to_owned(),
        steps: r.steps.iter().map(|t| t.as_str().to_owned()).collect(),
        turn_ids: r.turn_ids.clone(),
        episodic_id: r.episodic_id.clone(),
        semantic_added: r.semantic_added,
        semantic_updated: r.semantic_updated,
        traces_pruned: r.traces_pruned,
        carried: r.carried,
        carry_dropped: r.carry_dropped,
        tokens_before: r.tokens_before,
        tokens_after: r.tokens_after,
        prepared_in_background: r.prepared_ago.is_some(),
        prepared_secs_ago: r.prepared_ago.map_or(0.0, |d| d.as_secs_f64()),
        strategy: r.strategy.as_str().to_owned(),
        error: r
            .error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    }
}

/// The report of a prompt that needed no compaction: its size only.
pub fn no_compaction_to_pb(tokens: u32) -> pb::CompactionReport {
    pb::CompactionReport {
        tokens_before: tokens,
        tokens_after: tokens,
        ..Default::default()
    }
}

pub fn budget_to_pb(b: &TokenBudget) -> pb::TokenBudget {
    pb::TokenBudget {
        max_context_tokens: b.max_context_tokens,
        max_output_tokens: b.max_output_tokens,
        safety_margin_tokens: b.safety_margin_tokens,
        input_budget: b.input_budget,
        compaction_ratio: b.compaction_ratio,
        trigger_tokens: b.trigger_tokens,
    }
}

pub fn format_from_pb(raw: i32) -> Result<Option<Format>, EngineError> {
    match pb::RenderFormat::try_from(raw) {
        Ok(pb::RenderFormat::Unspecified) => Ok(None),
        Ok(pb::RenderFormat::OpenaiChat) => Ok(Some(Format::OpenAiChat)),
        Ok(pb::RenderFormat::OpenaiResponses) => Ok(Some(Format::OpenAiResponses)),
        Ok(pb::RenderFormat::AnthropicMessages) => Ok(Some(Format::AnthropicMessages)),
        Ok(pb::RenderFormat::Gemini) => Ok(Some(Format::Gemini)),
        Err(_) => Err(EngineError::Invalid(format!(
            "render_format {raw} is unknown; use RENDER_FORMAT_UNSPECIFIED, _OPENAI_CHAT, _OPENAI_RESPONSES, _ANTHROPIC_MESSAGES or _GEMINI"
        ))),
    }
}

/// A request's `strategy`: "" for the agent's own.
pub fn strategy_from_pb(
    raw: &str,
) -> Result<Option<engram_core::compaction::Strategy>, EngineError> {
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse()
        .map(Some)
        .map_err(|e| EngineError::Invalid(format!("strategy: {e} (or empty for the agent's own)")))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn json_survives_the_protobuf_round_trip() {
        let v = json!({"a": [1, 2.5, null, true, "s"], "b": {"c": {}}, "n": -7});
        assert_eq!(json_from_value(value_from_json(&v)), v);
        assert_eq!(
            json_from_value(prost_types::Value { kind: None }),
            Value::Null
        );
    }

    #[test]
    fn unknown_and_unspecified_trace_types_are_absent() {
        assert_eq!(trace_type_from_pb(0), None);
        assert_eq!(trace_type_from_pb(99), None);
        assert_eq!(trace_type_from_pb(4), Some(TraceType::ToolResult));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1_000_000i64..1_000_000).prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            "[a-z ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_round_trips(v in json_value()) {
            let back = json_from_value(value_from_json(&v));
            // Key order may differ (protobuf maps are unordered); compare as values.
            prop_assert_eq!(
                serde_json::to_string(&sorted(&back)).unwrap(),
                serde_json::to_string(&sorted(&v)).unwrap()
            );
        }
    }

    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let m: std::collections::BTreeMap<_, _> =
                    o.iter().map(|(k, v)| (k.clone(), sorted(v))).collect();
                Value::Object(m.into_iter().collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            Value::Number(n) => n.as_f64().map(number).unwrap_or(Value::Null),
            other => other.clone(),
        }
    }
}
