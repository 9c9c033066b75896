//! One compaction per agent at a time: a request for an agent whose
//! compaction is running waits for it and shares its report, instead of
//! starting a second one that would summarize the same turns (a wasted LLM
//! call) and then find the agent changed under it.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use engram_core::AgentId;
use futures_util::FutureExt;
use tokio::sync::watch;

/// The work running now, by agent.
#[derive(Debug)]
pub struct Flights<V> {
    running: Mutex<HashMap<AgentId, watch::Receiver<Option<V>>>>,
}

impl<V> Default for Flights<V> {
    fn default() -> Self {
        Self {
            running: Mutex::default(),
        }
    }
}

/// Whose work an answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// This caller started it.
    Led,
    /// This caller found it running and waited for it.
    Joined,
}

impl<V: Clone + Send + Sync + 'static> Flights<V> {
    /// The answer of `work` for `agent`, or of the work for `agent` that is
    /// already running. The work runs as a task of its own: a caller that
    /// goes away (a cancelled RPC) leaves it to finish for the others. A
    /// panic in it is answered `failed()`, to everyone waiting.
    pub async fn run<W, F>(self: &Arc<Self>, agent: &AgentId, work: W, failed: F) -> (V, Share)
    where
        W: Future<Output = V> + Send + 'static,
        F: Fn() -> V + Clone + Send + 'static,
    {
        let (mut answer, share) = {
            let mut running = engram_store::lock(&self.running);
            match running.get(agent) {
                Some(rx) => (rx.clone(), Share::Joined),
                None => {
                    let (tx, rx) = watch::channel(None);
                    running.insert(agent.clone(), rx.clone());
                    let landed = Landed {
                        flights: Arc::clone(self),
                        agent: agent.clone(),
                    };
                    let on_panic = failed.clone();
                    tokio::spawn(async move {
                        let value = AssertUnwindSafe(work)
                            .catch_unwind()
                            .await
                            .unwrap_or_else(|_| on_panic());
                        // Gone from the map before the answer is out: a
                        // request after this one starts afresh.
                        drop(landed);
                        tx.send_replace(Some(value));
                    });
                    (rx, Share::Led)
                }
            }
        };
        let value = match answer.wait_for(Option::is_some).await {
            Ok(value) => value.clone().unwrap_or_else(&failed),
            // The task was dropped unfinished (the runtime shuts down).
            Err(_) => failed(),
        };
        (value, share)
    }
}

/// Takes a flight off the map however its task ends.
struct Landed<V> {
    flights: Arc<Flights<V>>,
    agent: AgentId,
}

impl<V> Drop for Landed<V> {
    fn drop(&mut self) {
        engram_store::lock(&self.flights.running).remove(&self.agent);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_second_request_shares_the_running_work_and_a_later_one_starts_afresh() {
        let flights: Arc<Flights<u32>> = Arc::default();
        let agent = AgentId::parse("a").unwrap();
        let calls = Arc::new(AtomicU32::new(0));
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let work = |gate: Option<tokio::sync::oneshot::Receiver<()>>| {
            let calls = Arc::clone(&calls);
            async move {
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                calls.fetch_add(1, Ordering::SeqCst) + 1
            }
        };
        let mut first = Box::pin(flights.run(&agent, work(Some(gate)), || 0));
        let mut second = Box::pin(flights.run(&agent, work(None), || 0));
        // Both are under way before the first one's work may finish.
        assert!((&mut first).now_or_never().is_none());
        assert!((&mut second).now_or_never().is_none());
        release.send(()).unwrap();
        let (first, second) = tokio::join!(first, second);
        assert_eq!(first, (1, Share::Led));
        assert_eq!(second, (1, Share::Joined), "the running work's answer");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one call for both");
        assert_eq!(flights.run(&agent, work(None), || 0).await, (2, Share::Led));
    }

    #[tokio::test]
    async fn a_panic_is_answered_failed_and_frees_the_agent() {
        let flights: Arc<Flights<u32>> = Arc::default();
        let agent = AgentId::parse("a").unwrap();
        let (v, _) = flights.run(&agent, async { panic!("bug") }, || 99).await;
        assert_eq!(v, 99);
        assert_eq!(flights.run(&agent, async { 1 }, || 99).await.0, 1);
    }
}
