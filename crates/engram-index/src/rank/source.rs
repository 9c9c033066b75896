//! What a backend gives the ranking: a narrow interface of batch
//! primitives ([`Source`]), with no ranking policy in it. The pipeline
//! (`pipeline.rs`) decides what to ask and what the answers weigh; a
//! backend only finds, counts and reads — with tantivy over the file
//! store's index (`lexical/source.rs`), with statements on PostgreSQL.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::{Said, Sittings};
use crate::{Candidate, Filter, Placed, Vectors};

/// A term of a question as a backend analyzed it, and how many of the
/// items searched hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub text: String,
    pub held: u64,
}

/// What a word search looks for.
#[derive(Debug, Clone, Copy)]
pub enum Lookup<'a> {
    /// The question's own terms, as [`Source::terms`] gave them (a backend
    /// may search more of an item for them than its text: its dates).
    Question,
    /// Terms each of a weight (BM25 × weight, summed): an expansion.
    Weighted(&'a [(String, f32)]),
}

/// One word search: the best `limit` items within `filter` for `lookup`,
/// by BM25, best first.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub lookup: Lookup<'a>,
    pub filter: &'a Filter,
    pub limit: usize,
}

/// The traces around places: up to the span asked on each side, nearest
/// first, each with its event time.
pub type Around = HashMap<u64, (Vec<Placed>, Vec<Placed>)>;

/// The sittings of what a source holds and how terms fall into them.
#[derive(Debug, Clone, Default)]
pub struct SittingCounts {
    pub sittings: Arc<Sittings>,
    /// Each sitting's length in words.
    pub lengths: Arc<Vec<u64>>,
    /// For each term asked, in order: its occurrences as (sitting, count),
    /// a sitting perhaps several times (the counts add up); a term the
    /// backend passed over (too costly to walk) has none.
    pub counts: Vec<Vec<(usize, u32)>>,
}

/// The primitives a ranking is made of, over one agent's memory or a
/// user's (places and keys as the backend gives them). Every call is a
/// batch: a ranking makes a handful, whatever its size.
#[async_trait]
pub trait Source: Send {
    type Error: Send;

    /// Items searched (what a term's rarity is counted among).
    fn documents(&self) -> u64;

    /// The distinct terms of `query`, at most `max`, each with the items
    /// holding it.
    async fn terms(&mut self, query: &str, max: usize) -> Result<Vec<Term>, Self::Error>;

    /// Each search of `asks`, in order.
    async fn postings(&mut self, asks: &[Ask<'_>]) -> Result<Vec<Vec<Candidate>>, Self::Error>;

    /// Up to `span` traces each side of each of `places` (a trace's own
    /// conversation only).
    async fn neighbours(&mut self, places: &[u64], span: usize) -> Result<Around, Self::Error>;

    /// The `n` words of the vocabulary of what is searched closest in
    /// meaning to `query` (a question's vector), closest first, each once;
    /// none without word vectors.
    async fn vocabulary_near(
        &mut self,
        query: &[f32],
        n: usize,
    ) -> Result<Vec<(String, f32)>, Self::Error>;

    /// Each word's term as a query term (`None`: a stop word), with the
    /// items holding it.
    async fn terms_of(&mut self, words: &[&str]) -> Result<Vec<Option<Term>>, Self::Error>;

    /// The traces in sittings split by `gap` seconds (none spans two
    /// conversations), and where `terms` fall in them.
    async fn sittings(&mut self, terms: &[&str], gap: f64) -> Result<SittingCounts, Self::Error>;

    /// What is known of the trace at each of `places`: who said it (an
    /// id of the source's) and whether it mostly asks.
    async fn said(&mut self, places: &[u64]) -> Result<Vec<Said>, Self::Error>;

    /// Each speaker's name as terms, analyzed as a question's are.
    async fn speakers(&mut self, ids: &[u32]) -> Result<Vec<Vec<String>>, Self::Error>;

    /// The vectors of what is searched, as far as they are embedded.
    fn vectors(&self) -> Option<&Vectors>;
}
