//! Each method of the JSON API: the body read as the method's request
//! message, the API's call, its answer written as JSON. ExportMemory and
//! ImportMemory stream: the bundle's lines go out and come in as they are.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use engram_proto::pb;
use futures_util::StreamExt;
use tonic::Status;

use super::{HttpState, chunks, json_response, media_type, read_body};
use crate::auth::Caller;

/// The media type of a bundle, out and in.
pub const BUNDLE_TYPE: &str = "application/x-ndjson";

/// One unary method: decode, call, encode.
macro_rules! unary {
    ($state:ident, $caller:ident, $method:ident, $body:ident;
     $($name:literal => $call:ident),* $(,)?) => {
        match $method {
            $($name => {
                let (input, output) = $state.json.method($name).expect("a method of the service");
                let bytes = read_body($body, $state.limit).await?;
                let request = $state.json.decode(input, bytes).await?;
                let answer = $state.api.$call($caller, request).await?;
                Ok(json_response($state.json.encode(output, answer).await?))
            })*
            _ => Err(Status::not_found(format!("no method {}", $method))),
        }
    };
}

/// Runs `method` (one of the service's) for `caller`.
pub async fn dispatch(
    state: &HttpState,
    caller: &Caller,
    method: &'static str,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Status> {
    match method {
        "ExportMemory" => return export(state, caller, body).await,
        "ImportMemory" if media_type(headers).as_deref() == Some(BUNDLE_TYPE) => {
            return import_bundle(state, caller, uri, body).await;
        }
        "ImportMemory" => {
            let (input, output) = state.json.method(method).expect("a method of the service");
            let bytes = read_body(body, state.limit).await?;
            let request: pb::ImportMemoryRequest = state.json.decode(input, bytes).await?;
            let pieces = futures_util::stream::iter([Ok(request)]);
            let answer = state.api.import_memory(caller, pieces).await?;
            return Ok(json_response(state.json.encode(output, answer).await?));
        }
        _ => {}
    }
    unary!(state, caller, method, body;
        "Ingest" => ingest,
        "PrepareRequest" => prepare_request,
        "Compact" => compact,
        "Retrieve" => retrieve,
        "SearchHistory" => search_history,
        "GetContextStats" => get_context_stats,
        "ListCompactions" => list_compactions,
        "ListAgents" => list_agents,
        "ListUsers" => list_users,
        "DeleteAgent" => delete_agent,
        "ForkAgent" => fork_agent,
        "DeleteUser" => delete_user,
        "ConsolidateUser" => consolidate_user,
        "ListConsolidations" => list_consolidations,
        "ListMemoryBlocks" => list_memory_blocks,
        "GetMemoryBlock" => get_memory_block,
        "PutMemoryBlock" => put_memory_block,
        "EditMemoryBlock" => edit_memory_block,
        "DeleteMemoryBlock" => delete_memory_block,
        "AddMemories" => add_memories,
        "ListMemories" => list_memories,
        "GetMemory" => get_memory,
        "GetMemoryHistory" => get_memory_history,
        "UpdateMemory" => update_memory,
        "DeleteMemory" => delete_memory,
        "ForgetTurn" => forget_turn,
        "ForgetEvents" => forget_events,
    )
}

/// ExportMemory: the bundle's lines as the body. A refusal before the
/// first piece is an error answer; a failure after it cuts the body short
/// (the bundle then lacks its `end` line, and an import refuses it).
async fn export(state: &HttpState, caller: &Caller, body: Body) -> Result<Response, Status> {
    let (input, _) = state
        .json
        .method("ExportMemory")
        .expect("a method of the service");
    let bytes = read_body(body, state.limit).await?;
    let request: pb::ExportMemoryRequest = state.json.decode(input, bytes).await?;
    let mut pieces = state.api.export_memory(caller, request).await?;
    let first = pieces.next().await.transpose()?;
    let rest = pieces.map(|piece| {
        piece.map(|p| bytes::Bytes::from(p.lines)).map_err(|s| {
            tracing::warn!(error = %s.message(), "an export failed midway; its body is cut");
            std::io::Error::other(s.message().to_owned())
        })
    });
    let head = futures_util::stream::iter(first.map(|p| Ok(bytes::Bytes::from(p.lines))));
    let mut response = Body::from_stream(head.chain(rest)).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(BUNDLE_TYPE));
    Ok(response)
}

/// ImportMemory with the bundle as the body: its chunks go in as they
/// arrive; `?replace=true` replaces what exists under its ids.
async fn import_bundle(
    state: &HttpState,
    caller: &Caller,
    uri: &Uri,
    body: Body,
) -> Result<Response, Status> {
    let replace = replace_asked(uri)?;
    let pieces = chunks(body).map(move |chunk| {
        chunk.map(|lines| pb::ImportMemoryRequest {
            lines: lines.to_vec(),
            replace,
        })
    });
    let answer = state.api.import_memory(caller, Box::pin(pieces)).await?;
    let (_, output) = state
        .json
        .method("ImportMemory")
        .expect("a method of the service");
    Ok(json_response(state.json.encode(output, answer).await?))
}

/// `replace=true|false` in the query (absent: false).
fn replace_asked(uri: &Uri) -> Result<bool, Status> {
    let mut replace = false;
    for pair in uri.query().unwrap_or_default().split('&') {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("", _) => {}
            ("replace", "true" | "1") => replace = true,
            ("replace", "false" | "0") => replace = false,
            (key, value) => {
                let shown: String = format!("{key}={value}").chars().take(64).collect();
                return Err(Status::invalid_argument(format!(
                    "unknown query parameter {shown:?}; ImportMemory takes replace=true or replace=false"
                )));
            }
        }
    }
    Ok(replace)
}
