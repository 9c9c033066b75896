//! The index's vocabulary: the distinct words of what it holds (the
//! `words` field's dictionary, so it is rebuilt with the index and costs
//! no file of its own), and word queries weighted per term, for query
//! expansion (`words.rs`, `rank.rs`).

use std::sync::Arc;

use tantivy::Term;

use super::Lexical;
use crate::words::is_word;
use crate::{Candidate, Filter, Result, WordVectors};

/// Words of one index considered for expansion, at most (a conversation
/// uses a few thousand; this bounds a query's scan of them).
pub const MAX_VOCABULARY: usize = 50_000;

impl Lexical {
    /// Which commit the searches see (a number that changes with each).
    pub fn generation(&self) -> u64 {
        self.reader.searcher().generation().generation_id()
    }

    /// The distinct plain words ([`is_word`]) of the committed documents,
    /// at most [`MAX_VOCABULARY`]; read once per commit.
    pub fn vocabulary(&mut self) -> Result<Arc<Vec<String>>> {
        let searcher = self.reader.searcher();
        let generation = searcher.generation().generation_id();
        if let Some((at, words, _)) = &self.vocabulary
            && *at == generation
        {
            return Ok(Arc::clone(words));
        }
        let mut all = std::collections::BTreeSet::new();
        for segment in searcher.segment_readers() {
            let inverted = segment.inverted_index(self.fields.words)?;
            let mut terms = inverted.terms().stream()?;
            while terms.advance() {
                if let Ok(word) = std::str::from_utf8(terms.key())
                    && is_word(word)
                    && !all.contains(word)
                {
                    all.insert(word.to_owned());
                }
            }
        }
        let words: Arc<Vec<String>> = Arc::new(all.into_iter().take(MAX_VOCABULARY).collect());
        let bytes = words
            .iter()
            .map(|w| w.capacity() + std::mem::size_of::<String>())
            .sum();
        self.vocabulary = Some((generation, Arc::clone(&words), bytes));
        Ok(words)
    }

    /// The words of [`vocabulary`](Self::vocabulary) that `table` has no
    /// vector for (at most as many as it holds).
    pub fn words_without_vectors(&mut self, table: &WordVectors) -> Result<Vec<String>> {
        let vocabulary = self.vocabulary()?;
        Ok(table.missing(vocabulary.iter().map(String::as_str)))
    }

    /// About how many bytes the vocabulary and the sittings read last
    /// hold, and what is staged (the memory budget's account).
    pub fn cached_bytes(&self) -> usize {
        self.vocabulary.as_ref().map_or(0, |(_, _, bytes)| *bytes)
            + self.sittings.as_ref().map_or(0, |s| s.bytes())
            + self.staged_bytes()
    }

    /// How many documents hold `term` (an analyzed query term), committed
    /// or staged.
    pub fn doc_freq(&self, term: &str) -> Result<u64> {
        let staged = self.staged_df(term);
        let term = Term::from_field_text(self.fields.text, term);
        Ok(self.reader.searcher().doc_freq(&term)? + staged)
    }

    /// The analyzed term of `word` (a word of the vocabulary), as a query
    /// term: `None` for a stop word.
    pub fn term_of(&mut self, word: &str) -> Option<String> {
        self.query_terms(word, 1).pop()
    }

    /// The best `limit` documents for `terms` each weighted (BM25 × its
    /// weight, summed), within `filter`.
    pub fn search_weighted(
        &self,
        terms: &[(String, f32)],
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Candidate>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let field = self.fields.text;
        let words = terms
            .iter()
            .map(|(t, weight)| (field, t.clone(), *weight))
            .collect();
        self.candidates(words, filter, limit)
    }
}
