//! Staged items are searched as if committed: the same index built by a
//! commit and by staging answers every primitive alike.

use proptest::prelude::*;

use super::*;
use crate::test_trace as trace;
use crate::{Filter, Kind};

const WORDS: &[&str] = &[
    "kayak", "lisbon", "berlin", "nurse", "teacher", "peanut", "sunset", "painting", "trip", "dog",
    "support", "group", "moved", "allergic", "june", "river", "camping", "guitar",
];

const DAY: f64 = 86_400.0;

/// Items of generated words: traces in turn order, with now and then a
/// summary or a fact, spread over a few sittings.
fn items(texts: &[Vec<usize>], names: &[bool]) -> Vec<Item> {
    texts
        .iter()
        .enumerate()
        .map(|(i, words)| {
            let text: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
            let ts = 1_683_554_160.0 + (i / 4) as f64 * DAY + (i % 4) as f64 * 60.0;
            let mut item = trace(&format!("k{i}"), i as u32 + 1, ts, &text.join(" "));
            if names.get(i).copied().unwrap_or(false) {
                item.name = Some(if i % 2 == 0 { "Caroline" } else { "Melanie" }.into());
            }
            if i % 7 == 6 {
                item.kind = if i % 2 == 0 {
                    Kind::Episodic
                } else {
                    Kind::Semantic
                };
            }
            item
        })
        .collect()
}

/// What a search of `query` finds, with scores rounded (the two sides
/// sum the same terms in another order).
fn found(index: &mut Lexical, query: &str, filter: &Filter) -> Vec<(String, i64)> {
    let terms = index.query_terms(query, 64);
    let mut hits: Vec<(String, i64)> = index
        .search(&terms, filter, 50)
        .unwrap()
        .iter()
        .map(|c| (index.body(c).unwrap(), (c.score * 1e3).round() as i64))
        .collect();
    hits.sort();
    hits
}

fn weighted(index: &Lexical, terms: &[(String, f32)]) -> Vec<(String, i64)> {
    let mut hits: Vec<(String, i64)> = index
        .search_weighted(terms, &Filter::default(), 50)
        .unwrap()
        .iter()
        .map(|c| (c.key.clone(), (c.score * 1e3).round() as i64))
        .collect();
    hits.sort();
    hits
}

