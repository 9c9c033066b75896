//! How text becomes terms, the same way for what is indexed and for a
//! query: words split on anything not alphanumeric, long tokens dropped,
//! lower-cased, folded to ASCII, English stop words removed, Porter2
//! (Snowball English) stemming — "went to the support groups" and "a
//! support group" meet on `support`, `group`.

use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
    StopWordFilter, TextAnalyzer, TextAnalyzerBuilder, TokenStream,
};

/// Name the analyzer is registered under in every index.
pub const ANALYZER: &str = "engram_en";

/// Name of the analyzer that keeps whole words (no stemming): the
/// vocabulary an index holds, as words a model can read ("puppies", not
/// the stem `puppi`).
pub const WORDS: &str = "engram_words";

/// Tokens longer than this are noise (hashes, base64, minified code); they
/// would only bloat the term dictionary.
const MAX_TOKEN_BYTES: usize = 40;

/// The Snowball project's English stop words (the list its stemmer ships
/// with), plus the pieces the tokenizer leaves of contractions ("I'm" →
/// `i`, `m`). Questions are mostly such words ("when did she …"); a
/// statement of the answer rarely repeats them, so they only add noise.
const STOP_WORDS: &[&str] = &[
    "i",
    "me",
    "my",
    "myself",
    "we",
    "our",
    "ours",
    "ourselves",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "he",
    "him",
    "his",
    "himself",
    "she",
    "her",
    "hers",
    "herself",
    "it",
    "its",
    "itself",
    "they",
    "them",
    "their",
    "theirs",
    "themselves",
    "what",
    "which",
    "who",
    "whom",
    "this",
    "that",
    "these",
    "those",
    "am",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "have",
    "has",
    "had",
    "having",
    "do",
    "does",
    "did",
    "doing",
    "would",
    "should",
    "could",
    "ought",
    "a",
    "an",
    "the",
    "and",
    "but",
    "if",
    "or",
    "because",
    "as",
    "until",
    "while",
    "of",
    "at",
    "by",
    "for",
    "with",
    "about",
    "against",
    "between",
    "into",
    "through",
    "during",
    "before",
    "after",
    "above",
    "below",
    "to",
    "from",
    "up",
    "down",
    "in",
    "out",
    "on",
    "off",
    "over",
    "under",
    "again",
    "further",
    "then",
    "once",
    "here",
    "there",
    "when",
    "where",
    "why",
    "how",
    "all",
    "any",
    "both",
    "each",
    "few",
    "more",
    "most",
    "other",
    "some",
    "such",
    "no",
    "nor",
    "not",
    "only",
    "own",
    "same",
    "so",
    "than",
    "too",
    "very",
    "can",
    "will",
    "just",
    "don",
    "now",
    "s",
    "t",
    "m",
    "d",
    "ll",
    "re",
    "ve",
];

/// The analyzer, built fresh (a `TextAnalyzer` is cheap to clone, not to
/// share across threads without one).
pub fn analyzer() -> TextAnalyzer {
    unstemmed()
        .filter_dynamic(Stemmer::new(Language::English))
        .build()
}

fn unstemmed() -> TextAnalyzerBuilder {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(StopWordFilter::remove(
            STOP_WORDS.iter().map(|w| (*w).to_owned()),
        ))
        .dynamic()
}

/// [`analyzer`] without the stemmer: the words themselves, for the
/// vocabulary (`lexical/vocabulary.rs`).
pub fn words_analyzer() -> TextAnalyzer {
    unstemmed().build()
}

/// The distinct terms of `text` in first-seen order, at most `max`.
pub fn terms(analyzer: &mut TextAnalyzer, text: &str, max: usize) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut stream = analyzer.token_stream(text);
    while out.len() < max && stream.advance() {
        let t = &stream.token().text;
        if seen.insert(t.clone()) {
            out.push(t.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<String> {
        terms(&mut analyzer(), text, usize::MAX)
    }

    #[test]
    fn questions_and_statements_meet_on_stems() {
        assert_eq!(
            all("When did Caroline go to the LGBTQ support group?"),
            ["carolin", "go", "lgbtq", "support", "group"]
        );
        assert_eq!(
            all("I went to the support groups yesterday"),
            ["went", "support", "group", "yesterday"]
        );
    }

    #[test]
    fn contractions_accents_and_long_tokens() {
        assert_eq!(
            all("I'm sure you'll love Zürich"),
            ["sure", "love", "zurich"]
        );
        assert!(all(&"x".repeat(41)).is_empty());
        assert!(all("").is_empty());
    }

    #[test]
    fn terms_are_distinct_and_capped() {
        assert_eq!(all("group groups grouping"), ["group"]);
        assert_eq!(
            terms(&mut analyzer(), "alpha beta gamma", 2),
            ["alpha", "beta"]
        );
    }
}
