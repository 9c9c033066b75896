//! Prometheus metrics: the recorder, the per-RPC layer and the `/metrics`
//! endpoint.
//!
//! Code anywhere records through the `metrics` facade; until
//! [`install`] runs (only when `server.metrics_listen` is set) every record
//! is a no-op. Gauges that describe state (agents loaded, bytes on disk, the
//! circuit) are read at scrape time instead of being kept up to date.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body::{Body, Frame, SizeHint};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tonic::codegen::http;

use crate::layers::Hook;
use engram_engine::Engine;

/// How long a walk of the data dir for `engram_disk_bytes` is reused.
const DISK_WALK_EVERY: Duration = Duration::from_secs(60);

/// Latency buckets in seconds: 50 µs to 30 s.
const SECONDS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    5.0, 30.0,
];
const APPENDS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];
const BYTES: [f64; 9] = [
    256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];

/// Installs the process-wide recorder once and returns its handle (tests
/// start several servers in one process; they share it).
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets(&SECONDS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("engram_fsync_batch_appends".into()),
                        &APPENDS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("engram_fsync_batch_bytes".into()),
                        &BYTES,
                    )
                })
                .expect("bucket lists are not empty")
                .install_recorder()
                .expect("the metrics recorder is installed once");
            describe();
            handle
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "engram_rpc_requests_total",
        "Finished gRPC calls by method and status code"
    );
    describe_histogram!(
        "engram_rpc_duration_seconds",
        metrics::Unit::Seconds,
        "gRPC call latency by method and status code"
    );
    describe_counter!("engram_traces_ingested_total", "Traces stored by Ingest");
    describe_histogram!(
        "engram_fsync_duration_seconds",
        metrics::Unit::Seconds,
        "Write plus fdatasync of one group commit"
    );
    describe_histogram!(
        "engram_fsync_batch_appends",
        "Appends made durable by one group commit"
    );
    describe_histogram!(
        "engram_fsync_batch_bytes",
        metrics::Unit::Bytes,
        "Bytes made durable by one group commit"
    );
    describe_counter!(
        "engram_compactions_total",
        "Compactions by trigger and outcome (summarized, microcompacted, skipped, failed)"
    );
    describe_histogram!(
        "engram_summarizer_duration_seconds",
        metrics::Unit::Seconds,
        "Summarizer calls, success or not"
    );
    describe_counter!(
        "engram_summarizer_failures_total",
        "Summaries that failed (nothing was pruned)"
    );
    describe_gauge!(
        "engram_summarizer_circuit_open",
        "1 while the summarizer's circuit breaker keeps calls away from the model"
    );
    describe_gauge!("engram_agents_loaded", "Agents held in memory");
    describe_gauge!(
        "engram_index_unembedded_items",
        "Items of loaded agents waiting for the embedding model (the index's lag)"
    );
    describe_histogram!(
        "engram_embed_batch_seconds",
        metrics::Unit::Seconds,
        "One batch of the background indexer through the embedding model"
    );
    describe_counter!(
        "engram_embedded_items_total",
        "Items the background indexer embedded"
    );
    describe_counter!(
        "engram_embed_refused_items_total",
        "Items the model refused even alone (found by their words only)"
    );
    describe_histogram!(
        "engram_embed_query_seconds",
        metrics::Unit::Seconds,
        "Embedding a search's query"
    );
    describe_counter!(
        "engram_embed_query_failures_total",
        "Queries not embedded (the search ranked by words alone)"
    );
    describe_gauge!(
        "engram_disk_bytes",
        metrics::Unit::Bytes,
        "Bytes of every file under store.data_dir (walked at most once a minute)"
    );
}

/// Serves `GET /metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    engine: Engine,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let scraper = Arc::new(Scraper {
        handle,
        engine,
        walked: tokio::sync::Mutex::new(None),
    });
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let scraper = Arc::clone(&scraper);
            async move { scraper.scrape().await }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

struct Scraper {
    handle: PrometheusHandle,
    engine: Engine,
    /// When the data dir was last walked and what it held: with many agents
    /// a walk is many stat calls, so scrapes reuse it for a while.
    walked: tokio::sync::Mutex<Option<(Instant, u64)>>,
}

