use std::time::Duration;

use engram_core::{NewEvent, TraceType};
use serde_json::json;

use super::*;
use engram_store::prelude::*;

fn id(s: &str) -> AgentId {
    AgentId::parse(s).unwrap()
}

async fn open(dir: &Path) -> FileStore {
    FileStore::open(StoreConfig::new(dir)).await.unwrap()
}

/// Recall's question `query`: ten memories, no context, no wait, every
/// conversation's transcript searched.
fn memory_query(query: &str) -> MemoryQuery {
    MemoryQuery {
        query: query.into(),
        limit: 10,
        ..MemoryQuery::default()
    }
}

/// The contents of the agent's active traces, in order.
async fn contents(store: &FileStore, agent: &AgentId) -> Vec<String> {
    store
        .read(agent, |v| {
            v.traces.iter().map(|t| t.content.clone()).collect()
        })
        .await
        .unwrap()
}

async fn count(store: &FileStore, agent: &str) -> usize {
    store.read(&id(agent), |v| v.traces.len()).await.unwrap()
}

#[tokio::test]
async fn ingest_writes_design_lines_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("agent-1");
    let out = store
        .ingest(
            &a,
            &[
                NewEvent::user("hi"),
                NewEvent::tool_call("c1", "search", json!({"q": "x"})),
            ],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(out.current_turn_id, "turn_0001");
    let text = std::fs::read_to_string(dir.path().join("agents/agent-1/raw_traces.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["trace_type"], "tool_call");
    assert_eq!(lines[1]["tool_args"]["q"], "x");
    drop(store);

    let store = open(dir.path()).await;
    let r = store
        .ingest(
            &a,
            &[
                NewEvent::user("next"),
                NewEvent::tool_result("c1", json!(1)),
            ],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.traces[0].turn_id, "turn_0002");
    assert_eq!(
        (r.traces[1].turn_id.as_str(), r.traces[1].seq),
        ("turn_0001", 2)
    );
    assert_eq!(count(&store, "agent-1").await, 4);
}

#[tokio::test]
async fn retries_return_the_first_trace_even_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("a");
    let first = store
        .ingest(
            &a,
            &[NewEvent::user("hi").with_event_id("e1")],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    let store = open(dir.path()).await;
    let again = store
        .ingest(
            &a,
            &[NewEvent::user("hi").with_event_id("e1")],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(first.traces, again.traces);
    assert_eq!(count(&store, "a").await, 1);
}

#[tokio::test]
async fn refused_input_creates_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let err = store
        .ingest(
            &id("fresh"),
            &[NewEvent::tool_result("x", json!(1))],
            None,
            None,
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Core(_)), "{err}");
    assert!(!dir.path().join("agents/fresh").exists());
    assert!(matches!(
        store.read(&id("fresh"), |_| ()).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
    assert!(matches!(
        store.read(&id("never"), |_| ()).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
    assert_eq!(
        store.loaded_agents(),
        1,
        "reads of unknown ids register nothing"
    );
}

#[tokio::test]
async fn a_torn_tail_is_repaired_when_the_agent_loads() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    store
        .ingest(&id("t"), &[NewEvent::user("x")], None, None, None)
        .await
        .unwrap();
    drop(store);
    let path = dir.path().join("agents/t/raw_traces.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"id\":\"half");
    std::fs::write(&path, bytes).unwrap();
    let store = open(dir.path()).await;
    let r = store
        .ingest(&id("t"), &[NewEvent::assistant("y")], None, None, None)
        .await
        .unwrap();
    assert_eq!(r.traces[0].seq, 1);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_write_in_parallel_and_each_keeps_its_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut tasks = vec![];
    for agent in 0..8 {
        for client in 0..4 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    let e = NewEvent::user(format!("{client}-{i}"));
                    store
                        .ingest(&id(&format!("p{agent}")), &[e], None, None, None)
                        .await
                        .unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    for agent in 0..8 {
        let turns = store
            .read(&id(&format!("p{agent}")), |v| {
                v.traces
                    .iter()
                    .filter(|t| t.trace_type == TraceType::User)
                    .count()
            })
            .await
            .unwrap();
        assert_eq!(turns, 100);
    }
}

#[tokio::test]
async fn a_failed_log_flush_is_never_acknowledged_and_stops_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("sick");
    store
        .ingest(&a, &[NewEvent::user("x")], None, None, None)
        .await
        .unwrap();
    store.inject_log_sync_failure();
    let err = store
        .ingest(&a, &[NewEvent::assistant("y")], None, None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::ReadOnly { agent: Some(agent), .. } if agent == "sick"),
        "{err}"
    );
    // Never retried and then acknowledged: the store refuses every agent,
    // reads included (they could show the unacknowledged write), and says
    // why, until a restart replays the log.
    assert!(store.failure().unwrap().contains("fdatasync"));
    let err = store
        .ingest(&id("other"), &[NewEvent::user("z")], None, None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Failed(_)), "{err}");
    assert!(matches!(
        store.read(&a, |v| v.traces.len()).await,
        Err(StoreError::Failed(_))
    ));
    assert!(
        !dir.path().join("agents/other").exists(),
        "a refused write leaves nothing behind"
    );
    drop(store);
    let store = open(dir.path()).await;
    assert!(store.failure().is_none());
    let texts = contents(&store, &a).await;
    assert_eq!(
        texts[0], "x",
        "what was acknowledged is there after restart"
    );
}

#[tokio::test]
async fn a_failed_agent_flush_stops_the_store_and_keeps_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("sick");
    store
        .ingest(&a, &[NewEvent::user("x")], None, None, None)
        .await
        .unwrap();
    let raw = store
        .handle(&a)
        .state
        .lock()
        .await
        .as_ref()
        .unwrap()
        .raw
        .clone()
        .unwrap();
    raw.inject_sync_failure();
    store.checkpoint().await.unwrap();
    let err = store
        .ingest(&a, &[NewEvent::assistant("y")], None, None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Failed(_)), "{err}");
    let err = store
        .ingest(&id("well"), &[NewEvent::user("x")], None, None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Failed(_)), "{err}");
    // The log segment that covers the unflushed agent is kept for replay.
    assert_eq!(
        std::fs::read_dir(dir.path().join("wal")).unwrap().count(),
        2
    );
    drop(store);
    let store = open(dir.path()).await;
    assert_eq!(count(&store, "sick").await, 1);
}

