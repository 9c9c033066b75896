//! A replica's background work: asking the database whether it answers
//! (health reports NOT_SERVING while it does not, and SERVING again once
//! it does, so an orchestrator routes around a replica cut off from it),
//! and dropping the caches of idle agents.

use std::time::Duration;

use crate::PgStore;

/// How often the database is asked.
const PING_EVERY: Duration = Duration::from_secs(5);

impl PgStore {
    pub(crate) fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PING_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                store.ping().await;
                if let Some(idle) = store.inner.config.idle_evict {
                    store.evict_idle(idle);
                }
            }
        })
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
