//! What a call asks to reach, and the one entry every call's handler goes
//! through: the lookups the rule needs (an agent's stored user), the rule
//! (`reach::decide`), then the call's place among the agent's calls in
//! flight. Each refusal is PERMISSION_DENIED (the API's statuses are
//! gRPC's; the HTTP side maps them). Listings filter with the same rule.

use std::sync::Arc;

use engram_engine::{AgentPermit, Engine};
use engram_proto::pb;
use tonic::Status;

use super::Scope;
use super::reach::{self, Target};
use crate::status;

/// Who is calling: the scope of their token, or none when auth is off.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    scope: Option<Arc<Scope>>,
}

impl Caller {
    pub fn new(scope: Option<Arc<Scope>>) -> Self {
        Self { scope }
    }

    /// The caller's scope, when auth is on.
    pub fn scope(&self) -> Option<&Scope> {
        self.scope.as_deref()
    }

    /// Whether the caller reaches the agent `id` of `owner`: what
    /// ListAgents shows.
    pub fn sees_agent(&self, id: &str, owner: Option<&str>) -> bool {
        reach::reaches_agent(self.scope(), id, owner)
    }

    /// Whether the caller reaches `user`: what ListUsers shows.
    pub fn sees_user(&self, user: &str) -> bool {
        reach::reaches_user(self.scope(), user)
    }
}

/// What a call touches, as its request says it.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// One agent, and the user the request names for it ("" for none),
    /// which binds the agent when it has none.
    Agent { id: &'a str, binds: &'a str },
    /// A user's own memory.
    User(&'a str),
    /// An agent's conversation, or (no agent named) all of a user's: the
    /// reads that take either (Retrieve, SearchHistory).
    AgentOrUser { agent: &'a str, user: &'a str },
    /// A memory scope (blocks, facts, an export); `binds` as for an agent
    /// (a block write on an agent may name its user).
    Scope {
        scope: Option<&'a pb::MemoryScope>,
        binds: &'a str,
        write: bool,
    },
    /// The new agent a fork makes of `source`: it inherits the source's
    /// user, so the token must cover that user.
    ForkInto { source: &'a str, target: &'a str },
    /// A call for admin tokens only.
    Admin(&'static str),
}

impl<'a> Access<'a> {
    /// A call on one agent that names no user for it.
    pub fn agent(id: &'a str) -> Self {
        Self::Agent { id, binds: "" }
    }

    /// A call on a memory scope that names no user for it.
    pub fn scope(scope: &'a Option<pb::MemoryScope>, write: bool) -> Self {
        Self::Scope {
            scope: scope.as_ref(),
            binds: "",
            write,
        }
    }
}

/// PERMISSION_DENIED unless the caller reaches what `access` touches
/// (`reach::decide`, with the agent's stored user looked up when the rule
/// needs it). Without a scope on the request (auth off) everything is
/// allowed.
///
/// Allowed, a call on an agent takes its place among the agent's calls in
/// flight (`Engine::admit`): the permit holds it until the call ends, and
/// a call past `server.max_calls_per_agent` is refused RESOURCE_EXHAUSTED.
/// Then, past the memory budget, it waits for room.
pub async fn authorize(
    engine: &Engine,
    caller: &Caller,
    access: Access<'_>,
) -> Result<AgentPermit, Status> {
    use pb::memory_scope::Scope as S;
    let scope = caller.scope();
    let agent = match access {
        Access::Agent { id, binds } => {
            check_agent(engine, scope, id, binds).await?;
            id
        }
        Access::AgentOrUser { agent, user } if agent.is_empty() && !user.is_empty() => {
            return check_user(scope, user);
        }
        Access::AgentOrUser { agent, .. } => {
            check_agent(engine, scope, agent, "").await?;
            agent
        }
        Access::User(user) => return check_user(scope, user),
        Access::Scope {
            scope: memory,
            binds,
            write,
        } => match memory.and_then(|s| s.scope.as_ref()) {
            Some(S::AgentId(id)) => {
                check_agent(engine, scope, id, binds).await?;
                id
            }
            Some(S::UserId(user)) => return check_user(scope, user),
            Some(S::Global(true)) => return decided(scope, Target::Global { write }),
            // Names no memory: the conversion's refusal, for every token.
            _ => {
                let invalid = crate::convert::scope_from_pb(None).expect_err("names no scope");
                return Err(status::from_engine(invalid));
            }
        },
        Access::ForkInto { source, target } => {
            let inherited = owner(engine, scope, source).await?;
            check_agent(engine, scope, target, inherited.as_deref().unwrap_or("")).await?;
            target
        }
        Access::Admin(what) => return decided(scope, Target::Admin(what)),
    };
    let permit = engine.admit(agent).map_err(status::from_engine)?;
    // Past the memory budget, the call waits for room before it loads
    // anything (`Engine::make_room`).
    engine.make_room().await;
    Ok(permit)
}

/// The rule on an agent, its stored user looked up (auth on, not admin).
async fn check_agent(
    engine: &Engine,
    scope: Option<&Scope>,
    id: &str,
    binds: &str,
) -> Result<(), Status> {
    let binds = Some(binds).filter(|u| !u.is_empty());
    // The named user first, before anything stored is read: a refusal for
    // it says the same whether `id` exists or not.
    if binds.is_some() {
        let named = Target::Agent {
            id,
            owner: None,
            binds,
        };
        reach::decide(scope, named).map_err(status::from_refusal)?;
    }
    let owner = owner(engine, scope, id).await?;
    let target = Target::Agent {
        id,
        owner: owner.as_deref(),
        binds,
    };
    reach::decide(scope, target).map_err(status::from_refusal)
}

/// The user `id` belongs to, when the rule needs it (auth on, not admin).
async fn owner(engine: &Engine, scope: Option<&Scope>, id: &str) -> Result<Option<String>, Status> {
    match scope {
        Some(scope) if !scope.admin => engine.agent_user(id).await.map_err(status::from_engine),
        _ => Ok(None),
    }
}

fn check_user(scope: Option<&Scope>, user: &str) -> Result<AgentPermit, Status> {
    decided(scope, Target::User(user))
}

fn decided(scope: Option<&Scope>, target: Target<'_>) -> Result<AgentPermit, Status> {
    reach::decide(scope, target)
        .map(|()| AgentPermit::none())
        .map_err(status::from_refusal)
}
