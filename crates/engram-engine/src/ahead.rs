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
//!   meanwhile stay in the transcript. So it starts as late as it can and
//!   still be ready at the trigger ([`Pace`]): past the ratio, once the
//!   prompt's growth over one summary's time would reach the trigger. A
//!   summary started at the ratio itself would leave the turns between
//!   ratio and trigger active after the commit, and the agent would
//!   compact more often than it does waiting (more summarizer calls). One
//!   that is late costs no wait: past the trigger, prompts that fit the
//!   input budget go out uncompacted until it is ready.
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

/// How fast prompts grow and summaries take, to start a summary ahead as
/// late as it can be and still be ready at the trigger.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Seconds a summary takes (moving average); `None` before the first.
    summary_secs: Mutex<Option<f64>>,
    /// By agent past its ratio.
    agents: Mutex<HashMap<AgentId, Growth>>,
}

/// An agent's last prompt's tokens, turns and time, and its growth in
/// tokens and turns a second (moving averages).
#[derive(Debug, Clone, Copy)]
struct Growth {
    tokens: u32,
    turns: u32,
    at: Instant,
    rate: Option<f64>,
    turn_rate: Option<f64>,
}

/// Weight of the newest sample in the moving averages.
const NEWEST: f64 = 0.3;

fn average(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |old| old + NEWEST * (new - old))
}

impl Pace {
    /// A summary took `took`.
    pub fn summarized(&self, took: Duration) {
        let mut secs = engram_store::lock(&self.summary_secs);
        *secs = Some(average(*secs, took.as_secs_f64()));
    }

    /// Whether the agent's prompt of `tokens` should start its summary now,
    /// for the `trigger`: never before the ratio (`at`); past it, when no
    /// summary was timed yet or no growth measured, at once; else when one
    /// summary's time of its growth would reach the trigger.
    pub fn due(&self, agent: &AgentId, (tokens, turns): (u32, u32), at: u32, trigger: u32) -> bool {
        let mut agents = engram_store::lock(&self.agents);
        // The growth is measured from half the ratio on, so that it is
        // known when the ratio is passed.
        if tokens <= at / 2 {
            agents.remove(agent);
            return false;
        }
        let now = Instant::now();
        let (rate, turn_rate) = match agents.get(agent) {
            Some(g) if tokens >= g.tokens && turns >= g.turns => {
                let secs = now.duration_since(g.at).as_secs_f64();
                match secs > 0.0 {
                    true => (
                        Some(average(g.rate, f64::from(tokens - g.tokens) / secs)),
                        Some(average(g.turn_rate, f64::from(turns - g.turns) / secs)),
                    ),
                    false => (g.rate, g.turn_rate),
                }
            }
            _ => (None, None),
        };
        let growth = Growth {
            tokens,
            turns,
            at: now,
            rate,
            turn_rate,
        };
        agents.insert(agent.clone(), growth);
        drop(agents);
        if tokens <= at {
            return false;
        }
        let secs = *engram_store::lock(&self.summary_secs);
        match (rate, secs) {
            (Some(rate), Some(secs)) => f64::from(tokens) + rate * secs >= f64::from(trigger),
            _ => true,
        }
    }

    /// The turns the agent is expected to add while a summary is written
    /// (0 before both are measured): a summary started now keeps that many
    /// fewer turns raw, so that when it is committed the raw tail is what a
    /// compaction that waited would have kept, and the agent compacts no
    /// more often than it would waiting.
    pub fn turns_during_summary(&self, agent: &AgentId) -> usize {
        let secs = *engram_store::lock(&self.summary_secs);
        let rate = engram_store::lock(&self.agents)
            .get(agent)
            .and_then(|g| g.turn_rate);
        match (rate, secs) {
            (Some(rate), Some(secs)) => (rate * secs).round() as usize,
            _ => 0,
        }
    }

    /// Forgets the agents not seen for `age`.
    fn drop_older_than(&self, age: Duration) {
        engram_store::lock(&self.agents).retain(|_, g| g.at.elapsed() <= age);
    }
}

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
    pub pace: Pace,
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
        self.pace.drop_older_than(age);
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
                ..Default::default()
            },
            policy: Policy {
                raw_tail_turns: 2,
                max_episodic: 3,
                max_semantic: 20,
                carry_tokens: 800,
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
    fn a_summary_starts_when_its_time_of_growth_would_reach_the_trigger() {
        let pace = Pace::default();
        let a = AgentId::parse("a").unwrap();
        // Below the ratio: never; past it, with nothing timed: at once.
        assert!(!pace.due(&a, (500, 1), 600, 800));
        assert!(pace.due(&a, (610, 1), 600, 800));
        assert!(!pace.due(&a, (200, 1), 600, 800), "compacted");
        pace.summarized(Duration::from_secs(3600));
        // A growth measured (whatever it is, an hour's summary covers it).
        std::thread::sleep(Duration::from_millis(5));
        assert!(pace.due(&a, (620, 1), 600, 800));
        // A summary that takes no time can wait for the trigger.
        let quick = Pace::default();
        quick.summarized(Duration::ZERO);
        assert!(quick.due(&a, (610, 1), 600, 800), "no growth measured yet");
        let b = AgentId::parse("b").unwrap();
        assert!(
            !quick.due(&b, (400, 1), 600, 800),
            "measured from half the ratio"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(!quick.due(&b, (610, 1), 600, 800));
        assert!(!quick.due(&a, (620, 1), 600, 800));
        assert!(quick.due(&a, (800, 1), 600, 800));
    }

    #[test]
    fn the_turns_that_come_during_a_summary_are_counted_from_the_pace() {
        let pace = Pace::default();
        let a = AgentId::parse("a").unwrap();
        assert!(pace.due(&a, (610, 10), 600, 800));
        std::thread::sleep(Duration::from_millis(5));
        pace.due(&a, (620, 11), 600, 800);
        assert_eq!(pace.turns_during_summary(&a), 0, "no summary timed");
        pace.summarized(Duration::from_secs(1));
        // At most one turn in the 5 ms or more measured: up to 200 a second.
        let n = pace.turns_during_summary(&a);
        assert!((1..=200).contains(&n), "{n}");
        pace.summarized(Duration::ZERO);
        assert!(pace.turns_during_summary(&a) < n);
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
