//! The checks a call makes with its caller's scope, whatever protocol
//! brought it: each answers PERMISSION_DENIED (the API's statuses are
//! gRPC's; the HTTP side maps them) when the scope does not cover what the
//! call touches.

use std::sync::Arc;

use engram_engine::{AgentPermit, Engine};
use tonic::Status;

use super::{Scope, check_admin, check_agent, check_user};
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
}

/// PERMISSION_DENIED unless the caller's scope covers `agent`: by its id,
/// or by its user — the stored one, else `named_user`, whom the request
/// binds it to ("" for none). The user is looked up only for a token
/// scoped by users that does not cover the id itself. Without a scope on
/// the request (auth off) everything is allowed.
///
/// Allowed, the call takes its place among the agent's calls in flight
/// (`Engine::admit`): the permit holds it until the call ends, and a call
/// past `server.max_calls_per_agent` is refused RESOURCE_EXHAUSTED. Then,
/// past the memory budget, it waits for room.
pub async fn authorize(
    engine: &Engine,
    caller: &Caller,
    agent: &str,
    named_user: &str,
) -> Result<AgentPermit, Status> {
    check_scope(engine, caller, agent, named_user).await?;
    let permit = engine.admit(agent).map_err(status::from_engine)?;
    // Past the memory budget, the call waits for room before it loads
    // anything (`Engine::make_room`).
    engine.make_room().await;
    Ok(permit)
}

async fn check_scope(
    engine: &Engine,
    caller: &Caller,
    agent: &str,
    named_user: &str,
) -> Result<(), Status> {
    let Some(scope) = caller.scope() else {
        return Ok(());
    };
    let owner = if scope.allows(agent) || !scope.has_users() {
        None
    } else {
        let stored = engine
            .agent_user(agent)
            .await
            .map_err(status::from_engine)?;
        stored.or_else(|| Some(named_user.to_owned()).filter(|u| !u.is_empty()))
    };
    check_agent(Some(scope), agent, owner.as_deref()).map_err(status::from_refusal)
}

/// Who may act on a memory scope: a token covering the agent (by id or by
/// its user) for an agent's blocks and facts; a token covering the user
/// for a user's (every agent of the user sees them, and the token covers
/// all of those); the global scope is shown to every agent, so anyone
/// reads it and only an admin token changes it.
pub async fn authorize_scope(
    engine: &Engine,
    caller: &Caller,
    scope: &Option<engram_proto::pb::MemoryScope>,
    user: &str,
    write: bool,
) -> Result<AgentPermit, Status> {
    use engram_proto::pb::memory_scope::Scope as S;
    match scope.as_ref().and_then(|s| s.scope.as_ref()) {
        Some(S::AgentId(agent)) => authorize(engine, caller, agent, user).await,
        Some(S::UserId(user)) => authorize_user(caller, user).map(|()| AgentPermit::none()),
        Some(S::Global(_)) if !write => Ok(AgentPermit::none()),
        _ => require_admin(caller, "the global memory blocks").map(|()| AgentPermit::none()),
    }
}

/// PERMISSION_DENIED unless the caller's scope covers `user`.
pub fn authorize_user(caller: &Caller, user: &str) -> Result<(), Status> {
    check_user(caller.scope(), user).map_err(status::from_refusal)
}

/// PERMISSION_DENIED unless the caller holds an admin token (or auth is off).
pub fn require_admin(caller: &Caller, what: &str) -> Result<(), Status> {
    check_admin(caller.scope(), what).map_err(status::from_refusal)
}
