//! Auth for gRPC: the tower hook that authenticates every call outside the
//! open paths and puts the caller's scope on the request.

use std::sync::Arc;

use tonic::codegen::http;

use super::{Authenticator, Caller, Scope};
use crate::layers::Hook;
use crate::status;

/// Paths served to anyone: probes and service discovery.
const OPEN_PREFIXES: [&str; 2] = ["/grpc.health.v1.Health/", "/grpc.reflection."];

/// The caller of a gRPC call: the scope the hook below put on it.
pub fn caller<T>(request: &tonic::Request<T>) -> Caller {
    Caller::new(request.extensions().get::<Arc<Scope>>().cloned())
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
