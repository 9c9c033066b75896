//! The lexical side: one tantivy index (BM25 over the English analyzer)
//! per agent, on disk or in memory.
//!
//! Each item is one document keyed by its id; writing an item again
//! replaces it. A commit carries the caller's payload (how far the index
//! has read its sources), atomically with the documents, so after a crash
//! the index knows exactly what to catch up on.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::Path;

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing,
    TextOptions, Value,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::analyzer::{self, ANALYZER};
use crate::{Address, Candidate, Filter, Item, Kind, Placed, Result};
use columns::Columns;
pub use source::{IndexSource, rank, rank_index};
use speakers::Speakers;
use staged::Clause;
use top::FilteredTop;

/// Memory the writer may buffer before it writes a segment (tantivy's
/// floor): an agent's batch is small, the index is one of many.
const WRITER_BUDGET: usize = 15_000_000;

#[derive(Debug, Clone, Copy)]
struct Fields {
    key: Field,
    kind: Field,
    trace_type: Field,
    order: Field,
    ts: Field,
    text: Field,
    when: Field,
    body: Field,
    /// The speaker's name, normalized ("" for none): the speaker prior.
    speaker: Field,
    /// 1 for a message that mostly asks: the question prior.
    asks: Field,
    /// The text's words, not stemmed, indexed for their dictionary only:
    /// the vocabulary query expansion draws on (`vocabulary.rs`).
    words: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        key: b.add_text_field("key", STRING | STORED | FAST),
        kind: b.add_u64_field("kind", INDEXED | FAST | STORED),
        trace_type: b.add_u64_field("trace_type", INDEXED | FAST | STORED),
        order: b.add_u64_field("order", INDEXED | FAST | STORED),
        ts: b.add_f64_field("ts", INDEXED | FAST | STORED),
        // Stored: what the embedding model reads when vectors are built
        // for documents already here (a new model, a lost vectors file).
        text: b.add_text_field("text", text.clone() | STORED),
        when: b.add_text_field("when", text),
        body: b.add_text_field("body", STORED),
        speaker: b.add_text_field("speaker", STRING | FAST),
        asks: b.add_u64_field("asks", FAST),
        words: b.add_text_field(
            "words",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(analyzer::WORDS)
                    .set_index_option(IndexRecordOption::Basic),
            ),
        ),
    };
    (b.build(), fields)
}

/// One agent's lexical index.
pub struct Lexical {
    index: Index,
    /// On disk: where commits wait in memory until persisted (`tiered.rs`).
    tiered: Option<tiered::Tiered>,
    reader: IndexReader,
    writer: Option<IndexWriter>,
    fields: Fields,
    analyzer: TextAnalyzer,
    /// The terms the `when` field can hold besides numbers (the analyzed
    /// month and weekday names): a query term that is neither is not
    /// looked up there (a lookup per term and segment, for no match).
    date_terms: std::collections::HashSet<String>,
    /// Event time of every trace by conversation order: a hit's
    /// neighbours without a query per hit.
    traces: BTreeMap<u64, f64>,
    /// Who said each trace, and which participant a question names.
    speakers: Speakers,
    /// The words of the index as of a searcher generation, and about how
    /// many bytes they hold.
    vocabulary: Option<(u64, std::sync::Arc<Vec<String>>, usize)>,
    /// The traces in sittings as of a commit, and where a place holds its
    /// conversation (a user's index).
    sittings: Option<sittings::SittingTable>,
    conversations: Option<u32>,
    /// Items a search staged and the indexer has not committed
    /// (`staged.rs`).
    staged: staged::Staged,
}

impl std::fmt::Debug for Lexical {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lexical")
            .field("traces", &self.traces.len())
            .finish()
    }
}

