//! The idle sweep on a real file store, with a paused clock: a quiet
//! conversation of a user is summarized once the idle time has passed
//! (not a second before), and the user's next conversation starts from
//! that summary.

use std::sync::Arc;
use std::time::Duration;

use engram_core::NewEvent;
use engram_core::transcript::Role;
use engram_files::{FileStore, StoreConfig};

use crate::Engine;
use crate::api::{IngestRequest, PrepareRequest};
use crate::settings::{
    BlocksSection, BudgetSection, MemorySection, PolicySection, RecallSection, Settings,
    UsersSection,
};
use crate::users::PREVIOUS_HEADING;

const IDLE: u64 = 1800;

pub(crate) fn settings() -> Settings {
    Settings {
        budget: BudgetSection {
            safety_margin_tokens: 2048,
            compaction_ratio: 0.8,
            precompact_ratio: 0.0,
            default_context_tokens: 200_000,
            default_max_output_tokens: 8192,
            models: Default::default(),
            agents: Default::default(),
        },
        policy: PolicySection {
            max_tool_result_chars: 20_000,
            raw_tail_turns: 4,
            max_active_turns: 0,
            max_episodic_items: 3,
            max_semantic_items: 20,
            max_carried_tokens: 800,
            strategy: Default::default(),
            keep_last_turns: 8,
            models: Default::default(),
            agents: Default::default(),
        },
        recall: RecallSection {
            enabled: false,
            max_tokens: 1500,
            min_score: 0.0,
            relative_floor: 0.0,
        },
        blocks: BlocksSection { max_share: 0.25 },
        memory: MemorySection {
            default_ttl_secs: 0,
            import_max_mb: 256,
        },
        users: UsersSection {
            inject_last_summary: true,
            summarize_idle_after_secs: IDLE,
        },
        agent_failures: 3,
        agent_cooldown: Duration::from_secs(300),
        idle_evict: None,
        max_calls_per_agent: 0,
        memory_budget: None,
    }
}

async fn talk(engine: &Engine, agent: &str, turns: usize) {
    for n in 1..=turns {
        engine
            .ingest(IngestRequest {
                agent_id: agent.into(),
                events: vec![
                    NewEvent::user(format!("Shall we plan the trip to Kyoto, part {n}?")),
                    NewEvent::assistant(format!("Yes: part {n} of the Kyoto trip is booked.")),
                ],
                user_id: Some("ana".into()),
                ..IngestRequest::default()
            })
            .await
            .unwrap();
    }
}

/// A file store on `dir` and an engine over it.
async fn open(dir: &std::path::Path) -> (Arc<dyn engram_store::Store>, Engine) {
    let store = FileStore::open(StoreConfig::new(dir)).await.unwrap();
    let store: Arc<dyn engram_store::Store> = Arc::new(store);
    let engine = Engine::new(
        Arc::clone(&store),
        Arc::new(engram_llm::Extractive),
        &settings(),
    );
    (store, engine)
}

#[tokio::test(start_paused = true)]
async fn a_quiet_conversation_is_summarized_and_starts_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path()).await;
    talk(&engine, "talk-1", 4).await;
    assert_eq!(engine.summarize_idle().await, 0, "not quiet yet");
    tokio::time::advance(Duration::from_secs(IDLE - 1)).await;
    assert_eq!(engine.summarize_idle().await, 0, "not a second early");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(engine.summarize_idle().await, 1);
    let id = engram_core::AgentId::parse("talk-1").unwrap();
    let bundle = store.bundle(&id, 0).await.unwrap();
    assert_eq!(bundle.episodic.len(), 1);
    assert_eq!(
        bundle.episodic[0].turn_ids.len(),
        3,
        "all but the current turn"
    );
    assert_eq!(engine.summarize_idle().await, 0, "once");

    // The user's next conversation starts with that summary.
    let prepared = engine
        .prepare(PrepareRequest {
            agent_id: "talk-2".into(),
            user_id: Some("ana".into()),
            user_input: Some(NewEvent::user("Where were we?")),
            ..PrepareRequest::default()
        })
        .await
        .unwrap();
    let messages: Vec<_> = prepared.messages.iter().collect();
    assert_eq!(messages[0].role, Role::System);
    let start = &messages[0].content;
    assert!(start.starts_with(PREVIOUS_HEADING), "{start}");
    assert!(start.contains("(talk-1, "), "{start}");
    assert!(start.contains("Kyoto"), "{start}");
    assert_eq!(messages[1].content, "Where were we?");
}

/// A conversation served by an engine that stopped before it went quiet
/// is summarized by the next engine on the same store: the notes reach
/// the store's list, which outlives the engine.
#[tokio::test(start_paused = true)]
async fn a_conversation_quiet_across_a_restart_is_summarized() {
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path()).await;
    talk(&engine, "before-restart", 4).await;
    // What the server does at shutdown.
    engine.note_used().await;
    store.close().await;
    drop((store, engine));

    let (store, engine) = open(dir.path()).await;
    // Each engine counts from the wall clock's whole second when it
    // started: the second one's may be a second later than the first's.
    tokio::time::advance(Duration::from_secs(IDLE - 2)).await;
    assert_eq!(engine.summarize_idle().await, 0, "not quiet yet");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        engine.summarize_idle().await,
        1,
        "the new engine sums it up"
    );
    let id = engram_core::AgentId::parse("before-restart").unwrap();
    assert_eq!(store.bundle(&id, 0).await.unwrap().episodic.len(), 1);
    assert_eq!(engine.summarize_idle().await, 0, "once");
}
