//! Overload: calls past a method's or an agent's limit are answered at
//! once with a retry hint, over gRPC and JSON; health stays served; a
//! caller's deadline ends its call and gives its place back. Calls are
//! held in flight by a summarizer (a local fake) that answers only when
//! the test says.

use std::sync::Arc;
use std::time::Duration;

use crate::common;

use common::*;
use engram_proto::pb;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const SUMMARY: &str = r#"{"episodic_summary": "Squares.", "semantic_facts": []}"#;

/// A server whose summarizer waits for `gate`, with these limits.
async fn held_server(
    gate: &Arc<tokio::sync::Semaphore>,
    limits: &[(&str, &str)],
) -> (TestServer, Arc<tokio::sync::Notify>) {
    let (base, _, arrived) =
        fake_llm_gated(vec![(200, completion(SUMMARY))], Arc::clone(gate)).await;
    let mut env = vec![
        ("ENGRAM__LLM__BASE_URL", base.as_str()),
        ("ENGRAM__LLM__MODEL", "m"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
        ("ENGRAM__HTTP__LISTEN", "127.0.0.1:0"),
    ];
    env.extend_from_slice(limits);
    (TestServer::start_with(&env).await, arrived)
}

/// A Compact of `agent` that waits for the summarizer, started in the
/// background once the agent has turns; returns when the summarizer has
/// the request (the call is in flight).
async fn hold_compact(
    server: &TestServer,
    arrived: &tokio::sync::Notify,
    agent: &str,
) -> tokio::task::JoinHandle<Result<pb::CompactResponse, tonic::Status>> {
    let mut c = server.client().await;
    turns(&mut c, agent, 3).await;
    let agent = agent.to_owned();
    let held =
        tokio::spawn(async move { c.compact(compact(&agent)).await.map(|r| r.into_inner()) });
    arrived.notified().await;
    held
}

fn pushback_ms(status: &tonic::Status) -> u64 {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .expect("a retry hint")
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn serving(server: &TestServer) -> ServingStatus {
    let mut health = HealthClient::new(server.channel().await);
    let answer = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "engram.v1.MemoryService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    ServingStatus::try_from(answer.status).unwrap()
}

async fn post(server: &TestServer, method: &str, body: serde_json::Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{}/v1/{method}", server.http.unwrap()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_past_its_calls_waits_its_turn_and_others_go_on() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (server, arrived) =
        held_server(&gate, &[("ENGRAM__SERVER__MAX_CALLS_PER_AGENT", "1")]).await;
    let held = hold_compact(&server, &arrived, "busy").await;
    let mut c = server.client().await;

    let refused = c
        .ingest(ingest_req("busy", vec![user("one more")]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("max_calls_per_agent"),
        "{refused:?}"
    );
    assert!(pushback_ms(&refused) > 0);
    let json = post(
        &server,
        "GetContextStats",
        serde_json::json!({"agentId": "busy"}),
    )
    .await;
    assert_eq!(json.status(), 429);
    assert_eq!(json.headers()["retry-after"], "1");
    // Another agent, and health, are served meanwhile.
    c.ingest(ingest_req("other", vec![user("hi")]))
        .await
        .unwrap();
    assert_eq!(serving(&server).await, ServingStatus::Serving);

    gate.add_permits(1);
    assert!(held.await.unwrap().unwrap().report.unwrap().performed);
    let out = c
        .ingest(ingest_req("busy", vec![user("one more")]))
        .await
        .expect("its turn once the call ended")
        .into_inner();
    assert_eq!(
        out.current_turn_id, "turn_0004",
        "the refused write stored nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_past_its_calls_is_shed_at_once_and_others_go_on() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (server, arrived) =
        held_server(&gate, &[("ENGRAM__SERVER__MAX_CALLS_PER_METHOD", "1")]).await;
    let held = hold_compact(&server, &arrived, "first").await;
    let mut c = server.client().await;
    turns(&mut c, "second", 3).await;

    let shed = c.compact(compact("second")).await.unwrap_err();
    assert_eq!(shed.code(), Code::Unavailable, "{shed:?}");
    assert!(shed.message().contains("max_calls_per_method"), "{shed:?}");
    assert!(pushback_ms(&shed) > 0);
    let json = post(&server, "Compact", serde_json::json!({"agentId": "second"})).await;
    assert_eq!(json.status(), 503);
    assert!(json.headers().contains_key("retry-after"));
    // Other methods, and health, are served meanwhile.
    c.ingest(ingest_req("second", vec![user("still here")]))
        .await
        .unwrap();
    assert_eq!(serving(&server).await, ServingStatus::Serving);

    gate.add_permits(2);
    assert!(held.await.unwrap().unwrap().report.unwrap().performed);
    let report = c
        .compact(compact("second"))
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert!(report.performed, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_past_its_deadline_gives_its_place_back() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (server, arrived) = held_server(
        &gate,
        &[
            ("ENGRAM__SERVER__MAX_CALLS_PER_AGENT", "1"),
            ("ENGRAM__SERVER__MAX_CALLS_PER_METHOD", "1"),
        ],
    )
    .await;
    let mut c = server.client().await;
    turns(&mut c, "late", 3).await;
    let mut request = tonic::Request::new(compact("late"));
    request.set_timeout(Duration::from_millis(300));
    let call = {
        let mut c = server.client().await;
        tokio::spawn(async move { c.compact(request).await })
    };
    arrived.notified().await;
    let err = call.await.unwrap().unwrap_err();
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    // Its places are free again: the agent's and the method's. The client
    // enforces the same deadline and may see it pass a moment before the
    // server does, so it follows the server's retry hint, as a client
    // would, for a few times the deadline. Were the places not given back
    // they would stay taken until the gate opens, and this would fail.
    let given_back = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let stats = c
            .get_context_stats(pb::GetContextStatsRequest {
                agent_id: "late".into(),
                ..Default::default()
            })
            .await;
        match stats {
            Ok(_) => break,
            Err(busy)
                if busy.code() == Code::ResourceExhausted
                    && tokio::time::Instant::now() < given_back =>
            {
                tokio::time::sleep(Duration::from_millis(pushback_ms(&busy))).await;
            }
            Err(other) => panic!("the agent's place was given back: {other:?}"),
        }
    }
    // The compaction itself goes on (one per agent, shared by whoever
    // asks): a new Compact joins it and gets its report.
    let joined = {
        let mut c = server.client().await;
        tokio::spawn(async move { c.compact(compact("late")).await })
    };
    gate.add_permits(1);
    let report = joined.await.unwrap().unwrap().into_inner().report.unwrap();
    assert!(report.performed, "{report:?}");
}
