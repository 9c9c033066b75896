use super::*;

fn item(id: &str, fact: &str) -> SemanticItem {
    SemanticItem {
        turn_ids: vec!["turn_0001".into()],
        ..SemanticItem::new(id, fact)
    }
}

fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("u{n}")
    }
}

/// Folds `items` of `agent` into `known`, returning the store after.
fn apply(
    known: &[UserFact],
    agent: &str,
    items: &[SemanticItem],
    next: &mut impl FnMut() -> String,
) -> Vec<UserFact> {
    let folded = fold(known, agent, items, next);
    let mut all = known.to_vec();
    for f in folded.changed {
        match all.iter_mut().find(|k| k.fact.id == f.fact.id) {
            Some(k) => *k = f,
            None => all.push(f),
        }
    }
    all
}

#[test]
fn the_same_fact_from_two_conversations_is_one_with_two_sources() {
    let mut next = ids();
    let store = apply(
        &[],
        "chat-1",
        &[item("a1", "The user lives in Lisbon")],
        &mut next,
    );
    let store = apply(
        &store,
        "chat-2",
        &[item("b1", "the user lives in lisbon.")],
        &mut next,
    );
    assert_eq!(store.len(), 1);
    let sources: Vec<_> = store[0]
        .sources
        .iter()
        .map(|s| (s.agent_id.as_str(), s.fact_id.as_str()))
        .collect();
    assert_eq!(sources, [("chat-1", "a1"), ("chat-2", "b1")]);
    assert_eq!(store[0].sources[1].turn_ids, ["turn_0001"]);
}

#[test]
fn a_changed_fact_supersedes_the_other_conversations() {
    let mut next = ids();
    let store = apply(
        &[],
        "chat-1",
        &[item("a1", "The user lives in Lisbon Portugal")],
        &mut next,
    );
    let store = apply(
        &store,
        "chat-2",
        &[item("b1", "The user lives in Porto Portugal")],
        &mut next,
    );
    assert_eq!(store.len(), 2);
    assert_eq!(
        store[0].fact.superseded_by.as_deref(),
        Some(store[1].fact.id.as_str())
    );
    assert!(store[1].is_live() && store[1].fact.fact.contains("Porto"));
}

#[test]
fn an_agents_own_update_supersedes_what_it_folded_before() {
    let mut next = ids();
    let store = apply(
        &[],
        "chat-1",
        &[item("a1", "Budget is 100 euros")],
        &mut next,
    );
    let mut old = item("a1", "Budget is 100 euros");
    old.superseded_by = Some("a2".into());
    let store = apply(
        &store,
        "chat-1",
        &[old, item("a2", "Spending cap raised to 500")],
        &mut next,
    );
    assert_eq!(store.len(), 2);
    assert!(!store[0].is_live() && store[1].is_live());
}

#[test]
fn folding_again_changes_nothing() {
    let mut next = ids();
    let items = [item("a1", "Likes tea"), item("a2", "Has a dog named Rex")];
    let store = apply(&[], "chat-1", &items, &mut next);
    let again = fold(&store, "chat-1", &items, &mut next);
    assert_eq!(again, Folded::default());
    let unrelated = fold(
        &store,
        "chat-2",
        &[item("b1", "Plays the cello")],
        &mut next,
    );
    assert_eq!(
        (unrelated.added, unrelated.merged, unrelated.superseded),
        (1, 0, 0)
    );
    assert_eq!(unrelated.changed.len(), 1);
}

#[test]
fn a_fold_never_supersedes_a_fact_a_client_pinned() {
    let mut next = ids();
    let store = apply(
        &[],
        "chat-1",
        &[item("a1", "The user lives in Lisbon Portugal")],
        &mut next,
    );
    let (_, lines) = change(
        &store,
        Op::Update {
            id: store[0].fact.id.clone(),
            change: facts::Change {
                pinned: Some(true),
                ..Default::default()
            },
        },
        5.0,
        &mut next,
    )
    .unwrap();
    let store = vec![lines[0].clone()];
    let folded = fold(
        &store,
        "chat-2",
        &[item("b1", "The user lives in Porto Portugal")],
        &mut next,
    );
    assert_eq!(folded.superseded, 0);
    assert_eq!(folded.added, 1);
    assert!(folded.changed.iter().all(|f| f.is_live()));
}

