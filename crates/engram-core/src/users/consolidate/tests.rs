use super::*;
use crate::memory::{Origin, SemanticItem};
use crate::users::FactSource;

fn fact(id: &str, text: &str, since: f64, agent: &str) -> UserFact {
    UserFact {
        fact: SemanticItem {
            valid_from: Some(since),
            ..SemanticItem::new(id, text)
        },
        sources: vec![FactSource {
            agent_id: agent.into(),
            fact_id: format!("{agent}-{id}"),
            turn_ids: vec![],
        }],
    }
}

fn client(id: &str, text: &str, since: f64) -> UserFact {
    let mut f = fact(id, text, since, "none");
    f.sources.clear();
    f.fact.managed.origin = Origin::Client;
    f
}

fn after(known: &[UserFact], plan: &Plan) -> (Vec<UserFact>, Consolidated) {
    let done = apply(known, plan);
    let mut all = known.to_vec();
    for f in &done.changed {
        let i = all.iter().position(|k| k.fact.id == f.fact.id).unwrap();
        all[i] = f.clone();
    }
    (all, done)
}

fn by_id<'a>(facts: &'a [UserFact], id: &str) -> &'a UserFact {
    facts.iter().find(|f| f.fact.id == id).unwrap()
}

#[test]
fn a_repeat_goes_into_the_earliest_saying_with_every_source() {
    let known = [
        fact("u1", "I am allergic to peanuts", 100.0, "chat-1"),
        fact(
            "u2",
            "Allergic to peanuts, please remember that",
            300.0,
            "chat-2",
        ),
    ];
    let plan = Plan {
        merges: vec![Merge {
            keep: "u1".into(),
            dup: "u2".into(),
        }],
        ..Plan::default()
    };
    let (facts, done) = after(&known, &plan);
    assert_eq!(
        done.counts,
        Counts {
            merged: 1,
            unchanged: 1,
            ..Counts::default()
        }
    );
    let keep = by_id(&facts, "u1");
    assert!(keep.is_live());
    let agents: Vec<_> = keep.sources.iter().map(|s| s.agent_id.as_str()).collect();
    assert_eq!(agents, ["chat-1", "chat-2"]);
    let dup = by_id(&facts, "u2");
    assert_eq!(dup.fact.superseded_by.as_deref(), Some("u1"));
    assert!(dup.fact.invalid_at.is_none(), "said again, not ended");
    assert!(
        dup.sources.is_empty(),
        "its sources moved, so a fold finds them once"
    );
    // As of any time, the user held the fact once.
    let items: Vec<_> = facts.iter().map(|f| f.fact.clone()).collect();
    for at in [150.0, 350.0] {
        let then = crate::memory::valid_at(&items, at);
        assert_eq!(then.len(), 1, "as of {at}: {then:?}");
    }
    // Applied again: nothing left to do.
    let again = apply(&facts, &plan);
    assert!(again.changed.is_empty());
    assert_eq!(again.counts.merged, 0);
}

#[test]
fn a_replacement_ends_the_old_fact_when_the_new_one_began() {
    let known = [
        fact("u1", "Lives in Lisbon", 100.0, "chat-1"),
        fact("u2", "Moved to Berlin", 500.0, "chat-2"),
    ];
    let plan = Plan {
        replaces: vec![Replace {
            old: "u1".into(),
            new: "u2".into(),
        }],
        ..Plan::default()
    };
    let (facts, done) = after(&known, &plan);
    assert_eq!(done.counts.replaced, 1);
    let old = by_id(&facts, "u1");
    assert_eq!(old.fact.superseded_by.as_deref(), Some("u2"));
    assert_eq!(old.fact.invalid_at, Some(500.0));
    // Backwards (the "new" fact said before the old one): refused.
    let back = Plan {
        replaces: vec![Replace {
            old: "u2".into(),
            new: "u1".into(),
        }],
        ..Plan::default()
    };
    let refused = apply(&known, &back);
    assert!(refused.changed.is_empty());
    assert_eq!(refused.counts.unchanged, 2);
}

