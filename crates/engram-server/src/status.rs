//! The one mapping from the engine's errors to gRPC statuses.

use engram_engine::EngineError;
use tonic::Status;

use crate::auth::Refusal;

pub fn from_engine(e: EngineError) -> Status {
    match e {
        EngineError::Invalid(m) => Status::invalid_argument(m),
        EngineError::Exhausted(m) => Status::resource_exhausted(m),
        EngineError::NotFound(m) => Status::not_found(m),
        EngineError::AlreadyExists(m) => Status::already_exists(m),
        EngineError::Conflict(m) => Status::aborted(m),
        EngineError::Precondition(m) => Status::failed_precondition(m),
        EngineError::Unavailable { message, .. } => Status::unavailable(message),
        EngineError::Unimplemented(m) => Status::unimplemented(m),
        EngineError::Busy {
            message,
            retry_after,
        } => busy(tonic::Code::ResourceExhausted, message, retry_after),
    }
}

/// The trailer (gRFC A6) that tells a client's retry policy when to try
/// again; the JSON API answers it as `Retry-After`.
pub const PUSHBACK: &str = "grpc-retry-pushback-ms";

/// A call refused because too many are in flight, with `retry_after` as
/// the retry pushback.
pub fn busy(code: tonic::Code, message: String, retry_after: std::time::Duration) -> Status {
    let mut status = Status::new(code, message);
    let ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
    status.metadata_mut().insert(PUSHBACK, ms.into());
    status
}

/// The pushback a busy refusal carries.
pub fn pushback(status: &Status) -> Option<std::time::Duration> {
    let ms = status
        .metadata()
        .get(PUSHBACK)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// An answer over `server.max_message_bytes`, with the way out (tonic
/// would fail it with a bare OUT_OF_RANGE in the trailers).
pub fn answer_too_large(what: &str, len: usize, limit: usize) -> Status {
    Status::resource_exhausted(format!(
        "the {what} is {len} bytes, over server.max_message_bytes ({limit}); compact the agent or raise the limit"
    ))
}

/// A caller refused by auth: UNAUTHENTICATED or PERMISSION_DENIED.
pub fn from_refusal(refusal: Refusal) -> Status {
    match refusal {
        Refusal::Unauthenticated(m) => Status::unauthenticated(m),
        Refusal::Denied(m) => Status::permission_denied(m),
    }
}

/// UNIMPLEMENTED for a part of the API that is in the contract but not
/// built yet, with what to do meanwhile.
pub fn not_built(what: &str, meanwhile: &str) -> Status {
    Status::unimplemented(format!("{what} is not built yet; {meanwhile}"))
}

/// A handler that panicked (a bug): INTERNAL, with nothing of the panic
/// in the message (the log has it).
pub fn panicked() -> Status {
    Status::internal(
        "internal error; the request was not completed, the operator's log has details",
    )
}

/// A request over `server.max_message_bytes` (tonic refuses it before any
/// handler; the oversize hook answers with this).
pub fn request_too_large(limit: usize) -> Status {
    Status::resource_exhausted(format!(
        "the request is over server.max_message_bytes ({limit} bytes); send less per call (split the events, store large media elsewhere) or raise the limit"
    ))
}
