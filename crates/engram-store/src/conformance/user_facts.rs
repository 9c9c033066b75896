//! A user's facts as clients manage them: added (merged when repeated,
//! beside the facts compactions folded in), updated as versions, deleted
//! with no text left, pinned into every conversation's prompt, expiring;
//! across a restart.

use engram_core::blocks::Scope;
use engram_core::facts::{Change, NewFact, Op, Outcome};
use engram_core::{CoreError, NewEvent, UserId};

use super::facts::racing_updates;
use super::users::compact_and_fold;
use super::{Harness, conversation, id};
use crate::prelude::*;
use crate::{PrepareInput, StoreError, unix_now};

fn fact(text: &str) -> NewFact {
    NewFact {
        text: text.into(),
        ..NewFact::default()
    }
}

fn added_ids(outcomes: &[Outcome]) -> Vec<(String, u64)> {
    outcomes
        .iter()
        .map(|o| match o {
            Outcome::Added(f, _) => (f.id.clone(), f.version()),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// The facts a ranking across `user`'s conversations finds for `query`.
async fn recalled(store: &dyn crate::Store, user: &UserId, query: &str) -> Vec<String> {
    let query = crate::MemoryQuery {
        query: query.into(),
        limit: 10,
        neighbours: 0,
        wait_for_index: None,
        archived_only: false,
        episodic: 0,
        semantic: 5,
        as_of: None,
    };
    let ranked = store.rank_user_memories(user, &query, None).await.unwrap();
    ranked.semantic.into_iter().map(|f| f.fact).collect()
}

pub async fn a_users_facts_are_managed_like_an_agents<H: Harness>(h: &H) {
    let store = h.open().await;
    let ana = UserId::parse("uf-ana").unwrap();
    let scope = Scope::User(ana.clone());
    let a = id("uf-chat-1");
    store
        .ingest(&a, &[NewEvent::user("hi")], None, None, Some(&ana))
        .await
        .unwrap();
    conversation(&*store, &a, 3).await;
    // A compaction's fact is the user's too.
    compact_and_fold(&*store, &a, &ana, "Talked.", "The user plays the cello").await;
    let folded = store.facts(&scope).await.unwrap();
    assert_eq!(folded.len(), 1);
    let cello = folded[0].id.clone();

    // Added beside it; the same fact twice is one.
    let pinned = NewFact {
        pinned: true,
        ..fact("Prefers metric units")
    };
    let added = store
        .change_facts(
            &scope,
            Op::Add(vec![
                pinned,
                fact("Code word okapi-4417"),
                fact("prefers METRIC units"),
            ]),
            None,
        )
        .await
        .unwrap();
    let ids = added_ids(&added.outcomes);
    assert_eq!(ids[2], (ids[0].0.clone(), 2), "merged: {ids:?}");
    let (metric, code) = (ids[0].0.clone(), ids[1].0.clone());
    let listed: Vec<String> = store
        .facts(&scope)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(listed, [cello.clone(), metric.clone(), code.clone()]);
    // A client's fact is found across the user's conversations.
    assert_eq!(
        recalled(&*store, &ana, "okapi-4417").await,
        ["Code word okapi-4417"]
    );

    // The pinned fact reaches every conversation of the user.
    let b = id("uf-chat-2");
    let input = PrepareInput {
        user: Some(&ana),
        user_input: Some(NewEvent::user("hello")),
        ..PrepareInput::default()
    };
    let prepared = store.prepare(&b, input).await.unwrap();
    let pinned: Vec<&str> = prepared
        .blocks
        .user_pinned
        .iter()
        .map(|f| f.fact.as_str())
        .collect();
    assert_eq!(pinned, ["Prefers metric units"]);

    // An update is a version; a stale one changes nothing.
    let update = |text: &str, expected| Op::Update {
        id: cello.clone(),
        change: Change {
            text: Some(text.into()),
            expected_version: expected,
            ..Change::default()
        },
    };
    store
        .change_facts(&scope, update("The user plays the viola", 1), None)
        .await
        .unwrap();
    let stale = store
        .change_facts(&scope, update("The user plays drums", 1), None)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, StoreError::Core(CoreError::Stale(_))),
        "{stale}"
    );
    let history = store.fact_history(&scope, &cello).await.unwrap();
    let texts: Vec<&str> = history.iter().map(|f| f.fact.as_str()).collect();
    assert_eq!(
        texts,
        ["The user plays the cello", "The user plays the viola"]
    );
    let sources = store.user_facts(&ana).await.unwrap();
    let viola = sources.iter().find(|f| f.fact.id == cello).unwrap();
    assert_eq!(
        viola.sources[0].agent_id, "uf-chat-1",
        "it keeps its sources"
    );

    // A delete leaves the id, the versions and the time; no text.
    let delete = Op::Delete {
        id: code.clone(),
        expected_version: 0,
    };
    store.change_facts(&scope, delete, None).await.unwrap();
    let gone = store.fact_history(&scope, &code).await.unwrap();
    assert_eq!(gone.len(), 2);
    assert!(gone.iter().all(|f| f.fact.is_empty()));
    assert!(gone[1].managed.deleted_at.is_some());
    assert!(h.holding(&store, "okapi-4417").await.is_empty());
    assert!(recalled(&*store, &ana, "okapi-4417").await.is_empty());
    assert!(
        !store
            .facts(&scope)
            .await
            .unwrap()
            .iter()
            .any(|f| f.id == code)
    );

    // Expired: out of what Retrieve ranks by salience; purged by upkeep.
    let expired = NewFact {
        expires_at: Some(unix_now() - 1.0),
        ..fact("Is boarding flight LX-318")
    };
    store
        .change_facts(&scope, Op::Add(vec![expired]), None)
        .await
        .unwrap();
    assert!(store.purge_expired().await.unwrap() >= 1);
    assert!(h.holding(&store, "LX-318").await.is_empty());

    let store = h.reopen(store).await;
    let history = store.fact_history(&scope, &cello).await.unwrap();
    assert_eq!(history.len(), 2);
    let input = PrepareInput {
        user_input: Some(NewEvent::user("again")),
        ..PrepareInput::default()
    };
    let prepared = store.prepare(&b, input).await.unwrap();
    assert_eq!(
        prepared.blocks.user_pinned.len(),
        1,
        "pinned after a restart"
    );

    // Eight updates of one version at once: exactly one wins.
    assert_eq!(racing_updates(&store, &scope, &metric, 2, None).await, 1);
    assert_eq!(store.fact_history(&scope, &metric).await.unwrap().len(), 3);

    // Erasing the user erases its facts and their versions.
    store.delete_user(&ana).await.unwrap();
    assert!(store.facts(&scope).await.unwrap().is_empty());
    assert!(store.fact_history(&scope, &cello).await.unwrap().is_empty());
    assert!(h.holding(&store, "viola").await.is_empty());
}
