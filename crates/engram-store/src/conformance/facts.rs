//! Facts that clients manage: added (merged when repeated), updated as
//! versions, deleted with no text left, pinned and expiring; in the
//! prompt at the next request; across a restart.

use engram_core::blocks::Scope;
use engram_core::facts::{Change, NewFact, Op, Outcome};
use engram_core::{CoreError, NewEvent};

use super::{Harness, id};
use crate::prelude::*;
use crate::{Store, StoreError, unix_now};

fn fact(text: &str) -> NewFact {
    NewFact {
        text: text.into(),
        ..NewFact::default()
    }
}

/// The text of the agent's prompt's first message (its snapshot).
async fn snapshot<S: Store + ?Sized>(store: &S, agent: &engram_core::AgentId) -> String {
    let context = store.context(agent).await.unwrap();
    context
        .messages
        .first()
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

pub async fn facts_are_added_corrected_and_forgotten<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("facts-a");
    let scope = Scope::Agent(a.clone());
    // An add starts the agent.
    let added = store
        .change_facts(
            &scope,
            Op::Add(vec![
                fact("Lives in Oslo"),
                fact("Code word zebra-7731"),
                fact("lives in   OSLO"),
            ]),
            Some(20),
        )
        .await
        .unwrap();
    let ids: Vec<(String, u64)> = added
        .outcomes
        .iter()
        .map(|o| match o {
            Outcome::Added(f, _) => (f.id.clone(), f.version()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        ids[2],
        (ids[0].0.clone(), 2),
        "the same fact merged: {ids:?}"
    );
    let (oslo, code) = (ids[0].0.clone(), ids[1].0.clone());
    assert!(snapshot(&*store, &a).await.contains(") Lives in Oslo\n"));
    store
        .ingest(&a, &[NewEvent::user("hello")], None, None, None)
        .await
        .unwrap();

    // An update is a new version; a stale one changes nothing.
    let update = |text: &str, expected| Op::Update {
        id: oslo.clone(),
        change: Change {
            text: Some(text.into()),
            expected_version: expected,
            ..Change::default()
        },
    };
    store
        .change_facts(&scope, update("Lives in Berlin", 2), Some(20))
        .await
        .unwrap();
    let stale = store
        .change_facts(&scope, update("Lives in Rome", 2), Some(20))
        .await
        .unwrap_err();
    assert!(
        matches!(stale, StoreError::Core(CoreError::Stale(_))),
        "{stale}"
    );
    let shown = snapshot(&*store, &a).await;
    assert!(
        shown.contains(") Lives in Berlin\n") && !shown.contains("Oslo"),
        "{shown}"
    );
    let history = store.fact_history(&scope, &oslo).await.unwrap();
    let texts: Vec<&str> = history.iter().map(|f| f.fact.as_str()).collect();
    assert_eq!(texts, ["Lives in Oslo", "Lives in Oslo", "Lives in Berlin"]);

    // A delete leaves the id, the versions and the time; no text anywhere
    // (the search index had it).
    let search = crate::Search {
        query: "zebra-7731".into(),
        limit: 5,
        ..crate::Search::default()
    };
    let found = store.search(&a, &search).await.unwrap();
    assert!(found.index.items > 0, "the index holds the agent's items");
    let delete = Op::Delete {
        id: code.clone(),
        expected_version: 0,
    };
    store.change_facts(&scope, delete, Some(20)).await.unwrap();
    assert!(!snapshot(&*store, &a).await.contains("zebra-7731"));
    let left: Vec<String> = store
        .facts(&scope)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(left, std::slice::from_ref(&oslo));
    let gone = store.fact_history(&scope, &code).await.unwrap();
    assert_eq!(gone.len(), 2);
    assert!(gone.iter().all(|f| f.fact.is_empty() && f.tags.is_empty()));
    assert!(gone[1].managed.deleted_at.is_some());
    let again = Op::Delete {
        id: code.clone(),
        expected_version: 0,
    };
    let twice = store
        .change_facts(&scope, again, Some(20))
        .await
        .unwrap_err();
    assert!(
        matches!(twice, StoreError::Core(CoreError::Absent(_))),
        "{twice}"
    );

    // Pinned: shown whatever the limit; expired: shown no more.
    let pinned = NewFact {
        pinned: true,
        ..fact("Allergic to peanuts")
    };
    let expired = NewFact {
        expires_at: Some(unix_now() - 1.0),
        ..fact("Is in a meeting")
    };
    store
        .change_facts(&scope, Op::Add(vec![pinned, expired]), Some(0))
        .await
        .unwrap();
    let shown = snapshot(&*store, &a).await;
    assert!(shown.contains(") Allergic to peanuts\n"), "{shown}");
    assert!(!shown.contains("Berlin"), "limit 0 shows the pinned only");
    assert!(!shown.contains("meeting"), "an expired fact is not shown");
    let query = crate::MemoryQuery {
        query: "meeting".into(),
        limit: 10,
        neighbours: 0,
        wait_for_index: None,
        archived_only: false,
        episodic: 0,
        semantic: 5,
        as_of: None,
    };
    let ranked = store.rank_memories(&a, &query).await.unwrap();
    assert!(
        !ranked.semantic.iter().any(|f| f.fact.contains("meeting")),
        "an expired fact is not ranked: {:?}",
        ranked.semantic
    );

    let store = h.reopen(store).await;
    let shown = snapshot(&*store, &a).await;
    assert!(shown.contains(") Allergic to peanuts\n"), "{shown}");
    let history = store.fact_history(&scope, &oslo).await.unwrap();
    assert_eq!(history.len(), 3);
    assert!(
        h.holding(&store, "zebra-7731").await.is_empty(),
        "a deleted fact's text is nowhere"
    );
    // Refused: an unknown fact, a fact with no words, the global scope.
    let unknown = Op::Update {
        id: "nope".into(),
        change: Change {
            pinned: Some(true),
            ..Change::default()
        },
    };
    let refused = store
        .change_facts(&scope, unknown, Some(20))
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Core(CoreError::Absent(_))));
    let refused = store
        .change_facts(&scope, Op::Add(vec![fact(" ... ")]), Some(20))
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Core(CoreError::Invalid(_))));
    assert_eq!(store.fact_history(&scope, &oslo).await.unwrap().len(), 3);

    // A fact that expires while shown: the first prompt after its time
    // shows it no more (nothing else changed meanwhile).
    let at = unix_now() + 0.5;
    let soon = NewFact {
        expires_at: Some(at),
        ..fact("Is on the train to Bergen")
    };
    let added = store
        .change_facts(&scope, Op::Add(vec![soon]), Some(20))
        .await
        .unwrap();
    let bergen = added.lines[0].id.clone();
    let prompt = |text: &str| crate::PrepareInput {
        user_input: Some(NewEvent::user(text)),
        ..crate::PrepareInput::default()
    };
    let shown = store.prepare(&a, prompt("where am I?")).await.unwrap();
    assert!(
        shown.context.messages[0]
            .content
            .contains("train to Bergen")
    );
    // Waiting for the wall clock to pass the fact's time, not for a result.
    while unix_now() <= at {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let after = store.prepare(&a, prompt("and now?")).await.unwrap();
    let first = &after.context.messages[0].content;
    assert!(!first.contains("Bergen"), "{first}");
    assert!(first.contains(") Allergic to peanuts\n"), "{first}");

    // The upkeep's purge deletes it: its history keeps the deletion, and
    // no byte of it is left; the earlier expired fact went with it.
    assert!(store.purge_expired().await.unwrap() >= 1);
    let gone = store.fact_history(&scope, &bergen).await.unwrap();
    assert!(gone.last().unwrap().managed.deleted_at.is_some());
    assert!(gone.iter().all(|f| f.fact.is_empty()));
    assert!(h.holding(&store, "Bergen").await.is_empty());
    assert!(h.holding(&store, "Is in a meeting").await.is_empty());
    assert_eq!(store.purge_expired().await.unwrap(), 0, "once");

    // Eight updates of one version at once: exactly one wins, the others
    // change nothing.
    let version = store
        .facts(&scope)
        .await
        .unwrap()
        .into_iter()
        .find(|f| f.id == oslo)
        .unwrap()
        .version();
    assert_eq!(
        racing_updates(&store, &scope, &oslo, version, Some(20)).await,
        1
    );
    let history = store.fact_history(&scope, &oslo).await.unwrap();
    assert_eq!(history.len() as u64, version + 1);
}

/// Eight updates of fact `id` at `version` at once (each snapshot showing
/// `limit` facts): how many won. Every other must be refused as stale.
pub(crate) async fn racing_updates<S: Store + ?Sized + Send + Sync + 'static>(
    store: &std::sync::Arc<S>,
    scope: &Scope,
    id: &str,
    version: u64,
    limit: Option<u32>,
) -> usize {
    let racing: Vec<_> = (0..8)
        .map(|n| {
            let (store, scope) = (std::sync::Arc::clone(store), scope.clone());
            let change = Op::Update {
                id: id.to_owned(),
                change: Change {
                    text: Some(format!("Racing version {n}")),
                    expected_version: version,
                    ..Change::default()
                },
            };
            tokio::spawn(async move { store.change_facts(&scope, change, limit).await })
        })
        .collect();
    let mut won = 0;
    for handle in racing {
        match handle.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::Core(CoreError::Stale(_))) => {}
            Err(e) => panic!("a race answered {e}"),
        }
    }
    won
}
