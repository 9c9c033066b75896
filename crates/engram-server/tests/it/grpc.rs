//! The real server over gRPC: health, reflection, the Ingest → Retrieve
//! round trip, and every refusal with its status and no file left behind.

use crate::common;

use common::*;
use engram_proto::pb;
use prost_types::value::Kind;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn json_struct(pairs: &[(&str, prost_types::Value)]) -> prost_types::Struct {
    prost_types::Struct {
        fields: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    }
}

fn string_value(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

#[tokio::test]
async fn health_is_serving_for_the_server_and_the_service() {
    let server = TestServer::start().await;
    let mut health = HealthClient::new(server.channel().await);
    for service in ["", "engram.v1.MemoryService"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }
}

#[tokio::test]
async fn health_turns_not_serving_when_draining() {
    let mut server = TestServer::start().await;
    let mut health = HealthClient::new(server.channel().await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "engram.v1.MemoryService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    server.stop_tx.take().unwrap().send(()).unwrap();
    let next = watch.message().await.unwrap().unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
}

#[tokio::test]
async fn reflection_lists_every_service_in_both_versions() {
    use tokio_stream::StreamExt;
    let server = TestServer::start().await;
    let channel = server.channel().await;

    let mut v1 = tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
        channel.clone(),
    );
    let req = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let mut stream = v1
        .server_reflection_info(tokio_stream::once(req))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.next().await.unwrap().unwrap();
    let Some(
        tonic_reflection::pb::v1::server_reflection_response::MessageResponse::ListServicesResponse(
            list,
        ),
    ) = resp.message_response
    else {
        panic!("unexpected reflection answer");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "engram.v1.MemoryService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(names.contains(&expected), "{names:?} lacks {expected}");
    }

    use tonic_reflection::pb::v1alpha as alpha;
    let mut v1alpha = alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let req = alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
                "engram.v1.MemoryService".into(),
            ),
        ),
    };
    let mut stream = v1alpha
        .server_reflection_info(tokio_stream::once(req))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(
            resp.message_response,
            Some(alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(ref f)) if !f.file_descriptor_proto.is_empty()
        ),
        "{resp:?}"
    );
}

