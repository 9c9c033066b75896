//! MCP at /mcp, by raw HTTP: the transport's refusals (406, 415, 400,
//! 403), the token's scope over the tools (401 without one, `isError`
//! outside it), the memory a call names or defaults to, and the
//! read-only rule of blocks. (clients/python/tests/test_mcp.py drives it
//! with the official Python client.)

use crate::common;

use common::*;
use engram_proto::pb;
use serde_json::{Value, json};

const ACCEPT: &str = "application/json, text/event-stream";

struct Mcp {
    url: String,
    client: reqwest::Client,
    token: Option<&'static str>,
}

impl Mcp {
    fn of(server: &TestServer) -> Self {
        Self {
            url: format!("http://{}/mcp", server.http.expect("the HTTP listener")),
            client: reqwest::Client::new(),
            token: None,
        }
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .body(body.to_string());
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        request
    }

    /// A tool's result: (isError, its text).
    async fn call(&self, tool: &str, arguments: Value) -> (bool, String) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        let answer: Value = self.post(&body).send().await.unwrap().json().await.unwrap();
        let result = &answer["result"];
        assert!(result.is_object(), "{tool}: {answer}");
        let text = result["content"][0]["text"].as_str().unwrap().to_owned();
        (result["isError"].as_bool().unwrap_or(false), text)
    }
}

