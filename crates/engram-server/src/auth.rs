//! Bearer-token auth: who is calling (a tower layer, before any handler)
//! and what they may touch (`reach`: one rule, which every call's
//! `calls::authorize` applies). This file speaks no protocol;
//! `auth/grpc.rs` is the gRPC side.
//!
//! Tokens are kept only as SHA-256 digests and compared in constant time;
//! a configured plaintext `token` is hashed at start. Health and reflection
//! stay open so probes and grpcurl discovery work without a secret.

use std::sync::Arc;

use subtle::ConstantTimeEq;
use tonic::codegen::http;

mod calls;
mod grpc;
mod reach;

pub use calls::{Access, Caller, authorize};
pub use grpc::{Auth, caller};

/// One `[[auth.tokens]]` table. Its Debug output hides the secret.
#[derive(Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    #[serde(default)]
    pub name: String,
    pub token: Option<String>,
    pub token_sha256: Option<String>,
    #[serde(default)]
    pub agents: Vec<String>,
    /// User-id patterns: the token covers these users' blocks and every
    /// agent bound to one of them.
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub admin: bool,
    /// The memory an MCP tool acts on when its call names none.
    #[serde(default)]
    pub default_agent: Option<String>,
    #[serde(default)]
    pub default_user: Option<String>,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig")
            .field("name", &self.name)
            .field("agents", &self.agents)
            .field("users", &self.users)
            .field("admin", &self.admin)
            .field("default_agent", &self.default_agent)
            .field("default_user", &self.default_user)
            .finish_non_exhaustive()
    }
}

/// What one token may do.
#[derive(Debug)]
pub struct Scope {
    pub name: String,
    patterns: Vec<String>,
    users: Vec<String>,
    pub admin: bool,
    /// The memory an MCP tool acts on when its call names none.
    pub default_agent: Option<String>,
    pub default_user: Option<String>,
}

impl Scope {
    /// Whether an agent-id pattern matches `agent` (which reaches it only
    /// when it has no user: `reach`).
    fn matches_agent(&self, agent: &str) -> bool {
        self.patterns.iter().any(|p| glob(p, agent))
    }

    /// Whether the token covers `user` (its memory, its agents).
    fn covers_user(&self, user: &str) -> bool {
        self.admin || self.users.iter().any(|p| glob(p, user))
    }

    /// What the token reaches, for its refusals: its own patterns, never
    /// anything of another token's.
    fn describe(&self) -> String {
        let mut what = vec![];
        if !self.patterns.is_empty() {
            what.push(format!(
                "the agents {} that belong to no user",
                self.patterns.join(", ")
            ));
        }
        if !self.users.is_empty() {
            what.push(format!(
                "the memory and agents of users {}",
                self.users.join(", ")
            ));
        }
        what.join("; ")
    }
}

#[derive(Debug)]
struct Credential {
    digest: [u8; 32],
    scope: Arc<Scope>,
}

/// The configured tokens; empty means auth is off.
#[derive(Debug, Default)]
pub struct Authenticator {
    credentials: Vec<Credential>,
}

impl Authenticator {
    /// Checks every table: one of `token` / `token_sha256`, agent patterns
    /// unless admin, no two tokens alike.
    pub fn new(tokens: &[TokenConfig]) -> Result<Self, String> {
        let mut credentials: Vec<Credential> = Vec::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            let name = if t.name.is_empty() {
                format!("#{}", i + 1)
            } else {
                t.name.clone()
            };
            let digest = match (&t.token, &t.token_sha256) {
                (Some(token), None) if token.len() >= 16 => sha256(token.as_bytes()),
                (Some(_), None) => {
                    return Err(format!(
                        "token {name}: the token must be at least 16 characters"
                    ));
                }
                (None, Some(hex)) => parse_digest(hex)
                    .ok_or_else(|| format!("token {name}: token_sha256 must be 64 hex digits"))?,
                _ => {
                    return Err(format!(
                        "token {name}: set exactly one of token and token_sha256"
                    ));
                }
            };
            if !t.admin && t.agents.is_empty() && t.users.is_empty() {
                return Err(format!(
                    "token {name}: list agent-id patterns in agents (e.g. [\"team-a-*\"]) or user-id patterns in users, or set admin = true"
                ));
            }
            if t.agents.iter().chain(&t.users).any(|p| p.trim().is_empty()) {
                return Err(format!("token {name}: empty agent or user pattern"));
            }
            if credentials.iter().any(|c| c.digest == digest) {
                return Err(format!("token {name}: the same token is configured twice"));
            }
            credentials.push(Credential {
                digest,
                scope: Arc::new(Scope {
                    name,
                    patterns: t.agents.clone(),
                    users: t.users.clone(),
                    admin: t.admin,
                    default_agent: t.default_agent.clone().filter(|a| !a.is_empty()),
                    default_user: t.default_user.clone().filter(|u| !u.is_empty()),
                }),
            });
        }
        Ok(Self { credentials })
    }

    pub fn enabled(&self) -> bool {
        !self.credentials.is_empty()
    }

    /// The scope of the bearer token in `authorization`, or why not.
    pub fn authenticate(&self, header: Option<&http::HeaderValue>) -> Result<Arc<Scope>, Refusal> {
        let value = header.ok_or_else(|| {
            Refusal::Unauthenticated(
                "this server needs a token: send `authorization: Bearer <token>`".into(),
            )
        })?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                Refusal::Unauthenticated("the authorization header must be `Bearer <token>`".into())
            })?;
        let digest = sha256(token.as_bytes());
        // Every credential is compared, so timing does not tell which matched.
        let mut found = None;
        for c in &self.credentials {
            if bool::from(c.digest.ct_eq(&digest)) {
                found = Some(Arc::clone(&c.scope));
            }
        }
        found.ok_or_else(|| Refusal::Unauthenticated("unknown token".into()))
    }
}

