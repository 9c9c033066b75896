//! The one mapping from domain errors to gRPC statuses.

use engram_core::CoreError;
use engram_store::StoreError;
use tonic::Status;

pub fn from_core(e: CoreError) -> Status {
    match e {
        CoreError::Invalid(_) => Status::invalid_argument(e.to_string()),
        CoreError::TooLarge { .. } => Status::resource_exhausted(e.to_string()),
    }
}

pub fn from_store(e: StoreError) -> Status {
    match e {
        StoreError::Core(core) => from_core(core),
        StoreError::NotFound(_) => Status::not_found(e.to_string()),
        StoreError::AlreadyExists(_) => Status::already_exists(e.to_string()),
        StoreError::ReadOnly { .. } | StoreError::Poisoned { .. } => {
            Status::unavailable(e.to_string())
        }
        StoreError::Io { .. } => {
            // Paths and OS errors are for the operator's log, not the client.
            tracing::error!(error = %e, "storage error");
            Status::unavailable("storage error; the operator's log has details; retry later")
        }
    }
}
