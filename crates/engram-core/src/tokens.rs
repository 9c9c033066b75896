//! Token estimates with the model family's BPE (tiktoken ranks embedded in
//! the binary: no download), plus the per-message framing the chat formats
//! add. Estimates only: the provider's reported usage is the truth, and the
//! context engine reconciles the two.

use tiktoken_rs::CoreBPE;

use crate::budget::normalize_model;
use crate::transcript::Message;

/// Tokens a chat format spends on each message's framing (role, separators).
pub const MESSAGE_OVERHEAD: u32 = 4;
/// Tokens that prime the reply, once per request.
pub const REPLY_PRIMING: u32 = 3;
/// A rough cost of one image (OpenAI's low-detail price); providers differ.
pub const IMAGE_TOKENS: u32 = 85;

/// The BPE a model family uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Current OpenAI models (gpt-4o, gpt-4.1, gpt-5, o-series).
    O200k,
    /// Older OpenAI models, and the general fallback for other families.
    Cl100k,
}

/// The encoding that fits `model`.
pub fn encoding_for(model: &str) -> Encoding {
    let name = normalize_model(model);
    const O200K: &[&str] = &[
        "gpt-4o",
        "chatgpt-4o",
        "gpt-4.1",
        "gpt-4.5",
        "gpt-5",
        "gpt-oss",
        "o1",
        "o3",
        "o4",
    ];
    if O200K.iter().any(|p| name.starts_with(p)) {
        Encoding::O200k
    } else {
        Encoding::Cl100k
    }
}

fn bpe(encoding: Encoding) -> &'static CoreBPE {
    match encoding {
        Encoding::O200k => tiktoken_rs::o200k_base_singleton(),
        Encoding::Cl100k => tiktoken_rs::cl100k_base_singleton(),
    }
}

/// Loads both encodings now rather than on the first request.
pub fn warm_up() {
    bpe(Encoding::O200k);
    bpe(Encoding::Cl100k);
}

/// Tokens of `text`.
pub fn count_text(encoding: Encoding, text: &str) -> u32 {
    if text.is_empty() {
        return 0;
    }
    u32::try_from(bpe(encoding).encode_ordinary(text).len()).unwrap_or(u32::MAX)
}

/// Tokens one message costs in a prompt: framing, text, tool calls (name
/// and JSON arguments), the answered call's id, and images.
pub fn count_message(encoding: Encoding, m: &Message) -> u32 {
    let mut n = MESSAGE_OVERHEAD + count_text(encoding, &m.content);
    for call in &m.tool_calls {
        let args = serde_json::Value::Object(call.arguments.clone()).to_string();
        n += MESSAGE_OVERHEAD + count_text(encoding, &call.name) + count_text(encoding, &args);
        n += count_text(encoding, &call.id);
    }
    if let Some(id) = &m.tool_call_id {
        n += count_text(encoding, id);
    }
    if let Some(media) = &m.media {
        n += IMAGE_TOKENS * u32::try_from(media.images.len()).unwrap_or(u32::MAX);
        for url in media.audio.iter().chain(&media.video) {
            n += count_text(encoding, url);
        }
    }
    n
}

/// Per-message counts of a growing transcript, kept between requests so a
/// prompt costs only the tokenization of what changed since the last one.
#[derive(Debug, Clone, Default)]
pub struct TokenCache {
    encoding: Option<Encoding>,
    counts: Vec<u32>,
    total: u64,
}

impl TokenCache {
    /// Forgets counts from message `index` on (it changed or is new).
    pub fn invalidate_from(&mut self, index: usize) {
        if index < self.counts.len() {
            let dropped: u64 = self.counts[index..].iter().map(|n| u64::from(*n)).sum();
            self.total -= dropped;
            self.counts.truncate(index);
        }
    }

    /// Tokens of the counted messages from `index` on (call after
    /// [`count`](Self::count)).
    pub fn sum_from(&self, index: usize) -> u64 {
        self.counts
            .get(index..)
            .map_or(0, |c| c.iter().map(|n| u64::from(*n)).sum())
    }

    /// Tokens of `messages` under `encoding`, counting only what is not
    /// cached yet (everything, if the encoding changed).
    pub fn count(&mut self, encoding: Encoding, messages: &[Message]) -> u64 {
        if self.encoding != Some(encoding) {
            *self = Self {
                encoding: Some(encoding),
                ..Self::default()
            };
        }
        self.invalidate_from(messages.len());
        for m in &messages[self.counts.len()..] {
            let n = count_message(encoding, m);
            self.counts.push(n);
            self.total += u64::from(n);
        }
        self.total
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::NewEvent;
    use crate::transcript::{Role, Transcript};
    use crate::turns::assign_all;

    #[test]
    fn families_get_their_encoding() {
        assert_eq!(encoding_for("gpt-4o-mini"), Encoding::O200k);
        assert_eq!(encoding_for("openai/gpt-5"), Encoding::O200k);
        assert_eq!(encoding_for("o3-mini"), Encoding::O200k);
        assert_eq!(encoding_for("gpt-4-0613"), Encoding::Cl100k);
        assert_eq!(encoding_for("gpt-3.5-turbo"), Encoding::Cl100k);
        assert_eq!(encoding_for("claude-sonnet-4-5"), Encoding::Cl100k);
        assert_eq!(encoding_for(""), Encoding::Cl100k);
    }

    #[test]
    fn counts_match_the_reference_tokenizers() {
        // Reference counts from OpenAI's tiktoken.
        assert_eq!(count_text(Encoding::Cl100k, "hello world"), 2);
        assert_eq!(count_text(Encoding::O200k, "hello world"), 2);
        assert_eq!(count_text(Encoding::Cl100k, ""), 0);
        let m = Message::text(Role::User, "hello world");
        assert_eq!(count_message(Encoding::Cl100k, &m), MESSAGE_OVERHEAD + 2);
    }

    #[test]
    fn the_cache_counts_only_what_changed() {
        let traces = assign_all([
            NewEvent::user("What is the weather like in Oslo today?"),
            NewEvent::assistant("Let me check."),
            NewEvent::tool_call("a", "weather", json!({"city": "Oslo"})),
            NewEvent::tool_result("a", json!({"temp_c": 3})),
        ]);
        let mut t = Transcript::default();
        let mut cache = TokenCache::default();
        let mut totals = vec![];
        for trace in &traces {
            let changed = t.push(trace);
            cache.invalidate_from(changed);
            totals.push(cache.count(Encoding::Cl100k, t.messages()));
        }
        let fresh: u64 = t
            .messages()
            .iter()
            .map(|m| u64::from(count_message(Encoding::Cl100k, m)))
            .sum();
        assert_eq!(
            *totals.last().unwrap(),
            fresh,
            "incremental equals from scratch"
        );
        assert!(totals.windows(2).all(|w| w[0] < w[1]), "{totals:?}");
        // Switching models recounts under the new encoding.
        let o200k = cache.count(Encoding::O200k, t.messages());
        let fresh: u64 = t
            .messages()
            .iter()
            .map(|m| u64::from(count_message(Encoding::O200k, m)))
            .sum();
        assert_eq!(o200k, fresh);
    }
}