/// Every primitive a ranking reads, of `index`, for `queries`.
fn answers(index: &mut Lexical, queries: &[String], orders: &[u64]) -> String {
    let traces_only = Filter {
        kinds: vec![Kind::Trace],
        ..Filter::default()
    };
    let mut out = format!("len {}\n", index.len());
    for q in queries {
        let terms = index.query_terms(q, 64);
        out += &format!("{q}: {:?}\n", found(index, q, &Filter::default()));
        out += &format!("  traces: {:?}\n", found(index, q, &traces_only));
        let held: Vec<u64> = terms.iter().map(|t| index.doc_freq(t).unwrap()).collect();
        out += &format!("  held {held:?}\n");
        let asked: Vec<(String, f32)> = terms.iter().map(|t| (t.clone(), 0.5)).collect();
        out += &format!("  weighted {:?}\n", weighted(index, &asked));
        let refs: Vec<&str> = terms.iter().map(String::as_str).collect();
        let counted = index.sitting_counts(&refs, 3_600.0).unwrap();
        let mut counts = counted.counts.clone();
        counts.iter_mut().for_each(|c| c.sort());
        out += &format!(
            "  sittings {:?} {:?} {counts:?}\n",
            counted.sittings, counted.lengths
        );
    }
    for order in orders {
        let said = index.said(*order);
        out += &format!(
            "{order}: {:?} {said:?} {:?}\n",
            index.neighbours(*order, 2),
            index.body_at(*order).unwrap()
        );
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever is committed and whatever staged, every answer is the one
    /// of the index with all of it committed.
    #[test]
    fn staged_items_answer_as_committed_ones(
        texts in prop::collection::vec(prop::collection::vec(0..WORDS.len(), 1..12), 1..30),
        names in prop::collection::vec(any::<bool>(), 0..30),
        split in 0.0..1.0_f64,
        queries in prop::collection::vec(prop::collection::vec(0..WORDS.len(), 1..4), 1..4),
    ) {
        let all = items(&texts, &names);
        let at = ((all.len() as f64) * split) as usize;
        let queries: Vec<String> = queries
            .iter()
            .map(|q| q.iter().map(|w| WORDS[*w]).collect::<Vec<_>>().join(" "))
            .collect();
        let orders: Vec<u64> = all.iter().map(|i| i.order).collect();

        let mut committed = Lexical::in_memory().unwrap();
        committed.upsert(&all).unwrap();
        committed.commit("").unwrap();

        let mut staged = Lexical::in_memory().unwrap();
        staged.upsert(&all[..at]).unwrap();
        staged.commit("").unwrap();
        staged.stage(&all[at..]).unwrap();
        prop_assert_eq!(staged.staged(), (all.len() - at) as u64);

        prop_assert_eq!(
            answers(&mut staged, &queries, &orders),
            answers(&mut committed, &queries, &orders)
        );

        // Unstaged, it is the committed part alone again.
        let mut part = Lexical::in_memory().unwrap();
        part.upsert(&all[..at]).unwrap();
        part.commit("").unwrap();
        staged.unstage();
        prop_assert_eq!(staged.staged(), 0);
        prop_assert_eq!(
            answers(&mut staged, &queries, &orders),
            answers(&mut part, &queries, &orders)
        );
    }
}

#[test]
fn a_staged_item_replaces_a_committed_one_and_a_removal_hides_it() {
    let mut index = Lexical::in_memory().unwrap();
    let mut fact = trace("f1", 1, 0.0, "lives in lisbon");
    fact.kind = Kind::Semantic;
    let mut other = trace("f2", 2, 0.0, "allergic to peanuts");
    other.kind = Kind::Semantic;
    index.upsert(&[fact.clone(), other.clone()]).unwrap();
    index.commit("").unwrap();
    assert_eq!(index.len(), 2);

    let mut moved = fact.clone();
    moved.text = "lives in berlin".into();
    moved.body = "f1 now".into();
    index.stage(&[moved]).unwrap();
    assert_eq!(index.len(), 2, "replaced, not added");
    assert!(found(&mut index, "lisbon", &Filter::default()).is_empty());
    let berlin = found(&mut index, "berlin", &Filter::default());
    assert_eq!(berlin.len(), 1);
    assert_eq!(berlin[0].0, "f1 now");
    assert_eq!(index.body_of("f1").unwrap().as_deref(), Some("f1 now"));

    index.stage_removal(&["f2"]).unwrap();
    assert_eq!(index.len(), 1);
    assert!(found(&mut index, "peanuts", &Filter::default()).is_empty());
    assert!(!index.contains("f2").unwrap());
    assert_eq!(index.body_of("f2").unwrap(), None);

    // Staged again, then unstaged: the committed index as it was.
    index.stage(&[other]).unwrap();
    assert!(index.contains("f2").unwrap());
    index.unstage();
    assert_eq!(found(&mut index, "lisbon", &Filter::default()).len(), 1);
    assert_eq!(found(&mut index, "peanuts", &Filter::default()).len(), 1);
    assert_eq!(index.len(), 2);
}

#[test]
fn a_trace_already_held_is_not_staged_again() {
    let mut index = Lexical::in_memory().unwrap();
    let t = trace("t1", 1, 0.0, "kayak trip");
    index.upsert(std::slice::from_ref(&t)).unwrap();
    index.commit("").unwrap();
    index
        .stage(&[t, trace("t2", 2, 0.0, "kayak again")])
        .unwrap();
    assert_eq!(index.staged(), 1);
    assert_eq!(index.len(), 2);
    assert!(index.has_trace(crate::order(2, 0)));
    index.unstage();
    assert!(!index.has_trace(crate::order(2, 0)), "unstaged");
    assert!(index.has_trace(crate::order(1, 0)), "committed");
}

/// Taken from staging and written, the items are committed as staged.
#[test]
fn what_is_taken_from_staging_and_written_is_committed_as_staged() {
    let mut index = Lexical::in_memory().unwrap();
    let mut fact = trace("f1", 1, 0.0, "lives in lisbon");
    fact.kind = Kind::Semantic;
    let mut gone = trace("f2", 2, 0.0, "allergic to peanuts");
    gone.kind = Kind::Semantic;
    index.upsert(&[fact.clone(), gone]).unwrap();
    index.commit("").unwrap();
    let mut moved = fact;
    moved.text = "lives in berlin".into();
    moved.body = "f1 now".into();
    index
        .stage(&[moved, trace("t3", 3, 0.0, "berlin trip")])
        .unwrap();
    index.stage_removal(&["f2"]).unwrap();
    let keys = |index: &mut Lexical| {
        let hits = found(index, "berlin peanuts lisbon", &Filter::default());
        hits.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
    };
    let staged = keys(&mut index);
    assert_eq!(staged, ["f1 now", "t3"]);

    let (items, removed) = index.take_staged();
    assert_eq!(index.staged(), 0);
    assert_eq!(items.len(), 2);
    assert_eq!(removed, ["f2"]);
    index.upsert(&items).unwrap();
    let removed: Vec<&str> = removed.iter().map(String::as_str).collect();
    index.remove(&removed).unwrap();
    index.commit("").unwrap();
    assert_eq!(keys(&mut index), staged);
    assert_eq!(index.len(), 2);
    assert!(index.has_trace(crate::order(3, 0)));
}
