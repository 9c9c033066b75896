//! From a question to ranked items.
//!
//! A message is rarely understood alone: the answer to "when did Caroline
//! go to the support group?" is often "Yesterday!", right after the message
//! that names the group. So a trace is scored with its own BM25 score plus
//! a share of its neighbours' (the messages just before and after it, in
//! the same sitting: close in time). Memory items (summaries, facts) stand
//! alone. Recency only breaks ties.

use std::collections::HashMap;

use crate::{Candidate, Filter, Kind, Lexical, Result};

/// How ranking works; the defaults are what the benchmark chose
/// (docs/BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Lexical candidates considered before context is added.
    pub candidates: usize,
    /// Share of a neighbour's score a trace gains.
    pub neighbour_weight: f32,
    /// Neighbours on each side that count.
    pub neighbour_span: usize,
    /// Messages further apart in time than this (seconds) are different
    /// sittings: not each other's context.
    pub session_gap: f64,
    /// Distinct query terms used (a huge query costs no more than this).
    pub max_terms: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            candidates: 256,
            neighbour_weight: 0.5,
            neighbour_span: 2,
            session_gap: 3600.0,
            max_terms: 64,
        }
    }
}

/// One ranked item.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub kind: Kind,
    pub order: u64,
    pub ts: f64,
    /// Final score.
    pub score: f32,
    /// The item's own lexical score (0 when only its context matched).
    pub lexical: f32,
    candidate: Option<Candidate>,
}

impl Ranked {
    /// The stored body (the item's JSON).
    pub fn body(&self, index: &Lexical) -> Result<Option<String>> {
        match &self.candidate {
            Some(c) => index.body(c).map(Some),
            None => index.body_at(self.order),
        }
    }
}

/// The best `limit` items for `query` within `filter`.
pub fn rank(
    index: &mut Lexical,
    query: &str,
    filter: &Filter,
    limit: usize,
    params: &Params,
) -> Result<Vec<Ranked>> {
    let terms = index.query_terms(query, params.max_terms);
    let candidates = index.search(&terms, filter, params.candidates.max(limit))?;
    Ok(with_context(index, candidates, filter, limit, params))
}

fn with_context(
    index: &Lexical,
    candidates: Vec<Candidate>,
    filter: &Filter,
    limit: usize,
    params: &Params,
) -> Vec<Ranked> {
    let mut ranked: Vec<Ranked> = Vec::with_capacity(candidates.len());
    let mut trace_at: HashMap<u64, usize> = HashMap::new();
    for c in candidates {
        if c.kind == Kind::Trace {
            trace_at.insert(c.order, ranked.len());
        }
        ranked.push(Ranked {
            kind: c.kind,
            order: c.order,
            ts: c.ts,
            score: c.score,
            lexical: c.score,
            candidate: Some(c),
        });
    }
    // A neighbour that did not match itself may still be the answer, but
    // only where the filter cannot exclude it unseen (its type is not
    // known without reading it).
    let may_add = filter.trace_types.is_empty() && filter.kinds.iter().all(|k| *k == Kind::Trace);
    let gains: Vec<(u64, f64, f32)> = ranked
        .iter()
        .filter(|r| r.kind == Kind::Trace && params.neighbour_weight > 0.0)
        .flat_map(|r| {
            let (before, after) = index.neighbours(r.order, params.neighbour_span);
            // Influence fades with distance: the next message shares
            // `neighbour_weight`, the one after half as much.
            let side = |v: Vec<(u64, f64)>| {
                v.into_iter()
                    .enumerate()
                    .map(|(d, n)| (n, r.lexical * params.neighbour_weight / (d + 1) as f32))
                    .collect::<Vec<_>>()
            };
            side(before)
                .into_iter()
                .chain(side(after))
                .filter(move |((_, ts), _)| (ts - r.ts).abs() <= params.session_gap)
                .map(|((order, ts), share)| (order, ts, share))
        })
        .collect();
    for (order, ts, share) in gains {
        match trace_at.get(&order) {
            Some(&i) => ranked[i].score += share,
            None if may_add && in_range(filter, order, ts) => {
                trace_at.insert(order, ranked.len());
                ranked.push(Ranked {
                    kind: Kind::Trace,
                    order,
                    ts,
                    score: share,
                    lexical: 0.0,
                    candidate: None,
                });
            }
            None => {}
        }
    }
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.order.cmp(&a.order)));
    ranked.truncate(limit);
    ranked
}

fn in_range(filter: &Filter, order: u64, ts: f64) -> bool {
    filter
        .order
        .is_none_or(|(lo, hi)| (lo..=hi).contains(&order))
        && filter.ts.is_none_or(|(lo, hi)| (lo..=hi).contains(&ts))
}
