//! Engram's search index: what makes an agent's memory findable.
//!
//! The index is derived from the store, never the source of truth: every
//! item (a raw trace, active or archived; an episodic summary; a semantic
//! fact) is written here by its id, and can be written again or the whole
//! index rebuilt from the store at any time.
//!
//! - [`analyzer`]: text to terms (English stop words, Porter2 stemming).
//! - [`lexical`]: one tantivy index per agent, BM25.
//! - [`vectors`]: one embedding per item, exact cosine.
//! - [`words`]: every agent's words embedded once, for query expansion.
//! - [`rank`]: from a question to ranked items — query terms, candidates,
//!   context from a hit's neighbouring messages, fusion with the vectors —
//!   written once ([`pipeline`]) over the primitives every backend gives
//!   ([`Source`]; [`lexical::IndexSource`] for this crate's index).
//!
//! The `lexical` feature (on by default) brings tantivy: the analyzer, the
//! per-agent index and ranking over it. Without it, what is left is what a
//! backend with its own word search needs (a database's full-text search):
//! items, filters, vectors, and ranking from its candidates
//! (the [`pipeline`] over its own [`Source`]).

#[cfg(feature = "lexical")]
pub mod analyzer;
#[cfg(feature = "lexical")]
pub mod lexical;
pub mod rank;
pub mod time;
pub mod vectors;
pub mod words;

#[cfg(feature = "lexical")]
pub use lexical::Lexical;
#[cfg(feature = "lexical")]
pub use lexical::{rank, rank_index};
pub use rank::{
    ASKING_CHARS, Around, Ask, Coverage, Fused, Lookup, Matched, Neighbours, Params, Ranked, Said,
    Semantic, SittingCounts, SittingScores, Sittings, Source, Term, Words, choose_expansion,
    from_candidates, mostly_asks, named_one, pipeline, sitting_scores, words_to_consider,
};
pub use vectors::{Embedded, Near, Vectors};
pub use words::WordVectors;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[cfg(feature = "lexical")]
    #[error("search index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[cfg(feature = "lexical")]
    #[error("search index directory: {0}")]
    Directory(#[from] tantivy::directory::error::OpenDirectoryError),
    #[error("search index I/O: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, IndexError>;

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Trace = 0,
    Episodic = 1,
    Semantic = 2,
}

impl Kind {
    fn from_u64(v: u64) -> Self {
        match v {
            1 => Self::Episodic,
            2 => Self::Semantic,
            _ => Self::Trace,
        }
    }
}

/// One item as the index sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The item's id in the store.
    pub key: String,
    pub kind: Kind,
    /// The trace type's number (0 for memory items).
    pub trace_type: u8,
    /// Place in the conversation: [`order`] of a trace's turn and seq; a
    /// memory item's first turn.
    pub order: u64,
    /// Event time, epoch seconds.
    pub ts: f64,
    /// What is searched: what was said.
    pub text: String,
    /// Who said it (a participant's display name), searched too.
    pub name: Option<String>,
    /// What a hit returns (the item as the store holds it, JSON).
    pub body: String,
}

impl Item {
    /// What is searched and embedded: the text, after the speaker's name
    /// as a transcript shows it ("Caroline: I went…") — measured better
    /// than a field of its own, where a name that half the messages carry
    /// scores next to nothing.
    pub fn full_text(&self) -> String {
        match &self.name {
            Some(name) => format!("{name}: {}", self.text),
            None => self.text.clone(),
        }
    }

    /// A message (a user's or an assistant's, [`MESSAGE_TYPES`]) that
    /// mostly asks: the question prior (`rank/asking.rs`).
    pub fn asks(&self) -> bool {
        self.kind == Kind::Trace
            && MESSAGE_TYPES.contains(&self.trace_type)
            && mostly_asks(&self.text)
    }
}

/// The trace type numbers of messages, a user's and an assistant's (as
/// the store numbers trace types; tool calls and results are 3 and 4).
pub const MESSAGE_TYPES: [u8; 2] = [1, 2];

/// A trace's conversation order and event time.
pub type Placed = (u64, f64);

/// A document that matched, before its body is read.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub key: String,
    pub kind: Kind,
    pub order: u64,
    pub ts: f64,
    pub score: f32,
    /// The part of `score` the question's expansion added (words of the
    /// conversation close in meaning, not the question's own).
    pub(crate) expansion: f32,
    /// Where the lexical index holds it (`None`: found by another word
    /// search, and read by key).
    pub(crate) address: Option<Address>,
}

/// A document's place in the lexical index (tantivy's segment and doc);
/// plain numbers, so that a candidate does not need tantivy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Address {
    pub(crate) segment: u32,
    pub(crate) doc: u32,
}

impl Candidate {
    /// A candidate another word search found (a database's full-text
    /// search): its body is looked up by key.
    pub fn new(key: String, kind: Kind, order: u64, ts: f64, score: f32) -> Self {
        Self {
            key,
            kind,
            order,
            ts,
            score,
            expansion: 0.0,
            address: None,
        }
    }
}

/// The conversation order of the `seq`th trace of turn `turn`.
pub fn order(turn: u32, seq: u32) -> u64 {
    (u64::from(turn) << 32) | u64::from(seq)
}

/// Which items a search may return; empty parts do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub kinds: Vec<Kind>,
    pub trace_types: Vec<u8>,
    /// Inclusive range of [`order`]s.
    pub order: Option<(u64, u64)>,
    /// Inclusive range of event times.
    pub ts: Option<(f64, f64)>,
    /// Only traces placed before this [`order`] (what a prompt does not
    /// show already); summaries and facts are not affected.
    pub traces_before: Option<u64>,
    /// No trace placed in this inclusive range of [`order`]s (one
    /// conversation's active transcript, in an index of several);
    /// summaries and facts are not affected.
    pub traces_hidden: Option<(u64, u64)>,
}

impl Filter {
    /// Whether an item of `kind` and `trace_type`, placed at `order` at
    /// time `ts`, is one a search within this filter may return.
    pub fn accepts(&self, kind: Kind, trace_type: u8, order: u64, ts: f64) -> bool {
        let trace = kind == Kind::Trace;
        (self.kinds.is_empty() || self.kinds.contains(&kind))
            && (self.trace_types.is_empty() || self.trace_types.contains(&trace_type))
            && self.order.is_none_or(|(lo, hi)| (lo..=hi).contains(&order))
            && self.ts.is_none_or(|(lo, hi)| (lo..=hi).contains(&ts))
            && self.traces_before.is_none_or(|end| !trace || order < end)
            && self
                .traces_hidden
                .is_none_or(|(lo, hi)| !trace || !(lo..=hi).contains(&order))
    }
}

/// A user message of turn `turn` as a test item; its body is its key.
#[cfg(all(test, feature = "lexical"))]
pub(crate) fn test_trace(key: &str, turn: u32, ts: f64, text: &str) -> Item {
    Item {
        key: key.into(),
        kind: Kind::Trace,
        trace_type: 1,
        order: order(turn, 0),
        ts,
        text: text.into(),
        name: None,
        body: key.into(),
    }
}
