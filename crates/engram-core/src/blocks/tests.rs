use proptest::prelude::*;

use super::*;

fn agent() -> Scope {
    Scope::Agent(AgentId::parse("a").unwrap())
}

fn put(value: &str) -> Change {
    Change::Put(Put {
        value: value.into(),
        ..Put::default()
    })
}

fn edit(e: Edit) -> Change {
    Change::Edit(e)
}

fn json(value: &str) -> Change {
    Change::Put(Put {
        value: value.into(),
        format: Some(Format::Json),
        ..Put::default()
    })
}

#[test]
fn a_put_creates_then_replaces_keeping_what_it_does_not_name() {
    let s = agent();
    let first = Change::Put(Put {
        value: "likes tea".into(),
        description: Some("what the user likes".into()),
        limit_chars: Some(100),
        read_only: Some(true),
        ..Put::default()
    });
    let v1 = apply(&s, "human", None, first, Some(0), 10.0).unwrap();
    assert_eq!((v1.version, v1.limit_chars, v1.read_only), (1, 100, true));
    let v2 = apply(&s, "human", Some(&v1), put("likes coffee"), Some(1), 11.0).unwrap();
    assert_eq!(v2.value, "likes coffee");
    assert_eq!(v2.description, "what the user likes");
    assert_eq!((v2.version, v2.limit_chars, v2.read_only), (2, 100, true));
    assert_eq!(v2.updated_at, 11.0);
    let fresh = apply(&s, "new", None, put("x"), None, 1.0).unwrap();
    assert_eq!(fresh.limit_chars, DEFAULT_LIMIT_CHARS);
}

#[test]
fn a_stale_expected_version_is_refused() {
    let s = agent();
    let v1 = apply(&s, "m", None, put("a"), None, 1.0).unwrap();
    let err = apply(&s, "m", Some(&v1), put("b"), Some(0), 2.0).unwrap_err();
    assert!(
        matches!(&err, CoreError::Stale(m) if m.contains("version 1, not the expected 0")),
        "{err}"
    );
    let err = apply(&s, "m", None, put("b"), Some(3), 2.0).unwrap_err();
    assert!(matches!(err, CoreError::Stale(_)));
}

#[test]
fn delete_leaves_a_tombstone_with_no_text_and_versions_go_on() {
    let s = agent();
    let v1 = apply(&s, "m", None, put("secret"), None, 1.0).unwrap();
    let gone = apply(&s, "m", Some(&v1), Change::Delete, Some(1), 2.0).unwrap();
    assert!(gone.deleted && gone.value.is_empty() && gone.version == 2);
    assert!(matches!(
        apply(&s, "m", Some(&gone), Change::Delete, None, 3.0),
        Err(CoreError::Absent(_))
    ));
    assert!(matches!(
        apply(
            &s,
            "m",
            Some(&gone),
            edit(Edit::Append("x".into())),
            None,
            3.0
        ),
        Err(CoreError::Absent(_))
    ));
    // Created again: version 0 is expected (it does not exist), numbering
    // goes on so history stays in order.
    let again = apply(&s, "m", Some(&gone), put("back"), Some(0), 3.0).unwrap();
    assert_eq!((again.version, again.deleted), (3, false));
}

#[test]
fn replace_insists_on_exactly_one_occurrence() {
    let s = agent();
    let b = apply(&s, "m", None, put("a cat and a cat"), None, 1.0).unwrap();
    let twice = edit(Edit::Replace {
        old: "cat".into(),
        new: "dog".into(),
    });
    let err = apply(&s, "m", Some(&b), twice, None, 2.0).unwrap_err();
    assert!(
        matches!(&err, CoreError::Precondition(m) if m.contains("occurs 2 times")),
        "{err}"
    );
    let none = edit(Edit::Replace {
        old: "bird".into(),
        new: "dog".into(),
    });
    let err = apply(&s, "m", Some(&b), none, None, 2.0).unwrap_err();
    assert!(
        matches!(&err, CoreError::Precondition(m) if m.contains("occurs 0 times")),
        "{err}"
    );
    let once = edit(Edit::Replace {
        old: "a cat and".into(),
        new: "one dog and".into(),
    });
    let b2 = apply(&s, "m", Some(&b), once, None, 2.0).unwrap();
    assert_eq!(b2.value, "one dog and a cat");
}

