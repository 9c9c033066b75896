//! DeleteUser meeting writes that bind agents to the user: every agent
//! bound to the user ends either erased or listed, never bound and
//! unlisted; no call fails with anything but NOT_FOUND.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use engram_core::blocks::{Change, Put, Scope};
use engram_core::{NewEvent, UserId};
use engram_store::prelude::*;
use engram_store::ranking::RankedReads;

use super::{id, open};
use crate::StoreError;

const AGENTS: [&str; 6] = ["u-0", "u-1", "u-2", "u-3", "u-4", "u-5"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_bound_while_a_user_is_erased_are_erased_or_listed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()).await);
    let ana = UserId::parse("ana").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = vec![];
    for w in 0..3 {
        let (store, ana) = (Arc::clone(&store), ana.clone());
        writers.push(tokio::spawn(async move {
            for round in 0..60 {
                let agent = id(AGENTS[(w * 7 + round) % AGENTS.len()]);
                let result = match round % 3 {
                    0 => store
                        .ingest(&agent, &[NewEvent::user("hi")], None, None, Some(&ana))
                        .await
                        .map(drop),
                    1 => store
                        .write_block(
                            &Scope::Agent(agent.clone()),
                            "notes",
                            Change::Put(Put {
                                value: "n".into(),
                                ..Put::default()
                            }),
                            None,
                            Some(&ana),
                        )
                        .await
                        .map(drop),
                    _ => store
                        .write_block(
                            &Scope::User(ana.clone()),
                            "human",
                            Change::Put(Put {
                                value: format!("round {round}"),
                                ..Put::default()
                            }),
                            None,
                            None,
                        )
                        .await
                        .map(drop),
                };
                match result {
                    Ok(()) | Err(StoreError::NotFound(_)) => {}
                    Err(e) => panic!("{agent}: {e}"),
                }
            }
        }));
    }
    let eraser = {
        let (store, ana, done) = (Arc::clone(&store), ana.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let mut erased = 0;
            while !done.load(Ordering::SeqCst) {
                erased += store.delete_user(&ana).await.expect("DeleteUser");
                tokio::task::yield_now().await;
            }
            erased
        })
    };
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let erased = eraser.await.unwrap();
    assert!(erased > 0, "the race happened");

    let listed = store.user_agents(&ana).await.unwrap();
    for agent in AGENTS {
        let bound = match store.context(&id(agent)).await {
            Ok(context) => context.user_id.as_deref() == Some("ana"),
            Err(StoreError::NotFound(_)) => false,
            Err(e) => panic!("{agent}: {e}"),
        };
        assert_eq!(
            bound,
            listed.contains(&id(agent)),
            "{agent}: bound {bound}, listed {listed:?}"
        );
    }
    // And it all goes with one more erasure.
    store.delete_user(&ana).await.unwrap();
    assert!(store.user_agents(&ana).await.unwrap().is_empty());
    assert!(
        std::fs::read_dir(dir.path().join("agents"))
            .unwrap()
            .next()
            .is_none()
    );
    assert!(!dir.path().join("users/ana").exists());
}

/// An erasure ends while bindings to the user never stop: it takes one
/// pass (before, each pass found agents bound meanwhile and went round
/// again, for as long as the storm lasted). Bindings that meet it land
/// after it, and every agent bound at the end is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_erasure_ends_under_a_storm_of_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()).await);
    let ana = UserId::parse("ana").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let bound = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut writers = vec![];
    for w in 0..3 {
        let (store, ana) = (Arc::clone(&store), ana.clone());
        let (done, bound) = (Arc::clone(&done), Arc::clone(&bound));
        writers.push(tokio::spawn(async move {
            let mut made = vec![];
            let mut n = 0;
            // Until the erasure has ended, and at least a few bindings.
            while !done.load(Ordering::SeqCst) || n < 8 {
                let agent = id(&format!("s-{w}-{n}"));
                let result = if w == 2 && n % 2 == 1 {
                    // A fork of a bound agent binds its copy too.
                    store
                        .fork_agent(&id(&format!("s-2-{}", n - 1)), &agent)
                        .await
                } else {
                    store
                        .ingest(&agent, &[NewEvent::user("hi")], None, None, Some(&ana))
                        .await
                        .map(drop)
                };
                match result {
                    Ok(()) | Err(StoreError::NotFound(_)) => {}
                    Err(e) => panic!("{agent}: {e}"),
                }
                bound.fetch_add(1, Ordering::SeqCst);
                made.push(agent);
                n += 1;
            }
            made
        }));
    }
    // The storm is under way before the erasure starts.
    while bound.load(Ordering::SeqCst) < 30 {
        tokio::task::yield_now().await;
    }
    store.delete_user(&ana).await.expect("DeleteUser");
    done.store(true, Ordering::SeqCst);
    let mut made = vec![];
    for w in writers {
        made.extend(w.await.unwrap());
    }
    let listed = store.user_agents(&ana).await.unwrap();
    let mut kept = 0;
    for agent in &made {
        let bound = match store.context(agent).await {
            Ok(context) => context.user_id.as_deref() == Some("ana"),
            Err(StoreError::NotFound(_)) => false,
            Err(e) => panic!("{agent}: {e}"),
        };
        kept += usize::from(bound);
        assert_eq!(
            bound,
            listed.contains(agent),
            "{agent}: bound {bound}, listed {listed:?}"
        );
    }
    assert!(kept < made.len(), "the erasure took agents bound before it");
    assert!(kept > 0, "bindings after the erasure stay");
}

