//! The size of the prompt an agent would send now, counted from its view:
//! the budget of its model, our own count, and the provider's last report.

use engram_core::AgentId;
use engram_core::budget::TokenBudget;
use engram_core::compaction::PromptSize;
use engram_core::tokens;
use engram_core::transcript::Message;
use engram_store::{AgentView, Store, StoreError};

use crate::budget::Budgets;
use crate::caches::{self, Caches, ContextCaches};

/// Token numbers of the prompt an agent would send now.
pub struct Sizing {
    pub budget: TokenBudget,
    pub size: PromptSize,
    /// Messages of the prompt, the system prompt included.
    pub messages: usize,
    /// Placeholders for calls still waiting for results (rendered last).
    pub tail: Vec<Message>,
}

impl Sizing {
    pub fn prompt_tokens(&self) -> u32 {
        self.size.tokens()
    }
}

pub fn sizing(
    view: &AgentView<'_>,
    caches: &mut Caches,
    agent: &AgentId,
    budgets: &Budgets,
    model: &str,
    max_output: Option<u32>,
) -> Sizing {
    let budget = budgets.budget(agent.as_str(), model, max_output);
    let encoding = tokens::encoding_for(model);
    let committed = view.transcript.messages();
    let tail = view.transcript.pending_tail();
    let body = caches.tokens.count(encoding, view.transcript);
    let tail_tokens: u64 = tail
        .iter()
        .map(|m| u64::from(tokens::count_message(encoding, m)))
        .sum();
    let system = caches
        .tokens
        .count_system(encoding, view.meta.system_prompt.as_deref());
    let estimate = u64::from(system) + body + tail_tokens + u64::from(tokens::REPLY_PRIMING);
    let reported = view.report.map(|(u, mark)| {
        let since = caches.tokens.sum_from(mark) + tail_tokens;
        (u.prompt_tokens, clamp(since))
    });
    Sizing {
        budget,
        size: PromptSize {
            estimate: clamp(estimate),
            reported,
        },
        messages: committed.len() + tail.len() + usize::from(view.meta.system_prompt.is_some()),
        tail,
    }
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Distinct turns among the active traces, the current one not counted.
pub fn finished_turns(traces: &[engram_core::RawTrace], current: Option<String>) -> usize {
    let current = current.unwrap_or_default();
    let turns: std::collections::HashSet<&str> = traces
        .iter()
        .map(|t| t.turn_id.as_str())
        .filter(|t| *t != current)
        .collect();
    turns.len()
}

/// Whether the agent's prompt (for its last reported model) is over its
/// compaction trigger, and its size.
pub async fn over_trigger(
    store: &Store,
    caches: &ContextCaches,
    budgets: &Budgets,
    id: &AgentId,
) -> Result<(bool, u32), StoreError> {
    let cell = caches.of(id);
    store
        .read(id, |view| {
            let model = view.tracker.last_model().unwrap_or_default().to_owned();
            let size = sizing(&view, &mut caches::lock(&cell), id, budgets, &model, None);
            let tokens = size.prompt_tokens();
            (tokens > size.budget.trigger_tokens, tokens)
        })
        .await
}
