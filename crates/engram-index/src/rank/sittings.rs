//! Sittings scored as wholes.
//!
//! A conversation happens in sittings: runs of messages with no long gap
//! in event time between them (`Params::session_gap`, the same gap that
//! ends a message's context). A question's evidence is often said across
//! one sitting rather than in one message of it: the sitting as a whole
//! shares the question's words and meaning where none of its messages
//! does alone. So each sitting is scored as one document (BM25 over its
//! messages' words together, and the closeness of its mean vector to the
//! question's), by the same mix as a message (issue 28; the outside
//! measurement on LoCoMo's dev half had 0.3 at +0.009 all@10).
//!
//! That score is a prior on where the answer is, like the speaker and
//! question priors, so it scales a message's own score rather than adding
//! to it: each message among the candidates is weighed by 1 +
//! `Params::sitting_weight` × its sitting's score ([`add_sittings`]). An
//! added share lifted every message of a sitting alike, so a well-matched
//! sitting's small talk ("Thanks!") passed another sitting's evidence;
//! once each message is read after the one before it, its own score
//! already carries its neighbours' meaning, and the added share counted
//! it twice (docs/BENCHMARKS.md has both forms' measurements). The sitting
//! in progress, where the question is asked, weighs nothing.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::{Params, Ranked};
use crate::Kind;

/// Where each sitting starts, in conversation order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sittings {
    /// The place of each sitting's first trace, ascending.
    starts: Vec<u64>,
    /// Names this split (for caches built over it).
    fingerprint: u64,
    /// The sitting of the latest event: the one in progress.
    latest: Option<usize>,
}

impl Sittings {
    /// The sittings of `traces` (place and event time, in conversation
    /// order): a new one starts after a gap longer than `gap` seconds.
    /// Event times out of order (an import) count by their distance.
    /// Where places hold a conversation in their bits from `conversation`
    /// up (a user's index), a new sitting also starts with each
    /// conversation, however close in time.
    pub fn split(
        traces: impl IntoIterator<Item = (u64, f64)>,
        gap: f64,
        conversation: Option<u32>,
    ) -> Self {
        let of = |order: u64| conversation.map(|shift| order.checked_shr(shift).unwrap_or(0));
        let mut starts = Vec::new();
        let mut last: Option<(u64, f64)> = None;
        let mut newest: Option<(f64, u64)> = None;
        for (order, ts) in traces {
            if last.is_none_or(|(o, t)| (ts - t).abs() > gap || of(o) != of(order)) {
                starts.push(order);
            }
            last = Some((order, ts));
            if newest.is_none_or(|(t, _)| ts >= t) {
                newest = Some((ts, order));
            }
        }
        Self::from_starts(starts).with_latest(newest.map(|(_, order)| order))
    }

    /// The sittings that start at `starts` (places, in any order).
    pub fn from_starts(mut starts: Vec<u64>) -> Self {
        starts.sort_unstable();
        starts.dedup();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        starts.hash(&mut hasher);
        Self {
            fingerprint: hasher.finish(),
            starts,
            latest: None,
        }
    }

    /// These sittings with the one holding `place` (the latest event) as
    /// the one in progress.
    pub fn with_latest(mut self, place: Option<u64>) -> Self {
        self.latest = place.and_then(|p| self.of(p));
        self
    }

    /// The sitting in progress: the one of the latest event.
    pub fn latest(&self) -> Option<usize> {
        self.latest
    }

    /// How many sittings there are.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The sitting the trace at `order` belongs to (`None` before the
    /// first).
    pub fn of(&self, order: u64) -> Option<usize> {
        self.starts.partition_point(|s| *s <= order).checked_sub(1)
    }

    /// Names this split: two splits with the same fingerprint start their
    /// sittings at the same places.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// BM25's constants, as tantivy scores a message.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// Each sitting's BM25 for a question's terms, the sitting taken as one
/// document (its messages' words together), relative to a sitting that
/// holds each term once at the average length: how much of the question
/// the sitting covers, from 0 to 1. Not relative to the best sitting: the
/// one sitting that shares a single word with a question would then count
/// as if it held the whole question. Fed term by term with where each
/// term is ([`Coverage::term`]).
#[derive(Debug)]
pub struct Coverage<'a> {
    /// Each sitting's length in words.
    lengths: &'a [u64],
    /// Sittings with any words, and their average length.
    held: f32,
    average: f32,
    scores: Vec<f32>,
    /// The score of a sitting that holds each term once.
    whole: f32,
}

impl<'a> Coverage<'a> {
    pub fn new(lengths: &'a [u64]) -> Self {
        let held = lengths.iter().filter(|l| **l > 0).count() as f32;
        let total: u64 = lengths.iter().sum();
        Self {
            lengths,
            held,
            average: if held > 0.0 { total as f32 / held } else { 0.0 },
            scores: vec![0.0; lengths.len()],
            whole: 0.0,
        }
    }

