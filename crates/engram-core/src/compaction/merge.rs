//! How a summary's facts enter the known ones (DESIGN §15).
//!
//! - An answer that names known facts by their handles decides: an
//!   `update` supersedes the fact it names, an `invalidate` ends it. A fact
//!   the agent's store does not hold (the user's, from another
//!   conversation) is replaced or ended by the user's fold instead
//!   (`SemanticItem::replaces`).
//! - An answer of an LLM that knows no handles falls back to the rule
//!   before them: a fact mostly made of a known fact's words supersedes it.
//! - Otherwise (the embedded summarizer, and answers with handles) a fact
//!   is never replaced by guesswork: the same fact said again, in other
//!   function words or order, is a repeat and is skipped.
//!
//! A pinned fact is the client's to change: nothing here replaces it.

use std::collections::HashSet;

use super::{NewFact, Summary};
use crate::memory::SemanticItem;

/// A known fact an answer replaces: `replaces` is its id (the answer's
/// handle, resolved), `fact` the new text.
#[derive(Debug, Clone, PartialEq)]
pub struct FactUpdate {
    pub replaces: String,
    pub fact: NewFact,
}

/// A known fact an answer named by its handle: its id and the text the
/// summarizer was shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub id: String,
    pub fact: String,
}

/// How an answer's `semantic_facts` may replace known facts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Replacing {
    /// A fact mostly made of a known fact's words supersedes it: the rule
    /// for LLM answers that name no handles.
    #[default]
    ByOverlap,
    /// Never: only the answer's `updates` replace (handles), and repeats
    /// are skipped. The embedded summarizer's and handle answers' rule.
    Never,
}

/// What merging new facts into known ones decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FactMerge {
    /// Items to append to `semantic.jsonl`.
    pub new_items: Vec<SemanticItem>,
    /// `(old id, new id)`: the old item is superseded by the new one.
    pub superseded: Vec<(String, String)>,
    /// `(id, when)`: known facts no longer true, with no replacement (the
    /// plan dates them by the statement that said so).
    pub invalidated: Vec<(String, f64)>,
    /// Proposed facts already known (skipped).
    pub duplicates: usize,
    /// Updates and invalidations not applied: the fact was pinned, or
    /// already replaced in this answer.
    pub refused: usize,
}

impl FactMerge {
    /// Dates what the merge decided from the window's statements: a new
    /// fact became true, and an invalidated one stopped, when the
    /// statement most like it was said (else at `fallback`, the window's
    /// end).
    pub fn date(
        &mut self,
        known: &[SemanticItem],
        statements: &super::when::Statements,
        fallback: Option<f64>,
    ) {
        for fact in &mut self.new_items {
            let at = statements.time_of(&fact.fact).or(fallback);
            fact.valid_from = at;
            if fact.invalid_at.is_some() {
                // A record that a user's fact ended: ended when said.
                fact.invalid_at = at.or(fact.invalid_at);
            }
        }
        for (id, at) in &mut self.invalidated {
            let text = known.iter().find(|k| k.id == *id).map(|k| k.fact.as_str());
            if let Some(when) = text.and_then(|t| statements.time_of(t)).or(fallback) {
                *at = when;
            }
        }
    }

    /// [`ended`] of `known` by this merge.
    pub fn endings(&self, known: &[SemanticItem]) -> Vec<SemanticItem> {
        ended(known, &self.superseded, &self.invalidated, &self.new_items)
    }
}

/// The lines that end facts of `known` as `superseded` (`(old, new)`, the
/// new among `new_items`) and `invalidated` (`(id, when)`) say, for each
/// fact not already ended so (a commit carried out again writes nothing
/// twice).
pub fn ended(
    known: &[SemanticItem],
    superseded: &[(String, String)],
    invalidated: &[(String, f64)],
    new_items: &[SemanticItem],
) -> Vec<SemanticItem> {
    let mut lines = vec![];
    for (old, new) in superseded {
        if let Some(item) = known
            .iter()
            .find(|s| s.id == *old && s.superseded_by.as_deref() != Some(new))
        {
            lines.push(item.replaced_by_id(new, new_items));
        }
    }
    for (id, at) in invalidated {
        if let Some(item) = known.iter().find(|s| s.id == *id && s.is_live()) {
            lines.push(item.invalidated(*at));
        }
    }
    lines
}

/// Lowercase alphanumeric words.
pub(crate) fn words(text: &str) -> impl Iterator<Item = String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// Lowercase words: two facts with the same words are the same fact.
pub fn normalize(text: &str) -> String {
    words(text).collect::<Vec<_>>().join(" ")
}

