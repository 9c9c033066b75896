//! Query expansion from the conversation's own vocabulary, the part every
//! backend shares: which of the nearest words join the question's word
//! query and at what weight ([`choose_expansion`]), and how what their
//! search found joins the question's ranking ([`Words::expanded`]). The
//! word searches themselves are the backend's primitives, which the
//! pipeline asks (`pipeline.rs`).
//!
//! A question that names a category ("what pets does she have?", "which
//! cities has he visited?") shares no word with the messages that name the
//! instances ("my pup", "Lisbon"), and its vector alone seldom lifts one
//! message among hundreds. The words the conversation itself uses that
//! are closest in meaning to the question ([`crate::WordVectors`]) join
//! its word query at a lower weight: the messages that say them now match
//! by their words. Only the conversation's words are candidates, so every
//! added term matches something, and the question's own words still decide
//! (outside measurement on LoCoMo's dev half, issue 28: multi-hop all@10
//! 0.211 → 0.296).

use std::collections::HashMap;

use super::{Neighbours, Params, Words, from_candidates};
use crate::Candidate;

/// How many of the vocabulary's nearest words to consider: more than
/// wanted, as the nearest are often the question's own words, or forms of
/// one word ("dog", "dogs") that share a term. `0`: no expansion.
pub fn words_to_consider(params: &Params, terms: &[String]) -> usize {
    if params.expansion_weight <= 0.0 || terms.is_empty() {
        return 0;
    }
    params.expansion_words * 4
}

/// The question's expansion from `near` (vocabulary words and their
/// cosine with the question, closest first): up to
/// `params.expansion_words` terms, none of them one of its own `terms`,
/// each with its weight. Together they weigh `params.expansion_weight` of
/// the question's terms, shared by closeness (each at most one question
/// term's weight). `term_of` gives a word's analyzed term and the number
/// of the `documents` searched that hold it (`None` for a stop word).
pub fn choose_expansion<E>(
    near: Vec<(&str, f32)>,
    mut term_of: impl FnMut(&str) -> Result<Option<(String, u64)>, E>,
    documents: u64,
    terms: &[String],
    params: &Params,
) -> Result<Vec<(String, f32)>, E> {
    let mut chosen: Vec<(String, f32)> = Vec::with_capacity(params.expansion_words);
    for (word, cosine) in near {
        if chosen.len() == params.expansion_words || cosine <= 0.0 {
            break;
        }
        let Some((term, held)) = term_of(word)? else {
            continue;
        };
        if terms.contains(&term) || chosen.iter().any(|(t, _)| *t == term) {
            continue;
        }
        // A term no document holds adds nothing. One in most of them
        // singles none out (BM25 gives it next to nothing), and walking
        // its postings is a search's worst case: a speaker's name, a word
        // the conversation always uses.
        if held == 0 || held * 2 > documents {
            continue;
        }
        chosen.push((term, cosine));
    }
    let closeness: f32 = chosen.iter().map(|(_, c)| c).sum();
    let budget = params.expansion_weight * terms.len() as f32;
    for (_, weight) in &mut chosen {
        *weight = (budget * *weight / closeness).min(1.0);
    }
    Ok(chosen)
}

impl Words {
    /// What this ranking was asked within.
    pub fn filter(&self) -> &crate::Filter {
        &self.filter
    }

    /// Candidates an expansion's search should find for this ranking.
    pub fn wanted(&self, params: &Params) -> usize {
        params.candidates.max(self.limit)
    }

    /// Whether an expansion applies: the question's own words found
    /// something. A question none of whose words the conversation uses is
    /// left to its meaning: scores are made relative to the best word
    /// match, so the nearest words would stand in for the whole question
    /// at full weight, and crowd out what its vector finds (the paraphrase
    /// test: 16/20 at 1 instead of 18/20).
    pub fn found_own_words(&self) -> bool {
        self.ranked.iter().any(|r| r.candidate.is_some())
    }

    /// This ranking's candidates with `extra` (what the expansion's terms
    /// found, each weighted) added: each document's score is its score for
    /// the question's words plus its score for the expansion (a query of
    /// both sums the two alike), best first, as many as a ranking keeps. A
    /// document among the best of one search but not of the other misses
    /// that side's share, which is small by then.
    pub fn expanded(&self, extra: Vec<Candidate>, params: &Params) -> Vec<Candidate> {
        let mut candidates: Vec<Candidate> = self
            .ranked
            .iter()
            .filter_map(|r| r.candidate.clone())
            .collect();
        let mut at: HashMap<String, usize> = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| (c.key.clone(), i))
            .collect();
        for c in extra {
            match at.get(&c.key) {
                Some(&i) => {
                    candidates[i].score += c.score;
                    candidates[i].expansion += c.score;
                }
                None => {
                    at.insert(c.key.clone(), candidates.len());
                    candidates.push(Candidate {
                        expansion: c.score,
                        ..c
                    });
                }
            }
        }
        candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
        candidates.truncate(self.wanted(params));
        candidates
    }

    /// This ranking made again from `candidates` ([`Words::expanded`]),
    /// with the traces around them.
    pub fn replaced(
        self,
        candidates: Vec<Candidate>,
        neighbours: Neighbours<'_>,
        params: &Params,
    ) -> Words {
        from_candidates(candidates, neighbours, &self.filter, self.limit, params)
    }
}
