//! The index's traces in sittings, and each sitting's BM25 as one
//! document (`rank/sittings.rs`).

use std::sync::Arc;

use tantivy::postings::Postings;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocSet, TERMINATED, Term};

use super::{Columns, Lexical};
use crate::rank::{SittingCounts, Sittings};
use crate::{Kind, Result};

/// No sitting: a document that is no trace, or deleted.
const NONE: u32 = u32::MAX;

/// The sittings as of one commit and one gap, with each one's length in
/// words (its messages' together), and each document's sitting by
/// segment (a postings walk then costs a lookup per document).
#[derive(Debug)]
pub(super) struct SittingTable {
    /// The commit's generation, and what was staged then.
    generation: (u64, u64),
    gap: f64,
    sittings: Arc<Sittings>,
    lengths: Arc<Vec<u64>>,
    docs: Vec<Vec<u32>>,
}

impl SittingTable {
    pub(super) fn bytes(&self) -> usize {
        self.lengths.capacity() * 8 + self.docs.iter().map(|d| d.capacity() * 4).sum::<usize>()
    }
}

impl Lexical {
    /// This index's places hold a conversation in their bits from `shift`
    /// up (a user's index): no sitting spans two conversations.
    pub fn set_conversation_bits(&mut self, shift: u32) {
        self.conversations = Some(shift);
        self.sittings = None;
    }

    /// The traces in sittings split by `gap` (seconds), as the index holds
    /// them (committed and staged); read once per commit and staging.
    pub fn sittings(&mut self, gap: f64) -> Result<Arc<Sittings>> {
        Ok(Arc::clone(&self.sitting_table(gap)?.sittings))
    }

    fn sitting_table(&mut self, gap: f64) -> Result<&SittingTable> {
        let searcher = self.reader.searcher();
        let generation = (
            searcher.generation().generation_id(),
            self.staged.generation,
        );
        let fresh = self
            .sittings
            .as_ref()
            .is_some_and(|t| t.generation == generation && t.gap.to_bits() == gap.to_bits());
        if !fresh {
            let traces = self.traces.iter().map(|(o, t)| (*o, *t));
            let sittings = Sittings::split(traces, gap, self.conversations);
            let mut lengths = vec![0_u64; sittings.len()];
            let mut docs = Vec::with_capacity(searcher.segment_readers().len());
            for segment in searcher.segment_readers() {
                let columns = Columns::of(segment)?;
                let norms = segment.get_fieldnorms_reader(self.fields.text)?;
                let mut of = vec![NONE; segment.max_doc() as usize];
                for doc in segment.doc_ids_alive() {
                    if let Some(s) = trace_sitting(&columns, &sittings, doc) {
                        lengths[s] += u64::from(norms.fieldnorm(doc));
                        of[doc as usize] = s as u32;
                    }
                }
                docs.push(of);
            }
            self.staged_lengths(&sittings, &mut lengths);
            self.sittings = Some(SittingTable {
                generation,
                gap,
                sittings: Arc::new(sittings),
                lengths: Arc::new(lengths),
                docs,
            });
        }
        Ok(self.sittings.as_ref().expect("filled above"))
    }

    /// The sittings split by `gap` and each one's length, and where each
    /// of `terms` (analyzed query terms) falls in them: its occurrences by
    /// sitting, walked over its postings.
    pub fn sitting_counts(&mut self, terms: &[&str], gap: f64) -> Result<SittingCounts> {
        let field = self.fields.text;
        let searcher = self.reader.searcher();
        let table = self.sitting_table(gap)?;
        let mut counted = SittingCounts {
            sittings: Arc::clone(&table.sittings),
            lengths: Arc::clone(&table.lengths),
            counts: vec![Vec::new(); terms.len()],
        };
        if terms.is_empty() {
            return Ok(counted);
        }
        let segments: Vec<_> = searcher
            .segment_readers()
            .iter()
            .zip(&table.docs)
            .map(|(segment, docs)| Ok((segment.inverted_index(field)?, docs)))
            .collect::<Result<_>>()?;
        for (term, counts) in terms.iter().zip(&mut counted.counts) {
            let term = Term::from_field_text(field, term);
            for (inverted, docs) in &segments {
                let Some(mut postings) =
                    inverted.read_postings(&term, IndexRecordOption::WithFreqs)?
                else {
                    continue;
                };
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    match docs.get(doc as usize) {
                        Some(&s) if s != NONE => counts.push((s as usize, postings.term_freq())),
                        _ => {}
                    }
                    doc = postings.advance();
                }
            }
        }
        self.staged_counts(terms, &mut counted);
        Ok(counted)
    }
}

/// The sitting of the document `doc`, when it is a trace.
fn trace_sitting(columns: &Columns, sittings: &Sittings, doc: u32) -> Option<usize> {
    (columns.kind.first(doc) == Some(Kind::Trace as u64))
        .then(|| columns.order.first(doc))
        .flatten()
        .and_then(|order| sittings.of(order))
}
