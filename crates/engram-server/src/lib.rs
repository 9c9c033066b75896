//! The Engram gRPC server.
//!
//! - [`run`]: serves a listener until a shutdown future resolves; used by
//!   `engramd` and by the integration tests alike.
//! - [`config`]: layered configuration.
//! - [`service`]: the `engram.v1.MemoryService` handlers.
//! - [`context`]: PrepareRequest and GetContextStats; [`sizing`]: the size
//!   of an agent's prompt; [`budget`]: budgets from the config;
//!   [`caches`]: the per-agent token and render caches.
//! - [`compactor`]: the tier ladder of a compaction, the per-agent pause
//!   and the summarizer stack; [`flights`]: one compaction per agent.
//! - [`convert`] / [`status`]: wire ↔ domain conversions and the one
//!   error → status mapping.
//! - [`layers`]: the one tower layer of the hooks around every call:
//!   [`auth`], the metrics of [`observe`], and [`oversize`] (RESOURCE_EXHAUSTED
//!   for requests over the size limit).
//! - [`auth`]: bearer tokens scoped to agent-id patterns.
//! - [`boundary`]: a panic in a handler is answered INTERNAL.
//! - [`observe`]: Prometheus metrics.
//! - [`probe`]: the client side of `engramd health`.
//! - [`telemetry`]: the log subscriber.

pub mod auth;
pub mod boundary;
pub mod budget;
pub mod caches;
pub mod compactor;
pub mod config;
pub mod context;
pub mod convert;
pub mod flights;
pub mod layers;
pub mod observe;
pub mod oversize;
pub mod probe;
pub mod recall;
pub mod search;
pub mod service;
pub mod sizing;
pub mod status;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use engram_proto::pb::memory_service_server::MemoryServiceServer;
use engram_store::{FileStore, Store, StoreError};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use layers::HookLayer;

pub use config::Config;
pub use service::Engram;

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
    let metrics = bind_metrics(&config).await?;
    run_with_metrics(listener, metrics, config, shutdown).await
}

