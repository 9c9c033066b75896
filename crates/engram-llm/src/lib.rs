//! What Engram asks of remote models: summarizers for compaction (and the
//! embedded extractive one that serves when no LLM is configured), and an
//! embedder for the search index.
//!
//! - [`Summarizer`]: the one operation compaction needs — whole turns in, an
//!   episodic summary and new or changed semantic facts out.
//! - [`extractive`]: deterministic, offline, every item tagged `extractive`.
//! - [`http`]: an OpenAI-compatible chat-completions client (OpenAI, vLLM,
//!   Ollama, llama.cpp, LiteLLM, …).
//! - [`embeddings`]: the search index's embedder over an OpenAI-compatible
//!   `/embeddings` endpoint.
//! - [`transport`]: both endpoints' retries and backoff.
//! - [`answer`]: the prompt the LLM gets and how its answer is read.
//! - [`circuit`]: stop calling a failing endpoint for a cool-down.
//! - [`chunked`]: windows larger than the model's context, in chunks.
//! - [`reconcile`]: the consolidation request about a user's facts.

pub mod answer;
pub mod chunked;
pub mod circuit;
pub mod embeddings;
pub mod extractive;
pub mod http;
pub mod reconcile;
pub mod transport;

#[cfg(test)]
mod fake;

use std::future::Future;
use std::pin::Pin;

use engram_core::RawTrace;
/// A fact a summarizer proposes; the store deduplicates and merges it.
pub use engram_core::compaction::NewFact;
/// A summarizer's answer.
pub use engram_core::compaction::Summary;
use engram_core::memory::SemanticItem;

pub use chunked::Chunked;
pub use circuit::{Breaker, Circuit, CircuitBreaker};
pub use embeddings::{EmbedConfig, HttpEmbedder};
pub use extractive::Extractive;
pub use http::{HttpConfig, HttpSummarizer};

/// Tag on every item the embedded summarizer writes.
pub use engram_core::memory::EXTRACTIVE_TAG;

/// What a summarizer is asked to condense.
#[derive(Debug, Clone, Copy)]
pub struct SummaryRequest<'a> {
    /// Whole turns, in order; a tool call and its result are never split.
    pub traces: &'a [RawTrace],
    /// Facts already known, so the answer holds only new or changed ones.
    pub known_facts: &'a [SemanticItem],
    /// Extra instruction of a manual compaction.
    pub focus: Option<&'a str>,
    /// The agent's working memory (its `working_memory` block: the state
    /// of the task at hand), shown for context; it is kept as it is.
    pub working_memory: Option<&'a str>,
}

/// Why no usable summary came back. Compaction prunes nothing on either.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SummarizeError {
    /// The model could not be reached or refused; a retry may succeed.
    #[error("summarizer unavailable: {0}")]
    Unavailable(String),
    /// The model answered with something that is not a summary.
    #[error("summarizer answer unusable: {0}")]
    BadAnswer(String),
    /// The endpoint refused the request (4xx other than 429): a retry would
    /// get the same answer; the configuration needs a look.
    #[error("summarizer refused the request: {0}")]
    Rejected(String),
    /// Too many outages in a row: the model is not called until the
    /// cool-down ends (this long from now; zero while a trial call decides).
    #[error("summarizer circuit open after repeated failures; {}", retry_in(*.0))]
    CircuitOpen(std::time::Duration),
}

pub(crate) fn retry_in(wait: std::time::Duration) -> String {
    if wait.is_zero() {
        "a trial call is under way".to_owned()
    } else {
        format!("retrying in {}s", wait.as_secs_f64().ceil())
    }
}

pub type SummaryFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Summary, SummarizeError>> + Send + 'a>>;

pub type ReconcileFuture<'a> =
    Pin<Box<dyn Future<Output = Result<reconcile::Decisions, SummarizeError>> + Send + 'a>>;

/// Condenses whole turns into memories.
pub trait Summarizer: Send + Sync + std::fmt::Debug {
    /// A short name for logs and reports (`extractive`, `http:<model>`).
    fn name(&self) -> String;

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a>;

    /// True while a circuit breaker keeps calls away from the model.
    fn circuit_open(&self) -> bool {
        false
    }

    /// Decides about a user's facts in `groups` on one subject each
    /// (consolidation: which replace which, which stopped being true), in
    /// one request; `None` from a summarizer that cannot judge meaning
    /// (the embedded one): nothing is replaced by guesswork.
    fn reconcile<'a>(&'a self, groups: &'a [Vec<SemanticItem>]) -> Option<ReconcileFuture<'a>> {
        let _ = groups;
        None
    }
}
