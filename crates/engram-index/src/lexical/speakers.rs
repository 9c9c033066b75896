//! Who said each trace: the participants' names an index has seen, and
//! which of them a question names. A question that names one participant
//! ("What did Caroline research?") is about what that participant said;
//! the ranking then weighs the others' messages less (`rank.rs`). And
//! which traces mostly ask (the question prior, `rank/asking.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tantivy::tokenizer::TextAnalyzer;

use crate::analyzer;
use crate::rank::Said;

/// The participants of an index, each trace's speaker, and the traces
/// that mostly ask.
#[derive(Debug, Default)]
pub(crate) struct Speakers {
    /// By id - 1: the normalized name, and its terms as the analyzer
    /// makes them (what a question's terms are matched against).
    names: Vec<(String, Vec<String>)>,
    ids: HashMap<String, u32>,
    /// A trace's speaker, by the trace's conversation order.
    by_order: BTreeMap<u64, u32>,
    /// The places of the messages that mostly ask.
    asking: BTreeSet<u64>,
}

impl Speakers {
    /// Notes that the trace at `order` was said by `name` ("" or blank:
    /// by nobody named), and whether it mostly `asks`.
    pub(crate) fn note(&mut self, analyzer: &mut TextAnalyzer, order: u64, name: &str, asks: bool) {
        if asks {
            self.asking.insert(order);
        } else {
            self.asking.remove(&order);
        }
        let name = crate::rank::speaker_name(name);
        if name.is_empty() {
            self.by_order.remove(&order);
            return;
        }
        let id = match self.ids.get(&name) {
            Some(&id) => id,
            None => {
                let terms = analyzer::terms(analyzer, &name, 8);
                self.names.push((name.clone(), terms));
                let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
                self.ids.insert(name, id);
                id
            }
        };
        self.by_order.insert(order, id);
    }

    pub(crate) fn forget_between(&mut self, lo: u64, hi: u64) {
        let gone: Vec<u64> = self.by_order.range(lo..=hi).map(|(o, _)| *o).collect();
        for order in gone {
            self.by_order.remove(&order);
        }
        let gone: Vec<u64> = self.asking.range(lo..=hi).copied().collect();
        for order in gone {
            self.asking.remove(&order);
        }
    }

    /// What is known of the trace at `order`: its speaker, if it was
    /// named, and whether it mostly asks.
    pub(crate) fn of(&self, order: u64) -> Said {
        Said {
            speaker: self.by_order.get(&order).copied(),
            asks: self.asking.contains(&order),
        }
    }

    /// The terms of speaker `id`'s name (none for an id it never gave).
    pub(crate) fn terms_of(&self, id: u32) -> Vec<String> {
        let at = (id as usize).checked_sub(1);
        at.and_then(|i| self.names.get(i))
            .map_or_else(Vec::new, |(_, terms)| terms.clone())
    }

    /// The one participant whose every name term is among `terms` (a
    /// question's, analyzed); `None` when none is, or several are (as the
    /// pipeline names one among a ranking's speakers).
    #[cfg(test)]
    fn named(&self, terms: &[String]) -> Option<u32> {
        let names = self
            .names
            .iter()
            .enumerate()
            .map(|(i, (_, name))| (u32::try_from(i + 1).unwrap_or(u32::MAX), name.as_slice()));
        crate::rank::named_one(terms, names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_names_one_participant_or_none_and_asking_traces_are_kept() {
        let mut analyzer = analyzer::analyzer();
        let mut s = Speakers::default();
        s.note(&mut analyzer, 1, "Caroline", false);
        s.note(&mut analyzer, 2, " Melanie ", true);
        s.note(&mut analyzer, 3, "caroline", false);
        s.note(&mut analyzer, 4, "", true);
        let of = |s: &Speakers, o| (s.of(o).speaker, s.of(o).asks);
        assert_eq!(
            (of(&s, 1), of(&s, 2), of(&s, 3), of(&s, 4)),
            (
                (Some(1), false),
                (Some(2), true),
                (Some(1), false),
                (None, true)
            )
        );
        let terms = |q: &str| analyzer::terms(&mut analyzer::analyzer(), q, 64);
        assert_eq!(s.named(&terms("What did Caroline research?")), Some(1));
        assert_eq!(
            s.named(&terms("Where did Caroline's sister move?")),
            Some(1)
        );
        assert_eq!(s.named(&terms("What do Caroline and Melanie share?")), None);
        assert_eq!(s.named(&terms("What is my job?")), None);
        s.forget_between(1, 2);
        assert_eq!((of(&s, 1), of(&s, 2)), ((None, false), (None, false)));
        assert_eq!((of(&s, 3), of(&s, 4)), ((Some(1), false), (None, true)));
        // Written again, a trace's asking is what its new text says.
        s.note(&mut analyzer, 4, "", false);
        assert_eq!(of(&s, 4), (None, false));
    }
}
