//! Which compaction strategy an agent's compactions follow
//! (`policy.strategy`, with `policy.keep_last_turns` for `trim`): the
//! request's, else the agent's `[policy.agents]` entry, else its model's
//! `[policy.models]` entry (longest prefix), else the global setting.

use engram_core::compaction::Strategy;

use crate::budget::Overrides;
use crate::settings::{PolicyOverride, PolicySection};

/// The strategy a compaction follows, with its setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chosen {
    pub strategy: Strategy,
    /// Whole turns `trim` keeps before the current one.
    pub keep_last_turns: usize,
}

#[derive(Debug, Clone)]
pub struct Strategies {
    global: Chosen,
    overrides: Overrides<PolicyOverride>,
}

impl Strategies {
    pub fn new(policy: &PolicySection) -> Self {
        Self {
            global: Chosen {
                strategy: policy.strategy,
                keep_last_turns: policy.keep_last_turns,
            },
            overrides: Overrides::new(&policy.models, &policy.agents),
        }
    }

    /// What `agent`'s compactions follow for a prompt of `model`, the
    /// request's strategy (if it named one) first.
    pub fn of(&self, agent: &str, model: &str, requested: Option<Strategy>) -> Chosen {
        let mut chosen = self.global;
        for o in self.overrides.applying(agent, model) {
            chosen.strategy = o.strategy.unwrap_or(chosen.strategy);
            chosen.keep_last_turns = o.keep_last_turns.unwrap_or(chosen.keep_last_turns);
        }
        chosen.strategy = requested.unwrap_or(chosen.strategy);
        chosen
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_request_then_the_agent_then_the_model_then_the_global_setting() {
        let policy = PolicySection {
            max_tool_result_chars: 0,
            raw_tail_turns: 4,
            max_active_turns: 0,
            max_episodic_items: 3,
            max_semantic_items: 20,
            max_carried_tokens: 800,
            strategy: Strategy::Summarize,
            keep_last_turns: 8,
            models: BTreeMap::from([(
                "gpt-4o-mini".into(),
                PolicyOverride {
                    strategy: Some(Strategy::Trim),
                    keep_last_turns: Some(3),
                },
            )]),
            agents: BTreeMap::from([(
                "bot".into(),
                PolicyOverride {
                    strategy: Some(Strategy::None),
                    keep_last_turns: None,
                },
            )]),
        };
        let s = Strategies::new(&policy);
        let chosen = |agent, model, requested| {
            let c = s.of(agent, model, requested);
            (c.strategy, c.keep_last_turns)
        };
        assert_eq!(chosen("a", "gpt-4o", None), (Strategy::Summarize, 8));
        assert_eq!(
            chosen("a", "openai/gpt-4o-mini-2024-07-18", None),
            (Strategy::Trim, 3)
        );
        assert_eq!(chosen("bot", "gpt-4o-mini", None), (Strategy::None, 3));
        assert_eq!(
            chosen("bot", "gpt-4o-mini", Some(Strategy::CompactToolResults)),
            (Strategy::CompactToolResults, 3)
        );
    }
}