impl Scraper {
    /// Reads the state gauges, then renders everything.
    async fn scrape(&self) -> ([(http::HeaderName, &'static str); 1], String) {
        metrics::gauge!("engram_agents_loaded").set(self.engine.store().loaded_agents() as f64);
        metrics::gauge!("engram_index_unembedded_items")
            .set(self.engine.store().unembedded_items() as f64);
        metrics::gauge!("engram_disk_bytes").set(self.disk_bytes().await as f64);
        let open = if self.engine.circuit_open() { 1.0 } else { 0.0 };
        metrics::gauge!("engram_summarizer_circuit_open").set(open);
        self.handle.run_upkeep();
        (
            [(
                http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            self.handle.render(),
        )
    }

    async fn disk_bytes(&self) -> u64 {
        let mut walked = self.walked.lock().await;
        match *walked {
            Some((at, bytes)) if at.elapsed() < DISK_WALK_EVERY => bytes,
            _ => {
                let bytes = self.engine.store().disk_bytes().await;
                *walked = Some((Instant::now(), bytes));
                bytes
            }
        }
    }
}

/// Counts and times every call by method and gRPC status code.
#[derive(Debug, Clone, Copy, Default)]
pub struct RpcMetrics;

impl<ReqBody, ResBody> Hook<ReqBody, ResBody> for RpcMetrics {
    type State = (&'static str, Instant);
    type Body = Observed<ResBody>;

    fn before(
        &self,
        req: &mut http::Request<ReqBody>,
    ) -> Result<Self::State, http::Response<Self::Body>> {
        Ok((method_label(req.uri().path()), Instant::now()))
    }

    fn after(
        (method, started): Self::State,
        res: http::Response<ResBody>,
    ) -> http::Response<Self::Body> {
        // A trailers-only answer (every error) has its code in the
        // headers; a normal one in the trailers at the end of the body.
        let code = res.headers().get("grpc-status").map(code_label);
        res.map(|body| Observed {
            body,
            call: Some(Call {
                method,
                started,
                code,
            }),
        })
    }
}

/// The method part of `/package.Service/Method`; unknown paths are one
/// label so scanners cannot grow the series without bound.
fn method_label(path: &str) -> &'static str {
    // The health and reflection services' own methods.
    const OTHERS: [&str; 3] = ["Check", "Watch", "ServerReflectionInfo"];
    let method = path.rsplit('/').next().unwrap_or_default();
    engram_proto::METHODS
        .iter()
        .chain(&OTHERS)
        .find(|m| **m == method)
        .copied()
        .unwrap_or("unknown")
}

fn code_label(value: &http::HeaderValue) -> &'static str {
    let code = value
        .to_str()
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(tonic::Code::Unknown, tonic::Code::from_i32);
    code_name(code)
}

/// The name of a gRPC code, as metrics and the JSON API's errors say it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Counts and times a call that did not come through gRPC's layers (the
/// JSON API's), under the same metrics by its method and code.
pub fn record_call(method: &'static str, code: tonic::Code, started: Instant) {
    Call {
        method,
        started,
        code: None,
    }
    .record(code_name(code));
}

#[derive(Debug)]
struct Call {
    method: &'static str,
    started: Instant,
    code: Option<&'static str>,
}

impl Call {
    fn record(self, code: &'static str) {
        let labels = [("method", self.method), ("code", code)];
        metrics::counter!("engram_rpc_requests_total", &labels).increment(1);
        metrics::histogram!("engram_rpc_duration_seconds", &labels)
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// A response body that records its call when the trailers pass by, or
/// when it is dropped (a client gone mid-answer: CANCELLED).
#[derive(Debug)]
pub struct Observed<B> {
    body: B,
    call: Option<Call>,
}

impl<B: Body + Unpin> Body for Observed<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame
                    .trailers_ref()
                    .and_then(|t| t.get("grpc-status"))
                    .map(code_label)
                    && let Some(call) = this.call.take()
                {
                    let code = call.code.unwrap_or(code);
                    call.record(code);
                }
            }
            Poll::Ready(None) => {
                if let Some(call) = this.call.take() {
                    let code = call.code.unwrap_or("OK");
                    call.record(code);
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B> Drop for Observed<B> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            let code = call.code.unwrap_or("CANCELLED");
            call.record(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        assert_eq!(method_label("/engram.v1.MemoryService/Ingest"), "Ingest");
        assert_eq!(method_label("/grpc.health.v1.Health/Check"), "Check");
        assert_eq!(method_label("/x.Y/../../etc/passwd"), "unknown");
        assert_eq!(
            code_label(&http::HeaderValue::from_static("16")),
            "UNAUTHENTICATED"
        );
        assert_eq!(code_label(&http::HeaderValue::from_static("x")), "UNKNOWN");
    }
}