#[tokio::test]
async fn checkpoints_bound_the_log_and_restart_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    for i in 0..10 {
        store
            .ingest(
                &id("cp"),
                &[NewEvent::user(format!("m{i}"))],
                None,
                None,
                None,
            )
            .await
            .unwrap();
    }
    store.checkpoint().await.unwrap();
    let segments: Vec<_> = std::fs::read_dir(dir.path().join("wal")).unwrap().collect();
    assert_eq!(
        segments.len(),
        1,
        "old segments dropped once agents are flushed"
    );
    store
        .ingest(&id("cp"), &[NewEvent::user("after")], None, None, None)
        .await
        .unwrap();
    // Simulate the page cache losing the agent file's unflushed tail: the
    // log still has it.
    let path = dir.path().join("agents/cp/raw_traces.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let cut = text.trim_end().rfind('\n').unwrap() + 1;
    std::fs::write(&path, &text[..cut]).unwrap();
    drop(store);
    let store = open(dir.path()).await;
    assert_eq!(count(&store, "cp").await, 11);
}

#[tokio::test]
async fn relaxed_policies_store_the_same_lines_without_the_log() {
    for policy in [FsyncPolicy::Interval, FsyncPolicy::Never] {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            fsync: policy,
            fsync_interval: Duration::from_millis(10),
            ..StoreConfig::new(dir.path())
        };
        let store = FileStore::open(config.clone()).await.unwrap();
        let upkeep = store.spawn_upkeep();
        store
            .ingest(&id("r"), &[NewEvent::user("x")], None, None, None)
            .await
            .unwrap();
        assert_eq!(count(&store, "r").await, 1);
        upkeep.abort();
        store.close().await;
        let wal_bytes: u64 = std::fs::read_dir(dir.path().join("wal"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(wal_bytes, 0, "{policy:?} writes no log records");
        let store = FileStore::open(config).await.unwrap();
        assert_eq!(count(&store, "r").await, 1);
    }
}

mod compaction;
mod conformance;
mod deletes;
mod embedding;
mod facts;
mod index;
mod registry;
mod users;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_under_the_agent_lock_drops_its_memory_state_not_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("panicky");
    store
        .ingest(
            &a,
            &[NewEvent::user("hi"), NewEvent::assistant("hello")],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    let (s, a2) = (store.clone(), a.clone());
    let crashed = tokio::spawn(async move {
        s.read(&a2, |_| -> usize { panic!("a bug while counting") })
            .await
    })
    .await;
    assert!(crashed.unwrap_err().is_panic());
    // The lock is free and the state gone: the next call reloads it.
    let handle = store.handle(&a);
    assert!(handle.state.try_lock().unwrap().is_none());
    assert_eq!(count(&store, "panicky").await, 2);
    let out = store
        .ingest(&a, &[NewEvent::user("again")], None, None, None)
        .await
        .unwrap();
    assert_eq!(out.current_turn_id, "turn_0002");
}
