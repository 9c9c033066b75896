//! The size of an agent's prompt, counted from its [`AgentContext`] (taken
//! from the store, owned) after the agent's lock is released: the budget
//! of its model, our own count, and the provider's last report.

use engram_core::AgentId;
use engram_core::budget::TokenBudget;
use engram_core::compaction::PromptSize;
use engram_core::tokens;
use engram_store::{AgentContext, Store, StoreError};

use crate::budget::Budgets;
use crate::caches::{self, Caches, ContextCaches};

/// Token numbers of the prompt an agent would send now.
pub struct Sizing {
    pub budget: TokenBudget,
    pub size: PromptSize,
    /// Messages of the prompt, the system prompt included.
    pub messages: usize,
}

impl Sizing {
    pub fn prompt_tokens(&self) -> u32 {
        self.size.tokens()
    }
}

/// The size of `context`'s prompt for the `requested` model (or the
/// agent's last reported one), counted with the agent's `caches`, and that
/// model ("" for none: the default budget).
pub fn sizing(
    context: &AgentContext,
    caches: &mut Caches,
    agent: &AgentId,
    budgets: &Budgets,
    requested: Option<&str>,
    max_output: Option<u32>,
) -> (Sizing, String) {
    let model = context.model(requested);
    let budget = budgets.budget(agent.as_str(), &model, max_output);
    let encoding = tokens::encoding_for(&model);
    let body = caches
        .tokens
        .count(encoding, context.transcript, &context.messages);
    let tail_tokens: u64 = context
        .tail
        .iter()
        .map(|m| u64::from(tokens::count_message(encoding, m)))
        .sum();
    let system = caches
        .tokens
        .count_system(encoding, context.system.as_deref());
    let estimate = u64::from(system) + body + tail_tokens + u64::from(tokens::REPLY_PRIMING);
    let reported = context.report.map(|(u, mark)| {
        let since = caches.tokens.sum_from(mark) + tail_tokens;
        (u.carried_prompt_tokens(), clamp(since))
    });
    let sizing = Sizing {
        budget,
        size: PromptSize {
            estimate: clamp(estimate),
            reported,
        },
        messages: context.messages.len()
            + context.tail.len()
            + usize::from(context.system.is_some()),
    };
    (sizing, model)
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Runs `f` on the agent's caches, off the async workers when the prompt is
/// large enough for counting or rendering it to take a while.
pub fn with_caches<T>(
    caches: &ContextCaches,
    agent: &AgentId,
    context: &AgentContext,
    f: impl FnOnce(&mut Caches) -> T,
) -> T {
    let cell = caches.of(agent);
    engram_store::offload_over(context.bytes, || f(&mut caches::lock(&cell)))
}

/// The agent's prompt, and its size for `model` (or its last reported
/// one), and that model: one read of the store, the count after it.
pub async fn measure(
    store: &dyn Store,
    caches: &ContextCaches,
    budgets: &Budgets,
    id: &AgentId,
    model: Option<&str>,
) -> Result<(AgentContext, Sizing, String), StoreError> {
    let context = store.context(id).await?;
    let (size, model) = with_caches(caches, id, &context, |c| {
        sizing(&context, c, id, budgets, model, None)
    });
    Ok((context, size, model))
}

/// Whether `context` (for the agent's last reported model) is over its
/// compaction trigger, and its size.
pub fn over_trigger(
    caches: &ContextCaches,
    budgets: &Budgets,
    id: &AgentId,
    context: &AgentContext,
) -> (bool, u32) {
    let (size, _) = with_caches(caches, id, context, |c| {
        sizing(context, c, id, budgets, None, None)
    });
    let tokens = size.prompt_tokens();
    (tokens > size.budget.trigger_tokens, tokens)
}
