//! Rendered message fragments kept between requests.
//!
//! A transcript only grows, so for the formats whose items map one message
//! each (OpenAI chat and Responses) the JSON text of every committed message
//! is rendered once and a request body is the header, the cached fragments
//! and the fresh tail joined: the cost of a prompt becomes copying bytes,
//! not rebuilding a JSON tree. The output is byte-identical to
//! [`render_json`](super::render_json). Formats that merge neighbouring
//! messages (Anthropic, Gemini) are rendered whole.

use serde_json::Value;

use super::{Format, Prompt, openai, render_json};
use crate::transcript::Message;

#[derive(Debug, Clone, Default)]
pub struct RenderCache {
    /// The transcript rendered (its
    /// [`Transcript::id`](crate::transcript::Transcript::id)).
    transcript: u64,
    format: Option<Format>,
    /// JSON of each committed message's items, comma-joined.
    fragments: Vec<String>,
    /// Their length, summed (as of the last render).
    bytes: usize,
}

fn fragment(format: Format, m: &Message) -> String {
    match format {
        Format::OpenAiChat => openai::chat_message(m).to_string(),
        _ => openai::responses_items(m)
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

fn json_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

impl RenderCache {
    /// About how many bytes the cache holds.
    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.fragments.capacity() * std::mem::size_of::<String>()
    }

    /// The request body for `format`, as [`render_json`] would write it,
    /// for a prompt whose messages are those of the transcript `transcript`
    /// (its [`Transcript::id`](crate::transcript::Transcript::id)). Renders the messages added since the last
    /// call and the last one rendered then (the only one that can have
    /// changed); everything for another transcript or format.
    pub fn render_json(&mut self, format: Format, transcript: u64, prompt: &Prompt<'_>) -> String {
        if !matches!(format, Format::OpenAiChat | Format::OpenAiResponses) {
            return render_json(format, prompt);
        }
        if self.format != Some(format) || self.transcript != transcript {
            self.format = Some(format);
            self.transcript = transcript;
            self.fragments.clear();
        }
        let keep = self
            .fragments
            .len()
            .saturating_sub(1)
            .min(prompt.messages.len());
        self.fragments.truncate(keep);
        for m in &prompt.messages[self.fragments.len()..] {
            self.fragments.push(fragment(format, m));
        }
        let tail: Vec<String> = prompt.tail.iter().map(|m| fragment(format, m)).collect();
        let system = prompt.system.filter(|s| !s.is_empty());
        let size: usize = self.fragments.iter().map(|f| f.len() + 1).sum::<usize>() + 256;
        self.bytes = size;
        let mut out = String::with_capacity(size + system.map_or(0, str::len));
        out.push_str("{\"model\":");
        out.push_str(&json_string(prompt.model));
        let mut items: Vec<&str> = vec![];
        let system_item;
        match format {
            Format::OpenAiChat => {
                out.push_str(&format!(
                    ",\"max_completion_tokens\":{},\"messages\":[",
                    prompt.max_output_tokens
                ));
                if let Some(system) = system {
                    system_item = format!(
                        "{{\"role\":\"system\",\"content\":{}}}",
                        json_string(system)
                    );
                    items.push(&system_item);
                }
            }
            _ => {
                out.push_str(&format!(
                    ",\"max_output_tokens\":{}",
                    prompt.max_output_tokens
                ));
                if let Some(system) = system {
                    out.push_str(",\"instructions\":");
                    out.push_str(&json_string(system));
                }
                out.push_str(",\"input\":[");
            }
        }
        items.extend(
            self.fragments
                .iter()
                .chain(&tail)
                .map(String::as_str)
                .filter(|f| !f.is_empty()),
        );
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(item);
        }
        out.push_str("]}");
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::transcript::Transcript;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn cached_rendering_is_byte_identical(traces in crate::transcript::tests::conversations(), system in prop::option::of("[a-z \"\n]{0,12}"), every in 1usize..4) {
            for format in [Format::OpenAiChat, Format::OpenAiResponses, Format::AnthropicMessages, Format::Gemini] {
                let mut transcript = Transcript::default();
                let mut cache = RenderCache::default();
                for (i, trace) in traces.iter().enumerate() {
                    transcript.push(trace);
                    if i % every != 0 {
                        continue; // a prompt only now and then
                    }
                    let tail = transcript.pending_tail();
                    let prompt = Prompt {
                        model: "m\"odel",
                        system: system.as_deref(),
                        messages: transcript.messages(),
                        tail: &tail,
                        max_output_tokens: 77,
                    };
                    prop_assert_eq!(cache.render_json(format, transcript.id(), &prompt), render_json(format, &prompt));
                }
            }
        }
    }
}
