//! Provider request bodies from the transcript.
//!
//! Each renderer turns the same [`Prompt`] into the request body of one
//! provider API, ready to send: `model` and the output limit are filled in
//! (Gemini takes the model in the URL); the client merges in its own `tools`
//! and sampling parameters. Output is deterministic (keys in a fixed order)
//! and the growing array (`messages`, `input`, `contents`) is the last key,
//! so when only appends happened, the previous body minus its closing
//! brackets is a byte prefix of the next one and prompt caches keep hitting.

mod anthropic;
mod cache;
mod gemini;
mod openai;

pub use cache::RenderCache;

use serde_json::Value;

use crate::transcript::Message;

/// The provider formats Engram renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenAiChat,
    OpenAiResponses,
    AnthropicMessages,
    Gemini,
}

/// Everything a request body is made of.
#[derive(Debug, Clone, Copy)]
pub struct Prompt<'a> {
    pub model: &'a str,
    pub system: Option<&'a str>,
    /// The epoch's committed messages, in order.
    pub messages: &'a [Message],
    /// Placeholders for pending calls, rendered after `messages`.
    pub tail: &'a [Message],
    pub max_output_tokens: u32,
}

impl<'a> Prompt<'a> {
    fn all(&self) -> impl Iterator<Item = &'a Message> {
        self.messages.iter().chain(self.tail)
    }
}

/// The request body for `format`.
pub fn render(format: Format, prompt: &Prompt<'_>) -> Value {
    match format {
        Format::OpenAiChat => openai::chat(prompt),
        Format::OpenAiResponses => openai::responses(prompt),
        Format::AnthropicMessages => anthropic::messages(prompt),
        Format::Gemini => gemini::generate_content(prompt),
    }
}

/// The request body for `format`, as JSON text.
pub fn render_json(format: Format, prompt: &Prompt<'_>) -> String {
    render(format, prompt).to_string()
}

/// Tool-call arguments as the JSON text OpenAI's APIs carry them in.
fn arguments_text(args: &serde_json::Map<String, Value>) -> String {
    Value::Object(args.clone()).to_string()
}

/// A media URL as a line of text, for formats that cannot carry its kind.
fn media_note(kind: &str, url: &str) -> String {
    format!("[{kind}: {url}]")
}

/// A MIME type guessed from a URL's extension (for formats that need one).
fn mime_type(url: &str, kind: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let ext = path
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let known = match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "mp3" => "audio/mp3",
        "wav" => "audio/wav",
        "ogg" => "audio/ogg",
        "flac" => "audio/flac",
        "m4a" | "aac" => "audio/aac",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "mov" => "video/quicktime",
        "pdf" => "application/pdf",
        _ => "",
    };
    if known.is_empty() {
        format!("{kind}/*")
    } else {
        known.to_owned()
    }
}

#[cfg(test)]
mod tests;
