//! A user's search over the conversations' vectors: embedded again after a
//! restart, and waited for when asked.

use super::*;

/// After a restart the table of word vectors starts empty. A search
/// across a user's conversations (not one of the agent's own) hands the
/// user's conversations whose words it lacks to the indexer, which gives
/// them again: the next user search expands as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_users_search_has_its_conversations_words_embedded_again() {
    words_embedded_again_after_a_restart(false).await;
}

/// The same when the user's index lost its last commit (held in memory
/// until the indexer writes it out, as when the process ends during the
/// indexer's pass): the conversation is read in again by the search,
/// staged, and its words are not in the committed vocabulary the table is
/// asked about; it is handed to the indexer all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_that_lost_the_users_index_its_search_has_the_words_embedded_again() {
    words_embedded_again_after_a_restart(true).await;
}

async fn words_embedded_again_after_a_restart(lose_users_index: bool) {
    let local = local_model();
    let dir = tempfile::tempdir().unwrap();
    let ana = engram_core::UserId::parse("ana").unwrap();
    let store = open(dir.path(), Some(Wrapped::new(&local, "m", "\u{0}"))).await;
    let events: Vec<NewEvent> = PET_MEMORIES.iter().map(|t| NewEvent::user(*t)).collect();
    store
        .ingest(&id("a"), &events, None, None, Some(&ana))
        .await
        .unwrap();
    search(&store, "a", DOG, WAIT).await;
    let held = |store: &FileStore| {
        let indexer = store.inner.indexer.as_ref().unwrap();
        indexer.words().contains("puppy")
    };
    assert!(held(&store));
    store.close().await;
    drop(store);
    if lose_users_index {
        let index = dir.path().join("users/ana").join(crate::index::INDEX_DIR);
        std::fs::remove_dir_all(&index).unwrap();
    }

    let store = open(dir.path(), Some(Wrapped::new(&local, "m", "\u{0}"))).await;
    assert!(!held(&store), "a restart starts the table empty");
    // What the indexer publishes for the agent, from before the search.
    let mut progress = store
        .existing_handle(&id("a"))
        .unwrap()
        .embedded
        .subscribe();
    progress.borrow_and_update();
    let query = crate::tests::memory_query("Which pets does Caroline have?");
    store.rank_user_memories(&ana, &query, None).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !held(&store) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the indexer gives the user's words again"
        );
        // The table is read again at each of the agent's publications, and
        // at least every half second: the words may land in the table
        // between a publication and this look at it.
        let _ = tokio::time::timeout(Duration::from_millis(500), progress.changed()).await;
    }
    let ranked = store.rank_user_memories(&ana, &query, None).await.unwrap();
    let first = &ranked.memories[0].memory;
    assert!(
        matches!(first, crate::Memory::Trace { trace, .. } if trace.content.contains("puppy")),
        "{first:?}"
    );
}

/// SearchHistory over a user's conversations waits, when asked, for every
/// one of them to be embedded, and says how far the user's index is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_search_waits_for_all_its_conversations_to_be_embedded() {
    let local = local_model();
    let dir = tempfile::tempdir().unwrap();
    let bea = engram_core::UserId::parse("bea").unwrap();
    let wrapped = Wrapped::new(&local, "m", "\u{0}");
    wrapped.hold("lighthouse");
    let store = open(dir.path(), Some(Arc::clone(&wrapped))).await;
    let said =
        |texts: &[&str]| -> Vec<NewEvent> { texts.iter().map(|t| NewEvent::user(*t)).collect() };
    let (first, second) = (
        said(&["the lighthouse keeper waved", "a storm came in at night"]),
        said(&PET_MEMORIES),
    );
    for (agent, events) in [("b1", &first), ("b2", &second)] {
        store
            .ingest(&id(agent), events, None, None, Some(&bea))
            .await
            .unwrap();
    }
    // The first conversation's batch is held in the model: its items and
    // the second's wait; the search is asked to wait for them.
    wrapped.held().await;
    wrapped.release();
    let page = store
        .search_user(
            &bea,
            &Search {
                query: DOG.into(),
                limit: 3,
                wait_for_index: Some(WAIT),
                ..Search::default()
            },
        )
        .await
        .unwrap();
    let (model, items, embedded, pending) = state(&page);
    assert_eq!(items, (first.len() + second.len()) as u64);
    assert_eq!(
        (model, embedded, pending),
        ("m", items, 0),
        "{:?}",
        page.index
    );
}