async fn mcp_server(env: &[(&str, &str)]) -> TestServer {
    let mut env = env.to_vec();
    env.push(("ENGRAM__HTTP__LISTEN", "127.0.0.1:0"));
    TestServer::start_with(&env).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transport_refuses_what_the_protocol_refuses() {
    let server = mcp_server(&[]).await;
    let mcp = Mcp::of(&server);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(mcp.post(&list).send().await.unwrap()), 200);
    let no_accept = mcp
        .client
        .post(&mcp.url)
        .header("content-type", "application/json");
    assert_eq!(
        status(no_accept.body(list.to_string()).send().await.unwrap()),
        406
    );
    let text = mcp
        .client
        .post(&mcp.url)
        .header("content-type", "text/plain")
        .header("accept", ACCEPT)
        .body(list.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(status(text), 415);
    let version = mcp
        .post(&list)
        .header("mcp-protocol-version", "1999-01-01")
        .send()
        .await
        .unwrap();
    assert_eq!(status(version), 400);
    let foreign = mcp
        .post(&list)
        .header("host", "evil.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(status(foreign), 403);
    let unknown = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "teleport", "arguments": {}}});
    let answer: Value = mcp
        .post(&unknown)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(answer["error"]["code"].is_i64(), "{answer}");

    // The ten tools of DESIGN §13, annotated.
    let tools: Value = mcp.post(&list).send().await.unwrap().json().await.unwrap();
    let tools = tools["result"]["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "add_memories",
            "append_memory_block",
            "delete_memory",
            "get_context_stats",
            "list_memories",
            "read_memory_block",
            "replace_in_memory_block",
            "search_history",
            "search_memory",
            "update_memory"
        ]
    );
    for tool in tools {
        let read_only = tool["annotations"]["readOnlyHint"].as_bool().unwrap();
        let name = tool["name"].as_str().unwrap();
        let reads = ["search", "list", "read", "get"]
            .iter()
            .any(|p| name.starts_with(p));
        assert_eq!(read_only, reads, "{name}");
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_act_on_the_named_memory_or_the_default_and_respect_read_only() {
    let server = mcp_server(&[("ENGRAM__MCP__USER_ID", "ana")]).await;
    let mcp = Mcp::of(&server);
    // No agent named: the server's default user.
    let (error, added) = mcp
        .call(
            "add_memories",
            json!({"memories": [{"text": "Prefers tea", "pinned": true}]}),
        )
        .await;
    assert!(!error, "{added}");
    let mut grpc = server.client().await;
    let listed = grpc
        .list_memories(pb::ListMemoriesRequest {
            scope: Some(pb::MemoryScope {
                scope: Some(pb::memory_scope::Scope::UserId("ana".into())),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.memories[0].fact, "Prefers tea");
    let id = listed.memories[0].id.clone();
    let (error, updated) = mcp
        .call(
            "update_memory",
            json!({"memory_id": id, "text": "Prefers green tea"}),
        )
        .await;
    assert!(!error && updated.contains("Prefers green tea"), "{updated}");
    let (error, found) = mcp
        .call("search_memory", json!({"query": "green tea"}))
        .await;
    assert!(!error && found.contains("Prefers green tea"), "{found}");

    // A block the application marked read-only: tools read it, not write.
    grpc.put_memory_block(pb::PutMemoryBlockRequest {
        scope: Some(pb::MemoryScope {
            scope: Some(pb::memory_scope::Scope::UserId("ana".into())),
        }),
        label: "rules".into(),
        value: "Be brief.".into(),
        read_only: Some(true),
        ..Default::default()
    })
    .await
    .unwrap();
    let (error, read) = mcp
        .call("read_memory_block", json!({"label": "rules"}))
        .await;
    assert!(!error && read.contains("Be brief."), "{read}");
    for (tool, args) in [
        (
            "append_memory_block",
            json!({"label": "rules", "text": "Swear."}),
        ),
        (
            "replace_in_memory_block",
            json!({"label": "rules", "old_text": "brief", "new_text": "long"}),
        ),
    ] {
        let (error, text) = mcp.call(tool, args).await;
        assert!(
            error && text.starts_with("FAILED_PRECONDITION"),
            "{tool}: {text}"
        );
    }
    // A new block is made by appending; a wrong edit is the model's to fix.
    let (error, made) = mcp
        .call(
            "append_memory_block",
            json!({"label": "notes", "text": "Trip in May"}),
        )
        .await;
    assert!(!error && made.contains("Trip in May"), "{made}");
    let (error, text) = mcp
        .call(
            "replace_in_memory_block",
            json!({"label": "notes", "old_text": "June", "new_text": "July"}),
        )
        .await;
    assert!(error && text.starts_with("FAILED_PRECONDITION"), "{text}");

    // A conversation's tools need it named; unknown ones are NOT_FOUND.
    let (error, text) = mcp.call("get_context_stats", json!({})).await;
    assert!(error && text.contains("agent_id"), "{text}");
    let (error, text) = mcp
        .call("get_context_stats", json!({"agent_id": "nobody"}))
        .await;
    assert!(error && text.starts_with("NOT_FOUND"), "{text}");
    let (error, text) = mcp.call("update_memory", json!({"text": "x"})).await;
    assert!(error && text.contains("memory_id"), "{text}");
    let (error, deleted) = mcp.call("delete_memory", json!({"memory_id": id})).await;
    assert!(!error, "{deleted}");
    let (_, listed) = mcp.call("list_memories", json!({})).await;
    assert!(!listed.contains("tea"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_scope_and_defaults_hold_over_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(
        dir.path(),
        "[[tokens]]\nname = \"desk\"\ntoken = \"desk-secret-0123456789\"\nagents = [\"desk-*\"]\ndefault_agent = \"desk-1\"\n",
    );
    let server = mcp_server(&[("ENGRAM__AUTH__TOKENS_FILE", tokens.as_str())]).await;
    let mut grpc = server.client().await;
    let mut mcp = Mcp::of(&server);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let anonymous = mcp.post(&list).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");

    mcp.token = Some("desk-secret-0123456789");
    let mut request = tonic::Request::new(ingest_req("desk-1", vec![user("Hello")]));
    request.metadata_mut().insert(
        "authorization",
        "Bearer desk-secret-0123456789".parse().unwrap(),
    );
    grpc.ingest(request).await.unwrap();
    // The token's default agent, then one outside its patterns.
    let (error, stats) = mcp.call("get_context_stats", json!({})).await;
    assert!(!error && stats.contains("\"turns\":1"), "{stats}");
    let (error, text) = mcp
        .call(
            "search_history",
            json!({"query": "Hello", "agent_id": "ops-1"}),
        )
        .await;
    assert!(error && text.starts_with("PERMISSION_DENIED"), "{text}");
    let (error, found) = mcp.call("search_history", json!({"query": "Hello"})).await;
    assert!(!error && found.contains("Hello"), "{found}");
}
