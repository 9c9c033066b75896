//! Raw traces as stored (one JSON object per line of `raw_traces.jsonl`) and
//! the events agents send. Field names and order follow the design so that
//! `jq` over the files reads like the API.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The four kinds of event. Serialized as `user`, `assistant`, `tool_call`,
/// `tool_result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceType {
    User,
    Assistant,
    ToolCall,
    ToolResult,
}

impl TraceType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
        }
    }
}

/// Media URLs attached to an event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Media {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audio: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub video: Vec<String>,
}

impl Media {
    pub fn is_empty(&self) -> bool {
        self.images.is_empty() && self.audio.is_empty() && self.video.is_empty()
    }

    fn urls(&self) -> impl Iterator<Item = &String> {
        self.images.iter().chain(&self.audio).chain(&self.video)
    }

    pub(crate) fn url_count(&self) -> usize {
        self.urls().count()
    }

    pub(crate) fn longest_url(&self) -> usize {
        self.urls().map(String::len).max().unwrap_or(0)
    }
}

/// Provider-reported token usage of one LLM call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    /// What Engram added to the prompt this usage is for and the next
    /// prompt does not carry (that turn's recall block), as Engram counted
    /// it when it served the prompt: left out of the size the report
    /// stands for ([`Usage::carried_prompt_tokens`]), so a turn's recall
    /// never counts towards the next turn's compaction trigger.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub engram_added_tokens: u32,
}

impl Usage {
    /// The reported prompt without what Engram added to it for that call
    /// only: what the next prompt carries of it.
    pub fn carried_prompt_tokens(&self) -> u32 {
        self.prompt_tokens.saturating_sub(self.engram_added_tokens)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One stored event: a line of `raw_traces.jsonl` or the archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawTrace {
    pub id: String,
    /// Epoch seconds.
    pub ts: f64,
    pub turn_id: String,
    /// Order within the turn; the user message of a turn is 0.
    pub seq: u32,
    pub trace_type: TraceType,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub source_event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_args: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<Media>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result_ref: Option<String>,
    /// Usage the provider reported for the LLM call that produced the Ingest
    /// this trace closed; kept on the trace so it is as durable as the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Model of that LLM call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Who said it: a participant's display name (several people can share
    /// one conversation), as the client gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl RawTrace {
    /// The JSONL encoding: one line, newline-terminated.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("a RawTrace always serializes");
        line.push(b'\n');
        line
    }

    /// Parses one line (without or with its newline).
    pub fn from_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(line)
    }
}

/// An event as an agent sends it, before the server assigns id, ts, turn
/// and seq. Empty strings from the wire are `None` here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewEvent {
    /// `None` when the client left the type unspecified.
    pub trace_type: Option<TraceType>,
    pub content: String,
    pub source_event: String,
    pub turn_id: Option<String>,
    pub event_id: Option<String>,
    pub ts: Option<f64>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_args: Option<Map<String, Value>>,
    pub tool_result: Option<Value>,
    pub tool_error: Option<String>,
    pub correlation_id: Option<String>,
    pub tags: Vec<String>,
    pub media: Option<Media>,
    pub name: Option<String>,
}

impl NewEvent {
    /// About how many bytes the event carries (its text and JSON payloads):
    /// a measure of the work of storing it, not of its stored size.
    pub fn approx_bytes(&self) -> usize {
        fn json(v: &Value) -> usize {
            match v {
                Value::String(s) => s.len() + 2,
                Value::Array(a) => a.iter().map(json).sum::<usize>() + 2,
                Value::Object(m) => m.iter().map(|(k, v)| k.len() + json(v)).sum::<usize>() + 2,
                _ => 8,
            }
        }
        let strings = [&self.tool_name, &self.tool_call_id, &self.tool_error]
            .into_iter()
            .flatten()
            .map(String::len);
        let media = self
            .media
            .iter()
            .flat_map(|m| m.images.iter().chain(&m.audio).chain(&m.video))
            .map(String::len);
        self.content.len()
            + self.source_event.len()
            + strings.chain(media).sum::<usize>()
            + self.tags.iter().map(String::len).sum::<usize>()
            + self
                .tool_args
                .iter()
                .flatten()
                .map(|(k, v)| k.len() + json(v))
                .sum::<usize>()
            + self.tool_result.as_ref().map_or(0, json)
    }

