//! The store as a running service: its health, its metrics, and a
//! replica's background work: asking the database whether it answers
//! (health reports NOT_SERVING while it does not, and SERVING again once
//! it does, so an orchestrator routes around a replica cut off from it),
//! clearing the compaction leases a lost connection left behind, and
//! dropping the caches of idle agents.

use std::time::Duration;

use async_trait::async_trait;
use engram_store::Runtime;

use crate::PgStore;

/// How often the database is asked.
const PING_EVERY: Duration = Duration::from_secs(5);

#[async_trait]
impl Runtime for PgStore {
    fn embedder(&self) -> Option<std::sync::Arc<dyn engram_core::embed::Embedder>> {
        self.inner.config.embedder.clone()
    }

    fn failure(&self) -> Option<String> {
        self.inner.failure.borrow().clone()
    }

    /// A database out of reach comes back by itself: only readiness
    /// follows it.
    fn failure_is_fatal(&self) -> bool {
        false
    }

    fn watch_failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.failure.subscribe()
    }

    fn loaded_agents(&self) -> usize {
        engram_store::lock(&self.inner.agents).len()
    }

    fn unembedded_items(&self) -> u64 {
        self.inner
            .unembedded
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn memory_bytes(&self) -> u64 {
        PgStore::memory_bytes(self)
    }

    async fn shrink_to(&self, target: u64) -> Vec<engram_core::AgentId> {
        PgStore::shrink_to(self, target)
    }

    async fn close(&self) {
        self.inner.pool.close().await;
    }

    /// The database's size (for a metrics scrape).
    async fn disk_bytes(&self) -> u64 {
        sqlx::query_scalar::<_, i64>("SELECT pg_database_size(current_database())")
            .fetch_one(&self.inner.pool)
            .await
            .map_or(0, |b| u64::try_from(b).unwrap_or(0))
    }

    fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PING_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                store.ping().await;
                store.clear_orphaned_leases().await;
                store.count_unembedded().await;
                if let Some(idle) = store.inner.config.idle_evict {
                    store.evict_idle(idle);
                    store.evict_idle_users(idle);
                }
            }
        })
    }
}

impl PgStore {
    /// Items of every agent waiting for the model (the index-lag metric),
    /// counted from the partial indexes of what has no vector.
    async fn count_unembedded(&self) {
        if self.embedder().is_none() {
            return;
        }
        let counted: Result<i64, _> = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM traces WHERE vector IS NULL)
                  + (SELECT count(*) FROM memories WHERE vector IS NULL AND live)",
        )
        .fetch_one(&self.inner.pool)
        .await;
        if let Ok(n) = counted {
            self.inner.unembedded.store(
                u64::try_from(n).unwrap_or(0),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// One round trip to the database; the outcome becomes the store's
    /// failure (or its absence).
    async fn ping(&self) {
        let answered = tokio::time::timeout(
            PING_EVERY,
            sqlx::query("SELECT 1").execute(&self.inner.pool),
        )
        .await;
        let failure = match answered {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("the database does not answer: {e}")),
            Err(_) => Some("the database does not answer within 5 s".to_owned()),
        };
        self.inner.failure.send_if_modified(|now| {
            if *now == failure {
                return false;
            }
            match &failure {
                Some(why) => tracing::error!(reason = %why, "database unreachable: not serving"),
                None => tracing::info!("database reachable again: serving"),
            }
            *now = failure;
            true
        });
    }
}
