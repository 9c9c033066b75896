//! What the index holds but has not committed: items staged in memory by
//! a search's catch-up ([`Lexical::stage`]), searched beside the committed
//! ones as if they were committed — by BM25 over the statistics of both,
//! as neighbours, speakers and sittings, read back by key or place — until
//! the indexer commits (it unstages them and indexes the same items from
//! the store's files). So a search pays for analyzing what it has not
//! seen, never for a commit (a segment written, the reader reloaded:
//! ~30 ms on a compacting turn), and what it finds does not depend on
//! whether the indexer has run.
//!
//! A staged item replaces a committed one of the same key, and a staged
//! removal hides one: both mask the committed item until the commit. The
//! masked item still counts in the statistics, as tantivy counts a
//! deleted document until its segment is merged away.
//! The vocabulary (query expansion) is the committed one: a staged word
//! has no vector until the indexer gives it one anyway.

use std::collections::{HashMap, HashSet};

use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::{Bm25StatisticsProvider, Bm25Weight};
use tantivy::schema::Field;
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Searcher, Term};

use super::{Fields, Lexical};
use crate::rank::{SittingCounts, Sittings};
use crate::{Candidate, Filter, Item, Kind, Result};

/// The two searched fields a staged item holds terms of.
const TEXT: usize = 0;
const WHEN: usize = 1;

/// The items staged since the last commit, and their postings.
#[derive(Debug, Default)]
pub(super) struct Staged {
    /// By slot; `None` once replaced or removed.
    items: Vec<Option<StagedItem>>,
    by_key: HashMap<String, usize>,
    /// Traces by place.
    traces: HashMap<u64, usize>,
    /// (field, term) → (slot, term frequency), per [`TEXT`] and [`WHEN`].
    postings: [HashMap<String, Vec<(u32, u32)>>; 2],
    /// Tokens of the live items, per field.
    tokens: [u64; 2],
    live: u64,
    /// Committed keys hidden until the commit: replaced by a staged item,
    /// or removed.
    masked: HashSet<String>,
    /// Bumped at every change: what the sittings table is read as of.
    pub(super) generation: u64,
    bytes: usize,
}

#[derive(Debug)]
struct StagedItem {
    item: Item,
    /// Each field's length in tokens, as a fieldnorm id (tantivy's code).
    norms: [u8; 2],
    /// The distinct terms of each field: where its postings are.
    terms: [Vec<String>; 2],
}

impl Staged {
    fn body_of(&self, key: &str) -> Option<&str> {
        let slot = self.by_key.get(key)?;
        self.items[*slot].as_ref().map(|s| s.item.body.as_str())
    }

    fn df(&self, field: usize, term: &str) -> u64 {
        self.postings[field].get(term).map_or(0, |p| p.len() as u64)
    }

    /// Drops the item in `slot` from the postings and the counts.
    fn drop_slot(&mut self, slot: usize) -> Option<StagedItem> {
        let gone = self.items[slot].take()?;
        for (field, terms) in gone.terms.iter().enumerate() {
            for term in terms {
                if let Some(p) = self.postings[field].get_mut(term) {
                    p.retain(|(s, _)| *s as usize != slot);
                    if p.is_empty() {
                        self.postings[field].remove(term);
                    }
                }
            }
            self.tokens[field] -= u64::from(FieldNormReader::id_to_fieldnorm(gone.norms[field]));
        }
        self.live -= 1;
        self.bytes = self.bytes.saturating_sub(bytes_of(&gone.item));
        self.by_key.remove(&gone.item.key);
        if gone.item.kind == Kind::Trace {
            self.traces.remove(&gone.item.order);
        }
        Some(gone)
    }
}

fn bytes_of(item: &Item) -> usize {
    // The item, and about as much again for its postings.
    2 * (item.key.len() + item.text.len() + item.body.len()) + 128
}

/// Each distinct term of `text` with its frequency, and the number of
/// tokens (what tantivy's fieldnorm counts).
fn analyzed(analyzer: &mut TextAnalyzer, text: &str) -> (Vec<(String, u32)>, u32) {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut order = Vec::new();
    let mut tokens = 0_u32;
    let mut stream = analyzer.token_stream(text);
    while stream.advance() {
        tokens = tokens.saturating_add(1);
        let t = &stream.token().text;
        match counts.get_mut(t) {
            Some(n) => *n += 1,
            None => {
                counts.insert(t.clone(), 1);
                order.push(t.clone());
            }
        }
    }
    let terms = order
        .into_iter()
        .map(|t| {
            let n = counts[&t];
            (t, n)
        })
        .collect();
    (terms, tokens)
}

/// BM25 statistics of the committed index and the staged items together:
/// a staged item scores as it will once committed, and a committed one as
/// beside it.
pub(super) struct WithStaged<'a> {
    pub searcher: &'a Searcher,
    pub staged: &'a Staged,
    pub fields: Fields,
}