/// Word overlap (Jaccard) above which a new fact updates a known one.
pub(crate) const UPDATE_OVERLAP: f64 = 0.6;

fn overlap(a: &str, b: &str) -> f64 {
    let a: HashSet<String> = words(a).collect();
    let b: HashSet<String> = words(b).collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// Words that carry no value of a fact: a fact that differs from another
/// only in them (or in order, case, punctuation, a plural) says the same.
const FUNCTION_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "i",
    "me",
    "my",
    "mine",
    "myself",
    "we",
    "us",
    "our",
    "you",
    "your",
    "he",
    "him",
    "his",
    "she",
    "her",
    "it",
    "its",
    "they",
    "them",
    "their",
    "is",
    "am",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "m",
    "re",
    "ve",
    "s",
    "d",
    "ll",
    "do",
    "does",
    "did",
    "has",
    "have",
    "had",
    "that",
    "this",
    "these",
    "those",
    "to",
    "of",
    "and",
    "so",
    "very",
    "really",
    "just",
    "also",
    "please",
    "remember",
    "user",
    "users",
    "now",
    "currently",
    "at",
    "in",
    "on",
    "as",
    "for",
    "with",
    "by",
    "from",
    "into",
    "fact",
];

/// Words that turn a statement around: two facts that differ in them are
/// never the same ("allergic to peanuts", "no longer allergic to
/// peanuts"). `t` is what "isn't" and "don't" leave.
const NEGATIONS: &[&str] = &[
    "not", "no", "never", "t", "nor", "neither", "none", "nothing", "nobody", "without", "cannot",
    "longer", "anymore", "stopped", "quit", "former", "formerly", "ex", "used", "gave", "lost",
];

/// The words that make a fact what it is, and the words that turn it
/// around.
fn gist(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut content, mut negations) = (vec![], vec![]);
    for w in words(text) {
        if NEGATIONS.contains(&w.as_str()) {
            negations.push(w);
        } else if !FUNCTION_WORDS.contains(&w.as_str()) {
            // "lives" and "live", "peanuts" and "peanut".
            let stem = match w.strip_suffix('s') {
                Some(s) if s.chars().count() >= 3 && !s.ends_with('s') => s.to_owned(),
                _ => w,
            };
            content.push(stem);
        }
    }
    for v in [&mut content, &mut negations] {
        v.sort_unstable();
        v.dedup();
    }
    (content, negations)
}

/// The words that make `text` what it is (function words and negations
/// left out, a plural's "s" dropped), sorted and once each.
pub fn content_words(text: &str) -> Vec<String> {
    gist(text).0
}

/// The words of `text` that turn a statement around ("no", "longer",
/// "stopped", …), sorted: two facts that differ in them say different
/// things however close their meaning reads.
pub fn negations(text: &str) -> Vec<String> {
    gist(text).1
}

/// The same fact in other words: the same value words and the same
/// negations (only function words, order, case or a plural differ).
/// Never true of two facts with no value words.
pub fn is_repeat(a: &str, b: &str) -> bool {
    repeat_key(a).is_some_and(|k| repeat_key(b) == Some(k))
}

/// What two repeats of a fact share ([`is_repeat`]): its value words and
/// negations; `None` for a text with no value words.
pub fn repeat_key(text: &str) -> Option<String> {
    let (content, negations) = gist(text);
    (!content.is_empty()).then(|| format!("{} | {}", content.join(" "), negations.join(" ")))
}

/// `b` says what `a` says: the same words, or a repeat ([`is_repeat`]).
fn says_again(a: &str, b: &str) -> bool {
    normalize(a) == normalize(b) || is_repeat(a, b)
}

/// [`merge_summary`] of `proposed` alone under the word-overlap rule.
pub fn merge_facts(
    known: &[SemanticItem],
    proposed: &[NewFact],
    now: f64,
    new_id: impl FnMut() -> String,
) -> FactMerge {
    let summary = Summary {
        semantic_facts: proposed.to_vec(),
        ..Summary::default()
    };
    merge_summary(known, &summary, now, new_id)
}

/// Merges what `summary` says about facts into the `known` ones (the
/// agent's, any version): its updates and invalidations first, then its
/// new facts (see the module docs). `new_id` names new items.
pub fn merge_summary(
    known: &[SemanticItem],
    summary: &Summary,
    now: f64,
    new_id: impl FnMut() -> String,
) -> FactMerge {
    let mut m = Merging {
        merge: FactMerge::default(),
        live: known.iter().filter(|k| k.is_live()).cloned().collect(),
        agents: known.iter().map(|k| k.id.clone()).collect(),
        now,
        new_id,
    };
    for u in &summary.updates {
        m.update(u);
    }
    for named in &summary.invalidates {
        m.invalidate(named);
    }
    for p in &summary.semantic_facts {
        m.add(p, summary.replacing);
    }
    m.merge
}

