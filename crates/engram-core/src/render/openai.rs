//! OpenAI Chat Completions and Responses request bodies.

use serde_json::{Map, Value, json};

use super::{Prompt, arguments_text, media_note};
use crate::transcript::{Message, Role};

/// `POST /v1/chat/completions`.
pub(super) fn chat(prompt: &Prompt<'_>) -> Value {
    let mut messages = vec![];
    if let Some(system) = prompt.system.filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.extend(prompt.all().map(chat_message));
    json!({
        "model": prompt.model,
        "max_completion_tokens": prompt.max_output_tokens,
        "messages": messages,
    })
}

pub(super) fn chat_message(m: &Message) -> Value {
    match m.role {
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => {
            let mut out = json!({
                "role": "user",
                "content": user_content(
                    m,
                    |text| json!({"type": "text", "text": text}),
                    |url| json!({"type": "image_url", "image_url": {"url": url}}),
                ),
            });
            if let Some(name) = participant(m) {
                out["name"] = name.into();
            }
            out
        }
        Role::Assistant => {
            let mut out = Map::new();
            out.insert("role".into(), "assistant".into());
            if let Some(name) = participant(m) {
                out.insert("name".into(), name.into());
            }
            let text = assistant_text(m);
            // Content may be null only when tool calls carry the message.
            let content = if text.is_empty() && !m.tool_calls.is_empty() {
                Value::Null
            } else {
                Value::String(text)
            };
            out.insert("content".into(), content);
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": arguments_text(&c.arguments)},
                        })
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(out)
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "content": m.content,
        }),
    }
}

/// The message's participant name as Chat Completions takes it (letters,
/// digits, `_` and `-`, at most 64): other characters become `_`; a name
/// with no letter or digit left is not sent.
fn participant(m: &Message) -> Option<String> {
    let name: String = m
        .name
        .as_deref()?
        .trim()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.chars()
        .any(|c| c.is_ascii_alphanumeric())
        .then_some(name)
}

/// Plain text, or parts when images ride along (audio and video URLs have
/// no URL part in OpenAI's APIs; they become text notes). `text_part` and
/// `image_part` give each API's part shapes.
fn user_content(
    m: &Message,
    text_part: fn(String) -> Value,
    image_part: fn(&str) -> Value,
) -> Value {
    let Some(media) = m.media.as_ref().filter(|m| !m.is_empty()) else {
        return Value::String(m.content.clone());
    };
    let mut text = m.content.clone();
    for (kind, urls) in [("audio", &media.audio), ("video", &media.video)] {
        for url in urls {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&media_note(kind, url));
        }
    }
    let mut parts = vec![];
    if !text.is_empty() {
        parts.push(text_part(text));
    }
    parts.extend(media.images.iter().map(|url| image_part(url)));
    Value::Array(parts)
}

/// An assistant's text, with notes for any media it carried.
fn assistant_text(m: &Message) -> String {
    let mut text = m.content.clone();
    if let Some(media) = &m.media {
        for url in media.images.iter().chain(&media.audio).chain(&media.video) {
            text.push_str(&format!("\n{}", media_note("media", url)));
        }
    }
    text
}

/// `POST /v1/responses`.
pub(super) fn responses(prompt: &Prompt<'_>) -> Value {
    let input: Vec<Value> = prompt.all().flat_map(responses_items).collect();
    let mut body = Map::new();
    body.insert("model".into(), prompt.model.into());
    body.insert("max_output_tokens".into(), prompt.max_output_tokens.into());
    if let Some(system) = prompt.system.filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), system.into());
    }
    body.insert("input".into(), Value::Array(input));
    Value::Object(body)
}

/// The `input` items of one message (a tool-calling assistant step is its
/// text, if any, then one `function_call` per call).
pub(super) fn responses_items(m: &Message) -> Vec<Value> {
    let mut items = vec![];
    match m.role {
        Role::System => items.push(json!({"role": "system", "content": m.content})),
        Role::User => items.push(json!({
            "role": "user",
            "content": user_content(
                m,
                |text| json!({"type": "input_text", "text": text}),
                |url| json!({"type": "input_image", "image_url": url, "detail": "auto"}),
            ),
        })),
        Role::Assistant => {
            let text = assistant_text(m);
            if !text.is_empty() {
                items.push(json!({"role": "assistant", "content": text}));
            }
            for c in &m.tool_calls {
                items.push(json!({
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": arguments_text(&c.arguments),
                }));
            }
        }
        Role::Tool => items.push(json!({
            "type": "function_call_output",
            "call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "output": m.content,
        })),
    }
    items
}
