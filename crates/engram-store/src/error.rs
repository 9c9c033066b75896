//! Store errors. The server maps each variant to one gRPC status.

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
    /// A durable write of this agent failed earlier; its files may have lost
    /// pages, so the agent refuses writes until an operator restarts.
    #[error(
        "agent {agent:?} is read-only after a storage failure ({reason}); fix the disk and restart engramd"
    )]
    ReadOnly { agent: String, reason: String },
    /// A file whose flush failed; it refuses further writes (see
    /// the `durable` module).
    #[error("{} is read-only after a storage failure ({reason}); fix the disk and restart engramd", path.display())]
    Poisoned { path: PathBuf, reason: String },
    /// The file system failed; retrying may succeed.
    #[error("{context} {}: {source}", path.display())]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The disk (or the quota) is full. What the request wrote was cut back
    /// off: nothing of it is visible, and the same write succeeds once space
    /// is freed.
    #[error("disk full while {context} {}: {source}", path.display())]
    DiskFull {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A flush failed earlier: what it covered may be lost from the page
    /// cache, so this store answers nothing more until it restarts and
    /// replays its log (health says NOT_SERVING meanwhile).
    #[error("the store stopped after a failed flush ({0}); restart engramd")]
    Failed(String),
    /// The database (the `postgres` backend) failed or could not be
    /// reached; retrying may succeed. Nothing of the request was committed.
    #[error("database: {0}")]
    Database(String),
    /// The search index failed (it is derived data: the agent's files are
    /// intact, and deleting the index has it rebuilt).
    #[error("{0}")]
    Index(String),
}

/// What a client is told for errors whose details (paths, OS errors) are
/// for the operator's log only.
pub const DISK_FULL: &str =
    "disk full: nothing of this request was stored; free space on the data volume and retry";
pub const STORAGE_FAILED: &str = "storage failed: a flush did not complete, so this server refuses requests until it restarts; the operator's log has details";
pub const STORAGE_ERROR: &str = "storage error; the operator's log has details; retry later";

impl StoreError {
    pub fn io(
        context: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| {
            if is_disk_full(&source) {
                Self::DiskFull {
                    context,
                    path,
                    source,
                }
            } else {
                Self::Io {
                    context,
                    path,
                    source,
                }
            }
        }
    }

    /// The message for a client: this error's own text where it holds
    /// nothing of the server's, else a fixed one (the log has the details).
    pub fn client_message(&self) -> String {
        match self {
            Self::Core(_) | Self::AlreadyExists(_) | Self::NotFound(_) | Self::Conflict(_) => {
                self.to_string()
            }
            Self::DiskFull { .. } => DISK_FULL.to_owned(),
            Self::ReadOnly { .. } | Self::Poisoned { .. } | Self::Failed(_) => {
                STORAGE_FAILED.to_owned()
            }
            Self::Io { .. } | Self::Index(_) | Self::Database(_) => STORAGE_ERROR.to_owned(),
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
    /// Names the agent whose write met a poisoned file.
    pub fn for_agent(self, agent: &str) -> Self {
        match self {
            Self::Poisoned { path, reason } => Self::ReadOnly {
                agent: agent.to_owned(),
                reason: format!("{}: {reason}", path.display()),
            },
            other => other,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
