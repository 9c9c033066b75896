//! The three surfaces a client reaches Engram by, each driven the way its
//! clients drive it: gRPC (any method, from its descriptor: the request
//! written as proto3 JSON, sent as protobuf), the JSON API (`POST
//! /v1/<Method>`) and MCP's tools (`tools/call`). Every answer comes back
//! alike: the code's name, the refusal's message, the body as text.

use engram_chaos::raw::RawCodec;
use engram_server::observe::code_name;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor};
use serde_json::{Value, json};
use tonic::transport::Channel;

/// A request: a message in the proto3 JSON mapping, or (ImportMemory) a
/// bundle.
#[derive(Debug, Clone)]
pub enum Req {
    Json(Value),
    Bundle { lines: Vec<u8>, replace: bool },
}

/// What a call answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The gRPC code's name (`OK`, `PERMISSION_DENIED`, …).
    pub code: String,
    /// A refusal's message ("" on OK).
    pub message: String,
    /// The answer as text (JSON, or a bundle's lines).
    pub body: String,
}

impl Answer {
    fn ok(body: String) -> Self {
        Self {
            code: "OK".into(),
            message: String::new(),
            body,
        }
    }

    fn refused(code: &str, message: &str) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            body: String::new(),
        }
    }
}

/// The service's descriptors: every method the matrix must cover
/// (decoded once: every gRPC cell looks its method up).
pub fn methods() -> &'static [MethodDescriptor] {
    static METHODS: std::sync::OnceLock<Vec<MethodDescriptor>> = std::sync::OnceLock::new();
    METHODS.get_or_init(|| {
        let pool = DescriptorPool::decode(engram_proto::FILE_DESCRIPTOR_SET).unwrap();
        let service = pool.get_service_by_name("engram.v1.MemoryService").unwrap();
        service.methods().collect()
    })
}

fn method(name: &str) -> &'static MethodDescriptor {
    methods()
        .iter()
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no method {name}"))
}

/// `name` over gRPC with `token` (none: no header).
pub async fn grpc(channel: &Channel, token: Option<&str>, name: &str, req: &Req) -> Answer {
    let desc = method(name);
    let bytes = match req {
        Req::Json(value) => {
            let text = value.to_string();
            let mut de = serde_json::Deserializer::from_str(&text);
            DynamicMessage::deserialize(desc.input(), &mut de)
                .unwrap_or_else(|e| panic!("{name}: {value}: {e}"))
                .encode_to_vec()
        }
        Req::Bundle { lines, replace } => engram_proto::pb::ImportMemoryRequest {
            lines: lines.clone(),
            replace: *replace,
        }
        .encode_to_vec(),
    };
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let path = format!("/engram.v1.MemoryService/{name}").parse().unwrap();
    let mut request = tonic::Request::new(bytes);
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().unwrap();
        request.metadata_mut().insert("authorization", value);
    }
    let output = desc.output();
    let decode = |bytes: Vec<u8>| -> String {
        let message = DynamicMessage::decode(output.clone(), bytes.as_slice()).unwrap();
        serde_json::to_string(&message).unwrap()
    };
    let answered = if desc.is_server_streaming() {
        match grpc.server_streaming(request, path, RawCodec).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                let mut lines = vec![];
                loop {
                    match stream.message().await {
                        Ok(Some(piece)) => {
                            let chunk =
                                engram_proto::pb::MemoryBundleChunk::decode(piece.as_slice())
                                    .unwrap();
                            lines.extend(chunk.lines);
                        }
                        Ok(None) => break Ok(String::from_utf8_lossy(&lines).into_owned()),
                        Err(status) => break Err(status),
                    }
                }
            }
            Err(status) => Err(status),
        }
    } else if desc.is_client_streaming() {
        let pieces = tokio_stream::iter([request.into_inner()]);
        let mut streamed = tonic::Request::new(pieces);
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().unwrap();
            streamed.metadata_mut().insert("authorization", value);
        }
        grpc.client_streaming(streamed, path, RawCodec)
            .await
            .map(|r| decode(r.into_inner()))
    } else {
        grpc.unary(request, path, RawCodec)
            .await
            .map(|r| decode(r.into_inner()))
    };
    match answered {
        Ok(body) => Answer::ok(body),
        Err(status) => Answer::refused(code_name(status.code()), status.message()),
    }
}

/// `name` over the JSON API with `token`.
pub async fn json_api(http: &str, token: Option<&str>, name: &str, req: &Req) -> Answer {
    let client = reqwest::Client::new();
    let mut request = match req {
        Req::Json(value) => client
            .post(format!("http://{http}/v1/{name}"))
            .header("content-type", "application/json")
            .body(value.to_string()),
        Req::Bundle { lines, replace } => client
            .post(format!("http://{http}/v1/{name}?replace={replace}"))
            .header("content-type", "application/x-ndjson")
            .body(lines.clone()),
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let ok = response.status().is_success();
    let text = response.text().await.unwrap();
    if ok {
        return Answer::ok(text);
    }
    let error: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{name}: {text}"));
    Answer::refused(
        error["error"]["status"].as_str().unwrap(),
        error["error"]["message"].as_str().unwrap(),
    )
}

/// The MCP tools the server lists (by any token).
pub async fn mcp_tools(http: &str, token: &str) -> Vec<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let answer = mcp_post(http, Some(token), &body).await.unwrap();
    answer["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The tool `tool` with `arguments`, over MCP with `token`.
pub async fn mcp(http: &str, token: Option<&str>, tool: &str, arguments: Value) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    let answer = match mcp_post(http, token, &body).await {
        Ok(answer) => answer,
        Err(401) => return Answer::refused("UNAUTHENTICATED", "401"),
        Err(other) => panic!("{tool}: HTTP {other}"),
    };
    let result = &answer["result"];
    assert!(result.is_object(), "{tool}: {answer}");
    let text = result["content"][0]["text"].as_str().unwrap().to_owned();
    if !result["isError"].as_bool().unwrap_or(false) {
        return Answer::ok(text);
    }
    // A refusal reads "CODE: message".
    let (code, message) = text.split_once(": ").unwrap_or(("UNKNOWN", &text));
    Answer::refused(code, message)
}

async fn mcp_post(http: &str, token: Option<&str>, body: &Value) -> Result<Value, u16> {
    let mut request = reqwest::Client::new()
        .post(format!("http://{http}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    if !response.status().is_success() {
        return Err(response.status().as_u16());
    }
    Ok(response.json().await.unwrap())
}
