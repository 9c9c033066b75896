//! The ranking, written once over any backend's [`Source`], step by step:
//!
//! 1. [`by_words`]: the question's terms, the best items for them within
//!    each filter asked, and the traces around them (what a message's
//!    context lends it) — while the caller embeds the question.
//! 2. [`by_meaning`]: the expansion from the conversation's vocabulary
//!    (its words closest to the question join the word query), the
//!    sittings scored as wholes, closeness in meaning fused in, the
//!    speaker and question priors, the best first.
//!
//! Every decision is here or in the steps it calls (`rank.rs`,
//! `expansion.rs`, `sittings.rs`); a backend only answers the primitives.

use std::collections::{BTreeSet, HashMap};

use super::source::{Ask, Lookup, Source, Term};
use super::{
    Coverage, Fused, Params, Ranked, Said, Semantic, SittingScores, Words, choose_expansion,
    from_candidates, named_one, sitting_scores, words_to_consider,
};
use crate::{Filter, Kind};

/// A ranking asked for: the best `.1` within `.0`.
pub type Wanted = (Filter, usize);

/// What the words found for each ranking asked (`None`: a limit of 0),
/// and the question's terms.
#[derive(Debug)]
pub struct Lexed {
    words: Vec<Option<Words>>,
    terms: Vec<Term>,
}

impl Lexed {
    /// What the words found, for each ranking asked, and the question's
    /// terms.
    pub fn into_parts(self) -> (Vec<Option<Words>>, Vec<Term>) {
        (self.words, self.terms)
    }
}

/// The first half of a ranking: each of `wants` (a filter and how many
/// to keep) ranked by the words of `query`, with context.
pub async fn by_words<S: Source + ?Sized>(
    source: &mut S,
    query: &str,
    wants: &[Wanted],
    params: &Params,
) -> Result<Lexed, S::Error> {
    let terms = source.terms(query, params.max_terms).await?;
    let asked: Vec<(usize, Ask<'_>)> = wants
        .iter()
        .enumerate()
        .filter(|(_, (_, limit))| *limit > 0 && !terms.is_empty())
        .map(|(i, (filter, limit))| {
            let ask = Ask {
                lookup: Lookup::Question,
                filter,
                limit: params.candidates.max(*limit),
            };
            (i, ask)
        })
        .collect();
    let asks: Vec<Ask<'_>> = asked.iter().map(|(_, a)| *a).collect();
    let found = match asks.is_empty() {
        true => Vec::new(),
        false => source.postings(&asks).await?,
    };
    let mut by_want: HashMap<usize, Vec<crate::Candidate>> =
        asked.iter().map(|(i, _)| *i).zip(found).collect();
    let around = around(source, trace_places(by_want.values()), params).await?;
    let words = wants
        .iter()
        .enumerate()
        .map(|(i, (filter, limit))| {
            (*limit > 0).then(|| {
                let candidates = by_want.remove(&i).unwrap_or_default();
                from_candidates(candidates, &near(&around), filter, *limit, params)
            })
        })
        .collect();
    Ok(Lexed { words, terms })
}

/// The second half: `lexed` expanded, fused with meaning (`query`: the
/// question's vector, none without a model), the priors applied; each
/// ranking's best first.
pub async fn by_meaning<S: Source + ?Sized>(
    source: &mut S,
    lexed: Lexed,
    query: Option<&[f32]>,
    params: &Params,
) -> Result<Vec<Vec<Ranked>>, S::Error> {
    let Lexed { words, terms } = lexed;
    if words.iter().all(Option::is_none) {
        return Ok(words.into_iter().map(|_| Vec::new()).collect());
    }
    let texts: Vec<String> = terms.iter().map(|t| t.text.clone()).collect();
    let chosen = match query {
        Some(query) if words.iter().flatten().any(Words::found_own_words) => {
            expansion(source, query, &texts, params).await?
        }
        _ => Vec::new(),
    };
    let words = expand(source, words, &chosen, params).await?;
    let sittings = sittings(source, &terms, &chosen, query, params).await?;
    let semantic = source
        .vectors()
        .zip(query)
        .map(|(vectors, query)| Semantic { vectors, query });
    let mut fused: Vec<Option<Fused>> = words
        .into_iter()
        .map(|w| w.map(|w| w.fuse_all(semantic, params)))
        .collect();
    let said = priors(source, &texts, &mut fused, params).await?;
    Ok(fused
        .into_iter()
        .map(|f| {
            f.map_or_else(Vec::new, |f| {
                f.best(
                    params,
                    &|place| said.get(&place).copied().unwrap_or_default(),
                    sittings.as_ref(),
                )
            })
        })
        .collect())
}

/// The places of the traces among `candidates`, each once, in order.
fn trace_places<'c>(candidates: impl IntoIterator<Item = &'c Vec<crate::Candidate>>) -> Vec<u64> {
    distinct(
        candidates
            .into_iter()
            .flatten()
            .filter(|c| c.kind == Kind::Trace)
            .map(|c| c.order),
    )
}

