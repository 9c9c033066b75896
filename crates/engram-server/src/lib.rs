//! engramd: Engram served over gRPC (and, optionally, JSON and MCP over
//! HTTP), on top of the engine
//! (`engram-engine`), which does the work.
//!
//! - [`run`]: serves a listener until a shutdown future resolves; used by
//!   `engramd` and by the integration tests alike.
//! - [`config`]: layered configuration; [`wiring`]: the store, the
//!   embedding model, the summarizer and the engine's settings it asks for.
//! - [`api`]: the calls of `engram.v1.MemoryService` whatever the
//!   protocol, each auth → [`convert`] → engine → [`convert`];
//!   [`status`]: every status the server answers with.
//! - [`service`]: the API over gRPC; [`http`]: over HTTP, as JSON; [`mcp`]:
//!   as MCP tools, on the HTTP listener.
//! - [`layers`]: the one tower layer of the hooks around every call:
//!   [`auth`], the metrics of [`observe`], and [`oversize`] (RESOURCE_EXHAUSTED
//!   for requests over the size limit).
//! - [`auth`]: bearer tokens scoped to agent-id patterns.
//! - [`boundary`]: a panic in a handler is answered INTERNAL.
//! - [`health`]: the gRPC health service following the store.
//! - [`observe`]: Prometheus metrics.
//! - [`probe`]: the client side of `engramd health`.
//! - [`telemetry`]: the log subscriber.

mod admission;
pub mod api;
pub mod auth;
mod blocks;
pub mod boundary;
pub mod config;
pub mod convert;
mod facts;
pub mod health;
pub mod http;
pub mod layers;
pub mod mcp;
pub mod observe;
pub mod oversize;
mod portable;
pub mod probe;
pub mod service;
pub mod status;
pub mod telemetry;
pub mod wiring;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use engram_engine::Engine;
use engram_proto::pb::memory_service_server::MemoryServiceServer;
use engram_store::{Store, StoreError};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tonic::transport::server::TcpIncoming;

use layers::HookLayer;

pub use config::Config;
pub use service::Engram;
pub use wiring::{embedder, open_store, reindex};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("opening the store: {0}")]
    Store(#[from] StoreError),
    #[error("building server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("configuring the summarizer: {0}")]
    Summarizer(String),
    #[error("loading the embedding model: {0}")]
    Embedder(String),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("configuring auth: {0}")]
    Auth(String),
    #[error("configuring TLS: {0}")]
    Tls(String),
    #[error("store.data_dir: {0}")]
    DataDir(String),
    #[error("binding server.metrics_listen {addr}: {error}")]
    Metrics {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
    #[error("binding http.listen {addr}: {error}")]
    Http {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
}

/// The listeners a server serves on, bound by the caller (who can then
/// say where): gRPC always, metrics and HTTP when configured.
#[derive(Debug)]
pub struct Listeners {
    pub grpc: TcpListener,
    pub metrics: Option<TcpListener>,
    pub http: Option<TcpListener>,
}

impl Listeners {
    /// `grpc`, and the metrics and HTTP listeners `config` asks for.
    pub async fn bind_for(grpc: TcpListener, config: &Config) -> Result<Self, ServerError> {
        Ok(Self {
            grpc,
            metrics: bind_metrics(config).await?,
            http: bind_http(config).await?,
        })
    }
}

/// Serves Engram on `listener` until `shutdown` resolves, then drains
/// in-flight calls (up to `server.shutdown_grace_secs`) and flushes the store.
/// Metrics, when `server.metrics_listen` is set, are served there.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let _held = lock_data_dir(&config.store.data_dir)?;
    let listeners = Listeners::bind_for(listener, &config).await?;
    run_on(listeners, config, shutdown).await
}

/// The HTTP listener `http.listen` asks for, if any.
pub async fn bind_http(config: &Config) -> Result<Option<TcpListener>, ServerError> {
    bind_optional(config.http_addr()?, |addr, error| ServerError::Http {
        addr,
        error,
    })
    .await
}

/// A listener on `addr`, if there is one; `failed` says which could not
/// be bound.
async fn bind_optional(
    addr: Option<std::net::SocketAddr>,
    failed: fn(std::net::SocketAddr, std::io::Error) -> ServerError,
) -> Result<Option<TcpListener>, ServerError> {
    match addr {
        Some(addr) => Ok(Some(
            TcpListener::bind(addr)
                .await
                .map_err(|error| failed(addr, error))?,
        )),
        None => Ok(None),
    }
}

/// The metrics listener `server.metrics_listen` asks for, if any.
pub async fn bind_metrics(config: &Config) -> Result<Option<TcpListener>, ServerError> {
    bind_optional(config.metrics_addr()?, |addr, error| ServerError::Metrics {
        addr,
        error,
    })
    .await
}

