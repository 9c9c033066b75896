//! Validation errors. The two variants map to different gRPC codes: malformed
//! input is INVALID_ARGUMENT, input over a configured limit is
//! RESOURCE_EXHAUSTED.

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
}

impl CoreError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }

    /// Prefixes the message with the index of the offending event.
    pub(crate) fn at_event(self, index: usize) -> Self {
        match self {
            Self::Invalid(m) => Self::Invalid(format!("events[{index}]: {m}")),
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