struct Merging<F> {
    merge: FactMerge,
    /// The live facts as this answer leaves them so far.
    live: Vec<SemanticItem>,
    /// Every fact the agent holds, live or not: a handle naming none of
    /// them names a user's fact from another conversation.
    agents: HashSet<String>,
    now: f64,
    new_id: F,
}

impl<F: FnMut() -> String> Merging<F> {
    fn item(&mut self, p: &NewFact) -> SemanticItem {
        SemanticItem {
            ts: self.now,
            tags: p.tags.clone(),
            confidence: p.confidence.clamp(0.0, 1.0),
            salience: p.salience.clamp(0.0, 1.0),
            ..SemanticItem::new((self.new_id)(), p.fact.trim())
        }
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.live.iter().position(|f| f.id == id)
    }

    fn repeat_of(&self, text: &str) -> Option<usize> {
        self.live.iter().position(|f| says_again(&f.fact, text))
    }

    /// `old` (an index into `live`) replaced by `new`.
    fn supersede(&mut self, old: usize, new: &str) {
        let old = self.live.remove(old);
        // Replacing a fact of this same answer: keep only the newer one.
        match self.merge.new_items.iter().position(|i| i.id == old.id) {
            Some(at) => {
                self.merge.new_items.remove(at);
            }
            None => self.merge.superseded.push((old.id, new.to_owned())),
        }
    }

    fn push(&mut self, item: SemanticItem) {
        self.agents.insert(item.id.clone());
        self.live.push(item.clone());
        self.merge.new_items.push(item);
    }

    fn update(&mut self, u: &FactUpdate) {
        if normalize(&u.fact.fact).is_empty() {
            return;
        }
        let Some(at) = self.position(&u.replaces) else {
            // Ended meanwhile (a summary written ahead) or in this answer.
            if self.agents.contains(&u.replaces) {
                self.merge.refused += 1;
                return self.add(&u.fact, Replacing::Never);
            }
            // Not the agent's: the user's fact, replaced when this one is
            // folded into the user's store.
            let mut item = self.item(&u.fact);
            item.replaces = Some(u.replaces.clone());
            return self.push(item);
        };
        if self.live[at].managed.pinned {
            self.merge.refused += 1;
            return self.add(&u.fact, Replacing::Never);
        }
        if says_again(&self.live[at].fact, &u.fact.fact) {
            self.merge.duplicates += 1;
            return;
        }
        if let Some(same) = self.repeat_of(&u.fact.fact) {
            // Replaced by a fact already known: no new item.
            let by = self.live[same].id.clone();
            self.merge.duplicates += 1;
            return self.supersede(at, &by);
        }
        let item = self.item(&u.fact);
        let id = item.id.clone();
        self.supersede(at, &id);
        self.push(item);
    }

    fn invalidate(&mut self, named: &Named) {
        match self.position(&named.id) {
            Some(at) if self.live[at].managed.pinned => self.merge.refused += 1,
            Some(at) => {
                let old = self.live.remove(at);
                match self.merge.new_items.iter().position(|i| i.id == old.id) {
                    Some(i) => {
                        self.merge.new_items.remove(i);
                    }
                    None => self.merge.invalidated.push((old.id, self.now)),
                }
            }
            None if self.agents.contains(&named.id) => self.merge.refused += 1,
            None => {
                // The user's fact: a record that it ended, which the fold
                // carries out in the user's store.
                let mut marker = SemanticItem::new((self.new_id)(), named.fact.trim());
                marker.ts = self.now;
                marker.replaces = Some(named.id.clone());
                marker.invalid_at = Some(self.now);
                self.merge.new_items.push(marker);
            }
        }
    }

    fn add(&mut self, p: &NewFact, replacing: Replacing) {
        if normalize(&p.fact).is_empty() {
            return;
        }
        if self.repeat_of(&p.fact).is_some() {
            self.merge.duplicates += 1;
            return;
        }
        let item = self.item(p);
        if replacing == Replacing::ByOverlap {
            let replaced = self
                .live
                .iter()
                .enumerate()
                .filter(|(_, f)| !f.managed.pinned)
                .map(|(i, f)| (i, overlap(&f.fact, &p.fact)))
                .filter(|(_, o)| *o >= UPDATE_OVERLAP)
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(i, _)| i);
            if let Some(old) = replaced {
                let id = item.id.clone();
                self.supersede(old, &id);
            }
        }
        self.push(item);
    }
}

#[cfg(any(test, feature = "testing"))]
pub mod pairs;

#[cfg(test)]
mod tests;
