//! Calls in flight per agent, bounded (`server.max_calls_per_agent`). One
//! agent's calls take turns at its lock anyway: past a handful, more of them
//! only queue, holding memory and the caller's time, while other agents
//! wait behind them for the workers. A call past the limit is refused at
//! once with a hint of when to come back (RESOURCE_EXHAUSTED: the caller
//! is over its share, not the server over its capacity).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{EngineError, Result};

/// How long a refused caller is asked to wait before it tries again: about
/// one call's time of the calls it found in flight.
pub const RETRY_AFTER: Duration = Duration::from_millis(100);

/// The calls in flight of each agent that has any.
#[derive(Debug, Default)]
pub struct AgentCalls {
    /// 0: no limit.
    limit: usize,
    counts: Mutex<HashMap<String, usize>>,
}

impl AgentCalls {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            counts: Mutex::default(),
        }
    }

    /// A place for one more call of `agent`, held until the permit drops;
    /// [`EngineError::Busy`] when the agent has `limit` calls in flight.
    pub fn admit(self: &Arc<Self>, agent: &str) -> Result<AgentPermit> {
        if self.limit == 0 {
            return Ok(AgentPermit { held: None });
        }
        let mut counts = engram_store::lock(&self.counts);
        let count = counts.entry(agent.to_owned()).or_default();
        if *count >= self.limit {
            drop(counts);
            metrics::counter!("engram_calls_shed_total", "limit" => "agent").increment(1);
            return Err(EngineError::Busy {
                message: format!(
                    "agent {:?} has {} calls in flight, the most one agent may have \
                     (server.max_calls_per_agent); retry in {} ms",
                    agent.chars().take(128).collect::<String>(),
                    self.limit,
                    RETRY_AFTER.as_millis()
                ),
                retry_after: RETRY_AFTER,
            });
        }
        *count += 1;
        Ok(AgentPermit {
            held: Some((Arc::clone(self), agent.to_owned())),
        })
    }

    /// How many calls `agent` has in flight.
    #[cfg(test)]
    fn in_flight(&self, agent: &str) -> usize {
        engram_store::lock(&self.counts)
            .get(agent)
            .copied()
            .unwrap_or(0)
    }
}

/// One admitted call of an agent: its place is given back when this drops
/// (the call answered, failed, or was dropped with its caller).
#[must_use = "the call's place is given back when the permit drops: hold it for the call"]
#[derive(Debug)]
pub struct AgentPermit {
    held: Option<(Arc<AgentCalls>, String)>,
}

impl AgentPermit {
    /// A permit that holds no place (a call that names no agent).
    pub fn none() -> Self {
        Self { held: None }
    }
}

impl Drop for AgentPermit {
    fn drop(&mut self) {
        let Some((calls, agent)) = self.held.take() else {
            return;
        };
        let mut counts = engram_store::lock(&calls.counts);
        if let Some(count) = counts.get_mut(&agent) {
            *count -= 1;
            if *count == 0 {
                // Only agents with calls in flight are kept.
                counts.remove(&agent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_past_its_limit_is_refused_until_a_call_ends() {
        let calls = Arc::new(AgentCalls::new(2));
        let one = calls.admit("a").unwrap();
        let two = calls.admit("a").unwrap();
        let refused = calls.admit("a").unwrap_err();
        assert!(
            matches!(&refused, EngineError::Busy { message, retry_after }
                if message.contains("max_calls_per_agent") && *retry_after == RETRY_AFTER),
            "{refused:?}"
        );
        let other = calls.admit("b").unwrap();
        assert_eq!(calls.in_flight("a"), 2);
        drop(one);
        let three = calls.admit("a").unwrap();
        drop((two, three, other));
        assert_eq!(calls.in_flight("a"), 0);
        assert!(engram_store::lock(&calls.counts).is_empty(), "nothing kept");
        let unlimited = Arc::new(AgentCalls::new(0));
        let many: Vec<_> = (0..100).map(|_| unlimited.admit("a").unwrap()).collect();
        assert_eq!(unlimited.in_flight("a"), 0, "not counted");
        drop(many);
    }
}
