//! Answers oversized requests with RESOURCE_EXHAUSTED.
//!
//! tonic refuses a request over `max_decoding_message_size` with
//! OUT_OF_RANGE, but the contract says input over a configured limit is
//! RESOURCE_EXHAUSTED. Engram's handlers never answer OUT_OF_RANGE, so
//! every OUT_OF_RANGE leaving the server is tonic's size check: this layer
//! rewrites its code (a trailers-only response carries it in the headers).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::codegen::http;
use tower::{Layer, Service};

const OUT_OF_RANGE: &str = "11";
const RESOURCE_EXHAUSTED: &str = "8";

#[derive(Debug, Clone, Copy, Default)]
pub struct OversizeLayer;

impl<S> Layer<S> for OversizeLayer {
    type Service = Oversize<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Oversize { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Oversize<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Oversize<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let fut = self.inner.call(req);
        Box::pin(async move {
            let mut res = fut.await?;
            let headers = res.headers_mut();
            if headers
                .get("grpc-status")
                .is_some_and(|v| v == OUT_OF_RANGE)
            {
                headers.insert(
                    "grpc-status",
                    http::HeaderValue::from_static(RESOURCE_EXHAUSTED),
                );
            }
            Ok(res)
        })
    }
}
