//! From a question to ranked items.
//!
//! A message is rarely understood alone: the answer to "when did Caroline
//! go to the support group?" is often "Yesterday!", right after the message
//! that names the group. So a trace is scored with its own BM25 score plus
//! a share of its neighbours' (the messages just before and after it, in
//! the same sitting: close in time). Memory items (summaries, facts) stand
//! alone.
//!
//! With vectors, each item also scores its closeness in meaning to the
//! question, and the two are mixed: the lexical score relative to the best
//! lexical match, plus `semantic_weight` × how far the cosine is above
//! `semantic_floor` (1 at identical). Rank fusion (RRF) and the mix were
//! measured on the benchmark's dev split; the mix won, and was flat over a
//! wide range of both settings (docs/BENCHMARKS.md). Recency only breaks
//! ties.

use std::collections::HashMap;

use crate::{Candidate, Filter, Kind, Near, Placed, Vectors};
#[cfg(feature = "lexical")]
use crate::{Lexical, Result};
pub use pipeline::ready;

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
    /// Weight of closeness in meaning against the lexical score.
    pub semantic_weight: f32,
    /// Cosine below which an item is not considered close at all: unrelated
    /// sentences of a small model still score 0.1–0.2.
    pub semantic_floor: f32,
    /// When a question names exactly one participant, the share of their
    /// score the other participants' messages keep (1: no prior).
    pub other_speakers: f32,
    /// Words of the conversation closest in meaning to the question added
    /// to its word query (0: no expansion; `rank/expansion.rs`).
    pub expansion_words: usize,
    /// The expansion's words together weigh this share of the question's
    /// own words (each at most as much as one of them).
    pub expansion_weight: f32,
    /// How much its sitting's score weighs a message: its score times 1 +
    /// this × the sitting's (0: sittings not scored; `rank/sittings.rs`).
    pub sitting_weight: f32,
    /// The share of its score a message that mostly asks keeps (1: no
    /// prior; `rank/asking.rs`).
    pub question_prior: f32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            candidates: 256,
            neighbour_weight: 0.5,
            neighbour_span: 2,
            session_gap: 3600.0,
            max_terms: 64,
            semantic_weight: 1.0,
            semantic_floor: 0.2,
            other_speakers: 0.5,
            expansion_words: 10,
            expansion_weight: 0.5,
            sitting_weight: 0.3,
            question_prior: 0.5,
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
    /// The part of `lexical` from the question's expansion: an item that
    /// matched only those words matched by meaning, not by the question's
    /// own words.
    pub expansion: f32,
    /// Cosine with the query, when the item was among the closest.
    pub semantic: Option<f32>,
    /// The item's key, when known without reading it.
    key: Option<String>,
    candidate: Option<Candidate>,
}

/// What put an item in the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    Lexical,
    Semantic,
    Both,
    /// Neither: its neighbouring messages matched.
    Context,
}

impl Ranked {
    /// The stored body (the item's JSON).
    #[cfg(feature = "lexical")]
    pub fn body(&self, index: &Lexical) -> Result<Option<String>> {
        match (&self.candidate, &self.key) {
            (Some(c), _) => index.body(c).map(Some),
            (None, Some(key)) => index.body_of(key),
            (None, None) => index.body_at(self.order),
        }
    }

    /// The item's key (a trace's id), when known without reading it.
    pub fn key(&self) -> Option<&str> {
        self.candidate
            .as_ref()
            .map(|c| c.key.as_str())
            .or(self.key.as_deref())
    }

    pub fn matched(&self) -> Matched {
        let own_words = self.lexical - self.expansion > 0.0;
        let meaning = self.semantic.is_some() || self.expansion > 0.0;
        match (own_words, meaning) {
            (true, true) if self.semantic.is_some() => Matched::Both,
            (true, _) => Matched::Lexical,
            (false, true) => Matched::Semantic,
            (false, false) => Matched::Context,
        }
    }
}

/// The semantic side of a search: the agent's vectors and the query's.
#[derive(Debug, Clone, Copy)]
pub struct Semantic<'a> {
    pub vectors: &'a Vectors,
    pub query: &'a [f32],
}

/// The lexical half of a ranking: what the words found, with context,
/// waiting for the query's vector (which a caller may compute meanwhile).
#[derive(Debug)]
pub struct Words {
    ranked: Vec<Ranked>,
    /// Where each trace is in `ranked`, by its place.
    traces: HashMap<u64, usize>,
    filter: Filter,
    limit: usize,
}

