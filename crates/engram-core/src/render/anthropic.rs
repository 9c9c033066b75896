//! Anthropic Messages request bodies: top-level `system`, roles strictly
//! alternating (consecutive same-role messages merged into one), tool calls
//! as `tool_use` blocks, results as `tool_result` blocks in a user message.

use serde_json::{Map, Value, json};

use super::{Prompt, media_note};
use crate::transcript::{Message, Role};

/// `POST /v1/messages`.
pub(super) fn messages(prompt: &Prompt<'_>) -> Value {
    let mut out: Vec<(&'static str, Vec<Value>)> = vec![];
    let mut system = prompt.system.unwrap_or_default().to_owned();
    let mut ids = ToolIds::default();
    for m in prompt.all() {
        let (role, blocks) = match m.role {
            Role::System => {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(&m.content);
                continue;
            }
            Role::User => ("user", user_blocks(m)),
            Role::Assistant => ("assistant", assistant_blocks(m, &mut ids)),
            Role::Tool => ("user", vec![tool_result(m, &ids)]),
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    // The conversation must open with the user.
    if out.first().is_some_and(|(role, _)| *role == "assistant") {
        out.insert(0, ("user", vec![text_block("(conversation start)")]));
    }
    let messages: Vec<Value> = out
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), prompt.model.into());
    body.insert("max_tokens".into(), prompt.max_output_tokens.into());
    if !system.is_empty() {
        body.insert("system".into(), system.into());
    }
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

/// Anthropic wants every `tool_use` id of a conversation distinct, while an
/// agent may reuse a call id once its call has a result: a reused id goes
/// out with a suffix (`call_1_2`), and the results after it follow it.
#[derive(Default)]
struct ToolIds {
    /// Every id sent so far.
    sent: std::collections::HashSet<String>,
    /// The id a call's own id went out as, latest call first.
    current: std::collections::HashMap<String, String>,
}

impl ToolIds {
    fn call(&mut self, id: &str) -> String {
        let base = tool_id(id);
        let mut out = base.clone();
        let mut n = 1;
        while self.sent.contains(&out) {
            n += 1;
            out = format!("{base}_{n}");
        }
        self.sent.insert(out.clone());
        self.current.insert(base, out.clone());
        out
    }

    fn result(&self, id: &str) -> String {
        let base = tool_id(id);
        self.current.get(&base).cloned().unwrap_or(base)
    }
}

/// Anthropic ids allow `[A-Za-z0-9_-]` only; other characters map to `_`
/// the same way for a call and its result, so they still pair.
pub(super) fn tool_id(id: &str) -> String {
    let mapped: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if mapped.is_empty() {
        "_".to_owned()
    } else {
        mapped
    }
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn user_blocks(m: &Message) -> Vec<Value> {
    let mut blocks = vec![];
    if !m.content.is_empty() {
        blocks.push(text_block(&m.content));
    }
    if let Some(media) = &m.media {
        for url in &media.images {
            blocks.push(json!({"type": "image", "source": {"type": "url", "url": url}}));
        }
        for (kind, urls) in [("audio", &media.audio), ("video", &media.video)] {
            for url in urls {
                blocks.push(text_block(&media_note(kind, url)));
            }
        }
    }
    blocks
}

fn assistant_blocks(m: &Message, ids: &mut ToolIds) -> Vec<Value> {
    let mut blocks = vec![];
    // Text blocks must not be empty.
    if !m.content.is_empty() {
        blocks.push(text_block(&m.content));
    }
    if let Some(media) = &m.media {
        for url in media.images.iter().chain(&media.audio).chain(&media.video) {
            blocks.push(text_block(&media_note("media", url)));
        }
    }
    for c in &m.tool_calls {
        blocks.push(json!({
            "type": "tool_use",
            "id": ids.call(&c.id),
            "name": c.name,
            "input": Value::Object(c.arguments.clone()),
        }));
    }
    blocks
}

fn tool_result(m: &Message, ids: &ToolIds) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), "tool_result".into());
    block.insert(
        "tool_use_id".into(),
        ids.result(m.tool_call_id.as_deref().unwrap_or_default())
            .into(),
    );
    if !m.content.is_empty() {
        block.insert("content".into(), m.content.clone().into());
    }
    if m.is_error {
        block.insert("is_error".into(), true.into());
    }
    Value::Object(block)
}
