//! Gemini `generateContent` request bodies: `systemInstruction`, `contents`
//! with roles `user`/`model`, calls as `functionCall` parts and results as
//! `functionResponse` parts (one content per step, so the number of
//! responses equals the number of calls). The model goes in the URL.

use serde_json::{Map, Value, json};

use super::{Prompt, mime_type};
use crate::transcript::{Message, Role};

#[derive(PartialEq, Clone, Copy)]
enum Kind {
    User,
    Model,
    FunctionResponse,
}

/// `POST /v1beta/models/{model}:generateContent`.
pub(super) fn generate_content(prompt: &Prompt<'_>) -> Value {
    let mut contents: Vec<(Kind, Vec<Value>)> = vec![];
    let mut system = prompt.system.unwrap_or_default().to_owned();
    for m in prompt.all() {
        let (kind, parts) = match m.role {
            Role::System => {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(&m.content);
                continue;
            }
            Role::User => (Kind::User, content_parts(m)),
            Role::Assistant => (Kind::Model, model_parts(m)),
            Role::Tool => (Kind::FunctionResponse, vec![function_response(m)]),
        };
        if parts.is_empty() {
            continue;
        }
        // Same-kind neighbours merge: a call turn must directly follow a
        // user or response turn, and all responses of a step share a turn.
        match contents.last_mut() {
            Some((last, existing)) if *last == kind => existing.extend(parts),
            _ => contents.push((kind, parts)),
        }
    }
    if contents
        .first()
        .is_some_and(|(kind, _)| *kind == Kind::Model)
    {
        contents.insert(
            0,
            (Kind::User, vec![json!({"text": "(conversation start)"})]),
        );
    }
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|(kind, parts)| {
            let role = if kind == Kind::Model { "model" } else { "user" };
            json!({"role": role, "parts": parts})
        })
        .collect();
    let mut body = Map::new();
    body.insert(
        "generationConfig".into(),
        json!({"maxOutputTokens": prompt.max_output_tokens}),
    );
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    body.insert("contents".into(), Value::Array(contents));
    Value::Object(body)
}

fn media_parts(m: &Message) -> Vec<Value> {
    let Some(media) = &m.media else {
        return vec![];
    };
    [
        ("image", &media.images),
        ("audio", &media.audio),
        ("video", &media.video),
    ]
    .into_iter()
    .flat_map(|(kind, urls)| {
        urls.iter()
            .map(move |url| json!({"fileData": {"mimeType": mime_type(url, kind), "fileUri": url}}))
    })
    .collect()
}

fn content_parts(m: &Message) -> Vec<Value> {
    let mut parts = vec![];
    if !m.content.is_empty() {
        parts.push(json!({"text": m.content}));
    }
    parts.extend(media_parts(m));
    parts
}

fn model_parts(m: &Message) -> Vec<Value> {
    let mut parts = content_parts(m);
    for c in &m.tool_calls {
        parts.push(json!({
            "functionCall": {"id": c.id, "name": c.name, "args": Value::Object(c.arguments.clone())}
        }));
    }
    parts
}

/// The result as the `response` object Gemini expects: `{"result": …}`, or
/// `{"error": …}` for a failed call.
fn function_response(m: &Message) -> Value {
    let mut response = Map::new();
    let key = if m.is_error { "error" } else { "result" };
    response.insert(key.into(), m.content.clone().into());
    json!({
        "functionResponse": {
            "id": m.tool_call_id.as_deref().unwrap_or_default(),
            "name": m.tool_name.as_deref().unwrap_or_default(),
            "response": Value::Object(response),
        }
    })
}