impl WithStaged<'_> {
    fn side(&self, field: Field) -> Option<usize> {
        match field {
            f if f == self.fields.text => Some(TEXT),
            f if f == self.fields.when => Some(WHEN),
            _ => None,
        }
    }

    /// The BM25 weight of `term` in `field`.
    fn weight(&self, field: Field, term: &str) -> tantivy::Result<Bm25Weight> {
        let docs = self.total_num_docs()?;
        let tokens = self.total_num_tokens(field)?;
        let df = self.doc_freq(&Term::from_field_text(field, term))?;
        let average = tokens as f32 / docs.max(1) as f32;
        Ok(Bm25Weight::for_one_term_without_explain(df, docs, average))
    }
}

impl Bm25StatisticsProvider for WithStaged<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let staged = self.side(field).map_or(0, |s| self.staged.tokens[s]);
        Ok(Bm25StatisticsProvider::total_num_tokens(self.searcher, field)? + staged)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(Bm25StatisticsProvider::total_num_docs(self.searcher)? + self.staged.live)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let staged = match (self.side(term.field()), term.value().as_str()) {
            (Some(side), Some(text)) => self.staged.df(side, text),
            _ => 0,
        };
        Ok(self.searcher.doc_freq(term)? + staged)
    }
}

/// What a word search asks of each field: a term and its weight.
pub(super) type Clause = (Field, String, f32);

impl Lexical {
    /// Stages `items`: searchable at once, beside the committed ones and
    /// replacing any of the same key, without a commit (see the module).
    /// A trace already held at its place is left as it is: a trace does
    /// not change once written.
    pub fn stage(&mut self, items: &[Item]) -> Result<()> {
        for item in items {
            if item.kind == Kind::Trace && self.traces.contains_key(&item.order) {
                continue;
            }
            match self.staged.by_key.get(&item.key) {
                Some(&slot) => {
                    self.staged.drop_slot(slot);
                }
                // A trace not held at its place is not committed (its key
                // names that place): no lookup per trace.
                None if item.kind == Kind::Trace => {}
                None => {
                    if self.committed_contains(&item.key)? {
                        self.staged.masked.insert(item.key.clone());
                    }
                }
            }
            let (text, text_len) = analyzed(&mut self.analyzer, &item.full_text());
            let (when, when_len) = analyzed(&mut self.analyzer, &crate::time::words(item.ts));
            let staged = &mut self.staged;
            let slot = staged.items.len();
            let mut terms: [Vec<String>; 2] = Default::default();
            for (field, analyzed) in [(TEXT, text), (WHEN, when)] {
                for (term, tf) in analyzed {
                    let postings = staged.postings[field].entry(term.clone()).or_default();
                    postings.push((slot as u32, tf));
                    terms[field].push(term);
                }
            }
            let norms = [
                FieldNormReader::fieldnorm_to_id(text_len),
                FieldNormReader::fieldnorm_to_id(when_len),
            ];
            for (field, norm) in norms.iter().enumerate() {
                staged.tokens[field] += u64::from(FieldNormReader::id_to_fieldnorm(*norm));
            }
            staged.live += 1;
            staged.bytes += bytes_of(item);
            staged.by_key.insert(item.key.clone(), slot);
            if item.kind == Kind::Trace {
                staged.traces.insert(item.order, slot);
                self.traces.insert(item.order, item.ts);
                let name = item.name.as_deref().unwrap_or_default();
                self.speakers
                    .note(&mut self.analyzer, item.order, name, item.asks());
            }
            staged.items.push(Some(StagedItem {
                item: item.clone(),
                norms,
                terms,
            }));
        }
        self.staged.generation += 1;
        Ok(())
    }

    /// Hides the items of these keys (memories a change ended; a trace is
    /// only erased by a forget, which commits) until the next commit.
    pub fn stage_removal(&mut self, keys: &[&str]) -> Result<()> {
        for key in keys {
            if let Some(&slot) = self.staged.by_key.get(*key)
                && let Some(gone) = self.staged.drop_slot(slot)
                && gone.item.kind == Kind::Trace
            {
                self.traces.remove(&gone.item.order);
                self.speakers
                    .forget_between(gone.item.order, gone.item.order);
            }
            if self.committed_contains(key)? {
                self.staged.masked.insert((*key).to_owned());
            }
        }
        self.staged.generation += 1;
        Ok(())
    }

    /// Drops everything staged: the indexer then indexes the same items,
    /// and commits them.
    pub fn unstage(&mut self) {
        if self.staged.live == 0 && self.staged.masked.is_empty() {
            return;
        }
        self.unstage_all();
    }

    fn unstage_all(&mut self) {
        for order in self.staged.traces.keys() {
            self.traces.remove(order);
            self.speakers.forget_between(*order, *order);
        }
        let generation = self.staged.generation + 1;
        self.staged = Staged {
            generation,
            ..Staged::default()
        };
    }

