//! Summaries written ahead of the trigger (docs/DESIGN.md §14): past
//! `budget.precompact_ratio` of its input budget, an agent's next summary
//! is written in the background, so that at the trigger PrepareRequest
//! commits it at once instead of waiting for the summarizer.
//!
//! - One preparation per agent at a time. It holds the store's compaction
//!   lock (`begin_compaction`) while the summarizer runs, as a compaction
//!   does, and gives it back once the summary is held here: nothing is
//!   written until the commit.
//! - Its window is the one a compaction would have taken when it began
//!   (the oldest whole turns but the raw tail); turns that arrive
//!   meanwhile stay in the transcript.
//! - The commit (`Compactor::commit_prepared`) takes the lock again; the
//!   store refuses a summary whose window is no longer the agent's (a
//!   compaction, a forget or a microcompact since) as stale, and the
//!   compaction then runs as it would have without one.
//! - Held in memory only: a crash loses the summary, never a turn. A
//!   summary held longer than the idle-evict time is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_core::AgentId;
use engram_core::compaction::Summary;
use engram_store::{Job, Policy};
use tokio::sync::watch;

/// A summary ready to commit.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub job: Job,
    pub summary: Summary,
    pub policy: Policy,
    /// When it was ready.
    pub at: Instant,
}

#[derive(Debug)]
enum Slot {
    /// The summarizer is at work; the sender drops when it is done.
    Running(watch::Receiver<()>),
    Ready(Box<Prepared>),
}

/// What an agent has ahead of its trigger.
#[derive(Debug)]
pub(crate) enum Ahead {
    Nothing,
    /// Done (or gone) when `changed()` returns.
    Running(watch::Receiver<()>),
    Ready(Box<Prepared>),
}

/// The preparations, by agent.
#[derive(Debug, Default)]
pub(crate) struct Preparations {
    slots: Mutex<HashMap<AgentId, Slot>>,
}

impl Preparations {
    /// Takes the agent's ready summary, or says one is being written.
    pub fn take(&self, agent: &AgentId) -> Ahead {
        let mut slots = self.lock();
        match slots.remove(agent) {
            None => Ahead::Nothing,
            Some(Slot::Ready(prepared)) => Ahead::Ready(prepared),
            Some(Slot::Running(rx)) => {
                slots.insert(agent.clone(), Slot::Running(rx.clone()));
                Ahead::Running(rx)
            }
        }
    }

    /// Claims the agent's preparation for the caller, unless one runs or
    /// a summary is ready (for `epoch`, if given: one of another epoch is
    /// stale and goes). The claim ends when the returned [`Claim`] drops.
    pub fn claim(self: &Arc<Self>, agent: &AgentId, epoch: Option<u32>) -> Option<Claim> {
        let mut slots = self.lock();
        match slots.get(agent) {
            Some(Slot::Running(_)) => return None,
            Some(Slot::Ready(p)) if epoch.is_none_or(|e| e == p.job.epoch) => return None,
            _ => {}
        }
        let (tx, rx) = watch::channel(());
        slots.insert(agent.clone(), Slot::Running(rx));
        Some(Claim {
            preparations: Arc::clone(self),
            agent: agent.clone(),
            done: Some(tx),
            ready: None,
        })
    }

    /// "writing", "ready" (for `epoch`) or "".
    pub fn status(&self, agent: &AgentId, epoch: u32) -> &'static str {
        match self.lock().get(agent) {
            Some(Slot::Running(_)) => "writing",
            Some(Slot::Ready(p)) if p.job.epoch == epoch => "ready",
            _ => "",
        }
    }

    /// Drops what the agent has ahead (it was deleted).
    pub fn forget(&self, agent: &AgentId) {
        let mut slots = self.lock();
        if matches!(slots.get(agent), Some(Slot::Ready(_))) {
            slots.remove(agent);
        }
    }

    /// Drops the summaries ready for longer than `age` (their agents went
    /// quiet before the trigger); returns how many.
    pub fn drop_older_than(&self, age: Duration) -> usize {
        let mut slots = self.lock();
        let before = slots.len();
        slots.retain(|_, slot| !matches!(slot, Slot::Ready(p) if p.at.elapsed() > age));
        before - slots.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AgentId, Slot>> {
        engram_store::lock(&self.slots)
    }
}

/// A preparation under way. Dropped, it leaves the summary it was given
/// ready, or nothing (a failure, a panic): never a preparation that looks
/// running forever.
pub(crate) struct Claim {
    preparations: Arc<Preparations>,
    agent: AgentId,
    done: Option<watch::Sender<()>>,
    ready: Option<Box<Prepared>>,
}

impl Claim {
    pub fn ready(mut self, prepared: Prepared) {
        self.ready = Some(Box::new(prepared));
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut slots = self.preparations.lock();
        match self.ready.take() {
            Some(prepared) => {
                slots.insert(self.agent.clone(), Slot::Ready(prepared));
            }
            None => {
                slots.remove(&self.agent);
            }
        }
        drop(slots);
        // Waiters wake once the slot says how it ended.
        self.done.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(epoch: u32) -> Prepared {
        Prepared {
            job: Job {
                epoch,
                next_epoch: epoch + 1,
                turn_ids: vec![],
                traces: vec![],
                known_facts: vec![],
                current_turn: 0,
                user_id: None,
            },
            summary: Summary {
                episodic_summary: String::new(),
                tags: vec![],
                salience: 0.0,
                semantic_facts: vec![],
            },
            policy: Policy {
                raw_tail_turns: 2,
                max_episodic: 3,
                max_semantic: 20,
                fact_ttl: None,
            },
            at: Instant::now(),
        }
    }

    #[tokio::test]
    async fn one_preparation_per_agent_and_waiters_see_how_it_ended() {
        let p: Arc<Preparations> = Arc::default();
        let a = AgentId::parse("a").unwrap();
        let claim = p.claim(&a, Some(1)).expect("nothing running");
        assert!(p.claim(&a, Some(1)).is_none(), "one at a time");
        let Ahead::Running(mut rx) = p.take(&a) else {
            panic!("running")
        };
        claim.ready(prepared(1));
        assert!(rx.changed().await.is_err(), "the waiter wakes");
        assert!(p.claim(&a, Some(1)).is_none(), "ready for this epoch");
        let Ahead::Ready(ready) = p.take(&a) else {
            panic!("ready")
        };
        assert_eq!(ready.job.epoch, 1);
        assert!(matches!(p.take(&a), Ahead::Nothing), "taken once");

        // A failure (or a panic) leaves nothing behind.
        drop(p.claim(&a, Some(1)).unwrap());
        assert!(matches!(p.take(&a), Ahead::Nothing));

        // A summary of an earlier epoch is stale: a new one may start.
        p.claim(&a, Some(1)).unwrap().ready(prepared(1));
        assert!(p.claim(&a, Some(2)).is_some());
    }

    #[test]
    fn summaries_held_too_long_are_dropped() {
        let p: Arc<Preparations> = Arc::default();
        let a = AgentId::parse("a").unwrap();
        p.claim(&a, Some(1)).unwrap().ready(prepared(1));
        assert_eq!(p.drop_older_than(Duration::from_secs(60)), 0);
        assert_eq!(p.drop_older_than(Duration::ZERO), 1);
        assert!(matches!(p.take(&a), Ahead::Nothing));
    }
}
