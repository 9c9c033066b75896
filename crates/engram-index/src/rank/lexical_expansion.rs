//! Query expansion over the file store's index (`expansion.rs` says why
//! and holds what every backend shares): the vocabulary is the index's
//! own, and the expansion's terms are a second word search of it.

use super::{Params, Ranked, Semantic, SittingScores, Words, sitting_scores};
use super::{choose_expansion, words_to_consider};
use crate::{Lexical, Result, Vectors, WordVectors};

/// The question's expansion ([`choose_expansion`]) from the index's
/// vocabulary words closest to the question's vector `query`.
pub fn expansion(
    index: &mut Lexical,
    words: &WordVectors,
    query: &[f32],
    terms: &[String],
    params: &Params,
) -> Result<Vec<(String, f32)>> {
    let considered = words_to_consider(params, terms);
    if considered == 0 {
        return Ok(Vec::new());
    }
    let vocabulary = index.vocabulary()?;
    let near = words.nearest(query, &vocabulary, considered);
    let documents = index.len();
    let term_of = |word: &str| -> Result<Option<(String, u64)>> {
        let Some(term) = index.term_of(word) else {
            return Ok(None);
        };
        let held = index.doc_freq(&term)?;
        Ok(Some((term, held)))
    };
    choose_expansion(near, term_of, documents, terms, params)
}

impl Words {
    /// This ranking with `expansion`'s terms in its word query
    /// ([`Words::expanded`]).
    pub fn expand(
        self,
        index: &Lexical,
        expansion: &[(String, f32)],
        params: &Params,
    ) -> Result<Words> {
        if expansion.is_empty() || !self.found_own_words() {
            return Ok(self);
        }
        let extra = index.search_weighted(expansion, self.filter(), self.wanted(params))?;
        let candidates = self.expanded(extra, params);
        Ok(self.replaced(candidates, &|order, n| index.neighbours(order, n), params))
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
                    &|order| lexical.said(order),
                    sittings.as_ref(),
                )
            })
        })
        .collect())
}
