//! The JSON API on the HTTP listener: every method reachable as `POST
//! /v1/<Method>`, its answers the same messages as gRPC's on the same
//! calls (read back through the descriptors), the bundle streamed out and
//! in, and the refusals mapped to HTTP statuses with a JSON error body.

use crate::common;

use common::*;
use engram_proto::pb;
use prost_reflect::{DescriptorPool, DynamicMessage};
use serde_json::{Value, json};

/// A JSON client of one server.
struct Http {
    base: String,
    client: reqwest::Client,
    token: Option<String>,
}

impl Http {
    fn of(server: &TestServer) -> Self {
        Self {
            base: format!("http://{}", server.http.expect("the HTTP listener is on")),
            client: reqwest::Client::new(),
            token: None,
        }
    }

    /// The raw answer to `body` sent to `method`.
    async fn raw(&self, method: &str, content_type: &str, body: Vec<u8>) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/v1/{method}", self.base))
            .header("content-type", content_type)
            .body(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request.send().await.unwrap()
    }

    /// The HTTP status and JSON answer to `body`.
    async fn call(&self, method: &str, body: Value) -> (u16, Value) {
        let answer = self
            .raw(method, "application/json", body.to_string().into_bytes())
            .await;
        let status = answer.status().as_u16();
        assert_eq!(
            answer.headers()["content-type"],
            "application/json",
            "{method}"
        );
        (status, answer.json().await.unwrap())
    }

    /// A call that must succeed: its answer.
    async fn ok(&self, method: &str, body: Value) -> Value {
        let (status, answer) = self.call(method, body).await;
        assert_eq!(status, 200, "{method}: {answer}");
        answer
    }

