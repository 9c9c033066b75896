//! Auth for gRPC: the tower hook that authenticates every call outside the
//! open paths, and the checks the handlers make with the caller's scope.

use std::sync::Arc;

use tonic::Status;
use tonic::codegen::http;

use engram_engine::Engine;

use super::{Authenticator, Scope, check_admin, check_agent, check_user};
use crate::layers::Hook;
use crate::status;

/// Paths served to anyone: probes and service discovery.
const OPEN_PREFIXES: [&str; 2] = ["/grpc.health.v1.Health/", "/grpc.reflection."];

/// PERMISSION_DENIED unless the caller's scope covers `agent`: by its id,
/// or by its user — the stored one, else `named_user`, whom the request
/// binds it to ("" for none). The user is looked up only for a token
/// scoped by users that does not cover the id itself. Without a scope on
/// the request (auth off) everything is allowed.
pub async fn authorize<T>(
    engine: &Engine,
    request: &tonic::Request<T>,
    agent: &str,
    named_user: &str,
) -> Result<(), Status> {
    let Some(scope) = request.extensions().get::<Arc<Scope>>() else {
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
pub async fn authorize_scope<T>(
    engine: &Engine,
    request: &tonic::Request<T>,
    scope: &Option<engram_proto::pb::MemoryScope>,
    user: &str,
    write: bool,
) -> Result<(), Status> {
    use engram_proto::pb::memory_scope::Scope as S;
    match scope.as_ref().and_then(|s| s.scope.as_ref()) {
        Some(S::AgentId(agent)) => authorize(engine, request, agent, user).await,
        Some(S::UserId(user)) => authorize_user(request, user),
        Some(S::Global(_)) if !write => Ok(()),
        _ => require_admin(request, "the global memory blocks"),
    }
}

/// PERMISSION_DENIED unless the caller's scope covers `user`.
pub fn authorize_user<T>(request: &tonic::Request<T>, user: &str) -> Result<(), Status> {
    let scope = request.extensions().get::<Arc<Scope>>();
    check_user(scope.map(AsRef::as_ref), user).map_err(status::from_refusal)
}

/// PERMISSION_DENIED unless the caller holds an admin token (or auth is off).
pub fn require_admin<T>(request: &tonic::Request<T>, what: &str) -> Result<(), Status> {
    let scope = request.extensions().get::<Arc<Scope>>();
    check_admin(scope.map(AsRef::as_ref), what).map_err(status::from_refusal)
}

/// The caller's scope, when auth is on.
pub fn scope<T>(request: &tonic::Request<T>) -> Option<Arc<Scope>> {
    request.extensions().get::<Arc<Scope>>().cloned()
}

/// Authenticates every call outside the open paths and hands the handlers
/// the caller's [`Scope`] in the request extensions.
#[derive(Debug, Clone)]
pub struct Auth {
    auth: Arc<Authenticator>,
}

impl Auth {
    pub fn new(auth: Arc<Authenticator>) -> Self {
        Self { auth }
    }
}

impl<ReqBody, ResBody: Default> Hook<ReqBody, ResBody> for Auth {
    type State = ();
    type Body = ResBody;

    fn before(&self, req: &mut http::Request<ReqBody>) -> Result<(), http::Response<ResBody>> {
        let path = req.uri().path();
        if !self.auth.enabled() || OPEN_PREFIXES.iter().any(|p| path.starts_with(p)) {
            return Ok(());
        }
        match self
            .auth
            .authenticate(req.headers().get(http::header::AUTHORIZATION))
        {
            Ok(scope) => {
                req.extensions_mut().insert(scope);
                Ok(())
            }
            Err(refusal) => {
                tracing::info!(path, reason = %refusal, "call refused: not authenticated");
                Err(status::from_refusal(refusal).into_http())
            }
        }
    }

    fn after(_: (), res: http::Response<ResBody>) -> http::Response<ResBody> {
        res
    }
}