/// Each of `items` once, in order.
fn distinct<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    items
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The traces around `places`, as [`Source::neighbours`] reads them;
/// nothing when context lends nothing.
async fn around<S: Source + ?Sized>(
    source: &mut S,
    places: Vec<u64>,
    params: &Params,
) -> Result<super::source::Around, S::Error> {
    if places.is_empty() || params.neighbour_weight <= 0.0 || params.neighbour_span == 0 {
        return Ok(Default::default());
    }
    source.neighbours(&places, params.neighbour_span).await
}

/// [`super::Neighbours`] over what [`around`] read.
fn near(
    around: &super::source::Around,
) -> impl Fn(u64, usize) -> (Vec<crate::Placed>, Vec<crate::Placed>) + '_ {
    |place, n| {
        around.get(&place).map_or_else(Default::default, |(b, a)| {
            (
                b.iter().take(n).copied().collect(),
                a.iter().take(n).copied().collect(),
            )
        })
    }
}

/// The question's expansion ([`choose_expansion`]): the vocabulary's
/// words closest to its vector `query`, their terms and rarity.
pub(crate) async fn expansion<S: Source + ?Sized>(
    source: &mut S,
    query: &[f32],
    terms: &[String],
    params: &Params,
) -> Result<Vec<(String, f32)>, S::Error> {
    let considered = words_to_consider(params, terms);
    if considered == 0 {
        return Ok(Vec::new());
    }
    let near = source.vocabulary_near(query, considered).await?;
    if near.is_empty() {
        return Ok(Vec::new());
    }
    let words: Vec<&str> = near.iter().map(|(w, _)| w.as_str()).collect();
    let found = source.terms_of(&words).await?;
    let of: HashMap<&str, Option<Term>> = words.iter().copied().zip(found).collect();
    let near = near.iter().map(|(w, c)| (w.as_str(), *c)).collect();
    let term_of = |word: &str| -> Result<Option<(String, u64)>, S::Error> {
        Ok(of.get(word).cloned().flatten().map(|t| (t.text, t.held)))
    };
    choose_expansion(near, term_of, source.documents(), terms, params)
}

