//! Compaction requests that meet: concurrent requests for one agent share
//! one summary, and one agent's failures pause that agent only.

use crate::common;

use std::sync::Arc;

use common::*;
use engram_core::AgentId;
use engram_core::compaction::{Tier, Trigger};
use engram_engine::budget::Budgets;
use engram_engine::compactor::Compactor;
use engram_proto::pb;
use engram_server::wiring::{engine_settings, summarizer};
use futures_util::FutureExt;

const SUMMARY: &str = r#"{"episodic_summary": "Early squares.", "semantic_facts": []}"#;

fn llm_env(base: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ENGRAM__LLM__BASE_URL", base.to_owned()),
        ("ENGRAM__LLM__MODEL", "m".to_owned()),
        ("ENGRAM__LLM__MAX_RETRIES", "0".to_owned()),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1".to_owned()),
    ]
}

async fn start(env: &[(&'static str, String)]) -> TestServer {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestServer::start_with(&env).await
}

/// A store and a compactor over it, configured by `env`, for tests that
/// drive compactions directly.
async fn compactor_over(
    env: &[(&'static str, String)],
) -> (
    engram_server::Config,
    Arc<dyn engram_store::Store>,
    Compactor,
) {
    let config =
        engram_server::Config::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.clone())))
            .unwrap();
    let store: Arc<dyn engram_store::Store> = Arc::new(
        engram_files::FileStore::open(config.store_config())
            .await
            .unwrap(),
    );
    let compactor = Compactor::new(
        Arc::clone(&store),
        Arc::default(),
        Arc::new(Budgets::new(config.budget.clone())),
        summarizer(&config.llm).unwrap(),
        &engine_settings(&config),
    );
    (config, store, compactor)
}

/// A PrepareRequest that asks to compact first; its report.
async fn forced(c: &mut Client, agent: &str) -> pb::CompactionReport {
    c.prepare_request(pb::PrepareRequestRequest {
        agent_id: agent.into(),
        force_compaction: true,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .compaction
    .unwrap()
}

/// A manual Compact, an automatic compaction and another manual Compact of
/// one agent at once: one summarizer call, one summary, the same report
/// for all three; nothing is thrown away. The compactions run on a
/// compactor of the test's own over the server's store, so the test can
/// make sure the later two are waiting before the summarizer answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_compactions_of_one_agent_share_one_summary() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (base, seen, arrived) =
        fake_llm_gated(vec![(200, completion(SUMMARY))], Arc::clone(&gate)).await;
    let data = tempfile::tempdir().unwrap();
    let mut env = llm_env(&base);
    env.push(("ENGRAM__STORE__DATA_DIR", data.path().display().to_string()));
    let (config, store, compactor) = compactor_over(&env).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(engram_server::serve(
        engram_server::Listeners {
            grpc: listener,
            metrics: None,
            http: None,
        },
        config,
        store,
        async {
            let _ = stopped.await;
        },
    ));
    let mut c = pb::memory_service_client::MemoryServiceClient::new(channel(addr).await);
    turns(&mut c, "race", 5).await;
    let agent = AgentId::parse("race").unwrap();

    let first = tokio::spawn({
        let (compactor, agent) = (compactor.clone(), agent.clone());
        async move {
            compactor
                .compact(&agent, Trigger::Manual, None, 0, summarize(&compactor))
                .await
        }
    });
    // The summarizer has the first request and has not answered: the
    // later two start and find it running.
    arrived.notified().await;
    let mut second =
        Box::pin(compactor.compact(&agent, Trigger::Reactive, None, 0, summarize(&compactor)));
    let mut third = Box::pin(compactor.compact(
        &agent,
        Trigger::Manual,
        Some("again"),
        0,
        summarize(&compactor),
    ));
    assert!((&mut second).now_or_never().is_none());
    assert!((&mut third).now_or_never().is_none());
    gate.add_permits(1);
    let (first, second, third) = tokio::join!(first, second, third);
    let first = first.unwrap().report;
    let (second, third) = (second.report, third.report);
    assert!(first.performed, "{first:?}");
    assert_eq!(first.trigger, Trigger::Manual);
    for other in [&second, &third] {
        assert!(other.performed, "{other:?}");
        assert_eq!(other.episodic_id, first.episodic_id, "the same summary");
        assert_eq!(other.turn_ids, first.turn_ids);
    }
    assert_eq!(seen.lock().unwrap().len(), 1, "one summarizer call for all");
    assert_eq!(bundle(&mut c, "race").await.episodic.len(), 1);
    // Once it is over, a new request compacts afresh.
    turns(&mut c, "race", 3).await;
    gate.add_permits(1);
    let next = compact_now(&mut c, "race").await;
    assert!(next.performed, "{next:?}");
    assert_ne!(next.episodic_id, first.episodic_id);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// A compaction that joins a running one must not answer with the
/// leader's prompt when that was taken before the joiner's own write: here
/// the leader's microcompact ran, its summary then failed, and meanwhile
/// the joiner's user message arrived. The joiner's prompt has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_never_gets_a_prompt_older_than_its_own_write() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (base, _seen, arrived) = fake_llm_gated(vec![(500, "{}".into())], Arc::clone(&gate)).await;
    let data = tempfile::tempdir().unwrap();
    let mut env = llm_env(&base);
    env.extend([
        ("ENGRAM__STORE__DATA_DIR", data.path().display().to_string()),
        ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "8000".into()),
        ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "1000".into()),
    ]);
    let (_, store, compactor) = compactor_over(&env).await;
    let agent = AgentId::parse("joined").unwrap();
    let words = "a fairly long line with many different words in it ";
    for t in 1..=5 {
        let events = [
            engram_core::NewEvent::user(words.repeat(100)),
            engram_core::NewEvent::tool_call(format!("c{t}"), "fetch", serde_json::json!({})),
            engram_core::NewEvent::tool_result(
                format!("c{t}"),
                format!("{t}: {}", words.repeat(80)).into(),
            ),
        ];
        store
            .ingest(&agent, &events, None, None, None)
            .await
            .unwrap();
    }
    let leader = tokio::spawn({
        let (compactor, agent) = (compactor.clone(), agent.clone());
        async move {
            compactor
                .compact(&agent, Trigger::Estimate, None, 0, summarize(&compactor))
                .await
        }
    });
    // Microcompact is done and the summarizer has the window.
    arrived.notified().await;
    let question = engram_core::NewEvent::user("the joiner's question");
    store
        .ingest(&agent, &[question], None, None, None)
        .await
        .unwrap();
    let mut joiner =
        Box::pin(compactor.compact(&agent, Trigger::Estimate, None, 0, summarize(&compactor)));
    assert!((&mut joiner).now_or_never().is_none(), "it joined");
    gate.add_permits(1);
    let (leader, joined) = tokio::join!(leader, joiner);
    let leader = leader.unwrap();
    assert_eq!(leader.report.steps, [Tier::Microcompact, Tier::Summarize]);
    assert!(!leader.report.performed, "the summary failed: {leader:?}");
    let stale = leader.context.expect("the microcompacted prompt");
    assert!(
        !stale
            .messages
            .iter()
            .any(|m| m.content == "the joiner's question")
    );
    if let Some(context) = joined.context {
        assert!(
            context
                .messages
                .iter()
                .any(|m| m.content == "the joiner's question"),
            "the joiner got a prompt without its own message"
        );
    }
}

