//! Consolidating a user's facts across conversations: a plan carried out
//! against the facts as they are, logged in one piece with it.

use engram_core::memory::SemanticItem;
use engram_core::users::consolidate::{ConsolidationRecord, Counts, Merge, Plan, Replace};
use engram_core::{NewEvent, UserId};

use super::{Harness, id};
use crate::prelude::*;

fn said(fact_id: &str, text: &str, at: f64) -> SemanticItem {
    SemanticItem {
        turn_ids: vec!["turn_0001".into()],
        valid_from: Some(at),
        ..SemanticItem::new(fact_id, text)
    }
}

/// A merge and a replacement applied once (what is stale refused),
/// numbered in the user's log, whole across a restart; a fold of the
/// same conversation again changes nothing; erasing the user takes the
/// log with it.
pub async fn a_users_facts_are_consolidated_and_logged<H: Harness>(h: &H) {
    let store = h.open().await;
    let ana = UserId::parse("sleep-ana").unwrap();
    for agent in ["s-1", "s-2"] {
        store
            .ingest(&id(agent), &[NewEvent::user("hi")], None, None, Some(&ana))
            .await
            .unwrap();
    }
    let first = [
        said("a1", "Allergic to peanuts", 100.0),
        said("a2", "Lives in Lisbon", 100.0),
    ];
    let second = [
        said("b1", "Has a peanut allergy, remember that", 200.0),
        said("b2", "Moved to Berlin this spring", 300.0),
    ];
    store
        .fold_into_user(&ana, &id("s-1"), &first, &[])
        .await
        .unwrap();
    store
        .fold_into_user(&ana, &id("s-2"), &second, &[])
        .await
        .unwrap();
    let facts = store.user_facts(&ana).await.unwrap();
    assert_eq!(facts.iter().filter(|f| f.is_live()).count(), 4);
    let of = |text: &str| {
        facts
            .iter()
            .find(|f| f.fact.fact == text)
            .map(|f| f.fact.id.clone())
            .unwrap()
    };
    let (allergic, allergy) = (of("Allergic to peanuts"), of(&second[0].fact));
    let (lisbon, berlin) = (of("Lives in Lisbon"), of(&second[1].fact));
    let plan = Plan {
        merges: vec![Merge {
            keep: allergic.clone(),
            dup: allergy.clone(),
        }],
        replaces: vec![
            Replace {
                old: lisbon.clone(),
                new: berlin.clone(),
            },
            // Backwards in time: refused.
            Replace {
                old: berlin.clone(),
                new: allergic.clone(),
            },
        ],
        invalidates: vec![("no-such-fact".into(), 500.0)],
    };
    let record = ConsolidationRecord {
        at: 1000.0,
        trigger: "request".into(),
        asked: 1,
        summarizer: "test".into(),
        ..ConsolidationRecord::default()
    };
    let (done, logged) = store
        .consolidate_user(&ana, &plan, record.clone())
        .await
        .unwrap();
    let counts = Counts {
        merged: 1,
        replaced: 1,
        invalidated: 0,
        unchanged: 2,
    };
    assert_eq!(done.counts, counts);
    assert_eq!((logged.seq, logged.counts), (1, counts));
    assert_eq!(
        logged.done.replaces.len(),
        1,
        "the refused step is not logged"
    );
    let (again, second_run) = store.consolidate_user(&ana, &plan, record).await.unwrap();
    assert!(again.changed.is_empty(), "nothing left to do: {again:?}");
    assert_eq!((second_run.seq, second_run.counts.unchanged), (2, 2));

    let store = h.reopen(store).await;
    let facts = store.user_facts(&ana).await.unwrap();
    let find = |id: &str| facts.iter().find(|f| f.fact.id == id).unwrap();
    let keep = find(&allergic);
    assert!(keep.is_live());
    let agents: Vec<&str> = keep.sources.iter().map(|s| s.agent_id.as_str()).collect();
    assert_eq!(agents, ["s-1", "s-2"], "every source kept");
    assert_eq!(
        find(&allergy).fact.superseded_by.as_deref(),
        Some(allergic.as_str())
    );
    let old = find(&lisbon);
    assert_eq!(old.fact.superseded_by.as_deref(), Some(berlin.as_str()));
    assert_eq!(old.fact.invalid_at, Some(300.0));
    assert!(find(&berlin).is_live());
    let log = store.consolidations(&ana, 10).await.unwrap();
    let seqs: Vec<u64> = log.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [2, 1], "newest first");
    assert_eq!(log[1].summarizer, "test");
    // The conversation folded again: its facts are known, moved or not.
    let folded = store
        .fold_into_user(&ana, &id("s-2"), &second, &[])
        .await
        .unwrap();
    assert!(folded.changed.is_empty(), "{folded:?}");

    store.delete_user(&ana).await.unwrap();
    assert!(store.consolidations(&ana, 10).await.unwrap().is_empty());
    let nobody = UserId::parse("sleep-nobody").unwrap();
    assert!(store.consolidations(&nobody, 10).await.unwrap().is_empty());
}

/// A fact one conversation said and another's replaced in the user's
/// memory stays in the user's search, read as replaced (its span ends
/// when the new one began); the new one reads as current.
pub async fn a_replaced_fact_is_found_as_replaced<H: Harness>(h: &H) {
    let store = h.open().await;
    let ana = UserId::parse("span-ana").unwrap();
    let before = crate::unix_now();
    let mut between = before;
    for (agent, fact) in [
        ("span-1", "The user lives in Lisbon Portugal"),
        ("span-2", "The user lives in Porto Portugal"),
    ] {
        let a = id(agent);
        for text in ["We talked about home", "more talk", "and more"] {
            store
                .ingest(&a, &[NewEvent::user(text)], None, None, Some(&ana))
                .await
                .unwrap();
        }
        super::users::compact_and_fold(&*store, &a, &ana, "Talked about home.", fact).await;
        if agent == "span-1" {
            between = crate::unix_now();
        }
    }
    let query = crate::MemoryQuery {
        query: "lives Portugal".into(),
        limit: 10,
        neighbours: 0,
        wait_for_index: None,
        archived_only: false,
        episodic: 0,
        semantic: 5,
        as_of: None,
    };
    let ranked = |as_of: Option<f64>| {
        let query = crate::MemoryQuery {
            as_of,
            ..query.clone()
        };
        let store = &store;
        let ana = &ana;
        async move {
            let found = store.rank_user_memories(ana, &query, None).await.unwrap();
            let facts: Vec<(String, bool)> = found
                .memories
                .iter()
                .filter_map(|m| match &m.memory {
                    crate::Memory::Semantic(f) => Some((f.fact.clone(), f.is_live())),
                    _ => None,
                })
                .collect();
            let semantic: Vec<String> = found.semantic.iter().map(|f| f.fact.clone()).collect();
            (facts, semantic)
        }
    };
    // As of a time, only what was true then: Lisbon between the two
    // conversations (replaced since), nothing before them.
    let (then, semantic) = ranked(Some(between)).await;
    assert_eq!(
        then,
        [("The user lives in Lisbon Portugal".to_owned(), false)],
        "as of between the conversations"
    );
    assert_eq!(semantic, ["The user lives in Lisbon Portugal"]);
    assert_eq!(ranked(Some(before - 1.0)).await, (vec![], vec![]));
    let (facts, _) = ranked(None).await;
    assert!(
        facts.contains(&("The user lives in Lisbon Portugal".into(), false)),
        "the replaced one, as replaced: {facts:?}"
    );
    assert!(
        facts.contains(&("The user lives in Porto Portugal".into(), true)),
        "{facts:?}"
    );
}
