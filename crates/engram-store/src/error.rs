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
    /// A durable write of this agent failed earlier; its files may have lost
    /// pages, so the agent refuses writes until an operator restarts.
    #[error(
        "agent {agent:?} is read-only after a storage failure ({reason}); fix the disk and restart engramd"
    )]
    ReadOnly { agent: String, reason: String },
    /// A file whose flush failed; it refuses further writes (see
    /// [`crate::durable`]).
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
}

impl StoreError {
    pub(crate) fn io(
        context: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            context,
            path,
            source,
        }
    }
}

impl StoreError {
    /// Names the agent whose write met a poisoned file.
    pub(crate) fn for_agent(self, agent: &str) -> Self {
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
