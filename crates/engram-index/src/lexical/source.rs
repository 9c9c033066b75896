//! The ranking's primitives over a lexical index and its vectors (the
//! file store's, an agent's or a user's): tantivy's BM25 and postings,
//! the index's own tables of traces, speakers and vocabulary. Each call
//! is done when it returns: the ranking runs to its end with
//! [`crate::rank::ready`], on the caller's thread.

use async_trait::async_trait;

use super::Lexical;
use crate::rank::{
    Around, Ask, Lookup, Params, Ranked, Said, Semantic, SittingCounts, Source, Term,
};
use crate::{Candidate, Filter, IndexError, Vectors, WordVectors};

/// A lexical index ranked as a [`Source`], with its vectors and the table
/// of word vectors its vocabulary is looked up in (none: no model).
pub struct IndexSource<'a> {
    lexical: &'a mut Lexical,
    vectors: Option<&'a Vectors>,
    words: Option<&'a WordVectors>,
    /// The question's terms, as [`Source::terms`] gave them.
    question: Vec<String>,
}

impl<'a> IndexSource<'a> {
    pub fn new(
        lexical: &'a mut Lexical,
        vectors: Option<&'a Vectors>,
        words: Option<&'a WordVectors>,
    ) -> Self {
        Self {
            lexical,
            vectors,
            words,
            question: Vec::new(),
        }
    }
}

#[async_trait]
impl Source for IndexSource<'_> {
    type Error = IndexError;

    fn documents(&self) -> u64 {
        self.lexical.len()
    }

    async fn terms(&mut self, query: &str, max: usize) -> Result<Vec<Term>, IndexError> {
        self.question = self.lexical.query_terms(query, max);
        self.question
            .iter()
            .map(|t| {
                let held = self.lexical.doc_freq(t)?;
                Ok(Term {
                    text: t.clone(),
                    held,
                })
            })
            .collect()
    }

    async fn postings(&mut self, asks: &[Ask<'_>]) -> Result<Vec<Vec<Candidate>>, IndexError> {
        asks.iter()
            .map(|ask| match ask.lookup {
                Lookup::Question => self.lexical.search(&self.question, ask.filter, ask.limit),
                Lookup::Weighted(terms) => {
                    self.lexical.search_weighted(terms, ask.filter, ask.limit)
                }
            })
            .collect()
    }

    async fn neighbours(&mut self, places: &[u64], span: usize) -> Result<Around, IndexError> {
        let around = |place: &u64| (*place, self.lexical.neighbours(*place, span));
        Ok(places.iter().map(around).collect())
    }

    async fn vocabulary_near(
        &mut self,
        query: &[f32],
        n: usize,
    ) -> Result<Vec<(String, f32)>, IndexError> {
        let Some(table) = self.words else {
            return Ok(Vec::new());
        };
        let vocabulary = self.lexical.vocabulary()?;
        let near = table.nearest(query, &vocabulary, n);
        Ok(near.into_iter().map(|(w, c)| (w.to_owned(), c)).collect())
    }

    async fn terms_of(&mut self, words: &[&str]) -> Result<Vec<Option<Term>>, IndexError> {
        words
            .iter()
            .map(|word| {
                let Some(text) = self.lexical.term_of(word) else {
                    return Ok(None);
                };
                let held = self.lexical.doc_freq(&text)?;
                Ok(Some(Term { text, held }))
            })
            .collect()
    }

    async fn sittings(&mut self, terms: &[&str], gap: f64) -> Result<SittingCounts, IndexError> {
        self.lexical.sitting_counts(terms, gap)
    }

    async fn said(&mut self, places: &[u64]) -> Result<Vec<Said>, IndexError> {
        Ok(places.iter().map(|p| self.lexical.said(*p)).collect())
    }

    async fn speakers(&mut self, ids: &[u32]) -> Result<Vec<Vec<String>>, IndexError> {
        Ok(ids
            .iter()
            .map(|id| self.lexical.speakers.terms_of(*id))
            .collect())
    }

    fn vectors(&self) -> Option<&Vectors> {
        self.vectors
    }
}

/// The best `limit` items for `query` within `filter`, from the lexical
/// index and, when given, the vectors (every step of a ranking but the
/// expansion, which needs the table of word vectors: [`rank_index`]).
pub fn rank(
    index: &mut Lexical,
    semantic: Option<Semantic<'_>>,
    query: &str,
    filter: &Filter,
    limit: usize,
    params: &Params,
) -> crate::Result<Vec<Ranked>> {
    let (vectors, vector) = semantic.map(|s| (s.vectors, s.query)).unzip();
    let mut source = IndexSource::new(index, vectors, None);
    let wants = [(filter.clone(), limit)];
    let lexed = rank_index(&mut source, |s| {
        crate::rank::pipeline::by_words(s, query, &wants, params)
    })?;
    let mut ranked = rank_index(&mut source, |s| {
        crate::rank::pipeline::by_meaning(s, lexed, vector, params)
    })?;
    Ok(ranked.pop().unwrap_or_default())
}

/// Runs a step of the pipeline over a lexical index, which answers each
/// primitive when called, to its end on this thread.
pub fn rank_index<'s, 'a, T, F>(
    source: &'s mut IndexSource<'a>,
    step: impl FnOnce(&'s mut IndexSource<'a>) -> F,
) -> crate::Result<T>
where
    F: std::future::Future<Output = crate::Result<T>>,
{
    crate::rank::pipeline::ready(step(source)).unwrap_or_else(|| {
        Err(crate::IndexError::Io(std::io::Error::other(
            "a ranking step waited on the index, which answers at once",
        )))
    })
}