#[tokio::test]
async fn ingest_then_retrieve_round_trip() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let call = pb::TraceEvent {
        tool_call_id: "call_1".into(),
        tool_name: "weather".into(),
        tool_args: Some(json_struct(&[("city", string_value("Paris"))])),
        ..event(pb::TraceType::ToolCall, "")
    };
    let result = pb::TraceEvent {
        tool_call_id: "call_1".into(),
        tool_result: Some(string_value("sunny")),
        ..event(pb::TraceType::ToolResult, "")
    };
    let out = client
        .ingest(pb::IngestRequest {
            usage: Some(pb::Usage {
                prompt_tokens: 1200,
                completion_tokens: 30,
                total_tokens: 1230,
            }),
            model: "gpt-4o".into(),
            ..ingest_req("agent-1", vec![user("weather in Paris?"), call, result])
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.current_turn_id, "turn_0001");
    let seqs: Vec<_> = out
        .traces
        .iter()
        .map(|t| (t.turn_id.as_str(), t.seq))
        .collect();
    assert_eq!(seqs, [("turn_0001", 0), ("turn_0001", 1), ("turn_0001", 2)]);
    assert!(out.traces.iter().all(|t| !t.id.is_empty() && t.ts > 0.0));
    assert!(!out.compaction_required);

    client
        .ingest(ingest_req(
            "agent-1",
            vec![event(pb::TraceType::Assistant, "It is sunny.")],
        ))
        .await
        .unwrap();
    let got = client
        .retrieve(pb::RetrieveRequest {
            agent_id: "agent-1".into(),
            include_tool_interactions: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let kinds: Vec<_> = got.raw_tail.iter().map(|t| t.trace_type).collect();
    assert_eq!(kinds, [1, 3, 4, 2]);
    assert_eq!(
        got.raw_tail[1].tool_args,
        Some(json_struct(&[("city", string_value("Paris"))]))
    );
    assert_eq!(got.tool_interactions.len(), 1);
    let it = &got.tool_interactions[0];
    assert_eq!(it.status, pb::ToolStatus::Success as i32);
    assert_eq!(it.result, Some(string_value("sunny")));
    assert_eq!(it.tool_name, "weather");
    let bundle = got.bundle.unwrap();
    assert!(bundle.episodic.is_empty() && bundle.semantic.is_empty());

    // On disk: the design's JSON lines, usage kept with the traces.
    let text =
        std::fs::read_to_string(server.agents_dir().join("agent-1/raw_traces.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[1]["tool_args"]["city"], "Paris");
    assert_eq!(lines[2]["tool_result"], "sunny");
    assert_eq!(lines[2]["usage"]["prompt_tokens"], 1200);
    assert_eq!(lines[2]["model"], "gpt-4o");
}

#[tokio::test]
async fn retrieve_serves_memories_from_the_files() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    client
        .ingest(ingest_req("mem", vec![user("hello")]))
        .await
        .unwrap();
    let dir = server.agents_dir().join("mem");
    let episodic: String = (1..=5)
        .map(|i| format!("{{\"id\":\"e{i}\",\"ts\":{i}.0,\"turn_ids\":[\"turn_000{i}\"],\"summary\":\"s{i}\",\"tags\":[],\"salience\":0.5}}\n"))
        .collect();
    std::fs::write(dir.join("episodic.jsonl"), episodic).unwrap();
    std::fs::write(
        dir.join("semantic.jsonl"),
        concat!(
            "{\"id\":\"f1\",\"ts\":1.0,\"fact\":\"likes tea\",\"tags\":[],\"confidence\":0.9,\"salience\":0.4}\n",
            "{\"id\":\"f2\",\"ts\":2.0,\"fact\":\"lives in Oslo\",\"tags\":[],\"confidence\":0.9,\"salience\":0.9}\n",
            "{\"id\":\"f3\",\"ts\":3.0,\"fact\":\"old\",\"tags\":[],\"confidence\":0.9,\"salience\":1.0,\"superseded_by\":\"f2\"}\n",
        ),
    )
    .unwrap();
    // A restart loads the files (agents load lazily, from disk).
    drop(client);
    let mut server = server;
    server.stop().await;
    let data_dir = server.data_dir;
    let config = engram_server::Config::load_from(
        None,
        [(
            "ENGRAM__STORE__DATA_DIR".to_string(),
            data_dir.path().display().to_string(),
        )],
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(engram_server::run(listener, config, std::future::pending()));
    let mut client = pb::memory_service_client::MemoryServiceClient::new(channel(addr).await);
    let bundle = client
        .retrieve(pb::RetrieveRequest {
            agent_id: "mem".into(),
            max_episodic: Some(2),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .bundle
        .unwrap();
    let e: Vec<_> = bundle.episodic.iter().map(|i| i.id.as_str()).collect();
    let s: Vec<_> = bundle.semantic.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(e, ["e4", "e5"]);
    assert_eq!(s, ["f2", "f1"]);
    // With a query: relevance first (the search index), then salience.
    let ranked = client
        .retrieve(pb::RetrieveRequest {
            agent_id: "mem".into(),
            query: "tea please".into(),
            max_episodic: Some(1),
            max_semantic: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .bundle
        .unwrap();
    assert_eq!(
        ranked.semantic[0].id, "f1",
        "the tea fact beats the more salient Oslo one"
    );
    assert_eq!(ranked.episodic.len(), 1);
}

async fn assert_refused(
    server: &TestServer,
    client: &mut Client,
    req: pb::IngestRequest,
    code: Code,
    says: &str,
) {
    let status = client.ingest(req).await.unwrap_err();
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().contains(says),
        "{:?} should say {says:?}",
        status.message()
    );
    let entries: Vec<_> = std::fs::read_dir(server.agents_dir()).unwrap().collect();
    assert!(entries.is_empty(), "refused input left files: {entries:?}");
}

#[tokio::test]
async fn bad_input_gets_its_status_and_creates_no_file() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let too_long = "a".repeat(129);
    for bad in [
        "../x",
        "",
        "a/b",
        ".hidden",
        too_long.as_str(),
        "semi;colon",
    ] {
        assert_refused(
            &server,
            &mut client,
            ingest_req(bad, vec![user("x")]),
            Code::InvalidArgument,
            "agent_id",
        )
        .await;
        let status = client
            .retrieve(pb::RetrieveRequest {
                agent_id: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "retrieve {bad:?}");
    }
    assert_refused(
        &server,
        &mut client,
        ingest_req("ok-agent", vec![event(pb::TraceType::Unspecified, "x")]),
        Code::InvalidArgument,
        "trace_type",
    )
    .await;
    let orphan = pb::TraceEvent {
        tool_result: Some(string_value("r")),
        ..event(pb::TraceType::ToolResult, "")
    };
    assert_refused(
        &server,
        &mut client,
        ingest_req("ok-agent", vec![user("q"), orphan]),
        Code::InvalidArgument,
        "tool_call_id",
    )
    .await;
    let huge = user(&"x".repeat(5 * 1024 * 1024));
    assert_refused(
        &server,
        &mut client,
        ingest_req("ok-agent", vec![huge]),
        Code::ResourceExhausted,
        "",
    )
    .await;
    assert_refused(
        &server,
        &mut client,
        ingest_req("ok-agent", vec![]),
        Code::InvalidArgument,
        "events is empty",
    )
    .await;
    // The connection still works after the refusals.
    client
        .ingest(ingest_req("ok-agent", vec![user("fine")]))
        .await
        .unwrap();
}

#[tokio::test]
async fn limits_from_config_are_resource_exhausted() {
    let server = TestServer::start_with(&[
        ("ENGRAM__LIMITS__MAX_EVENTS_PER_REQUEST", "2"),
        ("ENGRAM__SERVER__MAX_MESSAGE_BYTES", "65536"),
    ])
    .await;
    let mut client = server.client().await;
    assert_refused(
        &server,
        &mut client,
        ingest_req("a", vec![user("1"), user("2"), user("3")]),
        Code::ResourceExhausted,
        "limits.max_events_per_request",
    )
    .await;
    assert_refused(
        &server,
        &mut client,
        ingest_req("a", vec![user(&"y".repeat(70_000))]),
        Code::ResourceExhausted,
        "over server.max_message_bytes (65536 bytes)",
    )
    .await;
}

#[tokio::test]
async fn unknown_agents_are_not_found() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let status = client
        .retrieve(pb::RetrieveRequest {
            agent_id: "nobody".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .delete_agent(pb::DeleteAgentRequest {
            agent_id: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test]
async fn retries_with_event_id_store_once() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let e = pb::TraceEvent {
        event_id: "evt-1".into(),
        ..user("hello")
    };
    let first = client
        .ingest(ingest_req("idem", vec![e.clone()]))
        .await
        .unwrap()
        .into_inner();
    let again = client
        .ingest(ingest_req("idem", vec![e]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.traces, again.traces);
    assert_eq!(all_traces(&mut client, "idem").await.len(), 1);
}

/// `engramd --help` says what the program is and does, not how the crate
/// is built.
#[test]
fn help_describes_the_program() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_engramd"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.starts_with("Engram: memory for LLM agents"), "{help}");
    for command in ["serve", "reindex", "migrate", "health", "check-config"] {
        assert!(help.contains(command), "{command} missing from:\n{help}");
    }
    assert!(!help.contains("wiring"), "{help}");
}
