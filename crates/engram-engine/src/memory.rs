//! The memory budget (`store.memory_budget_mb`): what loaded agents and
//! their prompt caches hold, estimated in bytes by the store and the
//! caches, is kept under the budget by unloading the least recently used
//! agents nobody is using. The upkeep does it ten times a second; and a
//! call that arrives while the budget is exceeded first waits for a pass
//! (one at a time, shared by the calls waiting), so a burst of loads cannot
//! outrun the upkeep: that wait is the only cost of the budget to a call,
//! which never fails for it.
//!
//! The estimates cannot see everything: the work of calls in flight (an
//! agent being loaded, a prompt rendered and encoded), and estimates that
//! are off. Where the binary can tell what its allocator holds
//! (engramd's jemalloc can: [`use_heap`]), what it holds beyond what it
//! held when the upkeep started (the model loaded, no agent yet) and
//! beyond the estimates is counted as well: the agents are kept to the
//! budget less that, so the budget bounds what the server holds after
//! start, not only what it estimates. And what a pass unloaded is given
//! back to the system at once: an allocator keeps freed pages for reuse a
//! while, and with agents unloaded and loaded again many times a second
//! those pages were most of what the budget did not bound.
//!
//! And a pass acts only every so often: what the heap grows by between two
//! passes lands before the next can unload for it. So each pass also keeps
//! free the most the heap grew between two passes lately (the headroom):
//! with the local model that growth was what still passed the budget.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

use crate::Engine;

/// How long a measure of the accounted total stands for a call's check.
const FRESH: Duration = Duration::from_millis(10);

/// How long the most the heap held beyond the estimates is remembered.
const LATELY: Duration = Duration::from_secs(2);

/// The process's allocator, as far as the budget asks it.
#[derive(Debug, Clone, Copy)]
pub struct Heap {
    /// What it holds in memory, in bytes: live allocations, its own
    /// bookkeeping, and freed pages it keeps for reuse.
    pub resident: fn() -> Option<u64>,
    /// Gives the pages of freed memory back to the system now.
    pub release_freed: fn(),
}

static HEAP: OnceLock<Heap> = OnceLock::new();

/// Tells the budget how to ask the allocator (once, at start, by a binary
/// that knows its allocator).
pub fn use_heap(heap: Heap) {
    let _ = HEAP.set(heap);
}

fn heap() -> Option<u64> {
    HEAP.get().and_then(|heap| (heap.resident)())
}

/// The most a measure reached in the last [`LATELY`].
#[derive(Debug)]
struct Peak(std::sync::Mutex<(u64, Instant)>);

impl Default for Peak {
    fn default() -> Self {
        Self(std::sync::Mutex::new((0, Instant::now())))
    }
}

impl Peak {
    /// Notes `value`; returns the peak now.
    fn note(&self, value: u64) -> u64 {
        let mut peak = engram_store::lock(&self.0);
        if value >= peak.0 || peak.1.elapsed() > LATELY {
            *peak = (value, Instant::now());
        }
        peak.0
    }

    fn get(&self) -> u64 {
        engram_store::lock(&self.0).0
    }
}

/// The last measure, and the pass that calls wait for.
#[derive(Debug)]
pub struct Gate {
    last: std::sync::Mutex<(Instant, u64)>,
    pass: AsyncMutex<()>,
    /// The heap when the upkeep started.
    baseline: OnceLock<u64>,
    /// The most the heap held beyond the baseline and the estimates
    /// lately.
    unaccounted: Peak,
    /// The heap as the last pass left it.
    after_pass: std::sync::Mutex<Option<u64>>,
    /// The most the heap grew between two passes lately.
    growth: Peak,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            last: std::sync::Mutex::new((Instant::now(), 0)),
            pass: AsyncMutex::new(()),
            baseline: OnceLock::new(),
            unaccounted: Peak::default(),
            after_pass: std::sync::Mutex::new(None),
            growth: Peak::default(),
        }
    }
}

impl Engine {
    /// Notes the heap as the budget's zero (the upkeep, at its start).
    pub(crate) fn note_heap_baseline(&self) {
        if let Some(now) = heap() {
            let _ = self.memory.baseline.set(now);
        }
    }

    /// What the store's loaded agents and the caches hold now.
    fn accounted(&self) -> (u64, u64) {
        let measured = (self.store.memory_bytes(), self.caches.memory_bytes());
        self.noted(measured.0 + measured.1);
        if let (Some(base), Some(now)) = (self.memory.baseline.get(), heap()) {
            let unaccounted = now.saturating_sub(base + measured.0 + measured.1);
            self.memory.unaccounted.note(unaccounted);
            metrics::gauge!("engram_memory_unaccounted_bytes").set(unaccounted as f64);
        }
        measured
    }

    /// What the agents and caches may hold: the budget less the most the
    /// heap held beyond them lately (calls in flight come and go between
    /// two measures; the budget is for the peaks), and less the most it
    /// grew between two passes lately (what arrives before the next pass
    /// can act on it: a pass keeps that much free for it).
    fn room(&self, budget: u64) -> u64 {
        let held = (self.memory.unaccounted.get()).saturating_add(self.memory.growth.get());
        budget.saturating_sub(held)
    }

    /// Notes how much the heap grew since the last pass left it (at a
    /// pass's start), keeping the most of the last [`LATELY`].
    fn note_growth(&self) {
        let (Some(now), Some(before)) = (heap(), *engram_store::lock(&self.memory.after_pass))
        else {
            return;
        };
        let headroom = self.memory.growth.note(now.saturating_sub(before));
        metrics::gauge!("engram_memory_headroom_bytes").set(headroom as f64);
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
        if self.accounted_recently() <= self.room(budget) {
            return;
        }
        let _one = self.memory.pass.lock().await;
        // The pass before this one may have made the room.
        if self.accounted_recently() <= self.room(budget) {
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
        let Some(budget) = self.memory_budget else {
            self.accounted();
            return 0;
        };
        self.note_growth();
        let unloaded = self.unload_past(budget).await;
        *engram_store::lock(&self.memory.after_pass) = heap();
        unloaded
    }

    async fn unload_past(&self, budget: u64) -> usize {
        let (store, caches) = self.accounted();
        let total = store + caches;
        metrics::gauge!("engram_memory_budget_bytes").set(budget as f64);
        let room = self.room(budget);
        if total <= room {
            return 0;
        }
        let excess = u128::from(total - room);
        let share = (excess * u128::from(store) / u128::from(total)) as u64;
        let unloaded = self.store.shrink_to(store - share).await;
        for id in &unloaded {
            self.caches.drop_agent(id);
        }
        let store = self.store.memory_bytes();
        let caches_left = self.caches.shrink_to(room.saturating_sub(store));
        self.noted(store + caches_left);
        // What both sides let go of, back to the system at once.
        if (!unloaded.is_empty() || caches_left < caches)
            && let Some(heap) = HEAP.get()
        {
            (heap.release_freed)();
        }
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
