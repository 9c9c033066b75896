//! Token budgets: the built-in model table and the budget arithmetic of
//! DESIGN §5. `input_budget = max_context_tokens - max_output_tokens -
//! safety_margin_tokens`; compaction triggers at `compaction_ratio *
//! input_budget`.

/// Context window and default output reservation of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    pub context_tokens: u32,
    pub max_output_tokens: u32,
}

/// What unknown models get (DESIGN §5: 200,000).
pub const UNKNOWN_MODEL: ModelLimits = ModelLimits {
    context_tokens: 200_000,
    max_output_tokens: 8_192,
};

const fn limits(context_tokens: u32, max_output_tokens: u32) -> ModelLimits {
    ModelLimits {
        context_tokens,
        max_output_tokens,
    }
}

/// Model name prefixes and their limits; the longest matching prefix wins,
/// so dated variants (`gpt-4o-2024-08-06`, `claude-3-5-sonnet-20241022`)
/// find their family and `gpt-4o-mini` is not taken for `gpt-4o`.
const MODEL_TABLE: &[(&str, ModelLimits)] = &[
    // OpenAI
    ("gpt-5", limits(400_000, 128_000)),
    ("gpt-4.1", limits(1_047_576, 32_768)),
    ("gpt-4o", limits(128_000, 16_384)),
    ("chatgpt-4o", limits(128_000, 16_384)),
    ("gpt-4-turbo", limits(128_000, 4_096)),
    ("gpt-4-32k", limits(32_768, 4_096)),
    ("gpt-4", limits(8_192, 4_096)),
    ("gpt-3.5-turbo", limits(16_385, 4_096)),
    ("gpt-oss", limits(131_072, 32_768)),
    ("o1-mini", limits(128_000, 65_536)),
    ("o1", limits(200_000, 100_000)),
    ("o3", limits(200_000, 100_000)),
    ("o4-mini", limits(200_000, 100_000)),
    // Anthropic
    ("claude-opus-4", limits(200_000, 32_000)),
    ("claude-sonnet-4", limits(200_000, 64_000)),
    ("claude-haiku-4", limits(200_000, 64_000)),
    ("claude-3-7-sonnet", limits(200_000, 64_000)),
    ("claude-3-5-sonnet", limits(200_000, 8_192)),
    ("claude-3-5-haiku", limits(200_000, 8_192)),
    ("claude-3-opus", limits(200_000, 4_096)),
    ("claude-3-sonnet", limits(200_000, 4_096)),
    ("claude-3-haiku", limits(200_000, 4_096)),
    // Google
    ("gemini-2.5", limits(1_048_576, 65_536)),
    ("gemini-2.0", limits(1_048_576, 8_192)),
    ("gemini-1.5-pro", limits(2_097_152, 8_192)),
    ("gemini-1.5", limits(1_048_576, 8_192)),
    ("gemma-3", limits(131_072, 8_192)),
    // Meta
    ("llama-4", limits(1_048_576, 16_384)),
    ("llama4", limits(1_048_576, 16_384)),
    ("llama-3.3", limits(131_072, 8_192)),
    ("llama-3.2", limits(131_072, 8_192)),
    ("llama-3.1", limits(131_072, 8_192)),
    ("llama3.3", limits(131_072, 8_192)),
    ("llama3.2", limits(131_072, 8_192)),
    ("llama3.1", limits(131_072, 8_192)),
    ("llama-3", limits(8_192, 4_096)),
    ("llama3", limits(8_192, 4_096)),
    // Mistral
    ("mistral-large", limits(131_072, 8_192)),
    ("mistral-medium", limits(131_072, 8_192)),
    ("mistral-small", limits(131_072, 8_192)),
    ("mistral-nemo", limits(131_072, 8_192)),
    ("codestral", limits(262_144, 8_192)),
    ("ministral", limits(131_072, 8_192)),
    ("mixtral-8x22b", limits(65_536, 4_096)),
    ("mixtral", limits(32_768, 4_096)),
    ("mistral", limits(32_768, 4_096)),
    // Qwen
    ("qwen3", limits(131_072, 8_192)),
    ("qwen2.5", limits(131_072, 8_192)),
    ("qwen-max", limits(32_768, 8_192)),
    ("qwen-plus", limits(131_072, 8_192)),
    ("qwq", limits(131_072, 32_768)),
    // DeepSeek
    ("deepseek", limits(131_072, 8_192)),
];

/// Lowercases and drops routing prefixes (`openai/`, `models/`,
/// `meta-llama/`, `meta-`), so OpenRouter, Gemini, Hugging Face and Ollama
/// spellings find the same entry.
pub fn normalize_model(model: &str) -> String {
    let lower = model.trim().to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    name.strip_prefix("meta-").unwrap_or(name).to_owned()
}

/// The built-in limits of `model`, if the table knows its family.
pub fn builtin_limits(model: &str) -> Option<ModelLimits> {
    let name = normalize_model(model);
    MODEL_TABLE
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, l)| *l)
}