/// A model for the indexer that needs no weights: a unit vector from the
/// text's length.
#[derive(Debug)]
struct Lengths;

impl engram_core::embed::Embedder for Lengths {
    fn model(&self) -> &str {
        "lengths"
    }

    fn dim(&self) -> usize {
        2
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> engram_core::embed::EmbedFuture<'a> {
        Box::pin(async move {
            Ok(texts
                .iter()
                .map(|t| {
                    let mut v = vec![1.0, t.len() as f32];
                    engram_core::embed::normalize(&mut v);
                    v
                })
                .collect())
        })
    }
}

/// What a conversation's own index embedded is copied into its user's
/// index (not embedded again): once the indexer is done, the user's index
/// holds a vector for every item, and across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_index_copies_the_conversations_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let config = || crate::StoreConfig {
        embedder: Some(Arc::new(Lengths)),
        ..crate::StoreConfig::new(dir.path())
    };
    let store = crate::FileStore::open(config()).await.unwrap();
    let ana = UserId::parse("ana").unwrap();
    let a = id("vec-a");
    for text in ["kayak trip", "ferry at nine", "red kayak"] {
        store
            .ingest(&a, &[NewEvent::user(text)], None, None, Some(&ana))
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    store.wait_embedded(&a, deadline).await.unwrap();
    let query = super::memory_query("kayak");
    // The copy is background work: the indexer, done embedding, may
    // still hold the agent's index when a search comes (which then leaves
    // it to the indexer's catch-up that follows). Asked until it is there.
    let ranked = loop {
        let ranked = store.rank_user_memories(&ana, &query, None).await.unwrap();
        if ranked.index.embedded == 3 || std::time::Instant::now() > deadline {
            break ranked;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!((ranked.index.items, ranked.index.embedded), (3, 3));
    assert!(
        ranked
            .memories
            .iter()
            .any(|m| m.matched_by == engram_store::MatchedBy::Both)
    );
    store.close().await;
    drop(store);
    let store = crate::FileStore::open(config()).await.unwrap();
    let ranked = store.rank_user_memories(&ana, &query, None).await.unwrap();
    assert_eq!((ranked.index.items, ranked.index.embedded), (3, 3));
}

/// A user's search stages what its conversations added since the user's
/// index last committed, and finds it; the background's commit then holds
/// the same and answers the same, with the cursors that moved with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_search_stages_what_its_conversations_added_and_the_background_commits_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let ana = UserId::parse("ana").unwrap();
    let (a, b) = (id("stage-a"), id("stage-b"));
    store
        .ingest(
            &a,
            &[NewEvent::user("the okapi report")],
            None,
            None,
            Some(&ana),
        )
        .await
        .unwrap();
    let query = super::memory_query("okapi quokka");
    let found = |ranked: &engram_store::RankedMemories| {
        let mut texts: Vec<String> = ranked
            .memories
            .iter()
            .map(|m| format!("{:?} {:.3}", m.memory, m.score))
            .collect();
        texts.sort();
        texts
    };
    let held = || async {
        let slot = store.user_slot(&ana);
        let slot = slot.lock().await;
        let index = slot.as_ref().expect("open");
        (index.lexical.committed_len(), index.lexical.staged())
    };
    let first = store.rank_user_memories(&ana, &query, None).await.unwrap();
    assert_eq!(first.memories.len(), 1, "{first:?}");
    assert_eq!(held().await, (0, 1), "staged, not committed");

    store
        .ingest(
            &b,
            &[NewEvent::user("the quokka report")],
            None,
            None,
            Some(&ana),
        )
        .await
        .unwrap();
    let staged = store.rank_user_memories(&ana, &query, None).await.unwrap();
    assert_eq!(staged.memories.len(), 2, "{staged:?}");
    assert_eq!(held().await, (0, 2));

    // The background's commit (the indexer's, or the upkeep's tick).
    store.persist_user_index(&ana).await;
    assert_eq!(held().await, (2, 0));
    let committed = store.rank_user_memories(&ana, &query, None).await.unwrap();
    assert_eq!(found(&committed), found(&staged));
    assert_eq!(held().await, (2, 0), "nothing left to stage");

    // Reopened, the commit's cursors say both were read.
    store.close().await;
    drop(store);
    let store = open(dir.path()).await;
    let reopened = store.rank_user_memories(&ana, &query, None).await.unwrap();
    assert_eq!(found(&reopened), found(&committed));
    let slot = store.user_slot(&ana);
    let slot = slot.lock().await;
    assert_eq!(slot.as_ref().expect("open").lexical.staged(), 0);
}