#[test]
fn clients_and_pinned_facts_are_never_changed() {
    let mut pinned = fact("u3", "Vegetarian", 50.0, "chat-1");
    pinned.fact.managed.pinned = true;
    let known = [
        client("u1", "Lives in Lisbon", 100.0),
        fact("u2", "Lives in Berlin", 500.0, "chat-2"),
        pinned,
        fact("u4", "Eats meat now", 600.0, "chat-2"),
    ];
    let plan = Plan {
        merges: vec![Merge {
            keep: "u2".into(),
            dup: "u1".into(),
        }],
        replaces: vec![
            Replace {
                old: "u1".into(),
                new: "u2".into(),
            },
            Replace {
                old: "u3".into(),
                new: "u4".into(),
            },
        ],
        invalidates: vec![("u1".into(), 700.0), ("u3".into(), 700.0)],
    };
    let done = apply(&known, &plan);
    assert!(done.changed.is_empty(), "{:?}", done.changed);
    assert!(done.done.is_empty());
    assert_eq!(done.counts.unchanged, 4);
    // A compaction's repeat of a client's fact goes into it, leaving the
    // client's fact as written.
    let repeat = Plan {
        merges: vec![Merge {
            keep: "u1".into(),
            dup: "u2".into(),
        }],
        ..Plan::default()
    };
    let (facts, done) = after(&known, &repeat);
    assert_eq!(done.counts.merged, 1);
    assert_eq!(by_id(&facts, "u1"), &known[0]);
    assert_eq!(by_id(&facts, "u2").sources.len(), 1, "kept on the repeat");
}

#[test]
fn an_invalidation_ends_a_fact_with_nothing_in_its_place() {
    let known = [fact("u1", "Allergic to peanuts", 100.0, "chat-1")];
    let plan = Plan {
        invalidates: vec![("u1".into(), 900.0)],
        ..Plan::default()
    };
    let (facts, done) = after(&known, &plan);
    assert_eq!(done.counts.invalidated, 1);
    assert_eq!(facts[0].fact.invalid_at, Some(900.0));
    assert!(facts[0].fact.superseded_by.is_none());
}

/// A similarity table over fact indexes.
fn table(pairs: &[((usize, usize), f32)]) -> impl Fn(usize, usize) -> Option<f32> + '_ {
    move |a, b| {
        pairs
            .iter()
            .find(|((x, y), _)| (*x, *y) == (a, b) || (*y, *x) == (a, b))
            .map(|(_, s)| *s)
            .or(Some(0.0))
    }
}

#[test]
fn candidates_merge_repeats_and_group_a_subject() {
    let known = [
        fact("u1", "I am allergic to peanuts", 100.0, "chat-1"),
        fact("u2", "I'm allergic to peanuts", 200.0, "chat-2"),
        fact("u3", "I am no longer allergic to peanuts", 300.0, "chat-3"),
        fact("u4", "I live in Lisbon", 100.0, "chat-1"),
        fact("u5", "I live in Berlin", 400.0, "chat-3"),
        fact("u6", "Has a dog named Rex", 100.0, "chat-1"),
    ];
    let sims = [
        ((0, 1), 0.97),
        ((0, 2), 0.9),
        ((1, 2), 0.9),
        ((3, 4), 0.92),
        ((0, 5), 0.1),
    ];
    let found = candidates(&known, table(&sims));
    assert_eq!(
        found.merges,
        [Merge {
            keep: "u1".into(),
            dup: "u2".into(),
        }]
    );
    // The negation and the names keep these apart; they go to the
    // summarizer as subjects, oldest first.
    assert_eq!(found.groups, [vec!["u1", "u3"], vec!["u4", "u5"]]);
    // Without vectors: repeats by words only, no subjects.
    let words_only = candidates(&known, |_, _| None);
    assert_eq!(words_only.merges.len(), 1);
    assert!(words_only.groups.is_empty());
}

#[test]
fn same_fact_needs_the_same_negations_names_and_numbers() {
    assert!(same_fact("Allergic to peanuts", "allergic to peanut", None));
    assert!(same_fact(
        "Works as a nurse at the hospital",
        "Is a nurse in a hospital",
        Some(0.93)
    ));
    for (a, b) in [
        ("Allergic to peanuts", "No longer allergic to peanuts"),
        ("Lives in Lisbon", "Lives in Berlin"),
        ("Has 2 cats", "Has 3 cats"),
        ("Drives a Skoda Octavia", "Drives a Kia Niro"),
    ] {
        assert!(!same_fact(a, b, Some(0.99)), "{a} / {b}");
    }
}

#[test]
fn a_run_compares_the_latest_facts_only() {
    let many: Vec<UserFact> = (0..CONSIDER_MAX + 50)
        .map(|n| {
            let mut f = fact(
                &format!("u{n}"),
                &format!("Fact number {n} of many"),
                1.0,
                "c",
            );
            f.fact.ts = n as f64;
            f
        })
        .collect();
    let looked = considered(&many);
    assert_eq!(looked.len(), CONSIDER_MAX);
    assert!(looked.iter().all(|&i| i >= 50), "the latest written");
    // Every pair compared is among them.
    let asked = std::cell::RefCell::new(0usize);
    candidates(&many, |a, b| {
        assert!(a >= 50 && b >= 50);
        *asked.borrow_mut() += 1;
        Some(0.0)
    });
    assert!(*asked.borrow() > 0);
}
