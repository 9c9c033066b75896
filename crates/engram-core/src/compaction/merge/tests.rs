use super::pairs::{NOT_REPEATS, REPEATS};
use super::*;

#[test]
fn facts_are_never_stored_twice_and_updates_supersede() {
    let known = vec![SemanticItem::new("old", "The user lives in Oslo, Norway")];
    let fact = |f: &str| NewFact {
        fact: f.into(),
        tags: vec![],
        confidence: 2.0,
        salience: 0.5,
    };
    let mut n = 0;
    let merge = merge_facts(
        &known,
        &[
            fact("the user lives in oslo norway!"),
            fact("The user lives in Bergen, Norway"),
            fact("Prefers tea"),
            fact("prefers TEA"),
            fact("Prefers green tea"),
            fact("  "),
        ],
        5.0,
        || {
            n += 1;
            format!("new{n}")
        },
    );
    assert_eq!(merge.duplicates, 2);
    let facts: Vec<_> = merge.new_items.iter().map(|i| i.fact.as_str()).collect();
    assert_eq!(
        facts,
        ["The user lives in Bergen, Norway", "Prefers green tea"],
        "a batch keeps its newest version"
    );
    assert_eq!(merge.superseded, [("old".to_string(), "new1".to_string())]);
    assert_eq!(merge.new_items[0].confidence, 1.0, "clamped");
}

#[test]
fn a_compaction_adds_beside_a_pinned_fact_never_over_it() {
    let mut pinned = SemanticItem::new("pin", "The user lives in Oslo, Norway");
    pinned.managed.pinned = true;
    let proposed = |f: &str| NewFact {
        fact: f.into(),
        tags: vec![],
        confidence: 1.0,
        salience: 0.5,
    };
    let merge = merge_facts(
        &[pinned],
        &[
            proposed("The user lives in Bergen, Norway"),
            proposed("the user lives in oslo, norway"),
        ],
        5.0,
        || "new".to_string(),
    );
    assert!(merge.superseded.is_empty());
    assert_eq!((merge.new_items.len(), merge.duplicates), (1, 1));
}

fn new(f: &str) -> NewFact {
    NewFact {
        fact: f.into(),
        tags: vec![],
        confidence: 1.0,
        salience: 0.5,
    }
}

fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("n{n}")
    }
}

#[test]
fn an_answer_with_handles_replaces_and_ends_what_it_names_and_nothing_else() {
    let mut pinned = SemanticItem::new("pin", "Drinks tea");
    pinned.managed.pinned = true;
    let known = [
        SemanticItem::new("lisbon", "Lives in Lisbon"),
        SemanticItem::new("nurse", "Works as a nurse in Lisbon"),
        SemanticItem::new("peanuts", "Allergic to peanuts"),
        pinned,
    ];
    let summary = Summary {
        updates: vec![
            FactUpdate {
                replaces: "lisbon".into(),
                fact: new("Lives in Berlin"),
            },
            FactUpdate {
                replaces: "pin".into(),
                fact: new("Drinks coffee"),
            },
            FactUpdate {
                replaces: "users-fact".into(),
                fact: new("Drives a Kia Niro"),
            },
        ],
        invalidates: vec![
            Named {
                id: "peanuts".into(),
                fact: "Allergic to peanuts".into(),
            },
            Named {
                id: "users-other".into(),
                fact: "Plays curling".into(),
            },
        ],
        // Most of a known fact's words: under handles, not an update.
        semantic_facts: vec![new("Works as a nurse in Porto"), new("lives in berlin!")],
        replacing: Replacing::Never,
        ..Summary::default()
    };
    let m = merge_summary(&known, &summary, 9.0, ids());
    let texts: Vec<_> = m.new_items.iter().map(|i| i.fact.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Lives in Berlin",
            "Drinks coffee",
            "Drives a Kia Niro",
            "Plays curling",
            "Works as a nurse in Porto"
        ]
    );
    assert_eq!(m.superseded, [("lisbon".to_string(), "n1".to_string())]);
    assert_eq!(m.invalidated, [("peanuts".to_string(), 9.0)]);
    assert_eq!(m.refused, 1, "the pinned fact is the client's");
    assert_eq!(m.duplicates, 1, "the update said again");
    assert_eq!(m.new_items[2].replaces.as_deref(), Some("users-fact"));
    let marker = &m.new_items[3];
    assert_eq!(marker.replaces.as_deref(), Some("users-other"));
    assert!(!marker.is_live(), "a record that the user's fact ended");
    let ended = m.endings(&known);
    assert_eq!(ended.len(), 2);
    assert!(ended.iter().all(|e| !e.is_live()));
    assert!(m.endings(&ended).is_empty(), "ended once");
}

#[test]
fn without_handles_repeats_merge_and_nothing_is_replaced_by_guesswork() {
    let known = [SemanticItem::new("k", "The user lives in Lisbon")];
    let summary = Summary {
        semantic_facts: vec![
            new("I live in Lisbon now"),
            new("User lives in Berlin"),
            new("I no longer live in Lisbon"),
        ],
        replacing: Replacing::Never,
        ..Summary::default()
    };
    let m = merge_summary(&known, &summary, 1.0, ids());
    assert_eq!(m.duplicates, 1);
    assert!(m.superseded.is_empty() && m.invalidated.is_empty());
    assert_eq!(m.new_items.len(), 2);
}

#[test]
fn repeats_are_told_from_negations_and_changes() {
    assert!(NOT_REPEATS.len() >= 50);
    for (a, b) in NOT_REPEATS {
        assert!(!is_repeat(a, b), "{a:?} / {b:?}");
        assert!(!is_repeat(b, a), "{b:?} / {a:?}");
    }
    for (a, b) in REPEATS {
        assert!(is_repeat(a, b), "{a:?} / {b:?}");
    }
    assert!(!is_repeat("the", "a"), "no value words: never a repeat");
}