/// One agent whose summaries keep coming back unusable pauses its own
/// automatic compaction; another agent compacts at once, and a manual
/// Compact of the paused agent still tries.
#[tokio::test]
async fn one_agents_failures_pause_that_agent_only() {
    let (base, seen) = fake_llm(vec![
        (200, completion("")),
        (200, completion("")),
        (200, completion("")),
        (200, completion(SUMMARY)),
    ])
    .await;
    let server = start(&llm_env(&base)).await;
    let mut c = server.client().await;
    turns(&mut c, "bad", 5).await;
    turns(&mut c, "good", 5).await;
    for n in 1..=3 {
        let r = forced(&mut c, "bad").await;
        assert!(!r.performed);
        assert!(
            r.error.contains("empty answer")
                && r.error.contains(&format!("consecutive failures: {n}")),
            "{r:?}"
        );
    }
    let paused = forced(&mut c, "bad").await;
    assert!(!paused.performed);
    assert!(
        paused.error.starts_with("compaction paused") && paused.error.contains("resumes in 300s"),
        "{paused:?}"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        3,
        "a paused agent costs no call"
    );

    let other = forced(&mut c, "good").await;
    assert!(other.performed, "not held up by another agent: {other:?}");
    assert_eq!(seen.lock().unwrap().len(), 4);

    let manual = compact_now(&mut c, "bad").await;
    assert!(
        manual.performed,
        "a manual Compact tries at once: {manual:?}"
    );
    turns(&mut c, "bad", 3).await;
    let resumed = forced(&mut c, "bad").await;
    assert!(resumed.performed, "a success ends the pause: {resumed:?}");
}

/// An outage (every call fails with 500) opens the endpoint's circuit for
/// every agent, but for a short first cool-down, not for minutes.
#[tokio::test]
async fn an_outage_opens_the_endpoint_circuit_for_seconds() {
    let (base, seen) = fake_llm(vec![(500, "{\"error\":\"down\"}".into())]).await;
    let server = start(&llm_env(&base)).await;
    let mut c = server.client().await;
    for agent in ["b1", "b2", "b3", "c"] {
        turns(&mut c, agent, 5).await;
    }
    for agent in ["b1", "b2", "b3"] {
        let r = forced(&mut c, agent).await;
        assert!(r.error.contains("500"), "{r:?}");
    }
    let r = forced(&mut c, "c").await;
    assert!(
        r.error.contains("circuit open") && r.error.contains("retrying in 5s"),
        "{r:?}"
    );
    assert!(
        r.error.contains("consecutive failures: 0"),
        "not c's failure: {r:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
}

/// The strategy that summarizes (the default).
fn summarize(compactor: &engram_engine::compactor::Compactor) -> engram_engine::strategy::Chosen {
    compactor.strategy("", "", Some(engram_core::compaction::Strategy::Summarize))
}
