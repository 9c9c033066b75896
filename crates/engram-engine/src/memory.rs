//! The memory budget (`store.memory_budget_mb`): what loaded agents and
//! their prompt caches hold, estimated in bytes by the store and the
//! caches, is kept under the budget by unloading the least recently used
//! agents nobody is using. The upkeep does it ten times a second; and a
//! call that arrives while the budget is exceeded first waits for a pass
//! (one at a time, shared by the calls waiting), so a burst of loads cannot
//! outrun the upkeep: that wait is the only cost of the budget to a call,
//! which never fails for it.

use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

use crate::Engine;

/// How long a measure of the accounted total stands for a call's check.
const FRESH: Duration = Duration::from_millis(10);

/// The last measure, and the pass that calls wait for.
#[derive(Debug)]
pub struct Gate {
    last: std::sync::Mutex<(Instant, u64)>,
    pass: AsyncMutex<()>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            last: std::sync::Mutex::new((Instant::now(), 0)),
            pass: AsyncMutex::new(()),
        }
    }
}

impl Engine {
    /// What the store's loaded agents and the caches hold now.
    fn accounted(&self) -> (u64, u64) {
        let measured = (self.store.memory_bytes(), self.caches.memory_bytes());
        self.noted(measured.0 + measured.1);
        measured
    }

    /// `total` as the last measure.
    fn noted(&self, total: u64) {
        *engram_store::lock(&self.memory.last) = (Instant::now(), total);
        metrics::gauge!("engram_memory_accounted_bytes").set(total as f64);
    }

    /// The accounted total, measured again if the last measure is older
    /// than [`FRESH`].
    fn accounted_recently(&self) -> u64 {
        let (at, total) = *engram_store::lock(&self.memory.last);
        if at.elapsed() < FRESH {
            return total;
        }
        let (store, caches) = self.accounted();
        store + caches
    }

    /// Waits, before a call to an agent, while the budget is exceeded, for
    /// a pass of [`keep_to_budget`](Self::keep_to_budget) (one runs at a
    /// time; calls arriving meanwhile wait for it and check again). Under
    /// the budget, or without one, it returns at once.
    pub async fn make_room(&self) {
        let Some(budget) = self.memory_budget else {
            return;
        };
        if self.accounted_recently() <= budget {
            return;
        }
        let _one = self.memory.pass.lock().await;
        // The pass before this one may have made the room.
        if self.accounted_recently() <= budget {
            return;
        }
        self.budget_pass().await;
    }

    /// Holds what the loaded agents and their prompt caches take to the
    /// memory budget: past it, the least recently used agents nobody is
    /// using are unloaded (their caches dropped with them), each side
    /// giving up its share of the excess; a call to one of them loads it
    /// again. Returns how many agents were unloaded. The upkeep calls it
    /// every 100 ms; a test may too. One pass runs at a time (two at once
    /// would each unload the whole excess).
    pub async fn keep_to_budget(&self) -> usize {
        let _one = self.memory.pass.lock().await;
        self.budget_pass().await
    }

    async fn budget_pass(&self) -> usize {
        let (store, caches) = self.accounted();
        let total = store + caches;
        let Some(budget) = self.memory_budget else {
            return 0;
        };
        metrics::gauge!("engram_memory_budget_bytes").set(budget as f64);
        if total <= budget {
            return 0;
        }
        let excess = u128::from(total - budget);
        let share = (excess * u128::from(store) / u128::from(total)) as u64;
        let unloaded = self.store.shrink_to(store - share).await;
        for id in &unloaded {
            self.caches.drop_agent(id);
        }
        let store = self.store.memory_bytes();
        let caches = self.caches.shrink_to(budget.saturating_sub(store));
        self.noted(store + caches);
        if !unloaded.is_empty() {
            tracing::debug!(
                unloaded = unloaded.len(),
                accounted = total,
                budget,
                "unloaded agents to keep to the memory budget"
            );
        }
        unloaded.len()
    }
}