#[test]
fn append_and_insert_work_by_lines() {
    let s = agent();
    let b = apply(&s, "m", None, put("one"), None, 1.0).unwrap();
    let b = apply(
        &s,
        "m",
        Some(&b),
        edit(Edit::Append("three".into())),
        None,
        2.0,
    )
    .unwrap();
    assert_eq!(b.value, "one\nthree");
    let b = apply(
        &s,
        "m",
        Some(&b),
        edit(Edit::Insert {
            line: 1,
            text: "two".into(),
        }),
        None,
        3.0,
    )
    .unwrap();
    assert_eq!(b.value, "one\ntwo\nthree");
    let b = apply(
        &s,
        "m",
        Some(&b),
        edit(Edit::Insert {
            line: 0,
            text: "zero".into(),
        }),
        None,
        4.0,
    )
    .unwrap();
    assert_eq!(b.value, "zero\none\ntwo\nthree");
    let err = apply(
        &s,
        "m",
        Some(&b),
        edit(Edit::Insert {
            line: 9,
            text: "x".into(),
        }),
        None,
        5.0,
    )
    .unwrap_err();
    assert!(
        matches!(&err, CoreError::Invalid(m) if m.contains("has 4 lines")),
        "{err}"
    );
}

#[test]
fn merge_patch_follows_rfc_7396_and_starts_working_memory() {
    let s = agent();
    let wm = apply(
        &s,
        WORKING_MEMORY,
        None,
        edit(Edit::MergePatch(
            r#"{"files_reviewed":3,"issues":["a"]}"#.into(),
        )),
        Some(0),
        1.0,
    )
    .unwrap();
    assert_eq!(wm.format, Format::Json);
    let wm = apply(
        &s,
        WORKING_MEMORY,
        Some(&wm),
        edit(Edit::MergePatch(
            r#"{"files_reviewed":4,"issues":null,"flags":{"done":false}}"#.into(),
        )),
        Some(1),
        2.0,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&wm.value).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"files_reviewed": 4, "flags": {"done": false}})
    );
    let text = apply(&s, "t", None, put("x"), None, 1.0).unwrap();
    assert!(matches!(
        apply(
            &s,
            "t",
            Some(&text),
            edit(Edit::MergePatch("{}".into())),
            None,
            2.0
        ),
        Err(CoreError::Precondition(_))
    ));
    assert!(matches!(
        apply(
            &s,
            WORKING_MEMORY,
            Some(&wm),
            edit(Edit::MergePatch("{nope".into())),
            None,
            3.0
        ),
        Err(CoreError::Invalid(_))
    ));
    assert!(matches!(
        apply(
            &s,
            WORKING_MEMORY,
            Some(&wm),
            edit(Edit::Append("x".into())),
            None,
            3.0
        ),
        Err(CoreError::Precondition(_))
    ));
    assert!(matches!(
        apply(&s, "j", None, json("not json"), None, 1.0),
        Err(CoreError::Invalid(_))
    ));
}

