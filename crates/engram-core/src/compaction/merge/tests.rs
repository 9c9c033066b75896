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

/// Pairs that share most words but say different things: never repeats.
/// Each is (a statement, its negation or change).
const NOT_REPEATS: &[(&str, &str)] = &[
    (
        "I am allergic to peanuts",
        "I am no longer allergic to peanuts",
    ),
    ("I am allergic to peanuts", "I am not allergic to peanuts"),
    (
        "I am allergic to peanuts",
        "I'm not allergic to peanuts any more",
    ),
    ("I eat meat", "I don't eat meat"),
    ("I eat meat", "I never eat meat"),
    ("I smoke", "I quit smoking"),
    ("I smoke", "I stopped smoking"),
    ("Works as a nurse", "Used to work as a nurse"),
    ("Works as a nurse", "Former nurse"),
    ("Lives in Lisbon", "No longer lives in Lisbon"),
    ("Lives in Lisbon", "Lives in Berlin"),
    ("Lives in Lisbon", "Moved from Lisbon to Berlin"),
    ("Has a dog", "Has no dog"),
    ("Has a dog", "Lost the dog"),
    ("Has a dog", "Has a cat"),
    ("Is married", "Is not married"),
    ("Is married", "Is divorced"),
    ("Drives a Skoda Octavia", "Sold the Skoda Octavia"),
    ("Drives a Skoda Octavia", "Drives a Kia Niro"),
    ("Plays curling", "Gave up curling"),
    ("Plays curling", "Plays judo"),
    ("Likes coffee", "Doesn't like coffee"),
    ("Likes coffee", "Likes tea"),
    ("Can swim", "Cannot swim"),
    ("Can swim", "Can't swim"),
    ("Is vegetarian", "Is not vegetarian"),
    ("Is vegetarian", "Is vegan"),
    ("Speaks French", "Doesn't speak French"),
    ("Speaks French", "Speaks German"),
    ("Works from home", "No longer works from home"),
    ("Works from home", "Works from the office"),
    ("Has two children", "Has three children"),
    ("Has two children", "Has no children"),
    ("Is 34 years old", "Is 35 years old"),
    ("Takes insulin", "Stopped taking insulin"),
    ("Takes insulin", "Does not take insulin"),
    ("Owns a house", "Doesn't own a house"),
    ("Owns a house", "Rents a flat"),
    ("Is a student", "Is not a student anymore"),
    ("Is a student", "Is a teacher"),
    ("Prefers window seats", "Prefers aisle seats"),
    ("Prefers window seats", "Never wants window seats"),
    ("Uses Vim", "Uses Emacs"),
    ("Uses Vim", "Quit using Vim"),
    ("Drinks alcohol", "Doesn't drink alcohol"),
    ("Drinks alcohol", "Drinks no alcohol"),
    ("Runs marathons", "Ran marathons formerly"),
    ("Is on the night shift", "Is on the day shift"),
    ("Supports Benfica", "Supports Porto"),
    ("Is allergic to cats", "Is allergic to dogs"),
    ("Has diabetes", "Has no diabetes"),
    ("Works at Google", "Left Google"),
    ("Works at Google", "Works at Meta"),
    ("The meeting is on Monday", "The meeting is on Tuesday"),
];

/// The same fact in other function words, order, case or number.
const REPEATS: &[(&str, &str)] = &[
    ("The user lives in Lisbon", "I live in Lisbon"),
    ("Lives in Lisbon", "lives in lisbon now!"),
    (
        "I am allergic to peanuts",
        "The user is allergic to peanuts, please remember that",
    ),
    ("Has a dog named Rex", "has a dog named rex"),
    ("Prefers metric units", "The user prefers metric units"),
];

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