/// What the traces around a place are: up to `n` on each side, nearest
/// first, each with its event time.
pub type Neighbours<'a> = &'a dyn Fn(u64, usize) -> (Vec<Placed>, Vec<Placed>);

/// [`by_words`] for candidates another word search found (a database's
/// full-text search), best first, with the traces around them.
pub fn from_candidates(
    candidates: Vec<Candidate>,
    neighbours: Neighbours<'_>,
    filter: &Filter,
    limit: usize,
    params: &Params,
) -> Words {
    let (mut ranked, traces) = with_context(neighbours, candidates, filter, params);
    // Relative to the best lexical match, so that the semantic side's
    // weight means the same for every query.
    let top = ranked.iter().map(|r| r.score).fold(0.0_f32, f32::max);
    if top > 0.0 {
        ranked.iter_mut().for_each(|r| r.score /= top);
    }
    Words {
        ranked,
        traces,
        filter: filter.clone(),
        limit,
    }
}

impl Words {
    /// Meaning added to the words' ranking: every candidate, before the
    /// sittings' shares, the speaker prior and the cut ([`Fused::best`]).
    pub fn fuse_all(self, semantic: Option<Semantic<'_>>, params: &Params) -> Fused {
        let Words {
            mut ranked,
            traces,
            filter,
            limit,
        } = self;
        if let Some(s) = semantic {
            let near = s
                .vectors
                .nearest(s.query, &filter, params.candidates.max(limit));
            fuse(&mut ranked, &traces, near, params);
        }
        Fused {
            ranked,
            limit,
            named: None,
        }
    }
}

/// Every candidate of a ranking, meaning added, not yet cut.
#[derive(Debug)]
pub struct Fused {
    ranked: Vec<Ranked>,
    limit: usize,
    named: Option<u32>,
}

impl Fused {
    /// The places of the traces among the candidates.
    pub fn trace_places(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranked
            .iter()
            .filter(|r| r.kind == Kind::Trace)
            .map(|r| r.order)
    }

    /// The participant the question names, as the caller found it.
    pub fn name(&mut self, named: Option<u32>) {
        self.named = named;
    }

    /// The sittings' shares (when they were scored), the speaker prior and
    /// the question prior applied (`said` tells of the trace at a place),
    /// best `limit` first.
    pub fn best(
        self,
        params: &Params,
        said: &dyn Fn(u64) -> Said,
        sittings: Option<&SittingScores>,
    ) -> Vec<Ranked> {
        let Fused {
            mut ranked,
            limit,
            named,
        } = self;
        // Three priors, each scaling what the message holds itself: where
        // it was said (its sitting), who said it, whether it asks.
        if let Some(sittings) = sittings {
            add_sittings(&mut ranked, sittings, params);
        }
        if let Some(named) = named {
            prefer_speaker(&mut ranked, named, said, params);
        }
        if params.question_prior < 1.0 {
            prefer_telling(&mut ranked, said, params);
        }
        context_last(&mut ranked);
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.order.cmp(&a.order)));
        ranked.truncate(limit);
        ranked
    }
}

/// What a store knows of a trace at a place, for the priors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Said {
    /// Its speaker (an id of the store's), when named.
    pub speaker: Option<u32>,
    /// A message that mostly asks ([`mostly_asks`]).
    pub asks: bool,
}

/// A participant's name as both stores compare it: trimmed, lower-cased.
pub fn speaker_name(name: &str) -> String {
    name.trim().to_lowercase()
}

/// The one participant a question names: of `names` (each an id and the
/// terms of its name, analyzed as the question's `terms` are), the only
/// one whose every term is among the question's; `None` for none or
/// several.
pub fn named_one<'a>(
    terms: &[String],
    names: impl IntoIterator<Item = (u32, &'a [String])>,
) -> Option<u32> {
    let mut named = names
        .into_iter()
        .filter(|(_, name)| !name.is_empty() && name.iter().all(|t| terms.contains(t)));
    let (id, _) = named.next()?;
    named.next().is_none().then_some(id)
}

