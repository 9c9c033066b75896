//! Calls in flight per method, bounded (`server.max_calls_per_method`),
//! over gRPC and the JSON API together. Two cores serve a few hundred
//! calls at once as well as a few thousand; past that, queued calls only
//! hold memory and grow everyone's latency until health checks and
//! deadlines fail too. So a call past the limit is answered UNAVAILABLE at
//! once, with a retry hint (the server is over its capacity: another
//! replica, or the same one a moment later, can take it). One limit per
//! method keeps a flood of one kind (searches) from starving the others
//! (the agent loop's Ingest and PrepareRequest). Health checks and
//! reflection are never counted. Per agent, the engine bounds the calls
//! (`engram_engine::AgentPermit`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use engram_proto::METHODS;
use tonic::codegen::http;
use tonic::{Code, Status};

use crate::layers::Hook;

/// How long a shed caller is asked to wait before it tries again.
pub const RETRY_AFTER: Duration = Duration::from_millis(200);

const SERVICE: &str = "/engram.v1.MemoryService/";

/// The calls in flight of each method of the service.
#[derive(Debug)]
pub struct MethodCalls {
    /// 0: no limit.
    limit: usize,
    counts: [AtomicUsize; METHODS.len()],
}

impl MethodCalls {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            counts: std::array::from_fn(|_| AtomicUsize::new(0)),
        })
    }

    /// A place for one call of `method` (one of [`METHODS`]; anything else
    /// is not counted), held until the permit drops; UNAVAILABLE when the
    /// method has `limit` calls in flight.
    pub fn admit(self: &Arc<Self>, method: &str) -> Result<MethodPermit, Status> {
        let Some(index) = METHODS.iter().position(|m| *m == method) else {
            return Ok(MethodPermit { held: None });
        };
        if self.limit == 0 {
            return Ok(MethodPermit { held: None });
        }
        let count = &self.counts[index];
        if count.fetch_add(1, Ordering::AcqRel) >= self.limit {
            count.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!("engram_calls_shed_total", "limit" => "method").increment(1);
            return Err(crate::status::busy(
                Code::Unavailable,
                format!(
                    "the server has {} {method} calls in flight, its most \
                     (server.max_calls_per_method); retry in {} ms",
                    self.limit,
                    RETRY_AFTER.as_millis()
                ),
                RETRY_AFTER,
            ));
        }
        Ok(MethodPermit {
            held: Some((Arc::clone(self), index)),
        })
    }
}

/// One admitted call: its place is given back when this drops.
#[must_use = "the call's place is given back when the permit drops: hold it for the call"]
#[derive(Debug)]
pub struct MethodPermit {
    held: Option<(Arc<MethodCalls>, usize)>,
}

impl Drop for MethodPermit {
    fn drop(&mut self) {
        if let Some((calls, index)) = self.held.take() {
            calls.counts[index].fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The gRPC side: admits each call of the service by its path, and holds
/// its place until the answer's head (a unary call's work is done by then;
/// a call dropped with its caller or its deadline gives it back at once).
#[derive(Debug, Clone)]
pub struct Admit(pub Arc<MethodCalls>);

impl<ReqBody, ResBody: Default> Hook<ReqBody, ResBody> for Admit {
    type State = MethodPermit;
    type Body = ResBody;

    fn before(
        &self,
        req: &mut http::Request<ReqBody>,
    ) -> Result<MethodPermit, http::Response<ResBody>> {
        let Some(method) = req.uri().path().strip_prefix(SERVICE) else {
            return Ok(MethodPermit { held: None });
        };
        self.0.admit(method).map_err(Status::into_http)
    }

    fn after(_: MethodPermit, res: http::Response<ResBody>) -> http::Response<ResBody> {
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_past_its_limit_is_shed_and_others_go_on() {
        let calls = MethodCalls::new(2);
        let one = calls.admit("SearchHistory").unwrap();
        let _two = calls.admit("SearchHistory").unwrap();
        let shed = calls.admit("SearchHistory").unwrap_err();
        assert_eq!(shed.code(), Code::Unavailable);
        assert!(shed.message().contains("max_calls_per_method"), "{shed:?}");
        assert_eq!(crate::status::pushback(&shed), Some(RETRY_AFTER));
        let _ingest = calls.admit("Ingest").unwrap();
        // Not the service's: never counted.
        let _health: Vec<_> = (0..10).map(|_| calls.admit("Check").unwrap()).collect();
        drop(one);
        let _three = calls.admit("SearchHistory").unwrap();
        let unlimited = MethodCalls::new(0);
        let _many: Vec<_> = (0..1000)
            .map(|_| unlimited.admit("Ingest").unwrap())
            .collect();
    }
}