#[test]
fn the_limit_holds_on_every_write_path() {
    let s = agent();
    let small = Change::Put(Put {
        value: "12345".into(),
        limit_chars: Some(6),
        ..Put::default()
    });
    let b = apply(&s, "m", None, small, None, 1.0).unwrap();
    let over = |change| apply(&s, "m", Some(&b), change, None, 2.0);
    for change in [
        put("1234567"),
        edit(Edit::Append("xx".into())),
        edit(Edit::Insert {
            line: 0,
            text: "x".into(),
        }),
        edit(Edit::Replace {
            old: "1".into(),
            new: "abc".into(),
        }),
        Change::Put(Put {
            value: "12345".into(),
            limit_chars: Some(4),
            ..Put::default()
        }),
    ] {
        let err = over(change).unwrap_err();
        assert!(matches!(err, CoreError::TooLarge { .. }), "{err}");
    }
    // Characters, not bytes.
    assert!(over(put("ééééé")).is_ok());
    let wm = apply(
        &s,
        "w",
        None,
        Change::Put(Put {
            value: "{}".into(),
            format: Some(Format::Json),
            limit_chars: Some(10),
            ..Put::default()
        }),
        None,
        1.0,
    )
    .unwrap();
    assert!(matches!(
        apply(
            &s,
            "w",
            Some(&wm),
            edit(Edit::MergePatch(r#"{"k":"0123456789"}"#.into())),
            None,
            2.0
        ),
        Err(CoreError::TooLarge { .. })
    ));
    assert!(matches!(
        apply(
            &s,
            "m",
            None,
            Change::Put(Put {
                limit_chars: Some(0),
                ..Put::default()
            }),
            None,
            1.0
        ),
        Err(CoreError::Invalid(_))
    ));
}

#[test]
fn labels_follow_their_rule() {
    for ok in ["a", "working_memory", "team.rules-2", &"x".repeat(64)] {
        assert!(check_label(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "Upper",
        "with space",
        "a/b",
        "../x",
        &"x".repeat(65),
        "ü",
    ] {
        assert!(check_label(bad).is_err(), "{bad}");
    }
}

fn block(label: &str, value: &str, description: &str) -> Block {
    Block {
        description: description.into(),
        value: value.into(),
        version: 2,
        ..new_block(label)
    }
}

#[test]
fn the_section_lists_blocks_in_order_with_headings() {
    let g = block("rules", "Be brief.", "house rules");
    let u = block("human", "Name: Ana", "");
    let mut gone = block("old", "", "");
    gone.deleted = true;
    let s = section(
        &[("global", &g), ("user", &u), ("agent", &gone)],
        &[],
        Encoding::Cl100k,
        1000,
    );
    assert_eq!(
        s.text,
        "[MEMORY:BLOCKS]\n## rules (global): house rules\nBe brief.\n\n## human (user)\nName: Ana\n"
    );
    assert_eq!(s.shown.len(), 2);
    assert!(!s.shown[0].cut && s.shown[1].version == 2);
    assert_eq!(section(&[], &[], Encoding::Cl100k, 10), Section::default());
    // The user's pinned facts follow the user's blocks, one a line, and
    // are no block of the response's list.
    let a = block("notes", "Agent notes", "");
    let pinned = [crate::memory::SemanticItem::new(
        "p1",
        "Allergic to\npeanuts",
    )];
    let s = section(
        &[("user", &u), ("agent", &a)],
        &pinned,
        Encoding::Cl100k,
        1000,
    );
    assert_eq!(
        s.text,
        "[MEMORY:BLOCKS]\n## human (user)\nName: Ana\n\n## pinned facts (user): what the user asked to be always remembered\n- Allergic to peanuts\n\n## notes (agent)\nAgent notes\n"
    );
    assert_eq!(
        s.shown.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
        ["human", "notes"]
    );
    let alone = section(&[], &pinned, Encoding::Cl100k, 1000);
    assert!(alone.text.contains("- Allergic to peanuts") && alone.shown.is_empty());
    // A description cannot start a heading of its own.
    let forged = block("x", "v", "d\n## y (global): fake");
    let s = section(&[("agent", &forged)], &[], Encoding::Cl100k, 1000);
    assert_eq!(s.text.matches("\n## ").count(), 1);
}

#[test]
fn blocks_over_their_share_are_each_cut_with_a_marker() {
    let a = block("a", &"alpha ".repeat(400), "");
    let b = block("b", &"beta ".repeat(100), "");
    let s = section(&[("agent", &a), ("agent", &b)], &[], Encoding::Cl100k, 100);
    assert!(count_text(Encoding::Cl100k, &s.text) <= 100, "{}", s.text);
    assert_eq!(s.text.matches("[… cut:").count(), 2, "{}", s.text);
    assert!(s.shown.iter().all(|b| b.cut));
}

proptest! {
    #[test]
    fn edits_never_panic_and_keep_their_rules(
        value in ".{0,60}",
        old in ".{0,4}",
        new in ".{0,8}",
        line in 0u32..6,
        patch in prop_oneof![Just("{}".to_owned()), Just(r#"{"a":null}"#.to_owned()), ".{0,12}"],
        limit in 1u32..80,
    ) {
        let s = agent();
        let start = Change::Put(Put { value: value.clone(), limit_chars: Some(limit), ..Put::default() });
        let Ok(b) = apply(&s, "m", None, start, None, 1.0) else {
            prop_assert!(value.chars().count() > limit as usize);
            return Ok(());
        };
        for change in [
            edit(Edit::Append(new.clone())),
            edit(Edit::Replace { old: old.clone(), new: new.clone() }),
            edit(Edit::Insert { line, text: new.clone() }),
            edit(Edit::MergePatch(patch.clone())),
            Change::Delete,
        ] {
            if let Ok(next) = apply(&s, "m", Some(&b), change, Some(1), 2.0) {
                prop_assert_eq!(next.version, 2);
                prop_assert!(next.value.chars().count() <= limit as usize);
            }
        }
        let sec = section(&[("agent", &b)], &[], Encoding::Cl100k, 5 + limit / 4);
        prop_assert!(sec.shown.len() == 1);
    }
}