/// Items found only as a match's neighbours (neither their words nor
/// their meaning match) rank after every item that matches itself: they
/// are context, which `context_messages` attaches to a hit, not answers
/// of their own; their order among themselves stays. (With a model, on
/// LoCoMo this changed nothing in the top 10; a short conversation's
/// unrelated neighbour had come before the answer.)
fn context_last(ranked: &mut [Ranked]) {
    let floor = ranked
        .iter()
        .filter(|r| r.matched() != Matched::Context)
        .map(|r| r.score)
        .fold(f32::INFINITY, f32::min);
    if !floor.is_finite() {
        return;
    }
    for r in ranked
        .iter_mut()
        .filter(|r| r.matched() == Matched::Context)
    {
        // Below the weakest real match, in the same order as before.
        r.score = floor * r.score / (1.0 + r.score) * 0.5;
    }
}

/// The speaker prior: a question that names one participant (`named`) is
/// about what they said, so the other participants' messages keep
/// `params.other_speakers` of their score (messages of nobody named, and
/// memories, keep theirs). Over every candidate, before the best are cut.
fn prefer_speaker(ranked: &mut [Ranked], named: u32, said: &dyn Fn(u64) -> Said, params: &Params) {
    for r in ranked.iter_mut().filter(|r| r.kind == Kind::Trace) {
        if said(r.order).speaker.is_some_and(|s| s != named) {
            r.score *= params.other_speakers;
        }
    }
}

/// The question prior (`rank/asking.rs`): a message that mostly asks
/// keeps `params.question_prior` of its score. Over every candidate,
/// before the best are cut.
fn prefer_telling(ranked: &mut [Ranked], said: &dyn Fn(u64) -> Said, params: &Params) {
    for r in ranked.iter_mut().filter(|r| r.kind == Kind::Trace) {
        if said(r.order).asks {
            r.score *= params.question_prior;
        }
    }
}

/// Adds closeness in meaning (`near`, closest first) to `ranked`. Traces
/// are found by their place (`traces`, as [`with_context`] left it),
/// memory items by their key.
fn fuse(ranked: &mut Vec<Ranked>, traces: &HashMap<u64, usize>, near: Vec<Near>, params: &Params) {
    let floor = params.semantic_floor.clamp(0.0, 0.99);
    let memories: HashMap<String, usize> = ranked
        .iter()
        .enumerate()
        .filter(|(_, r)| r.kind != Kind::Trace)
        .filter_map(|(i, r)| Some((r.candidate.as_ref()?.key.clone(), i)))
        .collect();
    for near in near {
        let gain = params.semantic_weight * ((near.cosine - floor) / (1.0 - floor));
        if gain <= 0.0 {
            break;
        }
        let at = match near.kind {
            Kind::Trace => traces.get(&near.order),
            _ => memories.get(&near.key),
        };
        match at {
            Some(&i) => {
                ranked[i].score += gain;
                ranked[i].semantic = Some(near.cosine);
            }
            None => ranked.push(Ranked {
                kind: near.kind,
                order: near.order,
                ts: near.ts,
                score: gain,
                lexical: 0.0,
                expansion: 0.0,
                semantic: Some(near.cosine),
                key: Some(near.key),
                candidate: None,
            }),
        }
    }
}

/// Lexical candidates and the neighbours they lend a share of their score,
/// and where each trace among them is, by its place.
fn with_context(
    neighbours: Neighbours<'_>,
    candidates: Vec<Candidate>,
    filter: &Filter,
    params: &Params,
) -> (Vec<Ranked>, HashMap<u64, usize>) {
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
            expansion: c.expansion,
            semantic: None,
            key: None,
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
            let (before, after) = neighbours(r.order, params.neighbour_span);
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
                    expansion: 0.0,
                    semantic: None,
                    key: None,
                    candidate: None,
                });
            }
            None => {}
        }
    }
    (ranked, trace_at)
}

fn in_range(filter: &Filter, order: u64, ts: f64) -> bool {
    filter
        .order
        .is_none_or(|(lo, hi)| (lo..=hi).contains(&order))
        && filter.ts.is_none_or(|(lo, hi)| (lo..=hi).contains(&ts))
        && filter.traces_before.is_none_or(|end| order < end)
        && filter
            .traces_hidden
            .is_none_or(|(lo, hi)| !(lo..=hi).contains(&order))
}

mod asking;
pub use asking::{ASKING_CHARS, mostly_asks};

mod sittings;
use sittings::add_sittings;
pub use sittings::{Coverage, SittingScores, Sittings, TermCounts, sitting_scores};

mod expansion;
pub use expansion::{choose_expansion, words_to_consider};
pub mod pipeline;
mod source;
pub use source::{Around, Ask, Lookup, SittingCounts, Source, Term};

#[cfg(all(test, feature = "lexical"))]
mod tests;
