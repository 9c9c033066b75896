//! Query expansion from the conversation's own vocabulary.
//!
//! A question that names a category ("what pets does she have?", "which
//! cities has he visited?") shares no word with the messages that name the
//! instances ("my pup", "Lisbon"), and its vector alone seldom lifts one
//! message among hundreds. The words the conversation itself uses that
//! are closest in meaning to the question ([`WordVectors`]) join its word
//! query at a lower weight: the messages that say them now match by their
//! words. Only the conversation's words are candidates, so every added
//! term matches something, and the question's own words still decide
//! (outside measurement on LoCoMo's dev half, issue 28: multi-hop all@10
//! 0.211 → 0.296).

use std::collections::HashMap;

use super::{Params, Ranked, Semantic, SittingScores, Words, from_candidates, sitting_scores};
use crate::{Candidate, Lexical, Result, Vectors, WordVectors};

/// The question's expansion: up to `params.expansion_words` terms of the
/// index's vocabulary closest to the question's vector `query`, none of
/// them one of its own `terms`, each with its weight. Together they weigh
/// `params.expansion_weight` of the question's terms, shared by closeness
/// (each at most one question term's weight).
pub fn expansion(
    index: &mut Lexical,
    words: &WordVectors,
    query: &[f32],
    terms: &[String],
    params: &Params,
) -> Result<Vec<(String, f32)>> {
    if params.expansion_words == 0 || params.expansion_weight <= 0.0 || terms.is_empty() {
        return Ok(Vec::new());
    }
    let vocabulary = index.vocabulary()?;
    // More than wanted: the nearest are often the question's own words,
    // or forms of one word ("dog", "dogs") that share a term.
    let near = words.nearest(query, &vocabulary, params.expansion_words * 4);
    let documents = index.len();
    let mut chosen: Vec<(String, f32)> = Vec::with_capacity(params.expansion_words);
    for (word, cosine) in near {
        if chosen.len() == params.expansion_words || cosine <= 0.0 {
            break;
        }
        let Some(term) = index.term_of(word) else {
            continue;
        };
        if terms.contains(&term) || chosen.iter().any(|(t, _)| *t == term) {
            continue;
        }
        // A word in most of the messages singles none out (BM25 gives it
        // next to nothing), and walking its postings is a search's worst
        // case: a speaker's name, a word the conversation always uses.
        if index.doc_freq(&term)? * 2 > documents {
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
    /// The question's terms, as the index analyzed them.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// This ranking with `expansion`'s terms in its word query: each
    /// document's score is its score for the question's words plus its
    /// score for the expansion (a query of both sums the two alike). A
    /// document among the best of one search but not of the other misses
    /// that side's share, which is small by then.
    pub fn expand(
        self,
        index: &Lexical,
        expansion: &[(String, f32)],
        params: &Params,
    ) -> Result<Words> {
        // A question none of whose words the conversation uses is left to
        // its meaning: scores are made relative to the best word match, so
        // the nearest words would stand in for the whole question at full
        // weight, and crowd out what its vector finds (the paraphrase test:
        // 16/20 at 1 instead of 18/20).
        let own_words = self.ranked.iter().any(|r| r.candidate.is_some());
        if expansion.is_empty() || !own_words {
            return Ok(self);
        }
        let extra =
            index.search_weighted(expansion, &self.filter, params.candidates.max(self.limit))?;
        let Words {
            ranked,
            filter,
            limit,
            named,
            terms,
            traces: _,
        } = self;
        let mut candidates: Vec<Candidate> =
            ranked.into_iter().filter_map(|r| r.candidate).collect();
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
        candidates.truncate(params.candidates.max(limit));
        let mut words = from_candidates(
            candidates,
            &|order, n| index.neighbours(order, n),
            &filter,
            limit,
            params,
        );
        words.named = named;
        words.terms = terms;
        Ok(words)
    }
}

/// Each ranking of one question (`None`: nothing asked) expanded
/// ([`Words::expand`]) and completed with meaning, the speaker prior
/// applied and the sittings scored ([`sitting_scores`]). Without a table
/// of word vectors or a query vector there is no expansion. (Running the
/// expansion beside the scan of the vectors, on a second thread, measured
/// no faster at 10,000 traces on two cores: 7.6 / 12.0 ms p50 / p99
/// against 7.5 / 12.4.)
pub fn expand_and_fuse(
    words: Vec<Option<Words>>,
    lexical: &mut Lexical,
    vectors: Option<&Vectors>,
    table: Option<&WordVectors>,
    query: Option<&[f32]>,
    params: &Params,
) -> Result<Vec<Vec<Ranked>>> {
    let terms = words.iter().flatten().next().map(|w| w.terms.clone());
    let Some(terms) = terms else {
        return Ok(words.into_iter().map(|_| Vec::new()).collect());
    };
    let chosen = match table.zip(query) {
        Some((table, query)) => expansion(lexical, table, query, &terms, params)?,
        None => Vec::new(),
    };
    let words = words
        .into_iter()
        .map(|w| w.map(|w| w.expand(lexical, &chosen, params)).transpose())
        .collect::<Result<Vec<_>>>()?;
    let sittings = if params.sitting_weight > 0.0 {
        let weighted: Vec<(String, f32)> = terms
            .iter()
            .map(|t| (t.clone(), 1.0))
            .chain(chosen.iter().cloned())
            .collect();
        let (sittings, by_words) = lexical.sitting_words(&weighted, params.session_gap)?;
        let cosines = vectors
            .zip(query)
            .map(|(vectors, query)| vectors.sitting_cosines(query, &sittings));
        let scores = sitting_scores(&by_words, cosines.as_deref(), params);
        Some(SittingScores { sittings, scores })
    } else {
        None
    };
    let semantic = vectors
        .zip(query)
        .map(|(vectors, query)| Semantic { vectors, query });
    let lexical = &*lexical;
    Ok(words
        .into_iter()
        .map(|w| {
            w.map_or_else(Vec::new, |w| {
                w.fuse_all(semantic, params).best(
                    params,
                    &|order| lexical.speaker(order),
                    sittings.as_ref(),
                )
            })
        })
        .collect())
}
