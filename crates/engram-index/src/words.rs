//! Word vectors: each distinct word of the agents' messages embedded once,
//! for query expansion from a conversation's own vocabulary.
//!
//! A question names a category ("what pets does she have?") where the
//! conversation names instances ("my pup", "the dog"): their words never
//! meet, and the question's vector alone does not lift the one message
//! among hundreds. The words of the conversation that are closest in
//! meaning to the question are added to its word query
//! ([`crate::rank::Words::expand`]), so the messages that say them match.
//!
//! One table for every agent (a word's vector does not depend on who said
//! it), bounded, in memory only: the words of erased memories must not
//! outlive them in a file, and a restart embeds what searches ask for
//! again, in the background. Full, it makes room by the words least
//! recently asked about (or embedded): one agent that floods it with
//! words nobody searches for cannot keep the others' out for good; a
//! search that finds its words gone hands its agent to the indexer again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::vectors::{dot, quantize, quantize_i16};

/// The longest and shortest words embedded (bytes, ASCII after folding):
/// shorter ones are mostly fragments ("ok", "th"), longer ones identifiers.
pub const WORD_BYTES: std::ops::RangeInclusive<usize> = 3..=24;

/// Words a table of word vectors holds at most, for every agent together
/// (int8: about 20 MB with a 384-dimension model).
pub const MAX_WORDS: usize = 50_000;

/// Whether `word` is one the vocabulary embeds: letters only (numbers and
/// codes say nothing a model can place), of a sensible length.
pub fn is_word(word: &str) -> bool {
    WORD_BYTES.contains(&word.len()) && word.bytes().all(|b| b.is_ascii_lowercase())
}

/// The words of `text` a vocabulary holds ([`is_word`]), as a backend
/// without the index's analyzer splits them: at anything not a letter or
/// digit, lower-cased (a database's own parser stems them for its search;
/// these are what a model reads).
pub fn plain_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| WORD_BYTES.contains(&w.len()))
        .map(str::to_lowercase)
        .filter(|w| is_word(w))
}

/// The vectors of words, for one model.
#[derive(Debug)]
pub struct WordVectors {
    dim: usize,
    /// At most this many words are held; past it, a new word takes the
    /// place of the one least recently used.
    max: usize,
    at: HashMap<String, u32>,
    /// The word in each place.
    words: Vec<String>,
    /// When each place's word was last asked about or stored, by `clock`.
    used: Vec<AtomicU64>,
    clock: AtomicU64,
    /// Words given up for others so far.
    evictions: u64,
    /// Words the model refused: not asked for again (a remote model that
    /// refuses a word would refuse it at every visit of the indexer).
    refused: std::collections::HashSet<String>,
    scales: Vec<f32>,
    /// `dim` values per word, in insertion order.
    values: Vec<i8>,
}

