//! One tower layer for the hooks that wrap every call: authentication, the
//! metrics of each call, and the status of oversized requests. Each is a
//! [`Hook`]: something done before the inner service (which may answer at
//! once) and something done to its answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::codegen::http;
use tower::{Layer, Service};

pub trait Hook<ReqBody, ResBody>: Clone {
    /// What `before` hands to `after`.
    type State: Send + 'static;
    /// The body of the answers after the hook.
    type Body;

    /// Runs before the call: `Err` answers at once, without calling on.
    fn before(
        &self,
        req: &mut http::Request<ReqBody>,
    ) -> Result<Self::State, http::Response<Self::Body>>;

    /// Runs on the inner service's answer.
    fn after(state: Self::State, res: http::Response<ResBody>) -> http::Response<Self::Body>;
}

/// The layer of a [`Hook`].
#[derive(Debug, Clone)]
pub struct HookLayer<H>(pub H);

impl<S, H: Clone> Layer<S> for HookLayer<H> {
    type Service = Hooked<S, H>;

    fn layer(&self, inner: S) -> Self::Service {
        Hooked {
            inner,
            hook: self.0.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Hooked<S, H> {
    inner: S,
    hook: H,
}

impl<S, H, ReqBody, ResBody> Service<http::Request<ReqBody>> for Hooked<S, H>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    H: Hook<ReqBody, ResBody>,
    H::Body: Send + 'static,
{
    type Response = http::Response<H::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<ReqBody>) -> Self::Future {
        match self.hook.before(&mut req) {
            Err(answer) => Box::pin(async move { Ok(answer) }),
            Ok(state) => {
                let call = self.inner.call(req);
                Box::pin(async move { Ok(H::after(state, call.await?)) })
            }
        }
    }
}

/// Marks each call in flight until its answer's head is ready (a unary
/// call's work is done by then), so background embedding holds back
/// meanwhile (`engram_core::load`).
#[derive(Debug, Clone, Copy)]
pub struct Serving;

impl<ReqBody, ResBody> Hook<ReqBody, ResBody> for Serving {
    type State = engram_core::load::Serving<'static>;
    type Body = ResBody;

    fn before(
        &self,
        _: &mut http::Request<ReqBody>,
    ) -> Result<Self::State, http::Response<Self::Body>> {
        Ok(engram_core::load::Load::global().serving())
    }

    fn after(_: Self::State, res: http::Response<ResBody>) -> http::Response<Self::Body> {
        res
    }
}
