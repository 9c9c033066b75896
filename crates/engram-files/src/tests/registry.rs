//! The agent registry: listing, deleting, forking, idle eviction.
use std::sync::atomic::Ordering;
use std::time::Duration;

use engram_core::NewEvent;

use super::*;

#[tokio::test]
async fn delete_removes_everything_and_the_id_can_start_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("gone");
    store
        .ingest(&a, &[NewEvent::user("x")], None, None, None)
        .await
        .unwrap();
    store.delete_agent(&a).await.unwrap();
    assert!(!dir.path().join("agents/gone").exists());
    assert_eq!(
        std::fs::read_dir(dir.path().join("agents"))
            .unwrap()
            .count(),
        0
    );
    assert!(matches!(
        store.read(&a, |_| ()).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.delete_agent(&a).await,
        Err(StoreError::NotFound(_))
    ));
    let again = store
        .ingest(&a, &[NewEvent::user("y")], None, None, None)
        .await
        .unwrap();
    assert_eq!(
        again.traces[0].turn_id, "turn_0001",
        "a new agent, not the old one"
    );
}

/// Two deletes of one agent meet: the second waited for the lock while the
/// first removed the agent, and meanwhile an Ingest started a new agent of
/// the same id. The second delete must not take the new agent's files
/// from under it (a fuzz run found it did: the new agent then failed with
/// storage errors).
#[tokio::test]
async fn a_delete_that_waited_out_another_leaves_the_new_agent_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("twice");
    store
        .ingest(&a, &[NewEvent::user("old")], None, None, None)
        .await
        .unwrap();
    let waiting = store.handle(&a);
    store.delete_agent(&a).await.unwrap();
    store
        .ingest(&a, &[NewEvent::user("new")], None, None, None)
        .await
        .unwrap();
    assert!(matches!(
        store.delete_through(&a, waiting, None).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(dir.path().join("agents/twice").is_dir());
    assert_eq!(contents(&store, &a).await, ["new"]);
}

#[tokio::test]
async fn list_agents_pages_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    for name in ["c", "a", "e", "b", "d"] {
        store
            .ingest(&id(name), &[NewEvent::user("x")], None, None, None)
            .await
            .unwrap();
    }
    std::fs::create_dir(dir.path().join("agents/.deleted-junk")).unwrap();
    let (p1, t1) = store.list_agents(2, None, &|_, _| true).await.unwrap();
    let (p2, t2) = store
        .list_agents(2, t1.as_deref(), &|_, _| true)
        .await
        .unwrap();
    let (p3, t3) = store
        .list_agents(2, t2.as_deref(), &|_, _| true)
        .await
        .unwrap();
    assert_eq!(
        (p1, p2, p3.clone()),
        (
            vec!["a".into(), "b".into()],
            vec!["c".into(), "d".into()],
            vec!["e".to_string()]
        )
    );
    assert_eq!(t3, None);
    // A scope filter applies before paging: pages stay full.
    let visible = |id: &str, _: Option<&str>| id != "b" && id != "c";
    let (q1, u1) = store.list_agents(2, None, &visible).await.unwrap();
    let (q2, u2) = store.list_agents(2, u1.as_deref(), &visible).await.unwrap();
    assert_eq!(
        (q1, q2),
        (vec!["a".to_string(), "d".into()], vec!["e".to_string()])
    );
    assert_eq!(u2, None);
    // Leftover trash of an interrupted delete is cleaned at open.
    open(dir.path()).await;
    assert!(!dir.path().join("agents/.deleted-junk").exists());
}

#[tokio::test]
async fn idle_agents_are_unloaded_and_reload_on_use() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    store
        .ingest(&id("idle"), &[NewEvent::user("x")], None, None, None)
        .await
        .unwrap();
    assert_eq!(store.loaded_agents(), 1);
    assert_eq!(store.evict_idle(Duration::ZERO).await, 1);
    assert_eq!(store.loaded_agents(), 0);
    let r = store
        .ingest(&id("idle"), &[NewEvent::assistant("y")], None, None, None)
        .await
        .unwrap();
    assert_eq!(
        (r.traces[0].turn_id.as_str(), r.traces[0].seq),
        ("turn_0001", 1)
    );
}