#[test]
fn a_clients_change_keeps_the_sources_and_a_delete_is_never_folded_again() {
    let mut next = ids();
    let store = apply(
        &[],
        "chat-1",
        &[item("a1", "The user likes tea")],
        &mut next,
    );
    let id = store[0].fact.id.clone();
    let (applied, lines) = change(
        &store,
        Op::Delete {
            id: id.clone(),
            expected_version: 0,
        },
        9.0,
        &mut next,
    )
    .unwrap();
    assert_eq!(applied.erase.as_deref(), Some(id.as_str()));
    assert_eq!(lines[0].fact.fact, "");
    assert_eq!(lines[0].sources, store[0].sources);
    let again = fold(
        &lines,
        "chat-1",
        &[item("a1", "The user likes tea")],
        &mut next,
    );
    assert_eq!(again, Folded::default());
    let (added, lines) = change(
        &lines,
        Op::Add(vec![facts::NewFact {
            text: "Works at a bakery".into(),
            ..Default::default()
        }]),
        10.0,
        &mut next,
    )
    .unwrap();
    assert!(lines[0].sources.is_empty());
    assert_eq!(added.lines[0].managed.origin, crate::memory::Origin::Client);
}

#[test]
fn history_keeps_the_last_line_of_each_version() {
    let mut one = item("u1", "Likes tea");
    one.managed.version = 1;
    let with_source = UserFact {
        fact: one.clone(),
        sources: vec![],
    };
    let mut two = one.clone();
    two.managed.version = 2;
    two.fact = "Likes green tea".into();
    let mut later = with_source.clone();
    later.fact.tags = vec!["drinks".into()];
    let lines = vec![
        with_source,
        later.clone(),
        UserFact {
            fact: two.clone(),
            sources: vec![],
        },
    ];
    assert_eq!(history(lines, "u1"), vec![later.fact, two]);
}

proptest::proptest! {
    /// Whatever the facts, every live agent fact is a source of
    /// exactly one user fact, and a second fold changes nothing.
    #[test]
    fn every_fact_is_folded_once(
        said in proptest::collection::vec(("[a-c]", proptest::collection::vec("(tea|dog|lisbon|porto|the|user|likes|lives|in)", 1..6)), 0..20)
    ) {
        let mut next = ids();
        let mut store = vec![];
        for (n, (agent, words)) in said.iter().enumerate() {
            let items = [item(&format!("f{n}"), &words.join(" "))];
            store = apply(&store, agent, &items, &mut next);
        }
        for (n, (agent, _)) in said.iter().enumerate() {
            let id = format!("f{n}");
            let homes = store
                .iter()
                .filter(|f| f.sources.iter().any(|s| s.agent_id == *agent && s.fact_id == id))
                .count();
            proptest::prop_assert_eq!(homes, 1);
            let again = fold(&store, agent, &[item(&id, "anything")], &mut next);
            proptest::prop_assert_eq!(again, Folded::default());
        }
    }
}

#[test]
fn the_user_fact_a_summarizer_named_is_replaced_or_ended_by_the_fold() {
    let mut next = ids();
    let store = apply(
        &[],
        "chat-1",
        &[
            item("a1", "Lives in Lisbon"),
            item("a2", "Allergic to peanuts"),
        ],
        &mut next,
    );
    let (lisbon, peanuts) = (store[0].fact.id.clone(), store[1].fact.id.clone());
    // Conversation 2's summarizer was shown them and answered by handle:
    // other words, no overlap to guess from.
    let mut berlin = item("b1", "Moved to Berlin last month");
    berlin.replaces = Some(lisbon.clone());
    let mut ended = item("b2", "Allergic to peanuts");
    ended.replaces = Some(peanuts.clone());
    ended.invalid_at = Some(50.0);
    let items = [berlin, ended];
    let folded = fold(&store, "chat-2", &items, &mut next);
    assert_eq!(
        (folded.added, folded.superseded, folded.invalidated),
        (1, 1, 1)
    );
    let store = apply(&store, "chat-2", &items, &mut next);
    let by_id = |id: &str| store.iter().find(|f| f.fact.id == id).unwrap();
    let new = store
        .iter()
        .find(|f| f.fact.fact.starts_with("Moved"))
        .unwrap();
    assert_eq!(
        by_id(&lisbon).fact.superseded_by.as_ref(),
        Some(&new.fact.id)
    );
    assert_eq!(
        new.fact.replaces, None,
        "the user's own fact points nowhere"
    );
    assert_eq!(by_id(&peanuts).fact.invalid_at, Some(50.0));
    assert!(!by_id(&peanuts).is_live());
    let again = fold(&store, "chat-2", &items, &mut next);
    assert!(again.changed.is_empty(), "folding again changes nothing");
}

#[test]
fn facts_drawn_without_an_llm_never_replace_by_guesswork_but_repeats_merge() {
    let mut next = ids();
    let store = apply(
        &[],
        "chat-1",
        &[item("a1", "I work as a nurse in Lisbon")],
        &mut next,
    );
    let mut porto = item("b1", "I work as a nurse in Porto");
    porto.tags = vec![EXTRACTIVE_TAG.into()];
    let mut again = item("b2", "The user works as a nurse in Lisbon now");
    again.tags = vec![EXTRACTIVE_TAG.into()];
    let folded = fold(&store, "chat-2", &[porto, again], &mut next);
    assert_eq!((folded.added, folded.merged, folded.superseded), (1, 1, 0));
}