    /// Takes what is staged out, for the caller to write (upsert the
    /// items, remove the keys) and commit: the index then holds it as
    /// committed, from memory rather than read again from its source.
    pub fn take_staged(&mut self) -> (Vec<Item>, Vec<String>) {
        let items: Vec<Item> = std::mem::take(&mut self.staged.items)
            .into_iter()
            .flatten()
            .map(|s| s.item)
            .collect();
        let replaced: HashSet<&str> = items.iter().map(|i| i.key.as_str()).collect();
        let removed = self
            .staged
            .masked
            .iter()
            .filter(|k| !replaced.contains(k.as_str()))
            .cloned()
            .collect();
        self.unstage_all();
        (items, removed)
    }

    /// Items staged and not committed.
    pub fn staged(&self) -> u64 {
        self.staged.live
    }

    /// About how many bytes the staged items hold.
    pub fn staged_bytes(&self) -> usize {
        self.staged.bytes
    }

    /// Whether a trace is held at `order`, committed or staged.
    pub fn has_trace(&self, order: u64) -> bool {
        self.traces.contains_key(&order)
    }

    /// A staged item's body, or `Some(None)` for a key staging hides;
    /// `None`: the committed index answers.
    pub(super) fn staged_body(&self, key: &str) -> Option<Option<String>> {
        if let Some(body) = self.staged.body_of(key) {
            return Some(Some(body.to_owned()));
        }
        self.staged.masked.contains(key).then_some(None)
    }

    /// The body of the staged trace at `order`.
    pub(super) fn staged_body_at(&self, order: u64) -> Option<String> {
        let slot = self.staged.traces.get(&order)?;
        self.staged.items[*slot]
            .as_ref()
            .map(|s| s.item.body.clone())
    }

    /// Whether staging holds `key` (`Some(false)`: it hides it); `None`:
    /// the committed index answers.
    pub(super) fn staged_holds(&self, key: &str) -> Option<bool> {
        if self.staged.body_of(key).is_some() {
            return Some(true);
        }
        self.staged.masked.contains(key).then_some(false)
    }

    /// Committed keys staging hides, and whether anything is staged.
    pub(super) fn staging(&self) -> Option<&HashSet<String>> {
        (self.staged.live > 0 || !self.staged.masked.is_empty()).then_some(&self.staged.masked)
    }

    /// How many of the staged items hold `term` in the text.
    pub(super) fn staged_df(&self, term: &str) -> u64 {
        self.staged.df(TEXT, term)
    }

    /// Items committed and staged, less those staging hides.
    pub(super) fn staged_count(&self) -> i64 {
        self.staged.live as i64 - self.staged.masked.len() as i64
    }

    /// The best `limit` staged items for `clauses` within `filter`, scored
    /// as `stats` has it.
    pub(super) fn staged_top(
        &self,
        clauses: &[Clause],
        filter: &Filter,
        limit: usize,
        stats: &WithStaged<'_>,
    ) -> Result<Vec<Candidate>> {
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for (field, term, boost) in clauses {
            let Some(side) = stats.side(*field) else {
                continue;
            };
            let Some(postings) = self.staged.postings[side].get(term) else {
                continue;
            };
            let weight = stats.weight(*field, term)?.boost_by(*boost);
            for (slot, tf) in postings {
                let Some(s) = &self.staged.items[*slot as usize] else {
                    continue;
                };
                *scores.entry(*slot).or_default() += weight.score(s.norms[side], *tf);
            }
        }
        let mut found: Vec<Candidate> = scores
            .into_iter()
            .filter_map(|(slot, score)| {
                let item = &self.staged.items[slot as usize].as_ref()?.item;
                filter
                    .accepts(item.kind, item.trace_type, item.order, item.ts)
                    .then(|| Candidate {
                        key: item.key.clone(),
                        kind: item.kind,
                        order: item.order,
                        ts: item.ts,
                        score,
                        expansion: 0.0,
                        address: None,
                    })
            })
            .collect();
        found.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.order.cmp(&b.order)));
        found.truncate(limit);
        Ok(found)
    }

    /// Adds each staged trace's length to its sitting's.
    pub(super) fn staged_lengths(&self, sittings: &Sittings, lengths: &mut [u64]) {
        for slot in self.staged.traces.values() {
            if let Some(s) = &self.staged.items[*slot]
                && let Some(at) = sittings.of(s.item.order)
            {
                lengths[at] += u64::from(FieldNormReader::id_to_fieldnorm(s.norms[TEXT]));
            }
        }
    }

    /// Adds where `terms` fall in the staged traces to `counted`.
    pub(super) fn staged_counts(&self, terms: &[&str], counted: &mut SittingCounts) {
        for (term, counts) in terms.iter().zip(&mut counted.counts) {
            let Some(postings) = self.staged.postings[TEXT].get(*term) else {
                continue;
            };
            for (slot, tf) in postings {
                if let Some(s) = &self.staged.items[*slot as usize]
                    && s.item.kind == Kind::Trace
                    && let Some(at) = counted.sittings.of(s.item.order)
                {
                    counts.push((at, *tf));
                }
            }
        }
    }
}