    /// Whether no sitting holds a word.
    pub fn is_empty(&self) -> bool {
        self.held == 0.0
    }

    /// One term of the question, of `weight`: its counts by sitting go to
    /// the returned [`TermCounts`].
    pub fn term(&mut self, weight: f32) -> TermCounts<'_, 'a> {
        let freqs = vec![0; self.lengths.len()];
        TermCounts {
            coverage: self,
            weight,
            freqs,
        }
    }

    /// Each sitting's share of the question, 0 to 1.
    pub fn scores(self) -> Vec<f32> {
        let whole = self.whole;
        let mut scores = self.scores;
        if whole > 0.0 {
            scores.iter_mut().for_each(|s| *s = (*s / whole).min(1.0));
        }
        scores
    }
}

/// One term's occurrences, by sitting.
#[derive(Debug)]
pub struct TermCounts<'c, 'a> {
    coverage: &'c mut Coverage<'a>,
    weight: f32,
    freqs: Vec<u32>,
}

impl TermCounts<'_, '_> {
    /// `tf` more occurrences in `sitting`.
    pub fn add(&mut self, sitting: usize, tf: u32) {
        if let Some(f) = self.freqs.get_mut(sitting) {
            *f = f.saturating_add(tf);
        }
    }

    /// The term's BM25 added to each sitting that holds it.
    pub fn done(self) {
        let TermCounts {
            coverage: c,
            weight,
            freqs,
        } = self;
        let n = c.held;
        let df = freqs.iter().filter(|f| **f > 0).count() as f32;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        c.whole += weight * idf;
        for (s, tf) in freqs.iter().enumerate().filter(|(_, tf)| **tf > 0) {
            let tf = *tf as f32;
            let length = c.lengths[s] as f32 / c.average;
            c.scores[s] += weight * idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length));
        }
    }
}

/// A question's score for each of `sittings` ([`sitting_scores`]).
#[derive(Debug, Clone)]
pub struct SittingScores {
    pub sittings: Arc<Sittings>,
    pub scores: Vec<f32>,
}

/// Each sitting's score for a question, from its word score (`words`:
/// how much of the question the sitting holds, 0 to 1) and its closeness
/// in meaning (`cosines`, with the sitting's mean vector; `None` without
/// vectors), mixed as a message's are: the word score plus
/// `semantic_weight` × how far the cosine is above `semantic_floor`.
pub fn sitting_scores(words: &[f32], cosines: Option<&[Option<f32>]>, params: &Params) -> Vec<f32> {
    let floor = params.semantic_floor.clamp(0.0, 0.99);
    words
        .iter()
        .enumerate()
        .map(|(i, lexical)| {
            let meaning = cosines
                .and_then(|c| c.get(i).copied().flatten())
                .map_or(0.0, |c| {
                    params.semantic_weight * ((c - floor) / (1.0 - floor)).max(0.0)
                });
            lexical + meaning
        })
        .collect()
}

