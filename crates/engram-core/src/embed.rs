//! What the search index asks of an embedding model: texts in, one unit
//! vector per text out. The local model (`engram-embed`) and the
//! OpenAI-compatible client (`engram-llm`) both answer it.

use std::future::Future;
use std::pin::Pin;

/// Why no vectors came back. Search stays lexical until a retry succeeds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbedError {
    /// The model could not be reached or refused for now; a retry may succeed.
    #[error("embedder unavailable: {0}")]
    Unavailable(String),
    /// The answer was not one vector of the model's dimension per text, or
    /// the request was refused as such: retrying gets the same.
    #[error("embedder answer unusable: {0}")]
    BadAnswer(String),
}

pub type EmbedFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Vec<f32>>, EmbedError>> + Send + 'a>>;

/// An embedding model.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Identifies the model and its weights: vectors of two different ids
    /// are never compared (a change re-embeds everything).
    fn model(&self) -> &str;

    /// Length of every vector.
    fn dim(&self) -> usize;

    /// One L2-normalised vector per text, in order. An implementation that
    /// computes on the CPU does so off the async workers.
    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a>;

    /// One vector per text, each text read after its context (the first
    /// of its pair, when there is one): the text's meaning as the context
    /// makes it, but of the text's own tokens, so a context never stands
    /// in for the text. A model that cannot read part of a text that way
    /// (a remote one) reads each text alone.
    fn embed_after<'a>(&'a self, items: &'a [(Option<String>, String)]) -> EmbedFuture<'a> {
        Box::pin(async move {
            let texts: Vec<String> = items.iter().map(|(_, text)| text.clone()).collect();
            self.embed(&texts).await
        })
    }

    /// Whether this embedder remembers recent vectors already (see
    /// `engram_store::Remembering`), so that it is not wrapped twice.
    fn remembers(&self) -> bool {
        false
    }

    /// A search's query: one vector. A remote model answers it with less
    /// patience than the indexer's batches (a search is waiting).
    fn embed_query<'a>(&'a self, text: &'a str) -> EmbedFuture<'a> {
        Box::pin(async move {
            let texts = [text.to_owned()];
            self.embed(&texts).await
        })
    }
}

/// `v` scaled to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}
