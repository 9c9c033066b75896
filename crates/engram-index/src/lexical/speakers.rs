//! Who said each trace: the participants' names an index has seen, and
//! which of them a question names. A question that names one participant
//! ("What did Caroline research?") is about what that participant said;
//! the ranking then weighs the others' messages less (`rank.rs`).

use std::collections::{BTreeMap, HashMap};

use tantivy::tokenizer::TextAnalyzer;

use crate::analyzer;

/// The participants of an index and each trace's speaker.
#[derive(Debug, Default)]
pub(crate) struct Speakers {
    /// By id - 1: the normalized name, and its terms as the analyzer
    /// makes them (what a question's terms are matched against).
    names: Vec<(String, Vec<String>)>,
    ids: HashMap<String, u32>,
    /// A trace's speaker, by the trace's conversation order.
    by_order: BTreeMap<u64, u32>,
}

impl Speakers {
    /// Notes that the trace at `order` was said by `name` ("" or blank:
    /// by nobody named).
    pub(crate) fn note(&mut self, analyzer: &mut TextAnalyzer, order: u64, name: &str) {
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
    }

    /// The speaker of the trace at `order`, if it was named.
    pub(crate) fn of(&self, order: u64) -> Option<u32> {
        self.by_order.get(&order).copied()
    }

    /// The one participant whose every name term is among `terms` (a
    /// question's, analyzed); `None` when none is, or several are.
    pub(crate) fn named(&self, terms: &[String]) -> Option<u32> {
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
    fn a_question_names_one_participant_or_none() {
        let mut analyzer = analyzer::analyzer();
        let mut s = Speakers::default();
        s.note(&mut analyzer, 1, "Caroline");
        s.note(&mut analyzer, 2, " Melanie ");
        s.note(&mut analyzer, 3, "caroline");
        s.note(&mut analyzer, 4, "");
        assert_eq!(
            (s.of(1), s.of(2), s.of(3), s.of(4)),
            (Some(1), Some(2), Some(1), None)
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
        assert_eq!((s.of(1), s.of(3)), (None, Some(1)));
    }
}
