//! The id rule of agents and users: 1–128 characters of `[A-Za-z0-9._-]`,
//! not starting with `.`. An id is used as a directory name, so this rule
//! is what keeps `../x` or `a/b` from ever reaching the file system.

use std::fmt;

use crate::CoreError;

/// Longest accepted agent id, in characters (all ASCII, so also bytes).
pub const MAX_AGENT_ID_LEN: usize = 128;

/// A validated agent id; the only way to name an agent's directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(String);

impl AgentId {
    /// Validates `raw` against the id rule.
    pub fn parse(raw: &str) -> Result<Self, CoreError> {
        check_id("agent_id", raw).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated user id (the rule of agent ids): the person a conversation
/// belongs to, whose memory follows them across conversations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(String);

impl UserId {
    /// Validates `raw` against the id rule.
    pub fn parse(raw: &str) -> Result<Self, CoreError> {
        check_id("user_id", raw).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `raw` if it follows the id rule; the error names `field`.
fn check_id(field: &str, raw: &str) -> Result<String, CoreError> {
    if raw.is_empty() {
        return Err(CoreError::invalid(format!(
            "{field} is empty; use 1-128 characters of [A-Za-z0-9._-], not starting with '.'"
        )));
    }
    if raw.len() > MAX_AGENT_ID_LEN {
        return Err(CoreError::invalid(format!(
            "{field} is {} characters long; at most {MAX_AGENT_ID_LEN} are allowed",
            raw.chars().count()
        )));
    }
    if raw.starts_with('.') {
        return Err(CoreError::invalid(format!(
            "{field} {raw:?} starts with '.'; ids must start with [A-Za-z0-9_-]"
        )));
    }
    if let Some(bad) = raw.chars().find(|c| !is_id_char(*c)) {
        return Err(CoreError::invalid(format!(
            "{field} {raw:?} contains {bad:?}; only [A-Za-z0-9._-] is allowed"
        )));
    }
    Ok(raw.to_owned())
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for AgentId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects_by_the_rule() {
        let long_ok = "a".repeat(128);
        let long_bad = "a".repeat(129);
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("agent-1", true),
            ("Team_A.bot-7", true),
            ("a.", true),
            ("-leading-dash", true),
            ("_x", true),
            ("0", true),
            (&long_ok, true),
            ("", false),
            (&long_bad, false),
            (".hidden", false),
            (".", false),
            ("..", false),
            ("../x", false),
            ("a/b", false),
            ("a\\b", false),
            ("semi;colon", false),
            ("with space", false),
            ("tab\t", false),
            ("nul\0", false),
            ("ümlaut", false),
            ("new\nline", false),
        ];
        for (raw, ok) in cases {
            assert_eq!(AgentId::parse(raw).is_ok(), *ok, "agent id {raw:?}");
        }
    }

    #[test]
    fn errors_say_what_is_allowed() {
        let err = AgentId::parse("a/b").unwrap_err().to_string();
        assert!(
            err.contains("'/'") && err.contains("[A-Za-z0-9._-]"),
            "{err}"
        );
        let err = AgentId::parse(&"x".repeat(129)).unwrap_err().to_string();
        assert!(err.contains("129") && err.contains("128"), "{err}");
        let err = UserId::parse("").unwrap_err().to_string();
        assert!(err.starts_with("user_id is empty"), "{err}");
        assert!(UserId::parse("../x").is_err() && UserId::parse("alice").is_ok());
    }
}