/// Holds `dir` for this process, so that a second engramd (or `engramd
/// reindex`) on the same data is refused rather than left to corrupt it.
/// Released when the file drops, or the process dies.
pub fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, ServerError> {
    let failed = |e: std::io::Error| ServerError::DataDir(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(failed)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(dir.join("engramd.lock"))
        .map_err(failed)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(ServerError::DataDir(format!(
            "{} is in use by another engramd (or engramd reindex)",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(failed(e)),
    }
}

/// [`run`] on listeners bound by the caller (which can then report their
/// ports), with the data directory locked by the caller
/// ([`lock_data_dir`]).
pub async fn run_on(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let store = open_store(&config).await?;
    serve(listeners, config, store, shutdown).await
}

/// [`run_on`] over a store the caller opened (and can reach).
pub async fn serve(
    listeners: Listeners,
    config: Config,
    store: Arc<dyn Store>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let Listeners {
        grpc: listener,
        metrics,
        http,
    } = listeners;
    // Installed before anything records, so the first calls count too.
    let metrics = metrics.map(|listener| (listener, observe::install()));
    // Everything that can fail comes before anything is spawned: an early
    // return past a spawned upkeep task or an open store left the runtime
    // waiting on them at drop, and engramd hung instead of exiting.
    let authenticator =
        Arc::new(auth::Authenticator::new(&config.auth.tokens).map_err(ServerError::Auth)?);
    let mut builder = tonic::transport::Server::builder();
    let tls = tls_config(&config.server)?;
    let tls_on = tls.is_some();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    let (reflection_v1, reflection_v1alpha) = reflection()?;
    let summarizer = wiring::summarizer(&config.llm).map_err(ServerError::Summarizer)?;

    let upkeep = store.spawn_upkeep();
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let failure_watch = health::follow_store(&reporter, &store).await;
    // The BPE tables load in the background instead of on the first prompt.
    tokio::task::spawn_blocking(engram_core::tokens::warm_up);
    let engine = Engine::new(
        Arc::clone(&store),
        summarizer,
        &wiring::engine_settings(&config),
    );
    tracing::info!(summarizer = %engine.summarizer_name(), "compaction ready");
    match engine.memory_budget() {
        Some(bytes) => tracing::info!(budget_mb = bytes >> 20, "memory budget"),
        None => tracing::info!(
            "no memory budget (store.memory_budget_mb, or a container's memory limit, sets one)"
        ),
    }
    log_security(&config, &authenticator, tls_on);
    let limit = config.server.max_message_bytes;
    let methods = admission::MethodCalls::new(config.server.max_calls_per_method);
    let (signal, draining) = drain_on(shutdown, reporter);
    let background = Background {
        upkeep,
        engine_upkeep: engine.spawn_upkeep(),
        failure_watch,
        metrics: metrics.map(|(listener, handle)| MetricsTask::spawn(listener, handle, &engine)),
        http: http.map(|listener| {
            let api = api::Api::new(engine.clone(), limit);
            let mcp = config.mcp.enabled.then(|| mcp::McpSettings {
                allowed_hosts: config.mcp.allowed_hosts.clone(),
                agent_id: config.mcp.agent_id.clone(),
                user_id: config.mcp.user_id.clone(),
            });
            let state = http::HttpState::new(
                api,
                Arc::clone(&authenticator),
                limit,
                mcp,
                Arc::clone(&methods),
            );
            HttpTask::spawn(listener, http::router(state), &draining)
        }),
    };
    let memory = MemoryServiceServer::new(Engram::new(engine.clone(), limit))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let serve = builder
        // Receive windows that grow with the connection's bandwidth-delay
        // product, so large requests do not crawl at 64 KiB per round trip.
        .http2_adaptive_window(Some(true))
        // Outermost: count every call, refusals included, by its final code.
        .layer(HookLayer(observe::RpcMetrics))
        .layer(HookLayer(layers::Serving))
        // Rewrite tonic's size refusals before anything else sees them.
        .layer(HookLayer(oversize::Oversize { limit }))
        .layer(HookLayer(auth::Auth::new(authenticator)))
        // Authenticated calls take their place; past the method's limit
        // they are answered at once.
        .layer(HookLayer(admission::Admit(methods)))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(memory)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), signal);
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    let mut stopping = draining.subscribe();
    let until_grace_ends = async move {
        let _ = stopping.wait_for(|draining| *draining).await;
        tokio::time::sleep(grace).await;
    };
    tokio::pin!(until_grace_ends);
    let result = tokio::select! {
        r = serve => r.map_err(ServerError::from),
        () = &mut until_grace_ends => {
            tracing::warn!(grace_secs = grace.as_secs(), "calls still open after the grace period; closing them");
            Ok(())
        }
    };
    // Also when gRPC stopped on its own: the HTTP listener stops with it.
    draining.send_replace(true);
    background.stop(until_grace_ends).await;
    // The conversations served since the last note, so that those that go
    // quiet now are summarized after the restart.
    engine.note_used().await;
    store.close().await;
    tracing::info!("stopped");
    result
}

/// `shutdown`, followed by NOT_SERVING on health (load balancers and probes
/// see it before the server stops) and `true` on the returned watch, which
/// stops the HTTP listener and starts the grace period of the calls still
/// open.
fn drain_on(
    shutdown: impl Future<Output = ()> + Send + 'static,
    reporter: tonic_health::server::HealthReporter,
) -> (
    impl Future<Output = ()> + Send + 'static,
    tokio::sync::watch::Sender<bool>,
) {
    let (draining, _) = tokio::sync::watch::channel(false);
    let notify = draining.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutdown requested; draining in-flight calls");
        health::not_serving(&reporter).await;
        notify.send_replace(true);
    };
    (signal, draining)
}