    /// A call that must fail: the HTTP status and the error's gRPC name.
    async fn refused(&self, method: &str, body: Value) -> (u16, String) {
        let (status, answer) = self.call(method, body).await;
        assert_ne!(status, 200, "{method}: {answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], status, "{answer}");
        assert!(!error["message"].as_str().unwrap().is_empty(), "{answer}");
        (status, error["status"].as_str().unwrap().to_owned())
    }
}

/// A JSON answer read as the gRPC message `T` (`pb::<name>`).
fn as_message<T: prost::Message + Default>(name: &str, answer: &Value) -> T {
    let pool = DescriptorPool::decode(engram_proto::FILE_DESCRIPTOR_SET).unwrap();
    let desc = pool
        .get_message_by_name(&format!("engram.v1.{name}"))
        .unwrap();
    DynamicMessage::deserialize(desc, answer.clone())
        .unwrap()
        .transcode_to()
        .unwrap()
}

pub(crate) async fn http_server(env: &[(&str, &str)]) -> TestServer {
    let mut env = env.to_vec();
    env.push(("ENGRAM__HTTP__LISTEN", "127.0.0.1:0"));
    TestServer::start_with(&env).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_answers_as_json_what_grpc_answers() {
    let server = http_server(&[]).await;
    let mut c = server.client().await;
    let http = Http::of(&server);
    let say = |text: &str| pb::IngestRequest {
        user_id: "ana".into(),
        ..ingest_req("trip", vec![user(text)])
    };
    c.ingest(say("We fly to Lisbon in May")).await.unwrap();
    c.ingest(say("Book the hotel near the river"))
        .await
        .unwrap();
    let scope = json!({"agent_id": "trip"});
    let added = http
        .ok(
            "AddMemories",
            json!({"scope": scope, "memories": [{"text": "Prefers window seats", "pinned": true}]}),
        )
        .await;
    let id = added["results"][0]["id"].as_str().unwrap().to_owned();
    http.ok(
        "PutMemoryBlock",
        json!({"scope": scope, "label": "plan", "value": "Lisbon, May"}),
    )
    .await;

    macro_rules! same {
        ($method:literal, $rpc:ident, $req:expr, $json:expr, $answer:ident) => {{
            let grpc = c.$rpc($req).await.unwrap().into_inner();
            let json = http.ok($method, $json).await;
            let json: pb::$answer = as_message(stringify!($answer), &json);
            assert_eq!(json, grpc, $method);
        }};
    }
    same!(
        "PrepareRequest",
        prepare_request,
        pb::PrepareRequestRequest {
            agent_id: "trip".into(),
            model: "gpt-4o".into(),
            render_format: pb::RenderFormat::OpenaiChat.into(),
            ..Default::default()
        },
        json!({"agentId": "trip", "model": "gpt-4o", "renderFormat": "RENDER_FORMAT_OPENAI_CHAT"}),
        PrepareRequestResponse
    );
    same!(
        "Retrieve",
        retrieve,
        pb::RetrieveRequest {
            agent_id: "trip".into(),
            ..Default::default()
        },
        json!({"agent_id": "trip"}),
        RetrieveResponse
    );
    same!(
        "SearchHistory",
        search_history,
        pb::SearchHistoryRequest {
            agent_id: "trip".into(),
            query: "hotel".into(),
            limit: 5,
            ..Default::default()
        },
        json!({"agentId": "trip", "query": "hotel", "limit": 5}),
        SearchHistoryResponse
    );
    same!(
        "GetContextStats",
        get_context_stats,
        pb::GetContextStatsRequest {
            agent_id: "trip".into(),
            model: "gpt-4o".into()
        },
        json!({"agentId": "trip", "model": "gpt-4o"}),
        GetContextStatsResponse
    );
    same!(
        "ListAgents",
        list_agents,
        pb::ListAgentsRequest::default(),
        json!({}),
        ListAgentsResponse
    );
    let pb_scope = || {
        Some(pb::MemoryScope {
            scope: Some(pb::memory_scope::Scope::AgentId("trip".into())),
        })
    };
    same!(
        "ListMemoryBlocks",
        list_memory_blocks,
        pb::ListMemoryBlocksRequest { scope: pb_scope() },
        json!({"scope": scope}),
        ListMemoryBlocksResponse
    );
    same!(
        "GetMemoryBlock",
        get_memory_block,
        pb::GetMemoryBlockRequest {
            scope: pb_scope(),
            label: "plan".into(),
            include_history: true
        },
        json!({"scope": scope, "label": "plan", "includeHistory": true}),
        GetMemoryBlockResponse
    );
    same!(
        "ListMemories",
        list_memories,
        pb::ListMemoriesRequest {
            scope: pb_scope(),
            ..Default::default()
        },
        json!({"scope": scope}),
        ListMemoriesResponse
    );
    same!(
        "GetMemory",
        get_memory,
        pb::GetMemoryRequest {
            scope: pb_scope(),
            id: id.clone()
        },
        json!({"scope": scope, "id": id}),
        GetMemoryResponse
    );
    same!(
        "GetMemoryHistory",
        get_memory_history,
        pb::GetMemoryHistoryRequest {
            scope: pb_scope(),
            id: id.clone()
        },
        json!({"scope": scope, "id": id}),
        GetMemoryHistoryResponse
    );

    // The bundle: the same bytes as gRPC's pieces put together.
    let mut pieces = c
        .export_memory(pb::ExportMemoryRequest { scope: pb_scope() })
        .await
        .unwrap()
        .into_inner();
    let mut grpc_bundle = vec![];
    while let Some(piece) = pieces.message().await.unwrap() {
        grpc_bundle.extend(piece.lines);
    }
    let exported = http
        .raw(
            "ExportMemory",
            "application/json",
            json!({"scope": scope}).to_string().into_bytes(),
        )
        .await;
    assert_eq!(exported.status(), 200);
    assert_eq!(exported.headers()["content-type"], "application/x-ndjson");
    let json_bundle = exported.bytes().await.unwrap().to_vec();
    let after_header = |b: &[u8]| {
        let text = String::from_utf8(b.to_vec()).unwrap();
        text.split_once('\n').unwrap().1.to_owned()
    };
    assert_eq!(after_header(&json_bundle), after_header(&grpc_bundle));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_works_as_json() {
    let server = http_server(&[("ENGRAM__POLICY__RAW_TAIL_TURNS", "1")]).await;
    let mut c = server.client().await;
    let http = Http::of(&server);
    for text in [
        "We adopted a puppy",
        "Its name is Rex",
        "Rex likes the park",
    ] {
        let ingested = http
            .ok(
                "Ingest",
                json!({"agentId": "pet", "userId": "bo", "events": [
                    {"traceType": "TRACE_TYPE_USER", "content": text},
                    {"traceType": "TRACE_TYPE_ASSISTANT", "content": "Noted."}]}),
            )
            .await;
        assert!(
            ingested["currentTurnId"]
                .as_str()
                .unwrap()
                .starts_with("turn_")
        );
    }
    assert_eq!(all_traces(&mut c, "pet").await.len(), 6);
    let compacted = http.ok("Compact", json!({"agentId": "pet"})).await;
    assert!(compacted["report"].is_object(), "{compacted}");
    let forked = http
        .ok(
            "ForkAgent",
            json!({"sourceAgentId": "pet", "targetAgentId": "pet-2"}),
        )
        .await;
    assert_eq!(forked["agentId"], "pet-2");

    let scope = json!({"agentId": "pet"});
    let put = http
        .ok(
            "PutMemoryBlock",
            json!({"scope": scope, "label": "notes", "value": "walks at 8"}),
        )
        .await;
    let version = put["block"]["version"].clone();
    let edited = http
        .ok(
            "EditMemoryBlock",
            json!({"scope": scope, "label": "notes", "expectedVersion": version,
                   "edit": {"append": " and 18"}}),
        )
        .await;
    assert_eq!(edited["block"]["value"], "walks at 8\n and 18", "{edited}");
    http.ok(
        "DeleteMemoryBlock",
        json!({"scope": scope, "label": "notes"}),
    )
    .await;

    let added = http
        .ok(
            "AddMemories",
            json!({"scope": scope, "memories": [{"text": "Lives in Oslo"}]}),
        )
        .await;
    let id = added["results"][0]["id"].as_str().unwrap().to_owned();
    let updated = http
        .ok(
            "UpdateMemory",
            json!({"scope": scope, "id": id, "text": "Lives in Berlin", "expectedVersion": 1}),
        )
        .await;
    assert_eq!(updated["memory"]["fact"], "Lives in Berlin", "{updated}");
    let deleted = http
        .ok("DeleteMemory", json!({"scope": scope, "id": id}))
        .await;
    assert!(deleted["version"].as_u64().is_some() || deleted["version"].is_string());

    let forgot = http
        .ok(
            "ForgetTurn",
            json!({"agentId": "pet-2", "turnId": "turn_0003"}),
        )
        .await;
    assert!(forgot["tracesErased"].as_u64().unwrap() > 0, "{forgot}");
    let none = http
        .ok(
            "ForgetEvents",
            json!({"agentId": "pet-2", "ids": ["no-such-event"]}),
        )
        .await;
    assert_eq!(none, json!({}), "nothing erased: every count its default");

    // A bundle out and in again, as the body, replacing the agent.
    let bundle = http
        .raw(
            "ExportMemory",
            "application/json",
            json!({"scope": scope}).to_string().into_bytes(),
        )
        .await
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let refused = http
        .raw("ImportMemory", "application/x-ndjson", bundle.clone())
        .await;
    assert_eq!(refused.status(), 409, "the agent exists");
    let imported = http
        .raw_query("ImportMemory?replace=true", bundle.clone())
        .await;
    assert_eq!(imported["agents"], 1, "{imported}");
    // And as the request message, its lines in base64, into a new server.
    let other = http_server(&[]).await;
    let lines = base64_of(&bundle);
    let imported = Http::of(&other)
        .ok("ImportMemory", json!({"lines": lines}))
        .await;
    assert_eq!(imported["agents"], 1, "{imported}");

    assert_eq!(
        http.ok("DeleteAgent", json!({"agentId": "pet-2"})).await,
        json!({})
    );
    let erased = http.ok("DeleteUser", json!({"userId": "bo"})).await;
    assert_eq!(erased["agentsDeleted"], 1, "{erased}");
    assert_eq!(
        http.refused("Retrieve", json!({"agentId": "pet"})).await,
        (404, "NOT_FOUND".to_owned())
    );
}

impl Http {
    /// ImportMemory with the bundle as the body and a query string.
    async fn raw_query(&self, path: &str, body: Vec<u8>) -> Value {
        let answer = self
            .client
            .post(format!("{}/v1/{path}", self.base))
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        answer.json().await.unwrap()
    }
}

fn base64_of(bytes: &[u8]) -> String {
    // The proto3 JSON mapping's bytes, through the descriptors.
    let message = pb::ImportMemoryRequest {
        lines: bytes.to_vec(),
        replace: false,
    };
    let pool = DescriptorPool::decode(engram_proto::FILE_DESCRIPTOR_SET).unwrap();
    let desc = pool
        .get_message_by_name("engram.v1.ImportMemoryRequest")
        .unwrap();
    let mut dynamic = DynamicMessage::new(desc);
    dynamic.transcode_from(&message).unwrap();
    serde_json::to_value(&dynamic).unwrap()["lines"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_http_statuses_with_a_json_error() {
    let server = http_server(&[("ENGRAM__SERVER__MAX_MESSAGE_BYTES", "65536")]).await;
    let http = Http::of(&server);
    for agent in ["a", "b"] {
        http.ok(
            "Ingest",
            json!({"agentId": agent, "events": [{"traceType": "TRACE_TYPE_USER", "content": "hi"}]}),
        )
        .await;
    }
    let cases = [
        (
            "Ingest",
            json!({"agentId": "a", "nope": 1}),
            400,
            "INVALID_ARGUMENT",
        ),
        ("Ingest", json!({"agentId": 7}), 400, "INVALID_ARGUMENT"),
        ("Ingest", json!({"agentId": "a"}), 400, "INVALID_ARGUMENT"),
        ("Retrieve", json!({"agentId": "nobody"}), 404, "NOT_FOUND"),
        ("Teleport", json!({}), 404, "NOT_FOUND"),
        (
            "ForkAgent",
            json!({"sourceAgentId": "a", "targetAgentId": "b"}),
            409,
            "ALREADY_EXISTS",
        ),
        (
            "Ingest",
            json!({"agentId": "a", "events": [{"traceType": "TRACE_TYPE_USER", "content": "x".repeat(70_000)}]}),
            413,
            "RESOURCE_EXHAUSTED",
        ),
    ];
    for (method, body, status, name) in cases {
        assert_eq!(
            http.refused(method, body.clone()).await,
            (status, name.to_owned()),
            "{method} {}",
            body.to_string().chars().take(80).collect::<String>()
        );
    }
    let mut grpc = server.client().await;
    let stale = json!({"scope": {"agentId": "a"}, "memories": [{"text": "Tea"}]});
    let id = http.ok("AddMemories", stale).await["results"][0]["id"].clone();
    assert_eq!(
        http.refused(
            "UpdateMemory",
            json!({"scope": {"agentId": "a"}, "id": id, "text": "Coffee", "expectedVersion": 9})
        )
        .await,
        (409, "ABORTED".to_owned())
    );
    // The same refusal over gRPC.
    let over_grpc = grpc
        .update_memory(pb::UpdateMemoryRequest {
            scope: Some(pb::MemoryScope {
                scope: Some(pb::memory_scope::Scope::AgentId("a".into())),
            }),
            id: id.as_str().unwrap().into(),
            text: Some("Coffee".into()),
            expected_version: 9,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(over_grpc.code(), tonic::Code::Aborted);

    let not_json = http.raw("Ingest", "application/json", b"{".to_vec()).await;
    assert_eq!(not_json.status(), 400);
    let form = http.raw("Ingest", "text/plain", b"{}".to_vec()).await;
    assert_eq!(form.status(), 415);
    let get = reqwest::get(format!("{}/v1/Ingest", http.base))
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let elsewhere = reqwest::get(format!("{}/nowhere", http.base))
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_guard_the_json_api_as_they_guard_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(
        dir.path(),
        "[[tokens]]\nname = \"team-a\"\ntoken = \"team-a-secret-0123456789\"\nagents = [\"team-a-*\"]\n",
    );
    let server = http_server(&[("ENGRAM__AUTH__TOKENS_FILE", tokens.as_str())]).await;
    let mut http = Http::of(&server);
    let ingest = |agent: &str| json!({"agentId": agent, "events": [{"traceType": "TRACE_TYPE_USER", "content": "hi"}]});
    let (status, name) = http.refused("Ingest", ingest("team-a-1")).await;
    assert_eq!((status, name.as_str()), (401, "UNAUTHENTICATED"));
    http.token = Some("not-a-token-of-this-server".into());
    assert_eq!(http.refused("Ingest", ingest("team-a-1")).await.0, 401);
    http.token = Some("team-a-secret-0123456789".into());
    http.ok("Ingest", ingest("team-a-1")).await;
    assert_eq!(
        http.refused("Ingest", ingest("team-b-1")).await,
        (403, "PERMISSION_DENIED".to_owned())
    );
    assert_eq!(
        http.refused("DeleteUser", json!({"userId": "u"})).await,
        (403, "PERMISSION_DENIED".to_owned())
    );
}

/// A JSON call in flight when the server is asked to stop finishes with
/// its answer (the HTTP listener drains with gRPC's), and the server then
/// stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_at_shutdown_is_answered() {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let summary = r#"{"episodic_summary": "Talked about a puppy.", "semantic_facts": []}"#;
    let (base, _, arrived) = fake_llm_gated(
        vec![(200, completion(summary))],
        std::sync::Arc::clone(&gate),
    )
    .await;
    let mut server = http_server(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "m"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let http = Http::of(&server);
    for text in [
        "We adopted a puppy",
        "Its name is Rex",
        "Rex likes the park",
    ] {
        http.ok(
            "Ingest",
            json!({"agentId": "d", "events": [{"traceType": "TRACE_TYPE_USER", "content": text}]}),
        )
        .await;
    }
    // A compaction waits on "the LLM" until the gate opens.
    let compact = tokio::spawn(async move { http.call("Compact", json!({"agentId": "d"})).await });
    arrived.notified().await;
    // Stop, and wait for the drain to begin (health turns NOT_SERVING just
    // before the HTTP listener is told to stop) while the call waits.
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let mut health = HealthClient::new(server.channel().await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "engram.v1.MemoryService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    server.stop_tx.take().unwrap().send(()).unwrap();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::NotServing as i32
    );
    // The watch is a call in flight too: the drain would wait for it.
    drop((watch, health));
    gate.add_permits(1);
    let (status, answer) = compact.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["report"]["performed"], true, "{answer}");
    assert_eq!(answer["report"]["steps"], json!(["summarize"]), "{answer}");
    server.stop().await;
}