/// Each trace among `ranked` weighed by its sitting: its score times 1 +
/// `params.sitting_weight` × the sitting's score (one per sitting), so the
/// messages of a sitting keep their order against each other and one
/// that matches nothing itself gains nothing. Memories (summaries, facts)
/// belong to no sitting. The sitting in progress gains
/// nothing: the question is asked in it (recall stores the user's message
/// there first; an agent asks about what it is discussing), so it holds
/// the question by its making, not as evidence. On LoCoMo's compacted
/// agents, whose latest sitting is every question asked so far, it had
/// outranked the evidence (Retrieve all@10 0.647 → 0.613).
pub(super) fn add_sittings(ranked: &mut [Ranked], sittings: &SittingScores, params: &Params) {
    if params.sitting_weight <= 0.0 {
        return;
    }
    let SittingScores { sittings, scores } = sittings;
    for r in ranked.iter_mut().filter(|r| r.kind == Kind::Trace) {
        let sitting = sittings.of(r.order).filter(|s| Some(*s) != sittings.latest);
        if let Some(score) = sitting.and_then(|s| scores.get(s)) {
            r.score *= 1.0 + params.sitting_weight * score;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_gap_starts_a_sitting() {
        let s = Sittings::split(
            [(1, 0.0), (2, 60.0), (5, 10_000.0), (6, 10_030.0)],
            3600.0,
            None,
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s.of(0), None);
        assert_eq!(s.of(1), Some(0));
        assert_eq!(s.of(2), Some(0));
        assert_eq!(s.of(4), Some(0), "a place between two traces");
        assert_eq!(s.of(5), Some(1));
        assert_eq!(s.of(99), Some(1));
        assert_eq!(s.latest(), Some(1), "the sitting of the latest event");
        let back = Sittings::split([(1, 50_000.0), (2, 50_060.0), (5, 10.0)], 3600.0, None);
        assert_eq!(back.latest(), Some(0), "by event time, not place");
        let same = Sittings::split([(1, 5.0), (2, 6.0), (5, 20_000.0)], 3600.0, None);
        assert_eq!(s.fingerprint(), same.fingerprint());
        let other = Sittings::split([(1, 5.0), (2, 6.0), (4, 20_000.0)], 3600.0, None);
        assert_ne!(s.fingerprint(), other.fingerprint());
        assert!(Sittings::split([], 1.0, None).is_empty());
        // A user's index: conversations 1 and 2 (from bit 40), minutes apart.
        let c = |conversation: u64, turn: u64| (conversation << 40) | turn;
        let traces = [(c(1, 1), 0.0), (c(1, 2), 60.0), (c(2, 1), 120.0)];
        let within = Sittings::split(traces, 3600.0, Some(40));
        assert_eq!(within.len(), 2);
        assert_eq!((within.of(c(1, 2)), within.of(c(2, 1))), (Some(0), Some(1)));
        assert_eq!(Sittings::split(traces, 3600.0, None).len(), 1);
        let given = Sittings::from_starts(vec![c(2, 1), c(1, 1), c(1, 1)]);
        assert_eq!(
            given.with_latest(Some(c(2, 1))),
            within,
            "sorted, each once"
        );
    }

    #[test]
    fn messages_are_weighed_by_their_sitting_but_in_the_sitting_in_progress() {
        let sittings = Sittings::split([(1, 0.0), (5, 10_000.0)], 3600.0, None);
        let trace = |order| Ranked {
            kind: Kind::Trace,
            order,
            ts: 0.0,
            score: 1.0,
            lexical: 1.0,
            expansion: 0.0,
            semantic: None,
            key: None,
            candidate: None,
        };
        let mut ranked = vec![trace(1), trace(5)];
        let scored = SittingScores {
            sittings: Arc::new(sittings),
            scores: vec![1.0, 1.0],
        };
        add_sittings(&mut ranked, &scored, &Params::default());
        assert!((ranked[0].score - 1.3).abs() < 1e-6, "{ranked:?}");
        assert_eq!(ranked[1].score, 1.0, "the latest sitting: none");
    }

    /// The sitting scales a message's own evidence: a well-matched
    /// sitting's weak message (small talk) stays after a stronger match in
    /// a sitting that matched nothing as a whole, where an added share
    /// (0.5 + 0.3 against 0.7) had put it first.
    #[test]
    fn a_sitting_weighs_its_messages_own_evidence_and_adds_none() {
        let sittings = Sittings::split(
            [
                (1, 0.0),
                (2, 10.0),
                (5, 10_000.0),
                (9, 20_000.0),
                (12, 30_000.0),
            ],
            3600.0,
            None,
        );
        let trace = |order, score| Ranked {
            kind: Kind::Trace,
            order,
            ts: 0.0,
            score,
            lexical: score,
            expansion: 0.0,
            semantic: None,
            key: None,
            candidate: None,
        };
        let mut ranked = vec![trace(1, 1.0), trace(2, 0.5), trace(5, 0.7), trace(9, 0.0)];
        let scored = SittingScores {
            sittings: Arc::new(sittings),
            scores: vec![1.0, 0.0, 1.0, 0.0],
        };
        add_sittings(&mut ranked, &scored, &Params::default());
        let scores: Vec<f32> = ranked.iter().map(|r| r.score).collect();
        assert!((scores[0] - 1.3).abs() < 1e-6, "{scores:?}");
        assert!((scores[1] - 0.65).abs() < 1e-6, "{scores:?}");
        assert!(
            scores[1] < scores[2],
            "small talk after evidence: {scores:?}"
        );
        assert_eq!(scores[3], 0.0, "nothing of its own, nothing gained");
    }

    #[test]
    fn scores_mix_words_and_meaning_as_messages_do() {
        let params = Params::default();
        let words = [1.0, 0.5, 0.0];
        let scores = sitting_scores(&words, None, &params);
        assert_eq!(scores, vec![1.0, 0.5, 0.0]);
        let cosines = [Some(0.2), None, Some(1.0)];
        let scores = sitting_scores(&words, Some(&cosines), &params);
        assert_eq!(scores, vec![1.0, 0.5, params.semantic_weight]);
        assert_eq!(sitting_scores(&[0.0, 0.0], None, &params), vec![0.0, 0.0]);
    }
}
