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
        StoreError::Conflict(_) => Status::aborted(e.to_string()),
        // Paths and OS errors are for the operator's log, not the client.
        StoreError::DiskFull { .. } => {
            tracing::warn!(error = %e, "disk full; the request was refused");
            Status::resource_exhausted(e.client_message())
        }
        StoreError::ReadOnly { .. } | StoreError::Poisoned { .. } | StoreError::Failed(_) => {
            tracing::error!(error = %e, "storage failed");
            Status::unavailable(e.client_message())
        }
        StoreError::Io { .. } | StoreError::Index(_) | StoreError::Database(_) => {
            tracing::error!(error = %e, "storage error");
            Status::unavailable(e.client_message())
        }
    }
}
