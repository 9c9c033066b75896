//! Why the domain refuses a request. Each variant maps to its own gRPC
//! code: malformed input is INVALID_ARGUMENT, input over a limit
//! RESOURCE_EXHAUSTED, a request that does not fit the state it would
//! change FAILED_PRECONDITION, a stale expected version ABORTED, a memory
//! that does not exist NOT_FOUND.

/// Why input was refused. Messages say what was wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    /// The input breaks a rule of the contract.
    #[error("{0}")]
    Invalid(String),
    /// The input is well-formed but over a configured limit.
    #[error("{what} is {actual}, the limit is {limit} ({setting})")]
    TooLarge {
        what: String,
        actual: usize,
        limit: usize,
        /// The config key that sets the limit.
        setting: &'static str,
    },
    /// Well-formed, but the state it would change does not allow it (a
    /// `replace` whose text does not occur exactly once, another user).
    #[error("{0}")]
    Precondition(String),
    /// An `expected_version` that is no longer current: nothing changed.
    #[error("{0}")]
    Stale(String),
    /// The memory it names does not exist.
    #[error("{0}")]
    Absent(String),
}

impl CoreError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }

    /// Prefixes the message with the index of the offending event.
    pub(crate) fn at_event(self, index: usize) -> Self {
        match self {
            Self::Invalid(m) => Self::Invalid(format!("events[{index}]: {m}")),
            Self::Precondition(m) => Self::Precondition(format!("events[{index}]: {m}")),
            Self::Stale(m) => Self::Stale(format!("events[{index}]: {m}")),
            Self::Absent(m) => Self::Absent(format!("events[{index}]: {m}")),
            Self::TooLarge {
                what,
                actual,
                limit,
                setting,
            } => Self::TooLarge {
                what: format!("events[{index}]: {what}"),
                actual,
                limit,
                setting,
            },
        }
    }
}