    /// A user message with `content`, the common case in tests and tools.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            trace_type: Some(TraceType::User),
            content: content.into(),
            ..Self::default()
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            trace_type: Some(TraceType::Assistant),
            content: content.into(),
            ..Self::default()
        }
    }

    pub fn tool_call(call_id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        Self {
            trace_type: Some(TraceType::ToolCall),
            tool_call_id: Some(call_id.into()),
            tool_name: Some(name.into()),
            tool_args: args.as_object().cloned(),
            ..Self::default()
        }
    }

    pub fn tool_result(call_id: impl Into<String>, result: Value) -> Self {
        Self {
            trace_type: Some(TraceType::ToolResult),
            tool_call_id: Some(call_id.into()),
            tool_result: Some(result),
            ..Self::default()
        }
    }

    pub fn with_event_id(mut self, id: impl Into<String>) -> Self {
        self.event_id = Some(id.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full_trace() -> RawTrace {
        RawTrace {
            id: "0190f0a0-0000-7000-8000-000000000001".into(),
            ts: 1_700_000_000.25,
            turn_id: "turn_0003".into(),
            seq: 2,
            trace_type: TraceType::ToolCall,
            content: "line one\nline \"two\" ünï".into(),
            source_event: "cli".into(),
            tool_name: Some("search".into()),
            tool_call_id: Some("call_1".into()),
            tool_args: json!({"q": "rust", "n": 3, "nested": {"a": [1, null, true]}})
                .as_object()
                .cloned(),
            tool_result: None,
            tool_error: None,
            correlation_id: Some("corr".into()),
            tags: vec!["t1".into()],
            media: Some(Media {
                images: vec!["https://x/y.png".into()],
                ..Media::default()
            }),
            event_id: Some("ev-1".into()),
            tool_result_ref: None,
            usage: Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                total_tokens: 12,
                engram_added_tokens: 3,
            }),
            model: Some("gpt-4o".into()),
            name: Some("Caroline".into()),
        }
    }

    #[test]
    fn jsonl_round_trip_is_one_line_and_lossless() {
        let trace = full_trace();
        let line = trace.to_line();
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(*line.last().unwrap(), b'\n');
        assert_eq!(RawTrace::from_line(&line).unwrap(), trace);
    }

    #[test]
    fn line_uses_the_design_field_names_and_plain_json() {
        let v: Value = serde_json::from_slice(&full_trace().to_line()).unwrap();
        assert_eq!(v["trace_type"], "tool_call");
        assert_eq!(v["turn_id"], "turn_0003");
        // Tool args are JSON, not a string holding JSON.
        assert_eq!(v["tool_args"]["nested"]["a"][2], true);
        assert!(v.get("tool_result").is_none(), "absent fields are omitted");
        let result = RawTrace {
            trace_type: TraceType::ToolResult,
            tool_result: Some(json!([{"title": "x"}])),
            ..full_trace()
        };
        let v: Value = serde_json::from_slice(&result.to_line()).unwrap();
        assert_eq!(v["tool_result"][0]["title"], "x");
    }

    #[test]
    fn minimal_lines_from_operators_parse() {
        let t = RawTrace::from_line(
            br#"{"id":"x","ts":1.5,"turn_id":"turn_0001","seq":0,"trace_type":"user"}"#,
        )
        .unwrap();
        assert_eq!(t.trace_type, TraceType::User);
        assert_eq!(t.content, "");
        assert!(RawTrace::from_line(br#"{"id":"x","ts":1.5}"#).is_err());
        assert!(
            RawTrace::from_line(br#"{"id":"x","ts":1,"turn_id":"t","seq":0,"trace_type":"robot"}"#)
                .is_err()
        );
    }
}