#[tokio::test]
async fn shrinking_unloads_the_least_recently_used_and_never_one_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let text = "words of a long message ".repeat(400);
    for name in ["a", "b", "c", "d"] {
        store
            .ingest(&id(name), &[NewEvent::user(text.clone())], None, None, None)
            .await
            .unwrap();
    }
    let all = store.memory_bytes();
    assert!(
        all > 4 * 3 * text.len() as u64,
        "the text, parsed and as messages: {all}"
    );
    // "a" is in use (a call holds its handle). Last used: c, d, a, b.
    let in_use = store.handle(&id("a"));
    for (name, ms) in [("c", 1), ("d", 2), ("a", 3), ("b", 4)] {
        store
            .handle(&id(name))
            .last_used
            .store(ms, Ordering::Relaxed);
    }
    // A target between two agents and three (they differ by a few bytes).
    let target = all / 2 + all / 8;
    let mut unloaded = store.shrink_to(target).await;
    unloaded.sort();
    assert_eq!(
        unloaded,
        [id("c"), id("d")],
        "least recently used first, to the target"
    );
    assert!(store.memory_bytes() <= target);
    let unloaded = store.shrink_to(0).await;
    assert_eq!(unloaded, [id("b")], "everything but the agent in use");
    assert_eq!(store.loaded_agents(), 1);
    drop(in_use);
    assert_eq!(store.shrink_to(0).await, [id("a")]);
    assert_eq!(store.memory_bytes(), 0);
    // Each loads again, whole.
    for name in ["a", "b", "c", "d"] {
        let context = store.context(&id(name)).await.unwrap();
        assert_eq!(context.messages[0].content, text, "{name}");
    }
}

#[tokio::test]
async fn a_fork_copies_everything_and_then_lives_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let (src, dst) = (id("src"), id("dst"));
    store
        .ingest(
            &src,
            &[
                NewEvent::user("one"),
                NewEvent::tool_call("c", "f", serde_json::json!({})),
            ],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    store
        .prepare(
            &src,
            PrepareInput {
                system_prompt: Some("sys"),
                ..PrepareInput::default()
            },
        )
        .await
        .unwrap();
    // A refused Ingest on the target leaves a cached "absent" state behind.
    assert!(
        store
            .ingest(
                &dst,
                &[NewEvent::tool_result("x", serde_json::json!(1))],
                None,
                None,
                None
            )
            .await
            .is_err()
    );
    store.fork_agent(&src, &dst).await.unwrap();
    assert!(matches!(
        store.fork_agent(&src, &dst).await,
        Err(StoreError::AlreadyExists(_))
    ));
    assert!(matches!(
        store.fork_agent(&id("nobody"), &id("x")).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.fork_agent(&src, &src).await,
        Err(StoreError::Core(_))
    ));
    // The fork continues the source's turns and pending call…
    let r = store
        .ingest(
            &dst,
            &[
                NewEvent::tool_result("c", serde_json::json!(2)),
                NewEvent::user("two"),
            ],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.traces[0].turn_id, "turn_0001");
    assert_eq!(r.traces[1].turn_id, "turn_0002");
    let system = store
        .read(&dst, |v| v.meta.system_prompt.clone())
        .await
        .unwrap();
    assert_eq!(system.as_deref(), Some("sys"));
    // …and the source does not see it.
    assert_eq!(count(&store, "src").await, 2);
    assert_eq!(count(&store, "dst").await, 4);
    drop(store);
    let store = open(dir.path()).await;
    assert_eq!(count(&store, "dst").await, 4, "the fork is durable");
    assert!(
        std::fs::read_dir(dir.path().join("agents"))
            .unwrap()
            .all(|e| !e.unwrap().file_name().to_string_lossy().starts_with('.'))
    );
}
