//! An embedder that remembers its latest vectors, so that one text is not
//! embedded twice in a row. A user message is both a prompt's query (its
//! recall embeds it at once, at the request's priority) and an item of
//! the agent's index (the indexer embeds it in the background): without
//! this, every user message cost the model twice, and on two cores the
//! two runs of the same text slowed each other down in front of the user.
//!
//! A query in flight is waited for by the indexer (the query runs at a
//! request's priority, so the background waits on faster work, never the
//! reverse); what the indexer embeds is remembered once its batch is done
//! (a request never waits behind idle-priority work). Only successes are
//! kept: a failed run leaves the next caller to try again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use engram_core::embed::{EmbedError, EmbedFuture, Embedder};
use tokio::sync::OnceCell;

/// Texts remembered: a prompt's query is embedded a few milliseconds
/// before the indexer reaches it, among at most a batch of others.
const REMEMBERED: usize = 256;

type Cell = Arc<OnceCell<Vec<f32>>>;

/// [`Embedder`] over another, remembering the vectors of the last
/// [`REMEMBERED`] texts (queries and items alike).
#[derive(Debug)]
pub struct Remembering {
    inner: Arc<dyn Embedder>,
    recent: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    /// A query's cell is set when its run succeeds; the indexer's are
    /// made set.
    cells: HashMap<String, Cell>,
    /// Oldest first; each text once.
    order: VecDeque<String>,
}

impl Recent {
    fn insert(&mut self, text: &str, cell: Cell) {
        if self.cells.insert(text.to_owned(), cell).is_none() {
            self.order.push_back(text.to_owned());
        }
        while self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.cells.remove(&old);
            }
        }
    }
}

impl Remembering {
    pub fn new(inner: Arc<dyn Embedder>) -> Self {
        Self {
            inner,
            recent: Mutex::new(Recent::default()),
        }
    }

    /// `inner`, remembering (once: an embedder that already remembers is
    /// not wrapped again).
    pub fn wrap(inner: Arc<dyn Embedder>) -> Arc<dyn Embedder> {
        if inner.remembers() {
            inner
        } else {
            Arc::new(Self::new(inner))
        }
    }

    /// The cell a query for `text` uses: the one remembered, else a new
    /// one (remembered at once: a caller of the same text meanwhile waits
    /// for this run).
    fn query_cell(&self, text: &str) -> Cell {
        let mut recent = crate::lock(&self.recent);
        if let Some(cell) = recent.cells.get(text) {
            return Arc::clone(cell);
        }
        let cell = Cell::default();
        recent.insert(text, Arc::clone(&cell));
        cell
    }

    /// For each text, the cell remembered for it, if any.
    fn item_cells(&self, texts: &[String]) -> Vec<Option<Cell>> {
        let recent = crate::lock(&self.recent);
        texts.iter().map(|t| recent.cells.get(t).cloned()).collect()
    }

    fn remember(&self, texts: &[&String], vectors: &[Vec<f32>]) {
        let mut recent = crate::lock(&self.recent);
        for (text, vector) in texts.iter().zip(vectors) {
            recent.insert(text, Arc::new(OnceCell::new_with(Some(vector.clone()))));
        }
    }

    async fn one(&self, cell: Cell, text: &str) -> Result<Vec<f32>, EmbedError> {
        let vector = cell
            .get_or_try_init(|| async {
                let mut v = self.inner.embed_query(text).await?;
                match (v.pop(), v.is_empty()) {
                    (Some(one), true) => Ok(one),
                    _ => Err(EmbedError::BadAnswer("not one vector for a query".into())),
                }
            })
            .await?;
        Ok(vector.clone())
    }

    async fn items(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let cells = self.item_cells(texts);
        let missing: Vec<&String> = texts
            .iter()
            .zip(&cells)
            .filter(|(_, c)| c.is_none())
            .map(|(t, _)| t)
            .collect();
        let mut fresh = if missing.is_empty() {
            Vec::new()
        } else {
            let owned: Vec<String> = missing.iter().map(|t| (*t).clone()).collect();
            let vectors = self.inner.embed(&owned).await?;
            if vectors.len() == owned.len() {
                self.remember(&missing, &vectors);
            }
            vectors
        }
        .into_iter();
        let mut out = Vec::with_capacity(texts.len());
        for (text, cell) in texts.iter().zip(cells) {
            match cell {
                Some(cell) => out.push(self.one(cell, text).await?),
                // A short answer is the caller's to judge (it counts).
                None => out.extend(fresh.next()),
            }
        }
        Ok(out)
    }
}

impl Embedder for Remembering {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn remembers(&self) -> bool {
        true
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(self.items(texts))
    }

    /// A text read after a context is not the text alone: such a batch is
    /// not remembered (each of its texts has its own context).
    fn embed_after<'a>(&'a self, items: &'a [(Option<String>, String)]) -> EmbedFuture<'a> {
        if items.iter().any(|(before, _)| before.is_some()) {
            return self.inner.embed_after(items);
        }
        Box::pin(async move {
            let texts: Vec<String> = items.iter().map(|(_, text)| text.clone()).collect();
            self.items(&texts).await
        })
    }

    fn embed_query<'a>(&'a self, text: &'a str) -> EmbedFuture<'a> {
        Box::pin(async move {
            let cell = self.query_cell(text);
            Ok(vec![self.one(cell, text).await?])
        })
    }
}

#[cfg(test)]
mod tests;
