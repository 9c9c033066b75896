//! The memory budget on a real file store: past it, the least recently
//! used agents are unloaded with their prompt caches, and every agent
//! still answers with everything it was given. (That an agent in use is
//! not unloaded is the store's part: engram-files' tests.)

use std::sync::Arc;

use engram_core::NewEvent;
use engram_core::render::Format;
use engram_files::{FileStore, StoreConfig};

use crate::Engine;
use crate::api::{IngestRequest, PrepareRequest};

async fn open(
    dir: &std::path::Path,
    budget: Option<u64>,
) -> (Arc<dyn engram_store::Store>, Engine) {
    let store = FileStore::open(StoreConfig::new(dir)).await.unwrap();
    let store: Arc<dyn engram_store::Store> = Arc::new(store);
    let mut settings = crate::idle::tests::settings();
    settings.memory_budget = budget;
    let engine = Engine::new(
        Arc::clone(&store),
        Arc::new(engram_llm::Extractive),
        &settings,
    );
    (store, engine)
}

/// `messages` messages of about 1 KB into `agent`, and its prompt rendered
/// (so its caches hold something too).
async fn fill(engine: &Engine, agent: &str, messages: usize) {
    let text = "the trip to Lisbon was planned in detail, day by day. ".repeat(18);
    let events = (0..messages)
        .map(|n| match n % 2 {
            0 => NewEvent::user(format!("{n}: {text}")),
            _ => NewEvent::assistant(format!("{n}: {text}")),
        })
        .collect();
    engine
        .ingest(IngestRequest {
            agent_id: agent.into(),
            events,
            ..IngestRequest::default()
        })
        .await
        .unwrap();
    prompt(engine, agent).await;
}

async fn prompt(engine: &Engine, agent: &str) -> usize {
    let prepared = engine
        .prepare(PrepareRequest {
            agent_id: agent.into(),
            format: Some(Format::OpenAiChat),
            model: Some("gpt-4o".into()),
            ..PrepareRequest::default()
        })
        .await
        .unwrap();
    prepared.messages.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_budget_the_least_recently_used_agents_go_and_come_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    // Measured first without a budget: what one agent of this size holds.
    let (store, engine) = open(dir.path(), None).await;
    fill(&engine, "probe", 100).await;
    let one = store.memory_bytes() + engine.caches.memory_bytes();
    assert!(one > 100 * 1024, "a 100 KB agent is accounted: {one}");
    assert_eq!(
        engine.keep_to_budget().await,
        0,
        "no budget, nothing unloaded"
    );
    drop((store, engine));

    // Room for about three such agents; ten are written.
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path(), Some(3 * one + one / 2)).await;
    for n in 0..10 {
        fill(&engine, &format!("agent-{n}"), 100).await;
    }
    assert_eq!(store.loaded_agents(), 10);
    let unloaded = engine.keep_to_budget().await;
    assert!(unloaded >= 6, "{unloaded} unloaded");
    let held = store.memory_bytes() + engine.caches.memory_bytes();
    assert!(
        held <= 3 * one + one / 2,
        "{held} held, budget {}",
        3 * one + one / 2
    );
    assert_eq!(store.loaded_agents(), 10 - unloaded);
    assert!(
        engine.caches.len() <= 10 - unloaded,
        "their caches went with them"
    );
    // The most recent stayed; every agent still has all 100 messages.
    for n in (0..10).rev() {
        assert_eq!(
            prompt(&engine, &format!("agent-{n}")).await,
            100,
            "agent-{n}"
        );
    }
}

/// What the heap holds beyond its start and the estimates (here, a
/// made-up 2.5 agents' worth: calls in flight, estimates that are off)
/// comes off the room the agents have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_heap_holds_beyond_the_estimates_leaves_less_room_for_agents() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static HEAP: AtomicU64 = AtomicU64::new(1 << 30);
    static RELEASED: AtomicU64 = AtomicU64::new(0);
    crate::use_heap(crate::Heap {
        resident: || Some(HEAP.load(Ordering::Relaxed)),
        release_freed: || {
            RELEASED.fetch_add(1, Ordering::Relaxed);
        },
    });
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path(), None).await;
    fill(&engine, "probe", 100).await;
    let one = store.memory_bytes() + engine.caches.memory_bytes();
    drop((store, engine));

    let dir = tempfile::tempdir().unwrap();
    let budget = 6 * one;
    let (store, engine) = open(dir.path(), Some(budget)).await;
    engine.note_heap_baseline();
    for n in 0..6 {
        fill(&engine, &format!("agent-{n}"), 100).await;
    }
    let held = store.memory_bytes() + engine.caches.memory_bytes();
    // The heap grew by what is accounted and 2.5 agents more.
    HEAP.fetch_add(held + 5 * one / 2, Ordering::Relaxed);
    let unloaded = engine.keep_to_budget().await;
    assert!(unloaded >= 2, "{unloaded} unloaded");
    let left = store.memory_bytes() + engine.caches.memory_bytes();
    assert!(
        left <= budget - 5 * one / 2,
        "{left} held, room {}",
        budget - 5 * one / 2
    );
    assert!(
        RELEASED.load(Ordering::Relaxed) >= 1,
        "what was unloaded is given back"
    );

    // The heap as the release left it: the agents kept and the 2.5 more.
    let base = HEAP.load(Ordering::Relaxed) - held - 5 * one / 2;
    HEAP.store(base + left + 5 * one / 2, Ordering::Relaxed);
    assert_eq!(engine.keep_to_budget().await, 0, "within the room now");
    // Between this pass and the next, an agent is loaded: the heap grew by
    // it. The next pass keeps that much free as well, for the growth to
    // come before the pass after it.
    fill(&engine, "agent-6", 100).await;
    let grown = store.memory_bytes() + engine.caches.memory_bytes() - left;
    HEAP.fetch_add(grown, Ordering::Relaxed);
    engine.keep_to_budget().await;
    let left = store.memory_bytes() + engine.caches.memory_bytes();
    let room = budget - 5 * one / 2 - grown;
    assert!(left <= room, "{left} held, room {room} with the headroom");
}