/// Budget settings that are not per model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetPolicy {
    /// Tokens kept free beyond the output reservation, for estimate error.
    pub safety_margin_tokens: u32,
    /// Compaction triggers at this share of the input budget.
    pub compaction_ratio: f64,
}

impl Default for BudgetPolicy {
    fn default() -> Self {
        Self {
            safety_margin_tokens: 2_048,
            compaction_ratio: 0.8,
        }
    }
}

/// A computed budget (the `TokenBudget` message).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBudget {
    pub max_context_tokens: u32,
    pub max_output_tokens: u32,
    pub safety_margin_tokens: u32,
    pub input_budget: u32,
    pub compaction_ratio: f64,
    pub trigger_tokens: u32,
}

impl TokenBudget {
    /// The budget for a model with `limits`, reserving `max_output` (the
    /// request's override) or the model's default for the answer. The
    /// margin never takes more than a twentieth of the window, and the output
    /// reservation never more than half, so small windows keep room to work.
    pub fn compute(limits: ModelLimits, max_output: Option<u32>, policy: BudgetPolicy) -> Self {
        let context = limits.context_tokens.max(1);
        let output = max_output
            .filter(|n| *n > 0)
            .unwrap_or(limits.max_output_tokens)
            .min(context / 2);
        let margin = policy.safety_margin_tokens.min(context / 20);
        let input_budget = context.saturating_sub(output).saturating_sub(margin);
        let ratio = policy.compaction_ratio.clamp(0.05, 1.0);
        Self {
            max_context_tokens: context,
            max_output_tokens: output,
            safety_margin_tokens: margin,
            input_budget,
            compaction_ratio: ratio,
            trigger_tokens: (f64::from(input_budget) * ratio).floor() as u32,
        }
    }

    /// Share of the input budget that `tokens` use, in percent.
    pub fn percent_used(&self, tokens: u32) -> f64 {
        if self.input_budget == 0 {
            return 100.0;
        }
        f64::from(tokens) * 100.0 / f64::from(self.input_budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_and_routed_names_find_their_family() {
        let cases = [
            ("gpt-4o-2024-08-06", 128_000),
            ("gpt-4o-mini-2024-07-18", 128_000),
            ("openai/gpt-4.1-mini", 1_047_576),
            ("gpt-5-nano", 400_000),
            ("gpt-4-0613", 8_192),
            ("gpt-4-turbo-2024-04-09", 128_000),
            ("o1-mini-2024-09-12", 128_000),
            ("o3-mini", 200_000),
            ("claude-3-5-sonnet-20241022", 200_000),
            ("anthropic/claude-sonnet-4-5-20250929", 200_000),
            ("models/gemini-2.5-flash", 1_048_576),
            ("gemini-1.5-pro-002", 2_097_152),
            ("meta-llama/Meta-Llama-3.1-8B-Instruct", 131_072),
            ("llama3.1:70b", 131_072),
            ("Llama-3-8B", 8_192),
            ("mistral-large-latest", 131_072),
            ("mixtral-8x22b-instruct", 65_536),
            ("Qwen/Qwen2.5-72B-Instruct", 131_072),
            ("deepseek-chat", 131_072),
        ];
        for (model, context) in cases {
            let got = builtin_limits(model).unwrap_or_else(|| panic!("{model} unknown"));
            assert_eq!(got.context_tokens, context, "{model}");
        }
        assert_eq!(
            builtin_limits("gpt-4o-mini").unwrap().max_output_tokens,
            16_384
        );
        assert_eq!(builtin_limits("my-own-finetune"), None);
        assert_eq!(builtin_limits(""), None);
    }

    #[test]
    fn budget_arithmetic_follows_the_design() {
        let b = TokenBudget::compute(limits(128_000, 16_384), None, BudgetPolicy::default());
        assert_eq!(b.input_budget, 128_000 - 16_384 - 2_048);
        assert_eq!(b.trigger_tokens, (f64::from(b.input_budget) * 0.8) as u32);
        assert_eq!(b.percent_used(b.input_budget / 2), 50.0);

        // A request override replaces the model's output reservation.
        let b = TokenBudget::compute(
            limits(128_000, 16_384),
            Some(1_000),
            BudgetPolicy::default(),
        );
        assert_eq!(
            (b.max_output_tokens, b.input_budget),
            (1_000, 128_000 - 1_000 - 2_048)
        );

        // Small windows: the margin and the output reservation are capped.
        let b = TokenBudget::compute(limits(8_192, 8_192), None, BudgetPolicy::default());
        assert_eq!(b.max_output_tokens, 4_096);
        assert_eq!(b.safety_margin_tokens, 409);
        assert_eq!(b.input_budget, 8_192 - 4_096 - 409);

        let unknown = TokenBudget::compute(UNKNOWN_MODEL, None, BudgetPolicy::default());
        assert_eq!(unknown.max_context_tokens, 200_000);
    }
}
