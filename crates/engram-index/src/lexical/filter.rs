//! A search's [`Filter`] as tantivy queries: each one a clause every
//! result must meet.

use std::ops::Bound;

use tantivy::Term;
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, RangeQuery, TermQuery, TermSetQuery};
use tantivy::schema::IndexRecordOption;

use super::Lexical;
use crate::{Filter, Kind};

impl Lexical {
    pub(super) fn filter_queries(&self, filter: &Filter) -> Vec<Box<dyn Query>> {
        let f = self.fields;
        let mut out: Vec<Box<dyn Query>> = Vec::new();
        if !filter.kinds.is_empty() {
            let terms = filter
                .kinds
                .iter()
                .map(|k| Term::from_field_u64(f.kind, *k as u64));
            out.push(Box::new(TermSetQuery::new(terms)));
        }
        if !filter.trace_types.is_empty() {
            let terms = filter
                .trace_types
                .iter()
                .map(|t| Term::from_field_u64(f.trace_type, u64::from(*t)));
            out.push(Box::new(TermSetQuery::new(terms)));
        }
        if let Some((lo, hi)) = filter.order {
            out.push(Box::new(RangeQuery::new(
                Bound::Included(Term::from_field_u64(f.order, lo)),
                Bound::Included(Term::from_field_u64(f.order, hi)),
            )));
        }
        if let Some((lo, hi)) = filter.ts {
            out.push(Box::new(RangeQuery::new(
                Bound::Included(Term::from_field_f64(f.ts, lo)),
                Bound::Included(Term::from_field_f64(f.ts, hi)),
            )));
        }
        let hidden = filter
            .traces_before
            .map(|end| (end, u64::MAX))
            .into_iter()
            .chain(filter.traces_hidden);
        for (lo, hi) in hidden {
            let later_trace = BooleanQuery::new(vec![
                (
                    Occur::Must,
                    Box::new(TermQuery::new(
                        Term::from_field_u64(f.kind, Kind::Trace as u64),
                        IndexRecordOption::Basic,
                    )) as Box<dyn Query>,
                ),
                (
                    Occur::Must,
                    Box::new(RangeQuery::new(
                        Bound::Included(Term::from_field_u64(f.order, lo)),
                        Bound::Included(Term::from_field_u64(f.order, hi)),
                    )),
                ),
            ]);
            out.push(Box::new(BooleanQuery::new(vec![
                (Occur::Must, Box::new(AllQuery) as Box<dyn Query>),
                (Occur::MustNot, Box::new(later_trace)),
            ])));
        }
        out
    }
}