impl WordVectors {
    pub fn new(dim: usize, max: usize) -> Self {
        Self {
            dim,
            max,
            at: HashMap::new(),
            words: Vec::new(),
            used: Vec::new(),
            clock: AtomicU64::new(0),
            evictions: 0,
            refused: std::collections::HashSet::new(),
            scales: Vec::new(),
            values: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Whether a new word takes another's place.
    pub fn is_full(&self) -> bool {
        self.at.len() >= self.max
    }

    /// How many words were given up for others so far: a caller that
    /// found every word of its own held checks again once this changes.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    pub fn contains(&self, word: &str) -> bool {
        self.at.contains_key(word)
    }

    /// About how many bytes the table holds in memory.
    pub fn memory_bytes(&self) -> usize {
        // A word and its map slot.
        const WORD: usize = 48;
        self.values.capacity()
            + self.scales.capacity() * 4
            + self.used.capacity() * 8
            + (self.at.capacity() + self.words.capacity() + self.refused.capacity()) * WORD
    }

    /// Of `words`, those without a vector, at most as many as the table
    /// holds.
    pub fn missing<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        words
            .into_iter()
            .filter(|w| !self.at.contains_key(*w) && !self.refused.contains(*w))
            .take(self.max)
            .map(str::to_owned)
            .collect()
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Notes that the model refused `words`: [`missing`](Self::missing)
    /// leaves them out from now on (bounded as the table is).
    pub fn refuse(&mut self, words: &[String]) {
        let room = self.max.saturating_sub(self.refused.len());
        self.refused.extend(words.iter().take(room).cloned());
    }

    /// Stores `word`'s vector (unit length, `dim` long), in the place of
    /// the word least recently used when the table is full. A word already
    /// held, or a vector of another length: nothing changes.
    pub fn insert(&mut self, word: &str, vector: &[f32]) {
        if vector.len() != self.dim || self.max == 0 || self.at.contains_key(word) {
            return;
        }
        let (scale, values) = quantize(vector);
        let now = self.tick();
        if !self.is_full() {
            self.at.insert(word.to_owned(), self.scales.len() as u32);
            self.words.push(word.to_owned());
            self.used.push(AtomicU64::new(now));
            self.scales.push(scale);
            self.values.extend(values);
            return;
        }
        // A pass over the table per word: a batch of the indexer's is 64
        // words, against a model pass for each.
        let Some(place) =
            (0..self.used.len()).min_by_key(|i| self.used[*i].load(Ordering::Relaxed))
        else {
            return;
        };
        self.evictions += 1;
        self.at.remove(&self.words[place]);
        self.at.insert(word.to_owned(), place as u32);
        self.words[place] = word.to_owned();
        self.used[place].store(now, Ordering::Relaxed);
        self.scales[place] = scale;
        self.values[place * self.dim..(place + 1) * self.dim].copy_from_slice(&values);
    }

    /// The `n` of `words` closest to `query` (unit length), with their
    /// cosines, closest first; words without a vector are skipped.
    pub fn nearest<'a>(&self, query: &[f32], words: &'a [String], n: usize) -> Vec<(&'a str, f32)> {
        if query.len() != self.dim || n == 0 {
            return Vec::new();
        }
        let (query_scale, query) = quantize_i16(query);
        // The words asked about are in use: the last a full table gives up.
        let now = self.tick();
        let mut scored: Vec<(f32, &'a str)> = words
            .iter()
            .filter_map(|w| {
                let i = *self.at.get(w.as_str())? as usize;
                self.used[i].store(now, Ordering::Relaxed);
                let values = &self.values[i * self.dim..(i + 1) * self.dim];
                let cosine = dot(values, &query) as f32 * self.scales[i] * query_scale;
                Some((cosine, w.as_str()))
            })
            .collect();
        let by_score = |a: &(f32, &str), b: &(f32, &str)| b.0.total_cmp(&a.0).then(a.1.cmp(b.1));
        if scored.len() > n {
            scored.select_nth_unstable_by(n - 1, by_score);
            scored.truncate(n);
        }
        scored.sort_by(by_score);
        scored.into_iter().map(|(c, w)| (w, c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    #[test]
    fn plain_words_are_the_lower_cased_letters_between_the_rest() {
        let words: Vec<String> =
            plain_words("Caroline's PUPPY, adopted_2023 (a re-do) x4 ok naïve").collect();
        // Too short, digits, not ASCII: none a word the model is asked for.
        assert_eq!(words, ["caroline", "puppy", "adopted"]);
    }

    #[test]
    fn words_are_found_by_meaning_among_those_asked_about() {
        let mut t = WordVectors::new(3, 10);
        t.insert("dog", &unit(&[1.0, 0.1, 0.0]));
        t.insert("puppy", &unit(&[0.9, 0.2, 0.0]));
        t.insert("lisbon", &unit(&[0.0, 0.0, 1.0]));
        let asked: Vec<String> = ["lisbon", "puppy", "dog", "unknown"]
            .map(String::from)
            .to_vec();
        let near = t.nearest(&unit(&[1.0, 0.0, 0.0]), &asked, 2);
        let words: Vec<&str> = near.iter().map(|(w, _)| *w).collect();
        assert_eq!(words, ["dog", "puppy"]);
        assert!((near[0].1 - 0.995).abs() < 0.01, "{near:?}");
        // Only the words asked about are considered.
        let only: Vec<String> = vec!["lisbon".into()];
        assert_eq!(t.nearest(&unit(&[1.0, 0.0, 0.0]), &only, 5).len(), 1);
    }

    #[test]
    fn the_table_is_bounded_and_says_what_is_missing() {
        let mut t = WordVectors::new(2, 2);
        t.insert("one", &[1.0, 0.0]);
        assert_eq!(t.missing(["one", "two", "three"]), ["two", "three"]);
        t.insert("two", &[0.0, 1.0]);
        assert!(t.is_full());
        let bytes = t.memory_bytes();
        // "one" is asked about; "two" is not: a new word takes its place.
        let asked = ["one".to_owned()];
        assert_eq!(t.nearest(&[1.0, 0.0], &asked, 1).len(), 1);
        assert_eq!(t.evictions(), 0);
        t.insert("three", &[0.0, 1.0]);
        assert_eq!((t.len(), t.evictions()), (2, 1));
        assert!(t.contains("one") && t.contains("three") && !t.contains("two"));
        assert_eq!(t.memory_bytes(), bytes, "bounded");
        let three = ["three".to_owned()];
        let near = t.nearest(&[0.0, 1.0], &three, 1);
        assert!(near[0].1 > 0.99, "its vector in the place: {near:?}");
        assert_eq!(t.missing(["two", "one"]), ["two"]);
        // Unasked since, "one" is now the least recently used.
        t.insert("four", &[1.0, 0.0]);
        assert!(t.contains("three") && t.contains("four") && !t.contains("one"));
        assert_eq!(WordVectors::new(2, 1).missing(["a", "b"]), ["a"]);
        let mut none = WordVectors::new(2, 0);
        none.insert("one", &[1.0, 0.0]);
        assert!(none.is_empty());
        // A word the model refused is not asked for again.
        let mut r = WordVectors::new(2, 5);
        r.refuse(&["nope".to_owned()]);
        assert_eq!(r.missing(["nope", "yes"]), ["yes"]);
        // A vector of the wrong length is not taken.
        let mut u = WordVectors::new(2, 5);
        u.insert("bad", &[1.0]);
        assert!(u.is_empty());
    }

    #[test]
    fn only_plain_words_are_embedded() {
        assert!(is_word("puppy"));
        assert!(!is_word("ok"));
        assert!(!is_word("2023"));
        assert!(!is_word("b2b"));
        assert!(!is_word(&"a".repeat(25)));
    }
}