impl Lexical {
    /// Opens the index in `dir`, creating it when there is none.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (schema, fields) = schema();
        let tiered = tiered::Tiered::open(dir)?;
        let index = Index::open_or_create(tiered.clone(), schema)?;
        let mut me = Self::with(index, fields)?;
        me.tiered = Some(tiered);
        Ok(me)
    }

    /// An index that lives in memory only.
    pub fn in_memory() -> Result<Self> {
        let (schema, fields) = schema();
        Self::with(Index::create_in_ram(schema), fields)
    }

    fn with(index: Index, fields: Fields) -> Result<Self> {
        index.tokenizers().register(ANALYZER, analyzer::analyzer());
        index
            .tokenizers()
            .register(analyzer::WORDS, analyzer::words_analyzer());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let mut analyzer = analyzer::analyzer();
        let date_terms = crate::time::names()
            .flat_map(|name| analyzer::terms(&mut analyzer, name, 4))
            .collect();
        let mut me = Self {
            index,
            tiered: None,
            reader,
            writer: None,
            fields,
            analyzer,
            date_terms,
            traces: BTreeMap::new(),
            speakers: Speakers::default(),
            vocabulary: None,
            sittings: None,
            conversations: None,
            staged: staged::Staged::default(),
        };
        me.load_traces()?;
        Ok(me)
    }

    fn load_traces(&mut self) -> Result<()> {
        let searcher = self.reader.searcher();
        for segment in searcher.segment_readers() {
            let c = Columns::of(segment)?;
            for doc in segment.doc_ids_alive() {
                if c.kind.first(doc) == Some(Kind::Trace as u64) {
                    let order = c.order.first(doc).unwrap_or_default();
                    self.traces
                        .insert(order, c.ts.first(doc).unwrap_or_default());
                    let speaker = Columns::str_of(c.speaker.as_ref(), doc)?;
                    let asks = c.asks.first(doc) == Some(1);
                    self.speakers
                        .note(&mut self.analyzer, order, &speaker, asks);
                }
            }
        }
        Ok(())
    }

    /// The payload of the last commit: how far the caller had indexed.
    pub fn payload(&self) -> Result<Option<String>> {
        Ok(self.index.load_metas()?.payload)
    }

    /// The analyzer's distinct terms of a query, at most `max`.
    pub fn query_terms(&mut self, text: &str, max: usize) -> Vec<String> {
        analyzer::terms(&mut self.analyzer, text, max)
    }

    /// Who said the trace at `order` (when it was named), and whether it
    /// mostly asks: what the priors weigh it by.
    pub fn said(&self, order: u64) -> crate::rank::Said {
        self.speakers.of(order)
    }

    /// Documents searched: committed so far, and staged.
    pub fn len(&self) -> u64 {
        let committed = self.reader.searcher().num_docs() as i64;
        (committed + self.staged_count()).max(0) as u64
    }

    /// Documents committed so far (staged ones left out).
    pub fn committed_len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The best `limit` documents for any of `terms` (BM25), within `filter`.
    pub fn search(
        &self,
        terms: &[String],
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Candidate>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let f = self.fields;
        let in_when =
            |t: &String| t.bytes().all(|b| b.is_ascii_digit()) || self.date_terms.contains(t);
        let words: Vec<Clause> = terms
            .iter()
            .flat_map(|t| {
                let fields = [Some(f.text), in_when(t).then_some(f.when)];
                fields
                    .into_iter()
                    .flatten()
                    .map(|field| (field, t.clone(), 1.0))
            })
            .collect();
        self.candidates(words, filter, limit)
    }

    /// The best `limit` documents for any of `words` (a term in a field,
    /// its score times a weight; the scores summed), within `filter`: the
    /// committed ones and the staged ones, on the statistics of both.
    fn candidates(
        &self,
        words: Vec<Clause>,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Candidate>> {
        let clauses: Vec<(Occur, Box<dyn Query>)> = words
            .iter()
            .map(|(field, text, weight)| {
                let term = Term::from_field_text(*field, text);
                let q: Box<dyn Query> =
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs));
                let q = match *weight == 1.0 {
                    true => q,
                    false => Box::new(BoostQuery::new(q, *weight)),
                };
                (Occur::Should, q)
            })
            .collect();
        // The filter is checked on what the union offers (`top.rs`).
        let query = BooleanQuery::new(clauses);
        let searcher = self.reader.searcher();
        let Some(masked) = self.staging() else {
            let top = match *filter == Filter::default() {
                true => searcher.search(&query, &TopDocs::with_limit(limit))?,
                false => searcher.search(&query, &FilteredTop { limit, filter })?,
            };
            return self.committed(&searcher, top);
        };
        let stats = staged::WithStaged {
            searcher: &searcher,
            staged: &self.staged,
            fields: self.fields,
        };
        // Room for what staging hides.
        let asked = limit + masked.len();
        let top = searcher.search_with_statistics_provider(
            &query,
            &FilteredTop {
                limit: asked,
                filter,
            },
            &stats,
        )?;
        let mut found = self.committed(&searcher, top)?;
        found.retain(|c| !masked.contains(&c.key));
        found.extend(self.staged_top(&words, filter, limit, &stats)?);
        // Stable: a committed item first on a tie.
        found.sort_by(|a, b| b.score.total_cmp(&a.score));
        found.truncate(limit);
        Ok(found)
    }

    /// The committed documents `top` found, as candidates.
    fn committed(
        &self,
        searcher: &tantivy::Searcher,
        top: Vec<(f32, DocAddress)>,
    ) -> Result<Vec<Candidate>> {
        // Fast fields only: the stored document (its whole body) is read
        // for the few that make the page, not for every candidate. Each
        // segment's columns are opened once, and its keys read together.
        let mut columns: HashMap<u32, Columns> = HashMap::new();
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let c = match columns.entry(address.segment_ord) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    e.insert(Columns::of(searcher.segment_reader(address.segment_ord))?)
                }
            };
            let doc = address.doc_id;
            out.push(Candidate {
                key: String::new(),
                kind: Kind::from_u64(c.kind.first(doc).unwrap_or_default()),
                order: c.order.first(doc).unwrap_or_default(),
                ts: c.ts.first(doc).unwrap_or_default(),
                score,
                expansion: 0.0,
                address: Some(Address {
                    segment: address.segment_ord,
                    doc: address.doc_id,
                }),
            });
        }
        for (segment, c) in &columns {
            let mut ours: Vec<&mut Candidate> = out
                .iter_mut()
                .filter(|o| o.address.is_some_and(|a| a.segment == *segment))
                .collect();
            let docs: Vec<u32> = ours
                .iter()
                .filter_map(|o| o.address.map(|a| a.doc))
                .collect();
            for (candidate, key) in ours.iter_mut().zip(c.keys_of(&docs)?) {
                candidate.key = key;
            }
        }
        Ok(out)
    }

    /// The stored body of a candidate.
    pub fn body(&self, candidate: &Candidate) -> Result<String> {
        let Some(at) = candidate.address else {
            return Ok(self.body_of(&candidate.key)?.unwrap_or_default());
        };
        let doc: TantivyDocument = self
            .reader
            .searcher()
            .doc(DocAddress::new(at.segment, at.doc))?;
        Ok(doc
            .get_first(self.fields.body)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned())
    }

    /// The body of the item with conversation order `order` (a trace).
    pub fn body_at(&self, order: u64) -> Result<Option<String>> {
        if let Some(body) = self.staged_body_at(order) {
            return Ok(Some(body));
        }
        self.stored_at(order, self.fields.body)
    }

    /// The body of the item of this key.
    pub fn body_of(&self, key: &str) -> Result<Option<String>> {
        if let Some(staged) = self.staged_body(key) {
            return Ok(staged);
        }
        let q = TermQuery::new(
            Term::from_field_text(self.fields.key, key),
            IndexRecordOption::Basic,
        );
        self.first_body(&q)
    }

    fn first_body(&self, query: &dyn Query) -> Result<Option<String>> {
        Ok(self.first_doc(query)?.and_then(|doc| {
            doc.get_first(self.fields.body)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        }))
    }

    /// Up to `limit` committed items `skip` does not name, without their
    /// bodies: what an embedding model is given when vectors are (re)built.
    pub fn items_except(&self, skip: impl Fn(&str) -> bool, limit: usize) -> Result<Vec<Item>> {
        let f = self.fields;
        let searcher = self.reader.searcher();
        let mut out = Vec::new();
        for segment in searcher.segment_readers() {
            let store = segment.get_store_reader(64)?;
            let columns = Columns::of(segment)?;
            for doc_id in segment.doc_ids_alive() {
                // The key from its column: the stored document (with its
                // whole body) is read only for an item not skipped.
                if skip(&columns.key_of(doc_id)?) {
                    continue;
                }
                if out.len() == limit {
                    return Ok(out);
                }
                let doc: TantivyDocument = store.get(doc_id)?;
                let text = |field| {
                    doc.get_first(field)
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_owned()
                };
                let key = text(f.key);
                let number = |field| doc.get_first(field).and_then(|v| v.as_u64()).unwrap_or(0);
                out.push(Item {
                    key,
                    kind: Kind::from_u64(number(f.kind)),
                    trace_type: number(f.trace_type) as u8,
                    order: number(f.order),
                    ts: doc.get_first(f.ts).and_then(|v| v.as_f64()).unwrap_or(0.0),
                    text: text(f.text),
                    name: None,
                    body: String::new(),
                });
            }
        }
        Ok(out)
    }

    /// Whether an item of this key is held, committed or staged.
    pub fn contains(&self, key: &str) -> Result<bool> {
        if let Some(held) = self.staged_holds(key) {
            return Ok(held);
        }
        self.committed_contains(key)
    }

    /// Whether the committed index holds `key`, whatever is staged.
    fn committed_contains(&self, key: &str) -> Result<bool> {
        let q = TermQuery::new(
            Term::from_field_text(self.fields.key, key),
            IndexRecordOption::Basic,
        );
        Ok(self
            .reader
            .searcher()
            .search(&q, &tantivy::collector::Count)?
            > 0)
    }

    /// The traces next to `order` in conversation order, up to `n` on each
    /// side, with their event times: (before, after), nearest first. In a
    /// user's index, only those of the same conversation: the last message
    /// of one is no context of the next one's first.
    pub fn neighbours(&self, order: u64, n: usize) -> (Vec<Placed>, Vec<Placed>) {
        let of = |o: u64| self.conversations.map(|s| o.checked_shr(s).unwrap_or(0));
        let same = |(o, _): &(&u64, &f64)| of(**o) == of(order);
        let before = self
            .traces
            .range(..order)
            .rev()
            .take_while(same)
            .take(n)
            .map(|(o, t)| (*o, *t))
            .collect();
        let after = self
            .traces
            .range((Bound::Excluded(order), Bound::Unbounded))
            .take_while(same)
            .take(n)
            .map(|(o, t)| (*o, *t))
            .collect();
        (before, after)
    }
}

mod columns;
mod context;
mod sittings;
mod source;
mod speakers;
mod staged;
#[cfg(test)]
mod staged_tests;
#[cfg(test)]
mod tests;
mod tiered;
mod top;
mod vocabulary;
mod write;
