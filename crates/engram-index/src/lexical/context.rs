//! What a trace's vector reads besides its own text: the trace before it
//! in its sitting (`engram_store::context_of`). The index knows every
//! trace's place and time, and keeps each one's text; when a trace is
//! removed (a forget), the trace after it was embedded after its text and
//! is embedded again; so is the trace after one placed in the middle of
//! the conversation (a late tool result).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use tantivy::TantivyDocument;
use tantivy::Term;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Value};

use super::Lexical;
use crate::{Kind, Placed, Result};

impl Lexical {
    /// The stored text (name and words) of the trace before the one at
    /// `order`, when it is no more than `gap` seconds earlier: what that
    /// trace is embedded after.
    pub fn text_before(&self, order: u64, gap: f64) -> Result<Option<String>> {
        let Some(&ts) = self.traces.get(&order) else {
            return Ok(None);
        };
        let Some((&before, &then)) = self.traces.range(..order).next_back() else {
            return Ok(None);
        };
        if (ts - then).abs() > gap {
            return Ok(None);
        }
        self.stored_at(before, self.fields.text)
    }

    /// The keys of the traces each right after one of `removed` (the
    /// places and times [`Lexical::remove`] returned) and no more than
    /// `gap` seconds after the last removed one before it: embedded after
    /// its text, to embed again now it is gone.
    pub fn traces_after_removed(&self, removed: &[Placed], gap: f64) -> Result<Vec<String>> {
        let mut removed = removed.to_vec();
        removed.sort_by_key(|(order, _)| *order);
        // Each remaining trace after a removed one, with the time of the
        // last removed before it (in ascending order, the last one wins).
        let mut after: BTreeMap<u64, f64> = BTreeMap::new();
        for (order, ts) in removed {
            if let Some((&next, _)) = self
                .traces
                .range((Bound::Excluded(order), Bound::Unbounded))
                .next()
            {
                after.insert(next, ts);
            }
        }
        let after = after
            .into_iter()
            .filter(|(next, last)| {
                self.traces
                    .get(next)
                    .is_some_and(|then| (then - last).abs() <= gap)
            })
            .map(|(next, _)| next);
        self.keys_at(after.collect())
    }

    /// The keys of the traces each right after one of `orders` (traces
    /// just indexed; none of them): a trace placed in the middle of the
    /// conversation (a late tool result, in its call's turn) now comes
    /// before one that was embedded after another text, or alone, to
    /// embed again. After the latest trace, as for every other append,
    /// there is none. One step per place: only the last of a run of
    /// consecutive ones finds a trace that is not new.
    pub fn traces_after_placed(&self, orders: &[u64]) -> Result<Vec<String>> {
        let placed: BTreeSet<u64> = orders.iter().copied().collect();
        let after = placed.iter().filter_map(|&order| {
            let (&next, _) = self
                .traces
                .range((Bound::Excluded(order), Bound::Unbounded))
                .next()?;
            (!placed.contains(&next)).then_some(next)
        });
        self.keys_at(after.collect())
    }

    /// The keys of the committed traces at `orders`.
    fn keys_at(&self, orders: BTreeSet<u64>) -> Result<Vec<String>> {
        let mut keys = Vec::with_capacity(orders.len());
        for order in orders {
            keys.extend(self.stored_at(order, self.fields.key)?);
        }
        Ok(keys)
    }

    /// The place of the committed trace of this key.
    pub(super) fn trace_order_of(&self, key: &str) -> Result<Option<u64>> {
        let q = TermQuery::new(
            Term::from_field_text(self.fields.key, key),
            IndexRecordOption::Basic,
        );
        let Some(doc) = self.first_doc(&q)? else {
            return Ok(None);
        };
        let number = |field| doc.get_first(field).and_then(|v| v.as_u64());
        Ok(number(self.fields.order)
            .filter(|_| number(self.fields.kind) == Some(Kind::Trace as u64)))
    }

    /// A stored field of the committed trace at `order`.
    pub(super) fn stored_at(&self, order: u64, field: Field) -> Result<Option<String>> {
        let at = TermQuery::new(
            Term::from_field_u64(self.fields.order, order),
            IndexRecordOption::Basic,
        );
        let kind = TermQuery::new(
            Term::from_field_u64(self.fields.kind, Kind::Trace as u64),
            IndexRecordOption::Basic,
        );
        let both = BooleanQuery::new(vec![
            (Occur::Must, Box::new(at) as Box<dyn Query>),
            (Occur::Must, Box::new(kind)),
        ]);
        Ok(self.first_doc(&both)?.and_then(|doc| {
            doc.get_first(field)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        }))
    }

    pub(super) fn first_doc(&self, query: &dyn Query) -> Result<Option<TantivyDocument>> {
        let searcher = self.reader.searcher();
        let Some((_, address)) = searcher.search(query, &TopDocs::with_limit(1))?.pop() else {
            return Ok(None);
        };
        Ok(Some(searcher.doc(address)?))
    }
}
