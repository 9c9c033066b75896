//! Query expansion on PostgreSQL (`engram_index::rank::expansion` says why
//! and how the terms are chosen): the nearest words of the vocabulary of
//! `who`'s rows (`vocabulary.rs`) in this replica's table of word vectors,
//! their lexemes and the rows that hold them, then a second word search
//! with those terms weighted, whose finds join the question's ranking.
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

use engram_index::{Params, WordVectors, Words, choose_expansion, words_to_consider};
use engram_store::Result;
use sqlx::PgConnection;

use crate::PgStore;
use crate::covered::{Covered, PlaceOrigins};
use crate::words::{Hidden, Terms, around, candidates, neighbours};

/// Words per call to the model when the vocabulary is embedded.
const BATCH: usize = 64;

/// An expansion's terms: lexeme, weight, rows of `who` that hold it.
pub(crate) type Expansion = Vec<(String, f32, u64)>;

impl PgStore {
    /// The expansion of a question whose terms are `own`, by its vector
    /// `query`, over `who`'s `docs` rows; `deadline`: the search waits
    /// for the index until then (its vocabulary's words are embedded
    /// first). Empty without a model, or with the expansion turned off.
    pub(crate) async fn expansion(
        &self,
        conn: &mut PgConnection,
        who: &Covered<'_>,
        (query, own): (&[f32], &[String]),
        docs: u64,
        deadline: Option<Instant>,
    ) -> Result<Expansion> {
        let params = &self.inner.config.ranking;
        let considered = words_to_consider(params, own);
        let Some(table) = &self.inner.words else {
            return Ok(Vec::new());
        };
        if considered == 0 {
            return Ok(Vec::new());
        }
        let agents = match who {
            Covered::Agent(id) => vec![(*id).to_owned()],
            Covered::User(p) => p.agents.clone(),
        };
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
        // The nearest of each conversation's words, then of them all.
        let mut near: Vec<(&str, f32)> = {
            let table = engram_store::read(table);
            lists
                .iter()
                .flat_map(|list| table.nearest(query, list, considered))
                .collect()
        };
        near.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        near.dedup_by(|a, b| a.0 == b.0);
        near.truncate(considered);
        let words: Vec<&str> = near.iter().map(|(w, _)| *w).collect();
        let lexemes = self.inner.vocabulary.lexemes(conn, &words).await?;
        // The rows holding each lexeme looked at, summed over the
        // conversations once, for the choice and then the search.
        let mut held: HashMap<String, u64> = HashMap::new();
        let term_of = |word: &str| -> Result<Option<(String, u64)>> {
            let Some(lexeme) = lexemes.get(word).cloned().flatten() else {
                return Ok(None);
            };
            let rows = *held.entry(lexeme.clone()).or_insert_with_key(|l| {
                vocabularies
                    .iter()
                    .map(|v| engram_store::lock(v).held(l))
                    .sum()
            });
            Ok(Some((lexeme, rows)))
        };
        let chosen = choose_expansion(near, term_of, docs, own, params)?;
        Ok(chosen
            .into_iter()
            .map(|(lexeme, weight)| {
                let rows = held.get(&lexeme).copied().unwrap_or(0);
                (lexeme, weight, rows)
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

/// Each ranking of `words` with `expansion`'s terms in its word query
/// ([`Words::expanded`]): a second search of `who`'s rows (the question's
/// `terms` give the rows' average length), and the traces around what it
/// found.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn expand(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    words: Vec<Option<Words>>,
    (expansion, terms): (&Expansion, &Terms),
    docs: u64,
    hidden: Hidden<'_>,
    places: &mut PlaceOrigins<'_>,
    params: &Params,
) -> Result<Vec<Option<Words>>> {
    if expansion.is_empty() {
        return Ok(words);
    }
    let weighted = Terms::weighted(expansion, docs, terms.avgdl);
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        let w = match w {
            Some(w) if w.found_own_words() => w,
            other => {
                out.push(other);
                continue;
            }
        };
        let (filter, wanted) = (w.filter().clone(), w.wanted(params));
        let extra = candidates(conn, who, &weighted, &filter, wanted, hidden, places).await?;
        let merged = w.expanded(extra, params);
        let placed = neighbours(conn, who, &merged, params.neighbour_span, places).await?;
        out.push(Some(w.replaced(merged, &around(&placed), params)));
    }
    Ok(out)
}

/// The weighted terms a sitting's score counts: the question's `rare`
/// ones, then the expansion's.
pub(crate) fn sitting_terms(rare: &[String], expansion: &Expansion) -> Vec<(String, f32)> {
    rare.iter()
        .map(|l| (l.clone(), 1.0))
        .chain(expansion.iter().map(|(l, w, _)| (l.clone(), *w)))
        .collect()
}
