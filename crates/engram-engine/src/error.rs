//! What can go wrong, in the terms a client acts on. Every protocol maps
//! each kind to one of its codes (gRPC in the server's `status.rs`); the
//! messages are for clients: no paths, no OS errors, nothing of the
//! operator's business, which goes to the log when the error is made.

use engram_core::CoreError;
use engram_store::StoreError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The request breaks a rule; nothing was done. Do not retry as is.
    #[error("{0}")]
    Invalid(String),
    /// The request is over a configured limit, or the storage is full;
    /// nothing was done.
    #[error("{0}")]
    Exhausted(String),
    /// The agent does not exist (or no longer does).
    #[error("{0}")]
    NotFound(String),
    /// What the request would create exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// Another change won a race with this one, which changed nothing;
    /// retrying may succeed (a stale `expected_version`: read, then retry).
    #[error("{0}")]
    Conflict(String),
    /// Well-formed, but the state it would change does not allow it (an
    /// agent of another user, a `replace` that does not match once);
    /// nothing was done.
    #[error("{0}")]
    Precondition(String),
    /// Storage cannot answer now; nothing was done. `retry` says whether
    /// the same call may succeed later without an operator.
    #[error("{message}")]
    Unavailable { message: String, retry: bool },
    /// Too many calls of one agent are in flight; nothing was done. Retry
    /// after `retry_after`.
    #[error("{message}")]
    Busy {
        message: String,
        retry_after: std::time::Duration,
    },
    /// In the contract, not built (on this backend) yet.
    #[error("{0}")]
    Unimplemented(String),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

impl EngineError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }
}

impl From<CoreError> for EngineError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Invalid(_) => Self::Invalid(e.to_string()),
            CoreError::TooLarge { .. } => Self::Exhausted(e.to_string()),
            CoreError::Precondition(m) => Self::Precondition(m),
            CoreError::Stale(m) => Self::Conflict(m),
            CoreError::Absent(m) => Self::NotFound(m),
        }
    }
}

/// The one place a storage error becomes a client's: logged here with its
/// details, answered with what the client can act on.
impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Core(core) => core.into(),
            StoreError::NotFound(_) => Self::NotFound(e.to_string()),
            StoreError::AlreadyExists(_) => Self::AlreadyExists(e.to_string()),
            StoreError::Conflict(_) => Self::Conflict(e.to_string()),
            StoreError::Full(_) => {
                tracing::warn!(error = %e, "disk full; the request was refused");
                Self::Exhausted(e.client_message())
            }
            StoreError::ReadOnly { .. } | StoreError::Failed(_) => {
                tracing::error!(error = %e, "storage failed");
                Self::Unavailable {
                    message: e.client_message(),
                    retry: false,
                }
            }
            StoreError::Unavailable { retry, .. } => {
                tracing::error!(error = %e, retry, "storage error");
                Self::Unavailable {
                    message: e.client_message(),
                    retry,
                }
            }
            StoreError::Index(_) => {
                tracing::error!(error = %e, "search index error");
                Self::Unavailable {
                    message: e.client_message(),
                    retry: true,
                }
            }
            StoreError::Unimplemented(m) => Self::Unimplemented(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_error_keeps_whether_a_retry_helps_and_tells_no_details() {
        for retry in [true, false] {
            let e = EngineError::from(StoreError::Unavailable {
                detail: "/var/lib/engram/agents/x: EIO".into(),
                retry,
            });
            let EngineError::Unavailable { message, retry: r } = e else {
                panic!("{e:?}");
            };
            assert_eq!(r, retry);
            assert!(!message.contains("/var/lib"), "{message}");
        }
        let full = EngineError::from(StoreError::Full("/data: ENOSPC".into()));
        assert!(
            matches!(&full, EngineError::Exhausted(m) if m.starts_with("disk full")),
            "{full:?}"
        );
    }
}
