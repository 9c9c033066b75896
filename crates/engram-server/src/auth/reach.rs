//! The one rule of tenancy (docs/DESIGN.md §9, "Tenancy"): whether a
//! token reaches what a call touches. Every call of every surface (gRPC,
//! the JSON API, MCP's tools, the console's calls) comes here through
//! `calls::authorize`, and every listing filters through it, so no handler
//! keeps a check of its own.
//!
//! - A user's memory (its blocks, facts, conversations, and every agent
//!   bound to it) only with a token that covers the user.
//! - An agent with no user by the token's agent patterns. An agent-pattern
//!   token binds nothing: its agents never see any user's memory.
//! - Binding an agent to a user (a write naming `user_id`, an import, a
//!   fork of a user's agent) needs a token covering that user.
//!
//! A refusal names the token and what it covers, never whether the id
//! exists or whose it is: an existing agent of another user and a missing
//! one (which has no user) read the same, and the user a call names is
//! checked before anything stored is looked at.

use super::{Refusal, Scope};

/// What a call touches, as the rule sees it: lookups already made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// One agent. `owner`: the user it belongs to (none when it has none
    /// or does not exist); `binds`: the user the call names for it, which
    /// binds it when it has none (none when the call names no user).
    Agent {
        id: &'a str,
        owner: Option<&'a str>,
        binds: Option<&'a str>,
    },
    /// A user's own memory (blocks, facts, all of its conversations).
    User(&'a str),
    /// The global blocks: shown to every agent, so anyone reads them and
    /// only an admin changes them.
    Global { write: bool },
    /// A call for admin tokens only (`what` names it in the refusal).
    Admin(&'a str),
}

/// Whether `scope` (none: auth is off) reaches `target`.
pub fn decide(scope: Option<&Scope>, target: Target<'_>) -> Result<(), Refusal> {
    let Some(scope) = scope else {
        return Ok(());
    };
    if scope.admin {
        return Ok(());
    }
    match target {
        Target::Agent { id, owner, binds } => {
            // The named user first: its answer cannot depend on what is
            // stored under `id`.
            if let Some(user) = binds
                && !scope.covers_user(user)
            {
                return Err(Refusal::Denied(format!(
                    "token {} may not bind agent {id:?} to user {user:?}: binding an agent to a user needs a token that covers the user; it covers {}",
                    scope.name,
                    scope.describe()
                )));
            }
            let reached = match owner.or(binds) {
                Some(user) => scope.covers_user(user),
                None => scope.matches_agent(id),
            };
            if reached {
                Ok(())
            } else {
                Err(Refusal::Denied(format!(
                    "token {} may not use agent {id:?}; it covers {}",
                    scope.name,
                    scope.describe()
                )))
            }
        }
        Target::User(user) if scope.covers_user(user) => Ok(()),
        Target::User(user) => Err(Refusal::Denied(format!(
            "token {} may not use user {user:?}; it covers {}",
            scope.name,
            scope.describe()
        ))),
        Target::Global { write: false } => Ok(()),
        Target::Global { write: true } => Err(Refusal::Denied(format!(
            "the global memory blocks are written with an admin token; token {} is not one",
            scope.name
        ))),
        Target::Admin(what) => Err(Refusal::Denied(format!(
            "{what} needs an admin token; token {} is not one",
            scope.name
        ))),
    }
}

/// Whether `scope` reaches the agent `id`, which belongs to `owner`: what
/// a listing shows.
pub fn reaches_agent(scope: Option<&Scope>, id: &str, owner: Option<&str>) -> bool {
    let target = Target::Agent {
        id,
        owner,
        binds: None,
    };
    decide(scope, target).is_ok()
}

/// Whether `scope` reaches the user `user`: what a listing shows.
pub fn reaches_user(scope: Option<&Scope>, user: &str) -> bool {
    decide(scope, Target::User(user)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scope(agents: &[&str], users: &[&str], admin: bool) -> Scope {
        Scope {
            name: "t".into(),
            patterns: agents.iter().map(|s| s.to_string()).collect(),
            users: users.iter().map(|s| s.to_string()).collect(),
            admin,
            default_agent: None,
            default_user: None,
        }
    }

    fn agent<'a>(id: &'a str, owner: Option<&'a str>, binds: Option<&'a str>) -> Target<'a> {
        Target::Agent { id, owner, binds }
    }

    #[test]
    fn an_agent_pattern_token_binds_nothing_and_reaches_no_users_agent() {
        let bot = scope(&["bot-*"], &[], false);
        let bot = Some(&bot);
        assert!(decide(bot, agent("bot-1", None, None)).is_ok());
        // Bound before the fix, or by another token: out of its reach.
        assert!(decide(bot, agent("bot-1", Some("b-1"), None)).is_err());
        let err = decide(bot, agent("bot-2", None, Some("b-1"))).unwrap_err();
        assert!(
            matches!(&err, Refusal::Denied(m) if m.contains("may not bind") && m.contains("bot-*")),
            "{err:?}"
        );
        assert!(decide(bot, Target::User("b-1")).is_err());
        assert!(!reaches_agent(bot, "bot-1", Some("b-1")));
    }

    #[test]
    fn a_user_token_reaches_its_users_agents_whatever_their_ids() {
        let a = scope(&[], &["a-*"], false);
        let a = Some(&a);
        assert!(decide(a, agent("chat", Some("a-1"), None)).is_ok());
        assert!(decide(a, agent("chat", None, Some("a-1"))).is_ok(), "binds");
        assert!(decide(a, agent("chat", None, None)).is_err(), "no user");
        assert!(decide(a, agent("chat", Some("b-1"), Some("a-1"))).is_err());
        assert!(decide(a, agent("chat", Some("a-1"), Some("b-1"))).is_err());
        assert!(decide(a, Target::User("a-9")).is_ok());
        assert!(decide(a, Target::Global { write: false }).is_ok());
        assert!(decide(a, Target::Global { write: true }).is_err());
        assert!(decide(a, Target::Admin("DeleteUser")).is_err());
        let both = scope(&["mix-*"], &["m-*"], false);
        assert!(reaches_agent(Some(&both), "mix-1", None));
        assert!(reaches_agent(Some(&both), "mix-1", Some("m-1")));
        assert!(!reaches_agent(Some(&both), "mix-1", Some("b-1")));
    }

    #[test]
    fn admins_and_auth_off_reach_everything() {
        let ops = scope(&[], &[], true);
        for s in [None, Some(&ops)] {
            assert!(decide(s, agent("x", Some("b-1"), Some("c-1"))).is_ok());
            assert!(decide(s, Target::Global { write: true }).is_ok());
            assert!(decide(s, Target::Admin("DeleteUser")).is_ok());
        }
    }

    proptest! {
        /// Outside a token's reach, an agent of another user and a missing
        /// agent (no owner) are refused alike, and no refusal names an
        /// owner the call did not name itself.
        #[test]
        fn refusals_never_tell_an_owner_or_existence(
            id in "[a-z]{1,3}-[0-9]",
            owner in "[a-z]{1,3}-[0-9]",
            binds in proptest::option::of("[a-z]{1,3}-[0-9]"),
            agents in proptest::collection::vec("[a-z]{0,2}\\*?", 0..3),
            users in proptest::collection::vec("[a-z]{0,2}\\*?", 0..3),
        ) {
            let patterns: Vec<&str> = agents.iter().map(String::as_str).collect();
            let user_patterns: Vec<&str> = users.iter().map(String::as_str).collect();
            let s = scope(&patterns, &user_patterns, false);
            let stored = decide(Some(&s), agent(&id, Some(&owner), binds.as_deref()));
            if let Err(Refusal::Denied(m)) = &stored {
                // (The agent's own id is named: an owner spelt the same is
                // the call's own word, not the owner told.)
                prop_assert!(
                    !m.contains(&format!("{owner:?}"))
                        || binds.as_deref() == Some(owner.as_str())
                        || owner == id,
                    "{m}"
                );
                // The same call on a missing id is refused the same when it
                // is outside the reach too.
                let missing = decide(Some(&s), agent(&id, None, binds.as_deref()));
                if let Err(Refusal::Denied(n)) = missing {
                    prop_assert_eq!(m, &n);
                }
            }
        }
    }
}
