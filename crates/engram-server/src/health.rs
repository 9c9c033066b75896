//! The gRPC health service follows the store: a failed flush stops the
//! whole server (liveness), a database out of reach only the MemoryService
//! (readiness), until it answers again.

use std::sync::Arc;

use engram_proto::pb::memory_service_server::MemoryServiceServer;
use engram_store::Store;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::Engram;

/// Reports SERVING now, and follows the store's failures from here on
/// (until the returned task is aborted).
pub async fn follow_store(
    health: &HealthReporter,
    store: &Arc<dyn Store>,
) -> tokio::task::JoinHandle<()> {
    health.set_serving::<MemoryServiceServer<Engram>>().await;
    health.set_service_status("", ServingStatus::Serving).await;
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
}

/// NOT_SERVING for the server and the service alike (shutting down).
pub async fn not_serving(health: &HealthReporter) {
    health
        .set_not_serving::<MemoryServiceServer<Engram>>()
        .await;
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
}
