//! The Engram gRPC server.
//!
//! - [`run`]: serves a listener until a shutdown future resolves; used by
//!   `engramd` and by the integration tests alike.
//! - [`config`]: layered configuration.
//! - [`service`]: the `engram.v1.MemoryService` handlers.
//! - [`convert`] / [`status`]: wire ↔ domain conversions and the one
//!   error → status mapping.
//! - [`oversize`]: RESOURCE_EXHAUSTED for requests over the size limit.

pub mod budget;
pub mod compactor;
pub mod config;
pub mod context;
pub mod convert;
pub mod oversize;
pub mod service;
pub mod status;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use engram_proto::pb::memory_service_server::MemoryServiceServer;
use engram_store::{Store, StoreError};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

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
}

/// Serves Engram on `listener` until `shutdown` resolves, then drains
/// in-flight calls (up to `server.shutdown_grace_secs`) and flushes the store.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let store = Store::open(config.store_config()).await?;
    // Crash tests of the binary: abort at a compaction step (never set in
    // production; not a config key on purpose).
    if let Ok(step) = std::env::var("ENGRAM_TEST_CRASH_AT") {
        store.inject_compaction_crash(Some(step));
    }
    let upkeep = store.spawn_upkeep();

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<MemoryServiceServer<Engram>>().await;
    health.set_service_status("", ServingStatus::Serving).await;

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
    let summarizer = compactor::summarizer(&config.llm).map_err(ServerError::Summarizer)?;
    let compactor = compactor::Compactor::new(
        store.clone(),
        Arc::clone(&budgets),
        summarizer,
        &config.policy,
    );
    tracing::info!(summarizer = %compactor.summarizer_name(), "compaction ready");
    let memory = MemoryServiceServer::new(Engram::new(store.clone(), budgets, compactor, limit))
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
            health
                .set_not_serving::<MemoryServiceServer<Engram>>()
                .await;
            health
                .set_service_status("", ServingStatus::NotServing)
                .await;
            draining.notify_one();
        }
    };
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    let serve = tonic::transport::Server::builder()
        // Receive windows that grow with the connection's bandwidth-delay
        // product, so large requests do not crawl at 64 KiB per round trip.
        .http2_adaptive_window(Some(true))
        // Outermost: rewrite tonic's size refusals before anything else sees them.
        .layer(oversize::OversizeLayer)
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
    store.close().await;
    tracing::info!("stopped");
    result
}