/// What runs beside the gRPC service until it stops.
struct Background {
    upkeep: tokio::task::JoinHandle<()>,
    engine_upkeep: tokio::task::JoinHandle<()>,
    failure_watch: tokio::task::JoinHandle<()>,
    metrics: Option<MetricsTask>,
    http: Option<HttpTask>,
}

impl Background {
    /// Stops everything; the HTTP calls still open get until `grace_ends`.
    async fn stop(self, grace_ends: impl Future<Output = ()>) {
        if let Some(http) = self.http {
            http.stop(grace_ends).await;
        }
        self.upkeep.abort();
        self.engine_upkeep.abort();
        self.failure_watch.abort();
        if let Some(metrics) = self.metrics {
            metrics.stop().await;
        }
    }
}

/// The HTTP listener, served until the server drains; its calls in flight
/// then finish within the same grace period as gRPC's.
struct HttpTask {
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HttpTask {
    fn spawn(
        listener: TcpListener,
        router: axum::Router,
        draining: &tokio::sync::watch::Sender<bool>,
    ) -> Self {
        let mut stopping = draining.subscribe();
        let task = tokio::spawn(http::serve(listener, router, async move {
            let _ = stopping.wait_for(|draining| *draining).await;
        }));
        Self { task }
    }

    async fn stop(mut self, grace_ends: impl Future<Output = ()>) {
        let finished = tokio::select! {
            r = &mut self.task => Some(r),
            () = grace_ends => None,
        };
        match finished {
            Some(Ok(Err(e))) => tracing::warn!(error = %e, "the HTTP listener failed"),
            Some(Err(e)) => tracing::warn!(error = %e, "the HTTP task panicked"),
            Some(Ok(Ok(()))) => {}
            None => {
                tracing::warn!("HTTP calls still open after the grace period; closing them");
                self.task.abort();
            }
        }
    }
}

/// The metrics endpoint, served until [`MetricsTask::stop`].
struct MetricsTask {
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MetricsTask {
    fn spawn(
        listener: TcpListener,
        handle: metrics_exporter_prometheus::PrometheusHandle,
        engine: &Engine,
    ) -> Self {
        let stop = Arc::new(Notify::new());
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(observe::serve(
            listener,
            handle,
            engine.clone(),
            async move { stopped.notified().await },
        ));
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.notify_one();
        match self.task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the metrics endpoint failed"),
            Err(e) => tracing::warn!(error = %e, "the metrics task panicked"),
            Ok(Ok(())) => {}
        }
    }
}

/// The security the server runs with, in one log line.
fn log_security(config: &Config, authenticator: &auth::Authenticator, tls: bool) {
    tracing::info!(
        auth = if authenticator.enabled() {
            "tokens"
        } else {
            "off"
        },
        tokens = config.auth.tokens.len(),
        tls,
        mtls = !config.server.tls_client_ca.as_os_str().is_empty(),
        "security"
    );
}

/// Server reflection in both versions. Both list every service, each
/// other included, so any client (grpcurl speaks v1alpha, newer tools v1)
/// sees the same server.
fn reflection() -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    ServerError,
> {
    // The closure takes no argument on purpose: rustc 1.95 miscompiles a
    // closure called twice with the same by-value argument that its body
    // mutates (rust-lang/rust#155241). With `|b: Builder| …` called on two
    // `Builder::configure()`, the release build handed the second call the
    // first call's spent builder, and reflection failed to decode.
    let configure = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(engram_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
            .include_reflection_service(false)
    };
    let v1 = configure().build_v1()?;
    let v1alpha = configure().build_v1alpha()?;
    Ok((v1, v1alpha))
}

/// The rustls server config `server.tls_*` asks for, if any.
fn tls_config(
    server: &config::ServerSection,
) -> Result<Option<tonic::transport::ServerTlsConfig>, ServerError> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    if server.tls_cert.as_os_str().is_empty() {
        return Ok(None);
    }
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| ServerError::Tls(format!("server.{key} {}: {e}", path.display())))
    };
    let identity = Identity::from_pem(
        read("tls_cert", &server.tls_cert)?,
        read("tls_key", &server.tls_key)?,
    );
    let mut tls = ServerTlsConfig::new().identity(identity);
    if !server.tls_client_ca.as_os_str().is_empty() {
        let ca = read("tls_client_ca", &server.tls_client_ca)?;
        tls = tls.client_ca_root(Certificate::from_pem(ca));
    }
    Ok(Some(tls))
}
