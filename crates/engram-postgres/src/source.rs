//! The ranking's primitives on the database (`engram_index::Source`), for
//! one agent's rows or a user's (`Covered`): words ranked by BM25 in SQL
//! (`words.rs`), the traces around places, the vocabulary (`expand.rs`),
//! sittings (`sittings.rs`), who said what (`speakers.rs`) and this
//! replica's copy of the vectors. The ranking itself is
//! `engram_index::pipeline`, the same as the file store's.

use std::collections::HashMap;
use std::time::Instant;

use async_trait::async_trait;
use engram_index::{Around, Ask, Candidate, Lookup, Said, SittingCounts, Source, Term, Vectors};
use engram_store::{Result, StoreError};
use sqlx::PgConnection;

use crate::PgStore;
use crate::covered::{Covered, PlaceOrigins};
use crate::vocabulary::Shared;
use crate::words::{Hidden, Terms, candidates, neighbours};

/// One ranking's view of `who`'s rows.
pub(crate) struct PgSource<'s, 'c, 'w, 'p> {
    store: &'s PgStore,
    conn: &'c mut PgConnection,
    who: Covered<'w>,
    /// Where each place found lies (read back from it afterwards).
    pub(crate) places: PlaceOrigins<'p>,
    /// Rows searched.
    docs: u64,
    /// The current conversation's active transcript, left out.
    hidden: Hidden<'w>,
    /// A search that waits for the index until then has its vocabulary
    /// embedded first.
    deadline: Option<Instant>,
    vectors: Option<&'s Vectors>,
    /// The question's terms and their statistics ([`Source::terms`]).
    question: Option<Terms>,
    /// The conversations' vocabularies, as the expansion read them.
    vocabularies: Vec<Shared>,
    /// The rows holding each term of the vocabulary looked up.
    held: HashMap<String, u64>,
    /// Speakers by id - 1, as [`Source::said`] met them.
    names: Vec<String>,
}

impl<'s, 'c, 'w, 'p> PgSource<'s, 'c, 'w, 'p> {
    pub(crate) fn new(
        store: &'s PgStore,
        conn: &'c mut PgConnection,
        who: Covered<'w>,
        places: PlaceOrigins<'p>,
        (docs, hidden, deadline): (u64, Hidden<'w>, Option<Instant>),
        vectors: Option<&'s Vectors>,
    ) -> Self {
        Self {
            store,
            conn,
            who,
            places,
            docs,
            hidden,
            deadline,
            vectors,
            question: None,
            vocabularies: Vec::new(),
            held: HashMap::new(),
            names: Vec::new(),
        }
    }
}

#[async_trait]
impl Source for PgSource<'_, '_, '_, '_> {
    type Error = StoreError;

    fn documents(&self) -> u64 {
        self.docs
    }

    async fn terms(&mut self, query: &str, max: usize) -> Result<Vec<Term>> {
        let terms = crate::words::terms(self.conn, &self.who, query, max, self.docs).await?;
        let out = terms.as_ref().map_or_else(Vec::new, |t| {
            t.lexemes
                .iter()
                .zip(&t.held)
                .map(|(text, held)| Term {
                    text: text.clone(),
                    held: *held,
                })
                .collect()
        });
        self.question = terms;
        Ok(out)
    }

    async fn postings(&mut self, asks: &[Ask<'_>]) -> Result<Vec<Vec<Candidate>>> {
        let mut out = Vec::with_capacity(asks.len());
        for ask in asks {
            let weighted;
            let terms = match (ask.lookup, &self.question) {
                (_, None) => {
                    out.push(Vec::new());
                    continue;
                }
                (Lookup::Question, Some(question)) => question,
                (Lookup::Weighted(terms), Some(question)) => {
                    let terms: Vec<(String, f32, u64)> = terms
                        .iter()
                        .map(|(t, w)| (t.clone(), *w, self.held.get(t).copied().unwrap_or(0)))
                        .collect();
                    // The rows' average length is the question's.
                    weighted = Terms::weighted(&terms, self.docs, question.avgdl);
                    &weighted
                }
            };
            let (who, hidden) = (&self.who, self.hidden);
            let found = candidates(
                self.conn,
                who,
                terms,
                ask.filter,
                ask.limit,
                hidden,
                &mut self.places,
            );
            out.push(found.await?);
        }
        Ok(out)
    }

    async fn neighbours(&mut self, places: &[u64], span: usize) -> Result<Around> {
        neighbours(self.conn, &self.who, places, span, &mut self.places).await
    }

    async fn vocabulary_near(&mut self, query: &[f32], n: usize) -> Result<Vec<(String, f32)>> {
        let (store, who) = (self.store, &self.who);
        let asked = store.vocabulary_near(self.conn, who, (query, n), self.deadline);
        let (near, vocabularies) = asked.await?;
        self.vocabularies = vocabularies;
        Ok(near)
    }

    async fn terms_of(&mut self, words: &[&str]) -> Result<Vec<Option<Term>>> {
        let found = self
            .store
            .vocabulary_terms(self.conn, &self.vocabularies, words)
            .await?;
        for term in found.iter().flatten() {
            self.held.insert(term.text.clone(), term.held);
        }
        Ok(found)
    }

    async fn sittings(&mut self, terms: &[&str], gap: f64) -> Result<SittingCounts> {
        // A question's term in as many rows as rarity is counted to is
        // common: counting it by sitting would read every row it is in,
        // for next to no weight. It is passed over (no counts).
        let question = self.question.as_ref();
        let common = |t: &str| {
            question
                .is_some_and(|q| q.lexemes.iter().any(|l| l == t) && !q.rare.iter().any(|r| r == t))
        };
        let cache = &self.store.inner.sittings;
        crate::sittings::counts(self.conn, cache, &self.who, terms, &common, gap).await
    }

    async fn said(&mut self, places: &[u64]) -> Result<Vec<Said>> {
        let (who, origins) = (&self.who, &self.places);
        crate::speakers::said(self.conn, who, places, origins, &mut self.names).await
    }

    async fn speakers(&mut self, ids: &[u32]) -> Result<Vec<Vec<String>>> {
        let names: Vec<&str> = ids
            .iter()
            .map(|id| {
                let at = (*id as usize).checked_sub(1);
                at.and_then(|i| self.names.get(i))
                    .map_or("", String::as_str)
            })
            .collect();
        crate::speakers::name_terms(self.conn, &names).await
    }

    fn vectors(&self) -> Option<&Vectors> {
        self.vectors
    }
}
