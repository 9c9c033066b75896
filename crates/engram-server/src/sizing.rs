//! What a prompt is made of, taken from an agent under its lock ([`Parts`]:
//! cheap, the messages are shared), and its size, counted after the lock
//! is released: the budget of its model, our own count, and the
//! provider's last report.

use std::sync::Arc;

use engram_core::budget::TokenBudget;
use engram_core::compaction::PromptSize;
use engram_core::tokens;
use engram_core::transcript::Message;
use engram_core::{AgentId, Usage};
use engram_store::{AgentView, Store, StoreError};

use crate::budget::Budgets;
use crate::caches::{self, Caches, ContextCaches};

/// An agent's prompt as it stands, owned: what PrepareRequest and
/// GetContextStats count and render once the agent is unlocked.
#[derive(Debug, Clone)]
pub struct Parts {
    /// The transcript's identity (for the caches).
    pub transcript: u64,
    pub messages: Arc<Vec<Message>>,
    /// Placeholders for calls still waiting for results (rendered last).
    pub tail: Vec<Message>,
    pub system: Option<String>,
    /// The provider's last usage report this epoch, and the number of
    /// messages before it.
    pub report: Option<(Usage, usize)>,
    pub last_model: Option<String>,
    pub compaction_required: bool,
    /// Active turns, the current one not counted.
    pub finished_turns: usize,
    pub turns: u32,
    pub current_turn_id: String,
    pub epoch: u32,
    pub compactions: u32,
    pub consecutive_failures: u32,
    /// About how much text there is (to keep big counts off the async
    /// workers).
    pub bytes: u64,
}

impl Parts {
    /// The model a prompt is for: the request's, or the last one the
    /// agent's Ingests reported ("" for neither: the default budget).
    pub fn model(&self, requested: Option<&str>) -> String {
        requested
            .or(self.last_model.as_deref())
            .unwrap_or_default()
            .to_owned()
    }
}

impl Parts {
    pub fn of(view: &AgentView<'_>) -> Self {
        Self {
            transcript: view.transcript.id(),
            messages: view.transcript.shared(),
            tail: view.transcript.pending_tail(),
            system: view.meta.system_prompt.clone(),
            report: view.report,
            last_model: view.tracker.last_model().map(str::to_owned),
            compaction_required: view.meta.compaction_required,
            finished_turns: finished_turns(view.traces, view.tracker.current_turn_id()),
            turns: view.tracker.turn_count(),
            current_turn_id: view.tracker.current_turn_id().unwrap_or_default(),
            epoch: view.meta.epoch,
            compactions: view.meta.compactions,
            consecutive_failures: view.meta.consecutive_failures,
            bytes: view.bytes,
        }
    }
}

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

pub fn sizing(
    parts: &Parts,
    caches: &mut Caches,
    agent: &AgentId,
    budgets: &Budgets,
    model: &str,
    max_output: Option<u32>,
) -> Sizing {
    let budget = budgets.budget(agent.as_str(), model, max_output);
    let encoding = tokens::encoding_for(model);
    let body = caches
        .tokens
        .count(encoding, parts.transcript, &parts.messages);
    let tail_tokens: u64 = parts
        .tail
        .iter()
        .map(|m| u64::from(tokens::count_message(encoding, m)))
        .sum();
    let system = caches
        .tokens
        .count_system(encoding, parts.system.as_deref());
    let estimate = u64::from(system) + body + tail_tokens + u64::from(tokens::REPLY_PRIMING);
    let reported = parts.report.map(|(u, mark)| {
        let since = caches.tokens.sum_from(mark) + tail_tokens;
        (u.prompt_tokens, clamp(since))
    });
    Sizing {
        budget,
        size: PromptSize {
            estimate: clamp(estimate),
            reported,
        },
        messages: parts.messages.len() + parts.tail.len() + usize::from(parts.system.is_some()),
    }
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Distinct turns among the active traces, the current one not counted.
fn finished_turns(traces: &[engram_core::RawTrace], current: Option<String>) -> usize {
    let current = current.unwrap_or_default();
    let turns: std::collections::HashSet<&str> = traces
        .iter()
        .map(|t| t.turn_id.as_str())
        .filter(|t| *t != current)
        .collect();
    turns.len()
}

/// Runs `f` on the agent's caches, off the async workers when the prompt is
/// large enough for counting or rendering it to take a while.
pub fn with_caches<T>(
    caches: &ContextCaches,
    agent: &AgentId,
    parts: &Parts,
    f: impl FnOnce(&mut Caches) -> T,
) -> T {
    let cell = caches.of(agent);
    engram_store::offload_over(parts.bytes, || f(&mut caches::lock(&cell)))
}

/// The agent's prompt parts, and its size for `model` (or its last
/// reported one): one lock to take the parts, the count after it.
pub async fn measure(
    store: &Store,
    caches: &ContextCaches,
    budgets: &Budgets,
    id: &AgentId,
    model: Option<&str>,
) -> Result<(Parts, Sizing, String), StoreError> {
    let parts = store.read(id, |view| Parts::of(&view)).await?;
    let model = parts.model(model);
    let size = with_caches(caches, id, &parts, |c| {
        sizing(&parts, c, id, budgets, &model, None)
    });
    Ok((parts, size, model))
}

/// Whether the agent's prompt (for its last reported model) is over its
/// compaction trigger, and its size.
pub async fn over_trigger(
    store: &Store,
    caches: &ContextCaches,
    budgets: &Budgets,
    id: &AgentId,
) -> Result<(bool, u32), StoreError> {
    let (_, size, _) = measure(store, caches, budgets, id, None).await?;
    let tokens = size.prompt_tokens();
    Ok((tokens > size.budget.trigger_tokens, tokens))
}
