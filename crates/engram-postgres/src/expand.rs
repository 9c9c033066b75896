//! The vocabulary's primitives on PostgreSQL (`engram_index::rank::expansion`
//! says why a question is expanded and how the terms are chosen): the
//! nearest words of the vocabulary of `who`'s rows (`vocabulary.rs`) in
//! this replica's table of word vectors, and their lexemes and the rows
//! that hold them.
//!
//! The table is filled in the background: a search that finds words of
//! its vocabulary without vectors has them embedded after it answers (one
//! round at a time per replica), and a search that waits for the index
//! (`wait_for_index`) has them embedded before it ranks, as long as its
//! wait allows.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use engram_index::{Params, Term, WordVectors};
use engram_store::Result;
use sqlx::PgConnection;

use crate::PgStore;
use crate::covered::Covered;
use crate::vocabulary::Shared;

/// Words per call to the model when the vocabulary is embedded.
const BATCH: usize = 64;

impl PgStore {
    /// The `n` words of `who`'s vocabulary closest to `query` (the
    /// nearest of each conversation's, then of them all), closest first;
    /// `deadline`: the search waits for the index until then (its
    /// vocabulary's words are embedded first). Empty without a model, or
    /// with the expansion turned off.
    pub(crate) async fn vocabulary_near(
        &self,
        conn: &mut PgConnection,
        who: &Covered<'_>,
        (query, n): (&[f32], usize),
        deadline: Option<Instant>,
    ) -> Result<(Vec<(String, f32)>, Vec<Shared>)> {
        let Some(table) = &self.inner.words else {
            return Ok(Default::default());
        };
        let agents = agents_of(who);
        let vocabularies = self.inner.vocabulary.of(conn, &agents).await?;
        let lists: Vec<Arc<Vec<String>>> = vocabularies
            .iter()
            .map(|v| Arc::clone(engram_store::lock(v).words()))
            .collect();
        let missing = {
            let table = engram_store::read(table);
            let mut missing = Vec::new();
            for v in &vocabularies {
                missing.extend(engram_store::lock(v).without_vectors(&table));
            }
            missing.sort_unstable();
            missing.dedup();
            missing
        };
        if !missing.is_empty() {
            self.embed_words(missing, deadline).await;
        }
        let table = engram_store::read(table);
        let mut near: Vec<(&str, f32)> = lists
            .iter()
            .flat_map(|list| table.nearest(query, list, n))
            .collect();
        near.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        near.dedup_by(|a, b| a.0 == b.0);
        near.truncate(n);
        let near = near.into_iter().map(|(w, c)| (w.to_owned(), c)).collect();
        drop(table);
        Ok((near, vocabularies))
    }

    /// Each word's lexeme (`None`: a stop word) and the rows holding it,
    /// summed over the conversations' `vocabularies` (as
    /// [`Self::vocabulary_near`] read them).
    pub(crate) async fn vocabulary_terms(
        &self,
        conn: &mut PgConnection,
        vocabularies: &[Shared],
        words: &[&str],
    ) -> Result<Vec<Option<Term>>> {
        let lexemes = self.inner.vocabulary.lexemes(conn, words).await?;
        let mut held: HashMap<String, u64> = HashMap::new();
        Ok(words
            .iter()
            .map(|word| {
                let text = lexemes.get(*word).cloned().flatten()?;
                let rows = *held.entry(text.clone()).or_insert_with_key(|l| {
                    vocabularies
                        .iter()
                        .map(|v| engram_store::lock(v).held(l))
                        .sum()
                });
                Some(Term { text, held: rows })
            })
            .collect())
    }

    /// Embeds `words` into the table of word vectors: now, when a search
    /// waits until `deadline` (what is left then is embedded in the
    /// background); else in the background, one round at a time.
    async fn embed_words(&self, words: Vec<String>, deadline: Option<Instant>) {
        let (Some(table), Some(embedder)) = (&self.inner.words, self.embedder()) else {
            return;
        };
        if let Some(deadline) = deadline {
            // This search waits for the model: it does not count as a
            // call the model's background work makes way for (it would
            // make way for its own wait, until the deadline).
            let _waiting = engram_core::load::Load::global().waiting();
            let embedding = engram_store::embed_words(embedder.as_ref(), table, &words, BATCH);
            match tokio::time::timeout_at(deadline.into(), embedding).await {
                Ok(Ok(())) => return,
                Ok(Err(why)) => {
                    tracing::warn!(error = %why, "words of a vocabulary not embedded; the search is not expanded by them");
                    return;
                }
                // The wait is over: the rest in the background.
                Err(_) => {}
            }
        }
        if self.inner.embedding_words.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        let (table, embedder) = (Arc::clone(table), Arc::clone(embedder));
        tokio::spawn(async move {
            let words = engram_store::read(&table).missing(words.iter().map(String::as_str));
            if let Err(why) =
                engram_store::embed_words(embedder.as_ref(), &table, &words, BATCH).await
            {
                tracing::warn!(error = %why, "words of a vocabulary not embedded; a later search asks again");
            }
            store.inner.embedding_words.store(false, Ordering::Release);
        });
    }
}

/// The table of word vectors a replica with a model keeps.
pub(crate) fn word_table(params: &Params, dim: usize) -> Option<Arc<RwLock<WordVectors>>> {
    (params.expansion_words > 0).then(|| {
        Arc::new(RwLock::new(WordVectors::new(
            dim,
            engram_index::words::MAX_WORDS,
        )))
    })
}

/// The agents whose rows a ranking reads.
fn agents_of(who: &Covered<'_>) -> Vec<String> {
    match who {
        Covered::Agent(id) => vec![(*id).to_owned()],
        Covered::User(p) => p.agents.clone(),
    }
}
