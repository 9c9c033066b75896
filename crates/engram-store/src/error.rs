//! Store errors, the same for every backend. The engine maps each to what
//! a client can act on (`EngineError`); `Display` is for the operator's
//! log, [`StoreError::client_message`] for the client.

use std::path::PathBuf;

use engram_core::CoreError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The request broke a rule of the contract or a limit.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The target of a fork already exists.
    #[error("agent {0:?} already exists; fork into a new agent id")]
    AlreadyExists(String),
    /// The agent has never been written (or was deleted).
    #[error("agent {0:?} not found")]
    NotFound(String),
    /// Another change to the agent won a race with this one (which wrote
    /// nothing); the caller may try again.
    #[error("{0}")]
    Conflict(String),
    /// A durable write failed earlier, so what it covered may be lost: the
    /// agent (`None`: the piece of storage `reason` names) refuses writes
    /// until the storage is repaired and the store opened again.
    #[error("{} is read-only after a storage failure ({reason})", agent.as_deref().map_or_else(|| "storage".to_owned(), |a| format!("agent {a:?}")))]
    ReadOnly {
        agent: Option<String>,
        reason: String,
    },
    /// The storage (or its quota) is full. What the request wrote was cut
    /// back off: nothing of it is visible, and the same write succeeds once
    /// space is freed.
    #[error("storage full: {0}")]
    Full(String),
    /// A flush failed earlier: what it covered may be lost, so this store
    /// answers nothing more until it is opened again and recovers (health
    /// says NOT_SERVING meanwhile).
    #[error("the store stopped after a failed flush ({0})")]
    Failed(String),
    /// The storage failed for this request, which changed nothing.
    /// `retry`: whether the same call may succeed later without an
    /// operator (a lost connection, a busy database: yes; data the store
    /// cannot read, a schema too old: no).
    #[error("storage error: {detail}")]
    Unavailable { detail: String, retry: bool },
    /// The search index failed (it is derived data: what it indexes is
    /// intact, and it can be rebuilt from it).
    #[error("{0}")]
    Index(String),
    /// This backend does not do this yet (the contract has it): what, and
    /// what to do meanwhile.
    #[error("{0}")]
    Unimplemented(String),
}

/// What a client is told for errors whose details (paths, OS errors) are
/// for the operator's log only.
pub const DISK_FULL: &str =
    "disk full: nothing of this request was stored; free space on the data volume and retry";
pub const STORAGE_FAILED: &str = "storage failed: a flush did not complete, so this server refuses requests until it restarts; the operator's log has details";
pub const STORAGE_ERROR: &str = "storage error; the operator's log has details; retry later";
pub const STORAGE_BROKEN: &str =
    "storage error that a retry will not fix; the operator's log has details";

impl StoreError {
    /// An I/O error while doing `context` on `path`: storage full, or a
    /// failure a retry may get past.
    pub fn io(
        context: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| {
            let detail = format!("{context} {}: {source}", path.display());
            if is_disk_full(&source) {
                Self::Full(detail)
            } else {
                Self::Unavailable {
                    detail,
                    retry: true,
                }
            }
        }
    }

    /// The message for a client: this error's own text where it holds
    /// nothing of the server's, else a fixed one (the log has the details).
    pub fn client_message(&self) -> String {
        match self {
            Self::Core(_)
            | Self::AlreadyExists(_)
            | Self::NotFound(_)
            | Self::Conflict(_)
            | Self::Unimplemented(_) => self.to_string(),
            Self::Full(_) => DISK_FULL.to_owned(),
            Self::ReadOnly { .. } | Self::Failed(_) => STORAGE_FAILED.to_owned(),
            Self::Unavailable { retry: false, .. } => STORAGE_BROKEN.to_owned(),
            Self::Unavailable { .. } | Self::Index(_) => STORAGE_ERROR.to_owned(),
        }
    }
}

/// ENOSPC or EDQUOT: no room for the write, which is not a failed flush.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

impl StoreError {
    /// Names the agent whose write met read-only storage.
    pub fn for_agent(self, agent: &str) -> Self {
        match self {
            Self::ReadOnly {
                agent: None,
                reason,
            } => Self::ReadOnly {
                agent: Some(agent.to_owned()),
                reason,
            },
            other => other,
        }
    }
}

impl From<engram_core::state::Stale> for StoreError {
    fn from(stale: engram_core::state::Stale) -> Self {
        Self::Conflict(stale.to_string())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
