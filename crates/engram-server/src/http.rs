//! The HTTP listener (`http.listen`): the JSON API under `/v1/`, for
//! clients that do not speak gRPC. Every call goes to the same API as
//! gRPC's (`api`), with the same tokens, limits and metrics; only the
//! encoding differs (`json`: the proto3 JSON mapping) and the status,
//! mapped to HTTP with a JSON error body.
//!
//! - `POST /v1/<Method>`: the request message as JSON, the answer likewise.
//! - `POST /v1/ExportMemory`: the bundle itself (JSON lines), streamed.
//! - `POST /v1/ImportMemory`: a bundle as the body (`application/x-ndjson`,
//!   `?replace=true` to replace), or the request message as JSON.
//! - `GET /v1/openapi.json`: the description of all that (`openapi`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use tonic::{Code, Status};

use crate::api::Api;
use crate::auth::{Authenticator, Caller};
use crate::boundary::catch_panics;
use crate::status;

mod calls;
mod console;
pub mod json;
pub mod openapi;

use json::Json;

/// What every HTTP call shares.
#[derive(Debug, Clone)]
pub struct HttpState {
    api: Api,
    auth: Arc<Authenticator>,
    json: Arc<Json>,
    /// `server.max_message_bytes`: a JSON body is held to it as gRPC's are.
    limit: usize,
    /// MCP at `/mcp`, when on.
    mcp: Option<Arc<crate::mcp::McpSettings>>,
    /// The calls in flight per method, shared with gRPC.
    methods: Arc<crate::admission::MethodCalls>,
}

impl HttpState {
    pub fn new(
        api: Api,
        auth: Arc<Authenticator>,
        limit: usize,
        mcp: Option<crate::mcp::McpSettings>,
        methods: Arc<crate::admission::MethodCalls>,
    ) -> Self {
        Self {
            api,
            auth,
            json: Arc::new(Json::new()),
            limit,
            mcp: mcp.map(Arc::new),
            methods,
        }
    }

    /// The caller of a request with these headers, or why not.
    fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Status> {
        if !self.auth.enabled() {
            return Ok(Caller::default());
        }
        self.auth
            .authenticate(headers.get(header::AUTHORIZATION))
            .map(|scope| Caller::new(Some(scope)))
            .map_err(|refusal| {
                tracing::info!(reason = %refusal, "call refused: not authenticated");
                status::from_refusal(refusal)
            })
    }
}

/// The routes of the HTTP listener.
pub fn router(state: HttpState) -> axum::Router {
    // Served to anyone, as gRPC's reflection is: it holds no data.
    let description = Bytes::from(openapi::document(state.json.pool()).to_string());
    let describe = move || {
        let body = description.clone();
        async move { ([(header::CONTENT_TYPE, "application/json")], body) }
    };
    let mut router = axum::Router::new()
        .route("/v1/openapi.json", axum::routing::get(describe))
        .route("/v1/{method}", axum::routing::post(call))
        .merge(console::routes());
    if let Some(settings) = &state.mcp {
        let tools = crate::mcp::service(
            state.api.clone(),
            Arc::clone(&state.json),
            (**settings).clone(),
            state.limit,
        );
        let mcp = axum::Router::new().nest_service("/mcp", tools).layer(
            axum::middleware::from_fn_with_state(state.clone(), authenticate),
        );
        router = router.merge(mcp);
    }
    router
        .fallback(not_found)
        .layer(axum::middleware::from_fn(serving))
        .with_state(state)
}

/// Marks the call in flight, so background embedding holds back meanwhile
/// (`engram_core::load`).
async fn serving(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let _serving = engram_core::load::Load::global().serving();
    next.run(request).await
}