/// Each ranking whose question's words found something with the
/// expansion's terms in its word query ([`Words::expanded`]): one more
/// search each, and the traces around what they found.
pub(crate) async fn expand<S: Source + ?Sized>(
    source: &mut S,
    words: Vec<Option<Words>>,
    chosen: &[(String, f32)],
    params: &Params,
) -> Result<Vec<Option<Words>>, S::Error> {
    let expands = |w: &Option<Words>| w.as_ref().is_some_and(Words::found_own_words);
    if chosen.is_empty() || !words.iter().any(expands) {
        return Ok(words);
    }
    let asks: Vec<Ask<'_>> = words
        .iter()
        .filter(|w| expands(w))
        .flatten()
        .map(|w| Ask {
            lookup: Lookup::Weighted(chosen),
            filter: w.filter(),
            limit: w.wanted(params),
        })
        .collect();
    let mut extra = source.postings(&asks).await?.into_iter();
    let merged: Vec<Option<Vec<crate::Candidate>>> = words
        .iter()
        .map(|w| match expands(w) {
            true => w
                .as_ref()
                .map(|w| w.expanded(extra.next().unwrap_or_default(), params)),
            false => None,
        })
        .collect();
    let around = around(source, trace_places(merged.iter().flatten()), params).await?;
    Ok(words
        .into_iter()
        .zip(merged)
        .map(|(w, merged)| match (w, merged) {
            (Some(w), Some(merged)) => Some(w.replaced(merged, &near(&around), params)),
            (w, _) => w,
        })
        .collect())
}

/// Each sitting's score for the question ([`sitting_scores`]): by its
/// terms (a term in more than half of the items is passed over: it is in
/// nearly every sitting, weighs next to nothing, and is the costliest to
/// count) and the expansion's, and by meaning; `None` when sittings do
/// not count.
async fn sittings<S: Source + ?Sized>(
    source: &mut S,
    terms: &[Term],
    chosen: &[(String, f32)],
    query: Option<&[f32]>,
    params: &Params,
) -> Result<Option<SittingScores>, S::Error> {
    if params.sitting_weight <= 0.0 {
        return Ok(None);
    }
    let documents = source.documents();
    let weighted: Vec<(&str, f32)> = terms
        .iter()
        .filter(|t| t.held * 2 <= documents)
        .map(|t| (t.text.as_str(), 1.0))
        .chain(chosen.iter().map(|(t, w)| (t.as_str(), *w)))
        .filter(|(_, w)| *w > 0.0)
        .collect();
    let asked: Vec<&str> = weighted.iter().map(|(t, _)| *t).collect();
    let counted = source.sittings(&asked, params.session_gap).await?;
    let mut coverage = Coverage::new(&counted.lengths);
    if !coverage.is_empty() {
        for ((_, weight), counts) in weighted.iter().zip(&counted.counts) {
            let mut term = coverage.term(*weight);
            for (sitting, tf) in counts {
                term.add(*sitting, *tf);
            }
            term.done();
        }
    }
    let words = coverage.scores();
    let cosines = source
        .vectors()
        .zip(query)
        .map(|(vectors, query)| vectors.sitting_cosines(query, &counted.sittings));
    let scores = sitting_scores(&words, cosines.as_deref(), params);
    Ok(Some(SittingScores {
        sittings: counted.sittings,
        scores,
    }))
}

/// What the priors weigh each candidate trace by, by place; and on each
/// of `fused` the participant the question names, if it names exactly
/// one of those who said a candidate (and the speaker prior is on).
async fn priors<S: Source + ?Sized>(
    source: &mut S,
    terms: &[String],
    fused: &mut [Option<Fused>],
    params: &Params,
) -> Result<HashMap<u64, Said>, S::Error> {
    if params.other_speakers >= 1.0 && params.question_prior >= 1.0 {
        return Ok(HashMap::new());
    }
    let places = distinct(fused.iter().flatten().flat_map(Fused::trace_places));
    if places.is_empty() {
        return Ok(HashMap::new());
    }
    let said: HashMap<u64, Said> = places
        .iter()
        .copied()
        .zip(source.said(&places).await?)
        .collect();
    if params.other_speakers < 1.0 {
        let ids = distinct(said.values().filter_map(|s| s.speaker));
        if !ids.is_empty() {
            let names = source.speakers(&ids).await?;
            let named = named_one(
                terms,
                ids.iter().copied().zip(names.iter().map(Vec::as_slice)),
            );
            for f in fused.iter_mut().flatten() {
                f.name(named);
            }
        }
    }
    Ok(said)
}

/// A future that is ready at once (a source that does its work when
/// called, as the file store's index does), run to its end without an
/// executor; `None` if it is not ready.
pub fn ready<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}
