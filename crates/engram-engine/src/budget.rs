//! Token budgets from config: the built-in model table, then the
//! `[budget.models]` override with the longest matching prefix, then the
//! agent's `[budget.agents]` override, then the request's output limit.

use std::collections::BTreeMap;

use engram_core::budget::{self, BudgetPolicy, ModelLimits, TokenBudget};

use crate::settings::{BudgetOverride, BudgetSection};

#[derive(Debug, Clone)]
pub struct Budgets {
    section: BudgetSection,
    overrides: Overrides<BudgetOverride>,
}

/// Settings by model name prefix and by agent: which apply to a call.
#[derive(Debug, Clone)]
pub struct Overrides<T> {
    /// By normalized model name prefix, longest first.
    models: Vec<(String, T)>,
    agents: BTreeMap<String, T>,
}

impl<T: Clone> Overrides<T> {
    pub fn new(models: &BTreeMap<String, T>, agents: &BTreeMap<String, T>) -> Self {
        let mut models: Vec<(String, T)> = models
            .iter()
            .map(|(name, o)| (budget::normalize_model(name), o.clone()))
            .collect();
        models.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
        Self {
            models,
            agents: agents.clone(),
        }
    }

    /// The overrides that apply to `agent` calling `model`, the later
    /// winning: the longest prefix of the model's normalized name, then
    /// the agent's.
    pub fn applying<'a>(&'a self, agent: &str, model: &str) -> impl Iterator<Item = &'a T> {
        let normalized = budget::normalize_model(model);
        let by_model = self
            .models
            .iter()
            .find(|(prefix, _)| normalized.starts_with(prefix.as_str()))
            .map(|(_, o)| o);
        by_model.into_iter().chain(self.agents.get(agent))
    }
}

impl Budgets {
    pub fn new(section: BudgetSection) -> Self {
        let overrides = Overrides::new(&section.models, &section.agents);
        Self { section, overrides }
    }

    /// The budget of `agent` calling `model`, with the request's output
    /// limit if it set one.
    pub fn budget(&self, agent: &str, model: &str, max_output: Option<u32>) -> TokenBudget {
        let mut limits = budget::builtin_limits(model).unwrap_or(ModelLimits {
            context_tokens: self.section.default_context_tokens,
            max_output_tokens: self.section.default_max_output_tokens,
        });
        let mut policy = BudgetPolicy {
            safety_margin_tokens: self.section.safety_margin_tokens,
            compaction_ratio: self.section.compaction_ratio,
        };
        for o in self.overrides.applying(agent, model) {
            limits.context_tokens = o.context_tokens.unwrap_or(limits.context_tokens);
            limits.max_output_tokens = o.max_output_tokens.unwrap_or(limits.max_output_tokens);
            policy.compaction_ratio = o.compaction_ratio.unwrap_or(policy.compaction_ratio);
            policy.safety_margin_tokens = o
                .safety_margin_tokens
                .unwrap_or(policy.safety_margin_tokens);
        }
        TokenBudget::compute(limits, max_output, policy)
    }

    /// Where `agent`'s next summary starts in the background, in tokens,
    /// for `budget` (its budget for `model`); `None`: off.
    pub fn precompact_tokens(&self, agent: &str, model: &str, budget: &TokenBudget) -> Option<u32> {
        let ratio = self
            .overrides
            .applying(agent, model)
            .fold(self.section.precompact_ratio, |r, o| {
                o.precompact_ratio.unwrap_or(r)
            });
        (ratio > 0.0 && ratio < budget.compaction_ratio)
            .then(|| (f64::from(budget.input_budget) * ratio).floor() as u32)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn section() -> BudgetSection {
        BudgetSection {
            safety_margin_tokens: 1000,
            compaction_ratio: 0.8,
            precompact_ratio: 0.6,
            default_context_tokens: 50_000,
            default_max_output_tokens: 5_000,
            models: BTreeMap::from([
                (
                    "My-Model".into(),
                    BudgetOverride {
                        context_tokens: Some(32_000),
                        ..Default::default()
                    },
                ),
                (
                    "my-model-xl".into(),
                    BudgetOverride {
                        context_tokens: Some(64_000),
                        ..Default::default()
                    },
                ),
                (
                    "gpt-4o".into(),
                    BudgetOverride {
                        max_output_tokens: Some(2_000),
                        ..Default::default()
                    },
                ),
            ]),
            agents: BTreeMap::from([(
                "tight".into(),
                BudgetOverride {
                    compaction_ratio: Some(0.5),
                    context_tokens: Some(20_000),
                    ..Default::default()
                },
            )]),
        }
    }

    #[test]
    fn table_then_model_then_agent_then_request() {
        let b = Budgets::new(section());
        let unknown = b.budget("a", "something-new", None);
        assert_eq!(
            (unknown.max_context_tokens, unknown.max_output_tokens),
            (50_000, 5_000)
        );
        assert_eq!(
            b.budget("a", "my-model-7b", None).max_context_tokens,
            32_000
        );
        assert_eq!(
            b.budget("a", "my-model-xl-2", None).max_context_tokens,
            64_000,
            "longest prefix"
        );
        let gpt = b.budget("a", "gpt-4o-2024-08-06", None);
        assert_eq!(
            (gpt.max_context_tokens, gpt.max_output_tokens),
            (128_000, 2_000)
        );
        let tight = b.budget("tight", "gpt-4o", None);
        assert_eq!(tight.max_context_tokens, 20_000);
        assert_eq!(tight.compaction_ratio, 0.5);
        assert_eq!(tight.input_budget, 20_000 - 2_000 - 1_000);
        assert_eq!(b.budget("a", "gpt-4o", Some(100)).max_output_tokens, 100);
    }

    #[test]
    fn background_summaries_start_below_the_trigger_or_not_at_all() {
        let b = Budgets::new(section());
        let at = |agent: &str| {
            let budget = b.budget(agent, "gpt-4o", None);
            b.precompact_tokens(agent, "gpt-4o", &budget)
                .map(|t| (t, budget.input_budget))
        };
        let (tokens, input) = at("a").unwrap();
        assert_eq!(tokens, (f64::from(input) * 0.6).floor() as u32);
        // `tight` triggers at 0.5: a start at 0.6 would come after it.
        assert_eq!(at("tight"), None);
    }
}
