//! Token estimates with the model family's BPE (tiktoken ranks embedded in
//! the binary: no download), plus the per-message framing the chat formats
//! add. Estimates only: the provider's reported usage is the truth, and the
//! context engine reconciles the two.

use bpe_openai::Tokenizer;

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

/// The encoders (GitHub's `bpe`, counting as tiktoken does, in linear
/// time). Their pre-tokenizing regexes keep one scratch cache per
/// concurrent use, not one per thread that ever counted (tiktoken-rs's
/// per-thread clones grew by megabytes with every new blocking thread).
fn bpe(encoding: Encoding) -> &'static Tokenizer {
    match encoding {
        Encoding::O200k => bpe_openai::o200k_base(),
        Encoding::Cl100k => bpe_openai::cl100k_base(),
    }
}

/// Loads both encodings now rather than on the first request.
pub fn warm_up() {
    bpe(Encoding::O200k);
    bpe(Encoding::Cl100k);
}

/// Tokens of `text`, in time linear in its length whatever it holds.
///
/// The BPE is quadratic in the length of one pre-tokenized piece, and its
/// regex engine overflows its stack on runs of about a million characters,
/// so the text goes to it in bounded segments (see [`segments`]). Ordinary
/// prose is cut only between words, where the tokenizer would split anyway,
/// and counts exactly; a run of one class of characters longer than
/// [`MAX_RUN`] bytes (a base64 blob, a minified file, a long URL) is cut
/// every `MAX_RUN` bytes, which can add a token per cut: under 2% on such
/// runs, and an estimate is all a count is.
pub fn count_text(encoding: Encoding, text: &str) -> u32 {
    let bpe = bpe(encoding);
    let n: usize = segments(text).map(|s| bpe.count(s)).sum();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Longest run of whitespace or of non-whitespace handed to the BPE whole.
pub const MAX_RUN: usize = 64;
/// Segments grow to about this many bytes before they end at a word.
const SEGMENT: usize = 4096;

/// `text` cut into consecutive pieces that tokenize like the whole: at a
/// word's end once a segment holds [`SEGMENT`] bytes, and inside any run of
/// whitespace or non-whitespace every [`MAX_RUN`] bytes. The pieces
/// concatenate to `text`; none is empty.
pub fn segments(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = segment_end(rest);
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// Where the first segment of `text` (not empty) ends.
fn segment_end(text: &str) -> usize {
    let mut run_start = 0;
    let mut prev: Option<char> = None;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if prev.map(char::is_whitespace) != Some(space) {
            if i >= SEGMENT && prev.is_some_and(|p| word_ends(p, c)) {
                return i;
            }
            run_start = i;
        } else if i - run_start >= MAX_RUN {
            return i;
        }
        if i >= 8 * SEGMENT {
            // Only newlines after punctuation for this long: cut anyway.
            return i;
        }
        prev = Some(c);
    }
    text.len()
}

/// Whether the tokenizer always splits between `prev` (not whitespace) and
/// `next` (whitespace): before blanks, and before line breaks except after
/// punctuation, which takes the line breaks that follow it into its token.
fn word_ends(prev: char, next: char) -> bool {
    match next {
        ' ' | '\t' => true,
        '\n' | '\r' => prev.is_alphanumeric(),
        _ => false,
    }
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
    if let Some(name) = &m.name {
        // OpenAI's chat format carries it; others cost nothing for it,
        // and an estimate errs on the safe side.
        n += count_text(encoding, name);
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
    /// The transcript counted (its
    /// [`Transcript::id`](crate::transcript::Transcript::id)).
    transcript: u64,
    encoding: Option<Encoding>,
    counts: Vec<u32>,
    total: u64,
    /// The system prompt's hash and tokens (it is sent with every prompt,
    /// and can be long).
    system: Option<(u64, u32)>,
}

impl TokenCache {
    /// About how many bytes the cache holds.
    pub fn memory_bytes(&self) -> usize {
        self.counts.capacity() * std::mem::size_of::<u32>()
    }

    /// Tokens the system prompt costs as a message (0 without one),
    /// counted once per prompt text and encoding.
    pub fn count_system(&mut self, encoding: Encoding, system: Option<&str>) -> u32 {
        use std::hash::{Hash, Hasher};
        let Some(text) = system else { return 0 };
        self.set_encoding(encoding);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        let key = h.finish();
        match self.system {
            Some((k, n)) if k == key => n,
            _ => {
                let n = MESSAGE_OVERHEAD.saturating_add(count_text(encoding, text));
                self.system = Some((key, n));
                n
            }
        }
    }

    /// Starts over when the encoding changes: every count is per encoding.
    fn set_encoding(&mut self, encoding: Encoding) {
        if self.encoding != Some(encoding) {
            *self = Self {
                encoding: Some(encoding),
                ..Self::default()
            };
        }
    }

    /// Forgets counts from message `index` on (it changed or is new).
    fn invalidate_from(&mut self, index: usize) {
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

    /// Tokens of `transcript`'s messages under `encoding`, counting only
    /// what is not cached yet: the messages added since the last count, and
    /// the last one counted then (the only one that can have changed);
    /// everything for another transcript or encoding.
    ///
    /// `messages` are those of the transcript `transcript` (its
    /// [`Transcript::id`](crate::transcript::Transcript::id)).
    pub fn count(&mut self, encoding: Encoding, transcript: u64, messages: &[Message]) -> u64 {
        self.set_encoding(encoding);
        if self.transcript != transcript {
            self.transcript = transcript;
            self.counts.clear();
            self.total = 0;
        }
        self.invalidate_from(self.counts.len().saturating_sub(1).min(messages.len()));
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

    /// Deterministic noise (xorshift), so the cases are the same every run.
    fn noise(seed: u64, len: usize, alphabet: &[u8]) -> String {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                alphabet[(x % alphabet.len() as u64) as usize] as char
            })
            .collect()
    }

    const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    #[test]
    fn a_million_characters_without_whitespace_count_without_panic() {
        // Each of these overflowed the tokenizer's stack, or took seconds
        // per 100k characters, when handed to it whole.
        let inputs = [
            "A".repeat(1_000_000),
            noise(7, 1_000_000, BASE64),
            " ".repeat(1_000_000),
            "\n".repeat(1_000_000),
            "é".repeat(500_000),
            "1".repeat(1_000_000),
            "!".repeat(1_000_000),
        ];
        for text in &inputs {
            for encoding in [Encoding::Cl100k, Encoding::O200k] {
                let n = count_text(encoding, text);
                assert!(
                    n > 0 && (n as usize) <= text.len(),
                    "{n} tokens for {} bytes",
                    text.len()
                );
            }
        }
    }

    #[test]
    fn long_runs_count_close_to_exact_and_linearly() {
        let blob = noise(11, 200_000, BASE64);
        let exact = bpe(Encoding::Cl100k).count(&blob[..5_000]) as f64;
        let cut = f64::from(count_text(Encoding::Cl100k, &blob[..5_000]));
        assert!((cut - exact).abs() / exact < 0.03, "{cut} vs {exact}");
        // Forty times the text, forty times the tokens (within 1%).
        let whole = f64::from(count_text(Encoding::Cl100k, &blob));
        assert!(
            (whole / cut / 40.0 - 1.0).abs() < 0.01,
            "{whole} vs 40 x {cut}"
        );
    }

    #[test]
    fn the_system_prompt_is_counted_once_per_text() {
        let mut cache = TokenCache::default();
        let long = "word ".repeat(10_000);
        let n = cache.count_system(Encoding::Cl100k, Some(&long));
        assert_eq!(n, MESSAGE_OVERHEAD + count_text(Encoding::Cl100k, &long));
        assert_eq!(cache.system.map(|(_, c)| c), Some(n));
        assert_eq!(cache.count_system(Encoding::Cl100k, Some(&long)), n);
        assert_eq!(
            cache.count_system(Encoding::Cl100k, Some("hello world")),
            MESSAGE_OVERHEAD + 2
        );
        assert_eq!(cache.count_system(Encoding::Cl100k, None), 0);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn segments_rebuild_the_text_within_bounds(
            text in proptest::string::string_regex(
                "([a-zé ]{0,80}|[A-Za-z0-9+/=]{0,300}|[ \t\n]{0,200}|\\PC{0,40}){0,60}"
            ).expect("a valid regex")
        ) {
            let pieces: Vec<&str> = segments(&text).collect();
            proptest::prop_assert_eq!(pieces.concat(), text.clone());
            for p in &pieces {
                proptest::prop_assert!(!p.is_empty());
                proptest::prop_assert!(p.len() <= SEGMENT + 2 * MAX_RUN + 8, "{}", p.len());
            }
        }

        /// The encoders count what OpenAI's tiktoken counts (tiktoken-rs,
        /// a port of it, as the reference), on any text.
        #[test]
        fn counts_are_tiktokens(text in "(\\PC{0,24}|[ \t\n\r]{0,6}|[0-9]{1,7}|'(s|t|re|ve|m|ll|d)|[A-Z][a-z]{0,9}){0,40}") {
            for (encoding, reference) in [
                (Encoding::Cl100k, tiktoken_rs::cl100k_base_singleton()),
                (Encoding::O200k, tiktoken_rs::o200k_base_singleton()),
            ] {
                let expected = reference.encode_ordinary(&text).len();
                proptest::prop_assert_eq!(bpe(encoding).count(text.as_str()), expected, "{:?}", encoding);
            }
        }

        #[test]
        fn prose_counts_exactly(words in proptest::collection::vec("[A-Za-z,.'!?]{1,12}", 0..1200),
                                seps in proptest::collection::vec("( |  |\n|\n\n| \t)", 1200)) {
            let mut text = String::new();
            for (w, s) in words.iter().zip(&seps) {
                text.push_str(w);
                text.push_str(s);
            }
            let exact = bpe(Encoding::Cl100k).count(text.as_str());
            proptest::prop_assert_eq!(count_text(Encoding::Cl100k, &text) as usize, exact);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A cache that looks at the transcript only now and then (as a
        /// prompt does, between Ingests) still counts exactly what a fresh
        /// count would; another transcript starts it over.
        #[test]
        fn a_cache_kept_outside_the_transcript_stays_exact(
            traces in crate::transcript::tests::conversations(),
            every in 1usize..5,
        ) {
            let fresh = |t: &Transcript| -> u64 {
                t.messages().iter().map(|m| u64::from(count_message(Encoding::Cl100k, m))).sum()
            };
            let mut t = Transcript::default();
            let mut cache = TokenCache::default();
            for (i, trace) in traces.iter().enumerate() {
                t.push(trace);
                if i % every == 0 {
                    proptest::prop_assert_eq!(cache.count(Encoding::Cl100k, t.id(), t.messages()), fresh(&t));
                }
            }
            proptest::prop_assert_eq!(cache.count(Encoding::Cl100k, t.id(), t.messages()), fresh(&t));
            let other = Transcript::from_traces(traces.iter().take(traces.len() / 2));
            proptest::prop_assert_eq!(cache.count(Encoding::Cl100k, other.id(), other.messages()), fresh(&other));
        }
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
            t.push(trace);
            totals.push(cache.count(Encoding::Cl100k, t.id(), t.messages()));
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
        let o200k = cache.count(Encoding::O200k, t.id(), t.messages());
        let fresh: u64 = t
            .messages()
            .iter()
            .map(|m| u64::from(count_message(Encoding::O200k, m)))
            .sum();
        assert_eq!(o200k, fresh);
    }
}