/// Why a caller may not make a call, whatever the protocol; each maps it
/// to its own code (gRPC: `status::from_refusal`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No token, or not one of this server's.
    #[error("{0}")]
    Unauthenticated(String),
    /// A token whose scope does not cover the call.
    #[error("{0}")]
    Denied(String),
}

/// `*` matches any run of characters (none included); all else literally.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and where in the text it started matching.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

fn parse_digest(hex_digest: &str) -> Option<[u8; 32]> {
    hex::decode(hex_digest.trim()).ok()?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(token: &str, agents: &[&str], admin: bool) -> TokenConfig {
        TokenConfig {
            name: String::new(),
            token: Some(token.into()),
            token_sha256: None,
            agents: agents.iter().map(|s| s.to_string()).collect(),
            users: vec![],
            admin,
            default_agent: None,
            default_user: None,
        }
    }

    fn bearer(v: &str) -> http::HeaderValue {
        http::HeaderValue::from_str(v).unwrap()
    }

    #[test]
    fn glob_matches_runs_and_literals() {
        for (p, t, want) in [
            ("team-a-*", "team-a-bot", true),
            ("team-a-*", "team-a-", true),
            ("team-a-*", "team-b-bot", false),
            ("*", "anything", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*-prod", "billing-prod", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("a**", "a", true),
        ] {
            assert_eq!(glob(p, t), want, "{p} vs {t}");
        }
    }

    #[test]
    fn tokens_authenticate_by_plaintext_or_digest() {
        let digest = hex::encode(sha256(b"second-secret-token"));
        let auth = Authenticator::new(&[
            token("first-secret-token", &["team-a-*"], false),
            TokenConfig {
                name: "ops".into(),
                token: None,
                token_sha256: Some(digest.to_uppercase()),
                agents: vec![],
                users: vec![],
                admin: true,
                default_agent: None,
                default_user: None,
            },
        ])
        .unwrap();
        let a = auth
            .authenticate(Some(&bearer("Bearer first-secret-token")))
            .unwrap();
        assert!(a.matches_agent("team-a-x") && !a.matches_agent("team-b-x") && !a.admin);
        let ops = auth
            .authenticate(Some(&bearer("bearer second-secret-token")))
            .unwrap();
        assert!(ops.admin && reach::reaches_agent(Some(&ops), "anyone", Some("anybody")));
        for bad in [
            None,
            Some(bearer("Bearer nope-nope-nope-nope")),
            Some(bearer("Basic first-secret-token")),
        ] {
            let err = auth.authenticate(bad.as_ref()).unwrap_err();
            assert!(matches!(err, Refusal::Unauthenticated(_)), "{err:?}");
        }
    }

    #[test]
    fn bad_token_tables_are_refused_with_the_reason() {
        let cases = [
            (token("short", &["a"], false), "16 characters"),
            (
                token("long-enough-token-1", &[], false),
                "agent-id patterns",
            ),
            (
                TokenConfig {
                    token_sha256: Some("abc".into()),
                    ..token("long-enough-token-1", &["a"], false)
                },
                "exactly one",
            ),
            (
                TokenConfig {
                    token: None,
                    token_sha256: Some("zz".into()),
                    ..token("", &["a"], false)
                },
                "64 hex",
            ),
        ];
        for (t, expected) in cases {
            let err = Authenticator::new(&[t]).unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
        let twice = [
            token("long-enough-token-1", &["a"], false),
            token("long-enough-token-1", &["b"], false),
        ];
        assert!(Authenticator::new(&twice).unwrap_err().contains("twice"));
        assert!(!Authenticator::new(&[]).unwrap().enabled());
    }

    #[test]
    fn user_patterns_cover_the_users_agents_only() {
        let auth = Authenticator::new(&[TokenConfig {
            users: vec!["acme-*".into()],
            ..token("user-scoped-token-1", &[], false)
        }])
        .unwrap();
        let t = auth
            .authenticate(Some(&bearer("Bearer user-scoped-token-1")))
            .unwrap();
        assert!(t.covers_user("acme-ana") && !t.covers_user("other-bo"));
        assert!(reach::reaches_agent(Some(&t), "chat-1", Some("acme-ana")));
        let err = reach::decide(
            Some(&t),
            reach::Target::Agent {
                id: "chat-1",
                owner: Some("other-bo"),
                binds: None,
            },
        )
        .unwrap_err();
        assert!(
            matches!(&err, Refusal::Denied(m) if !m.contains("other-bo") && m.contains("acme-*")),
            "{err:?}"
        );
        assert!(
            !reach::reaches_agent(Some(&t), "chat-1", None),
            "no user: not covered"
        );
        assert!(!reach::reaches_user(Some(&t), "other-bo") && reach::reaches_user(None, "x"));
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let t = token("super-secret-value-123", &["a"], false);
        assert!(!format!("{t:?}").contains("super-secret"));
    }
}