/// Puts the caller on a request for the MCP tools (401 without a valid
/// token when the server has tokens), before rmcp reads it.
async fn authenticate(
    State(state): State<HttpState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match state.authenticate(request.headers()) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refused) => error(&refused),
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the
/// calls in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// One call of the JSON API: authenticated, read, answered, counted.
async fn call(
    State(state): State<HttpState>,
    Path(method): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let Some(label) = engram_proto::METHODS.iter().find(|m| **m == method) else {
        return error(&Status::not_found(format!(
            "no method {:?}; the methods are listed in /v1/openapi.json",
            method.chars().take(64).collect::<String>()
        )));
    };
    let answer = state
        .authenticate(&headers)
        .and_then(|caller| accepts(label, &headers).map(|()| caller));
    let answer = match answer.and_then(|caller| Ok((caller, state.methods.admit(label)?))) {
        Ok((caller, _admitted)) => {
            let call = calls::dispatch(&state, &caller, label, &uri, &headers, body);
            catch_panics(label, "", call).await
        }
        Err(refused) => Err(refused),
    };
    let code = answer.as_ref().map_or_else(Status::code, |_| Code::Ok);
    crate::observe::record_call(label, code, started);
    answer.unwrap_or_else(|s| error(&s))
}

/// INVALID_ARGUMENT (answered 415) for a body that is not JSON, or, to
/// ImportMemory, a bundle.
fn accepts(method: &str, headers: &HeaderMap) -> Result<(), Status> {
    match media_type(headers).as_deref() {
        None | Some("application/json") => Ok(()),
        Some(calls::BUNDLE_TYPE) if method == "ImportMemory" => Ok(()),
        Some(other) => Err(Status::invalid_argument(format!(
            "{UNSUPPORTED}: {:?}; send content-type: application/json{}",
            other.chars().take(64).collect::<String>(),
            if method == "ImportMemory" {
                format!(
                    " (the request message) or {} (the bundle)",
                    calls::BUNDLE_TYPE
                )
            } else {
                String::new()
            }
        ))),
    }
}

/// How a refused media type's message starts: answered 415, not 400.
const UNSUPPORTED: &str = "unsupported content-type";

async fn not_found(uri: Uri) -> Response {
    error(&Status::not_found(format!(
        "no route {:?}; the JSON API is POST /v1/<Method>",
        uri.path().chars().take(128).collect::<String>()
    )))
}

/// The HTTP status of a gRPC code, as DESIGN §13 maps them.
pub fn http_status(status: &Status) -> StatusCode {
    match status.code() {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument if status.message().starts_with(UNSUPPORTED) => {
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        }
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        // A full disk passes, and so do an agent's calls in flight: retry
        // later. Everything else exhausted is the request's size, or its
        // answer's.
        Code::ResourceExhausted
            if status.message().starts_with("disk full")
                || crate::status::pushback(status).is_some() =>
        {
            StatusCode::TOO_MANY_REQUESTS
        }
        Code::ResourceExhausted => StatusCode::PAYLOAD_TOO_LARGE,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        // nginx's "client closed request": nobody reads it.
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A refusal as HTTP: the mapped status and a JSON body with the gRPC
/// code's name and the message, `{"error": {"code", "status", "message"}}`.
pub fn error(status: &Status) -> Response {
    let http = http_status(status);
    let body = serde_json::json!({
        "error": {
            "code": http.as_u16(),
            "status": crate::observe::code_name(status.code()),
            "message": status.message(),
        }
    });
    let mut response = (http, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if http == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if let Some(after) = crate::status::pushback(status) {
        // Whole seconds, at least one.
        let secs = after.as_millis().div_ceil(1000).max(1);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs as u64));
    }
    response
}

/// A JSON answer.
fn json_response(body: Vec<u8>) -> Response {
    let mut response = Body::from(body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The whole body, at most `limit` bytes (RESOURCE_EXHAUSTED past it).
async fn read_body(body: Body, limit: usize) -> Result<Bytes, Status> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(status::request_too_large(limit))
        }
        Err(e) => Err(Status::cancelled(format!("reading the body: {e}"))),
    }
}

/// The media type of the body, without parameters (`charset=utf-8`).
fn media_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
}

/// The body as a stream of chunks, each an error if the client cut it.
fn chunks(body: Body) -> impl futures_util::Stream<Item = Result<Bytes, Status>> {
    body.into_data_stream()
        .map(|chunk| chunk.map_err(|e| Status::cancelled(format!("reading the body: {e}"))))
}