/// The metrics listener `server.metrics_listen` asks for, if any.
pub async fn bind_metrics(config: &Config) -> Result<Option<TcpListener>, ServerError> {
    match config.metrics_addr()? {
        Some(addr) => Ok(Some(
            TcpListener::bind(addr)
                .await
                .map_err(|error| ServerError::Metrics { addr, error })?,
        )),
        None => Ok(None),
    }
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

/// [`run`] with the metrics listener bound by the caller (which can then
/// report its port), and the data directory locked by the caller
/// ([`lock_data_dir`]).
pub async fn run_with_metrics(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let store = open_store(&config).await?;
    serve(listener, metrics, config, store, shutdown).await
}

/// The store `[store]` asks for, with the embedding model of `[embed]`.
pub async fn open_store(config: &Config) -> Result<Arc<dyn Store>, ServerError> {
    let embedder = embedder(&config.embed).await?;
    match config.store.backend {
        config::BackendSetting::Files => {
            let mut store_config = config.store_config();
            store_config.embedder = embedder;
            let store = FileStore::open(store_config).await?;
            #[cfg(feature = "fault-injection")]
            store.inject_compaction_crash(config.crash_at.clone());
            Ok(Arc::new(store))
        }
        config::BackendSetting::Postgres => {
            let mut pg = config.postgres_config();
            pg.embedder = embedder;
            let store = engram_postgres::PgStore::open(pg).await?;
            tracing::info!(
                pool_size = config.store.postgres.pool_size,
                "storing agents in PostgreSQL"
            );
            Ok(Arc::new(store))
        }
    }
}

/// `engramd reindex`: the search index of `agent` (or of every agent)
/// deleted and built again from the files, with every item embedded when
/// there is a model. Reports each agent's index as it finishes.
pub async fn reindex(
    config: &Config,
    agent: Option<&str>,
    mut report: impl FnMut(&str, &engram_store::IndexState),
) -> Result<(), ServerError> {
    if config.store.backend == config::BackendSetting::Postgres {
        return Err(ServerError::DataDir(
            "engramd reindex rebuilds the file store's index; the postgres backend indexes words as it writes".into(),
        ));
    }
    let _held = lock_data_dir(&config.store.data_dir)?;
    let mut store_config = config.store_config();
    store_config.embedder = embedder(&config.embed).await?;
    let store = FileStore::open(store_config).await?;
    let agents = match agent {
        Some(id) => vec![id.to_owned()],
        None => {
            let mut all = vec![];
            let mut token: Option<String> = None;
            loop {
                let (page, next) =
                    Store::list_agents(&store, 1000, token.as_deref(), &|_| true).await?;
                all.extend(page);
                match next {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
            all
        }
    };
    for id in agents {
        let parsed = engram_core::AgentId::parse(&id).map_err(StoreError::from)?;
        let state = store.reindex(&parsed).await?;
        report(&id, &state);
    }
    Store::close(&store).await;
    Ok(())
}

/// The embedding model `[embed]` asks for; `None`: search by words only.
pub async fn embedder(
    section: &config::EmbedSection,
) -> Result<Option<Arc<dyn engram_core::embed::Embedder>>, ServerError> {
    match section.provider {
        config::EmbedProvider::None => Ok(None),
        config::EmbedProvider::Http => {
            let http = engram_llm::HttpEmbedder::new(engram_llm::EmbedConfig {
                reach: engram_llm::transport::Reach {
                    api_key: Some(section.api_key.0.clone()).filter(|k| !k.is_empty()),
                    timeout: Duration::from_secs(section.timeout_secs),
                    max_retries: section.max_retries,
                    ..Default::default()
                },
                batch: section.batch_size,
                query_timeout: Duration::from_millis(section.query_timeout_ms),
                circuit_failures: section.circuit_failures,
                circuit_cooldown: Duration::from_secs(section.circuit_cooldown_secs),
                circuit_max_cooldown: Duration::from_secs(section.circuit_max_cooldown_secs),
                ..engram_llm::EmbedConfig::new(
                    &section.base_url,
                    &section.model,
                    section.dimensions,
                )
            })
            .map_err(ServerError::Embedder)?;
            tracing::info!(endpoint = %http.endpoint(), model = %section.model, "embedding over HTTP");
            Ok(Some(Arc::new(http)))
        }
        config::EmbedProvider::Local => {
            let dir = section.model_dir.clone();
            if !dir.join("config.json").exists() {
                tracing::warn!(
                    model_dir = %dir.display(),
                    "no embedding model there (`make models` installs one): search is by words only"
                );
                return Ok(None);
            }
            let model = tokio::task::spawn_blocking(move || engram_embed::LocalModel::load(&dir))
                .await
                .map_err(|e| ServerError::Embedder(e.to_string()))?
                .map_err(|e| ServerError::Embedder(e.to_string()))?;
            tracing::info!(model = %engram_core::embed::Embedder::model(&model), "local embedding model loaded");
            Ok(Some(Arc::new(model)))
        }
    }
}

/// [`run_with_metrics`] over a store the caller opened (and can reach).
pub async fn serve(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    config: Config,
    store: Arc<dyn Store>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    // Installed before anything records, so the first calls count too.
    let metrics = metrics.map(|listener| (listener, observe::install()));
    let authenticator =
        Arc::new(auth::Authenticator::new(&config.auth.tokens).map_err(ServerError::Auth)?);
    let tls = tls_config(&config.server)?;
    let upkeep = store.spawn_upkeep();

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<MemoryServiceServer<Engram>>().await;
    health.set_service_status("", ServingStatus::Serving).await;
    let failure_watch = {
        let mut failed = store.watch_failure();
        let fatal = store.failure_is_fatal();
        let health = health.clone();
        tokio::spawn(async move {
            // A failed flush stops the store for good: the whole server
            // reports NOT_SERVING, so the orchestrator restarts it. A
            // database out of reach comes back: only the MemoryService
            // (readiness) follows it, so no restart storm while it is away.
            while failed.wait_for(Option::is_some).await.is_ok() {
                health
                    .set_not_serving::<MemoryServiceServer<Engram>>()
                    .await;
                if fatal {
                    health
                        .set_service_status("", ServingStatus::NotServing)
                        .await;
                }
                metrics::gauge!("engram_storage_failed").set(1.0);
                if fatal || failed.wait_for(Option::is_none).await.is_err() {
                    break;
                }
                health.set_serving::<MemoryServiceServer<Engram>>().await;
                metrics::gauge!("engram_storage_failed").set(0.0);
            }
        })
    };

    // Both versions list every service, each other included, so any client
    // (grpcurl speaks v1alpha, newer tools v1) sees the same server.
    let reflection = |b: tonic_reflection::server::Builder<'static>| {
        b.register_encoded_file_descriptor_set(engram_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
            .include_reflection_service(false)
    };
    let reflection_v1 = reflection(tonic_reflection::server::Builder::configure()).build_v1()?;
    let reflection_v1alpha =
        reflection(tonic_reflection::server::Builder::configure()).build_v1alpha()?;

    let limit = config.server.max_message_bytes;
    // The BPE tables load in the background instead of on the first prompt.
    tokio::task::spawn_blocking(engram_core::tokens::warm_up);
    let budgets = Arc::new(budget::Budgets::new(config.budget.clone()));
    let caches = Arc::new(caches::ContextCaches::default());
    let cache_upkeep = spawn_cache_upkeep(&caches, config.idle_evict());
    let summarizer = compactor::summarizer(&config.llm).map_err(ServerError::Summarizer)?;
    let compactor = compactor::Compactor::new(
        Arc::clone(&store),
        Arc::clone(&caches),
        Arc::clone(&budgets),
        summarizer,
        &config.policy,
        &config.llm,
    );
    tracing::info!(summarizer = %compactor.summarizer_name(), "compaction ready");
    tracing::info!(
        auth = if authenticator.enabled() {
            "tokens"
        } else {
            "off"
        },
        tokens = config.auth.tokens.len(),
        tls = tls.is_some(),
        mtls = !config.server.tls_client_ca.as_os_str().is_empty(),
        "security"
    );
    let metrics_stop = Arc::new(Notify::new());
    let metrics_task = metrics.map(|(listener, handle)| {
        let stop = Arc::clone(&metrics_stop);
        tokio::spawn(observe::serve(
            listener,
            handle,
            Arc::clone(&store),
            compactor.clone(),
            async move { stop.notified().await },
        ))
    });
    let memory = MemoryServiceServer::new(Engram::new(
        Arc::clone(&store),
        caches,
        budgets,
        compactor,
        limit,
        config.recall,
    ))
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);

    let draining = Arc::new(Notify::new());
    let signal = {
        let draining = Arc::clone(&draining);
        let health = health.clone();
        async move {
            shutdown.await;
            tracing::info!("shutdown requested; draining in-flight calls");
            // Load balancers and probes see NOT_SERVING before we stop.
            not_serving(&health).await;
            draining.notify_one();
        }
    };
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    let serve = builder
        // Receive windows that grow with the connection's bandwidth-delay
        // product, so large requests do not crawl at 64 KiB per round trip.
        .http2_adaptive_window(Some(true))
        // Outermost: count every call, refusals included, by its final code.
        .layer(HookLayer(observe::RpcMetrics))
        // Rewrite tonic's size refusals before anything else sees them.
        .layer(HookLayer(oversize::Oversize))
        .layer(HookLayer(auth::Auth::new(authenticator)))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(memory)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), signal);
    let result = tokio::select! {
        r = serve => r.map_err(ServerError::from),
        () = async { draining.notified().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_secs = grace.as_secs(), "calls still open after the grace period; closing them");
            Ok(())
        }
    };
    upkeep.abort();
    cache_upkeep.abort();
    failure_watch.abort();
    metrics_stop.notify_one();
    if let Some(task) = metrics_task {
        match task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the metrics endpoint failed"),
            Err(e) => tracing::warn!(error = %e, "the metrics task panicked"),
            Ok(Ok(())) => {}
        }
    }
    store.close().await;
    tracing::info!("stopped");
    result
}

/// Drops the prompt caches of agents idle for `idle` (the store's own
/// idle eviction; without it, never).
fn spawn_cache_upkeep(
    caches: &Arc<caches::ContextCaches>,
    idle: Option<Duration>,
) -> tokio::task::JoinHandle<()> {
    let caches = Arc::clone(caches);
    tokio::spawn(async move {
        let Some(idle) = idle else { return };
        let mut tick = tokio::time::interval(idle.min(Duration::from_secs(60)));
        loop {
            tick.tick().await;
            let n = caches.evict_idle(idle);
            if n > 0 {
                tracing::debug!(evicted = n, "dropped the prompt caches of idle agents");
            }
        }
    })
}

/// Health NOT_SERVING for the server and the service alike.
async fn not_serving(health: &tonic_health::server::HealthReporter) {
    health
        .set_not_serving::<MemoryServiceServer<Engram>>()
        .await;
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
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
