use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn new(text: &str) -> NewFact {
    NewFact {
        text: text.into(),
        ..NewFact::default()
    }
}

fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("f{n}")
    }
}

#[test]
fn the_same_words_merge_into_the_fact_there() {
    let mut next = ids();
    let (first, how) = add(&[], new("Lives in Berlin"), 1.0, &mut next).unwrap();
    assert_eq!(
        (how, first.id.as_str(), first.version()),
        (Added::Added, "f1", 1)
    );
    assert_eq!(first.managed.origin, Origin::Client);
    let again = NewFact {
        tags: vec!["home".into()],
        pinned: true,
        ..new("  lives in   BERLIN ")
    };
    let (merged, how) = add(std::slice::from_ref(&first), again, 2.0, &mut next).unwrap();
    assert_eq!(how, Added::Merged);
    assert_eq!((merged.id.as_str(), merged.version()), ("f1", 2));
    assert_eq!(merged.fact, "Lives in Berlin", "the text stays the first's");
    assert_eq!(
        (merged.tags.clone(), merged.managed.pinned),
        (vec!["home".to_string()], true)
    );
    // A superseded fact with those words is not merged into.
    let mut old = first.clone();
    old.superseded_by = Some("f9".into());
    let (fresh, how) = add(&[old], new("Lives in Berlin"), 3.0, &mut next).unwrap();
    assert_eq!((how, fresh.id.as_str()), (Added::Added, "f2"));
}

#[test]
fn updates_are_versions_checked_against_the_expected_one() {
    let (fact, _) = add(&[], new("Works at Acme"), 1.0, ids()).unwrap();
    let facts = vec![fact];
    let change = Change {
        text: Some("Works at Globex".into()),
        expected_version: 1,
        ..Change::default()
    };
    let current = changeable(&facts, "f1", 1).unwrap();
    let v2 = update(current, change, 2.0).unwrap();
    assert_eq!(
        (v2.fact.as_str(), v2.version(), v2.ts),
        ("Works at Globex", 2, 2.0)
    );
    let stale = changeable(std::slice::from_ref(&v2), "f1", 1).unwrap_err();
    assert!(matches!(stale, CoreError::Stale(_)), "{stale:?}");
    assert!(matches!(
        changeable(&[v2], "nope", 0),
        Err(CoreError::Absent(_))
    ));
}

#[test]
fn a_deleted_fact_keeps_no_text_and_cannot_be_changed() {
    let (fact, _) = add(
        &[],
        NewFact {
            tags: vec!["secret".into()],
            metadata: BTreeMap::from([("k".to_string(), "secret".to_string())]),
            ..new("The code is 4711")
        },
        1.0,
        ids(),
    )
    .unwrap();
    let gone = tombstone(&fact, 5.0);
    let line = serde_json::to_string(&gone).unwrap();
    assert!(!line.contains("4711") && !line.contains("secret"), "{line}");
    assert_eq!((gone.version(), gone.managed.deleted_at), (2, Some(5.0)));
    assert!(!gone.is_live());
    let old = serde_json::to_string(&scrubbed(&fact)).unwrap();
    assert!(!old.contains("4711") && !old.contains("secret"), "{old}");
    assert!(matches!(
        changeable(&[gone], "f1", 0),
        Err(CoreError::Absent(_))
    ));
}

#[test]
fn pinned_facts_are_always_shown_and_never_expire() {
    let mut next = ids();
    let mut facts = vec![];
    for (text, pinned, expires) in [
        ("a pinned fact", true, Some(10.0)),
        ("an expiring fact", false, Some(10.0)),
        ("a lasting fact", false, None),
    ] {
        let nf = NewFact {
            pinned,
            expires_at: expires,
            ..new(text)
        };
        facts.push(add(&facts, nf, 1.0, &mut next).unwrap().0);
    }
    assert_eq!(facts[0].managed.expires_at, None, "a pin drops the expiry");
    let texts = |now: f64, n: usize| -> Vec<String> {
        shown(&facts, n, now).into_iter().map(|f| f.fact).collect()
    };
    assert_eq!(
        texts(5.0, 9),
        // Then by salience, the latest first among equals.
        ["a pinned fact", "a lasting fact", "an expiring fact"]
    );
    assert_eq!(texts(10.0, 9), ["a pinned fact", "a lasting fact"]);
    // The limit is on the others: a pinned fact is never cut.
    assert_eq!(texts(5.0, 0), ["a pinned fact"]);
    assert_eq!(next_expiry(&facts, 5.0), Some(10.0));
    assert_eq!(next_expiry(&facts, 10.0), None);
}

#[test]
fn bad_fields_are_refused() {
    let refused = |nf: NewFact| add(&[], nf, 1.0, ids()).unwrap_err();
    assert!(matches!(refused(new("   ")), CoreError::Invalid(_)));
    assert!(matches!(refused(new("!!! ???")), CoreError::Invalid(_)));
    assert!(matches!(
        refused(new(&"x".repeat(MAX_FACT_CHARS + 1))),
        CoreError::Invalid(_)
    ));
    for at in [f64::NAN, -1.0, f64::INFINITY] {
        let nf = NewFact {
            expires_at: Some(at),
            ..new("fine")
        };
        assert!(matches!(refused(nf), CoreError::Invalid(_)));
    }
    let nf = NewFact {
        tags: vec![String::new()],
        ..new("fine")
    };
    assert!(matches!(refused(nf), CoreError::Invalid(_)));
}

proptest! {
    /// Whatever is added and updated, a fact's versions only go up by one,
    /// and an add never makes two live facts with the same words.
    #[test]
    fn versions_step_by_one_and_words_stay_unique(
        ops in prop::collection::vec((0usize..6, any::<bool>()), 1..40)
    ) {
        const TEXTS: [&str; 6] = ["a b", "A  b", "c", "d e", "c!", "f"];
        let mut facts: Vec<SemanticItem> = vec![];
        let mut n = 0;
        for (i, pin) in ops {
            let nf = NewFact { pinned: pin, ..new(TEXTS[i]) };
            let (line, _) = add(&facts, nf, 1.0, || { n += 1; format!("f{n}") }).unwrap();
            match facts.iter_mut().find(|f| f.id == line.id) {
                Some(old) => {
                    prop_assert_eq!(line.version(), old.version() + 1);
                    *old = line;
                }
                None => facts.push(line),
            }
        }
        let mut words: Vec<String> = facts.iter().map(|f| normalize(&f.fact)).collect();
        let all = words.len();
        words.sort();
        words.dedup();
        prop_assert_eq!(words.len(), all);
    }
}
