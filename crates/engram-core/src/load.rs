//! Whether the process is serving requests right now: background work that
//! only needs spare CPU (the local model embedding the indexer's backlog)
//! asks before each slice of work and holds back while requests run.
//!
//! Process-wide, like the metrics registry: every listener (gRPC, HTTP,
//! MCP) marks its calls, and the background work may be deep inside a
//! backend that knows nothing of listeners.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Requests in flight, and when the last one ended.
#[derive(Debug)]
pub struct Load {
    /// Signed: a [`Waiting`] outside any request takes it below zero for
    /// a while, which reads as "none".
    in_flight: AtomicIsize,
    /// Microseconds since `epoch` at which a request last ended.
    last_end: AtomicU64,
    epoch: Instant,
}

/// Takes a request out of the count while it waits for background work
/// (a search's `wait_for_index_ms`): holding the work back would only make
/// the request wait longer.
#[derive(Debug)]
#[must_use = "the request counts as waiting only while the guard lives"]
pub struct Waiting<'a>(&'a Load);

/// Marks one request in flight until dropped.
#[derive(Debug)]
#[must_use = "the request counts as in flight only while the guard lives"]
pub struct Serving<'a>(&'a Load);

impl Load {
    pub fn new() -> Self {
        Self {
            in_flight: AtomicIsize::new(0),
            last_end: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// The process's gauge.
    pub fn global() -> &'static Load {
        static LOAD: OnceLock<Load> = OnceLock::new();
        LOAD.get_or_init(Load::new)
    }

    pub fn serving(&self) -> Serving<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Serving(self)
    }

    /// The calling request waits for background work until the guard is
    /// dropped.
    pub fn waiting(&self) -> Waiting<'_> {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        Waiting(self)
    }

    /// A request is being served now.
    pub fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }

    /// A request is in flight, or one ended less than `quiet` ago (a client
    /// in a loop sends its next call within a round trip).
    pub fn busy(&self, quiet: Duration) -> bool {
        if self.in_flight() {
            return true;
        }
        let last = self.last_end.load(Ordering::Relaxed);
        last > 0 && self.micros() < last.saturating_add(quiet.as_micros() as u64)
    }

    fn micros(&self) -> u64 {
        // At least 1: 0 means "no request yet".
        (self.epoch.elapsed().as_micros() as u64).max(1)
    }
}

impl Default for Load {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.last_end.store(self.0.micros(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_while_serving_and_for_the_quiet_time_after() {
        let load = Load::new();
        assert!(!load.busy(Duration::from_secs(3600)), "no request yet");
        let a = load.serving();
        let b = load.serving();
        assert!(load.busy(Duration::ZERO));
        drop(a);
        assert!(load.busy(Duration::ZERO), "one is still in flight");
        drop(b);
        assert!(!load.busy(Duration::ZERO));
        assert!(load.busy(Duration::from_secs(3600)), "one ended just now");
    }

    #[test]
    fn a_request_waiting_for_background_work_does_not_hold_it_back() {
        let load = Load::new();
        let serving = load.serving();
        let waiting = load.waiting();
        assert!(!load.in_flight());
        drop(waiting);
        assert!(load.in_flight());
        drop(serving);
        // Outside any request: never counts as one.
        let waiting = load.waiting();
        assert!(!load.in_flight());
        drop(waiting);
        assert!(!load.in_flight());
    }
}
