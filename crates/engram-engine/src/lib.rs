//! What Engram does, over any [`Store`], speaking no protocol: the gRPC
//! service, the JSON API and every other way in call an [`Engine`] with
//! the plain requests of [`api`] and turn its answers and
//! [`EngineError`]s into their own.
//!
//! - [`Engine`]: ingest ([`ingest`](Engine::ingest)), the prompt
//!   ([`prepare`](Engine::prepare)), [`compact`](Engine::compact),
//!   [`retrieve`](Engine::retrieve), [`search`](Engine::search),
//!   [`context_stats`](Engine::context_stats) and the agents as a whole
//!   (`agents.rs`).
//! - [`api`]: the requests and answers; [`limits`]: their defaults and
//!   limits, and the checks, in one place; [`error`]: what goes wrong, for
//!   clients.
//! - `prepare.rs`, `sizing.rs`, [`budget`]: the prompt, its size and its
//!   model's budget; [`caches`]: per agent, token counts, rendered
//!   messages and the turn's recall.
//! - [`compactor`]: the tier ladder of a compaction, the per-agent pause;
//!   `flights.rs`: one compaction per agent at a time; `ahead.rs`: the
//!   summaries written in the background before the trigger.
//! - `portable.rs`: ExportMemory and ImportMemory (the bundle streamed out
//!   and read in).
//! - `recall.rs`: the `[MEMORY:RECALLED]` block attached to the current
//!   user message.
//! - [`settings`]: what the engine is configured with.

mod admission;
mod agents;
mod ahead;
pub mod api;
pub mod blocks;
pub mod budget;
pub mod caches;
pub mod compactor;
pub mod consolidate;
pub mod error;
mod facts;
mod flights;
mod forget;
mod idle;
mod ingest;
pub mod limits;
mod memory;
#[cfg(test)]
mod memory_tests;
pub mod portable;
mod prepare;
mod recall;
mod retrieve;
pub mod settings;
mod sizing;
mod stats;
pub mod strategy;
mod users;

use std::sync::Arc;
use std::time::Duration;

use engram_llm::Summarizer;
use engram_store::Store;

pub use admission::AgentPermit;
pub use api::*;
pub use error::EngineError;
pub use memory::{Heap, use_heap};
pub use portable::{Export, Import};
pub use recall::Report as RecallReport;
pub use settings::Settings;

use budget::Budgets;
use caches::ContextCaches;
use compactor::Compactor;
use settings::RecallSection;

/// How often the upkeep has the store delete the facts that expired.
const PURGE_EVERY: Duration = Duration::from_secs(30);

/// How often the upkeep holds the memory to the budget.
const BUDGET_EVERY: Duration = Duration::from_millis(100);

/// How often, without a budget, it measures what is accounted (the gauge).
const ACCOUNT_EVERY: Duration = Duration::from_secs(10);

/// Engram over one store. Cheap to clone: every clone is the same engine.
#[derive(Debug, Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    caches: Arc<ContextCaches>,
    budgets: Arc<Budgets>,
    compactor: Compactor,
    recall: RecallSection,
    blocks: settings::BlocksSection,
    users: settings::UsersSection,
    /// How many facts besides the pinned ones an agent's snapshot shows
    /// (`policy.max_semantic_items`), kept current as clients change them.
    facts_limit: u32,
    last_used: Arc<idle::LastUsed>,
    idle_evict: Option<Duration>,
    rewriting: Arc<forget::Rewriting>,
    /// The largest bundle ImportMemory takes (`memory.import_max_mb`).
    import_max_bytes: u64,
    calls: Arc<admission::AgentCalls>,
    /// `store.memory_budget_mb`, in bytes (`None`: no budget).
    memory_budget: Option<u64>,
    memory: Arc<memory::Gate>,
    /// The users whose facts are being consolidated.
    consolidating: Arc<consolidate::Running>,
}

impl Engine {
    /// The engine over `store`, compacting with `summarizer`.
    pub fn new(
        store: Arc<dyn Store>,
        summarizer: Arc<dyn Summarizer>,
        settings: &Settings,
    ) -> Self {
        let caches = Arc::new(ContextCaches::default());
        let budgets = Arc::new(Budgets::new(settings.budget.clone()));
        let compactor = Compactor::new(
            Arc::clone(&store),
            Arc::clone(&caches),
            Arc::clone(&budgets),
            summarizer,
            settings,
        );
        Self {
            store,
            caches,
            budgets,
            compactor,
            recall: settings.recall,
            blocks: settings.blocks,
            users: settings.users,
            facts_limit: u32::try_from(settings.policy.max_semantic_items).unwrap_or(u32::MAX),
            last_used: Arc::default(),
            idle_evict: settings.idle_evict,
            rewriting: Arc::default(),
            import_max_bytes: settings.memory.import_max_mb.saturating_mul(1 << 20),
            calls: Arc::new(admission::AgentCalls::new(settings.max_calls_per_agent)),
            memory_budget: settings.memory_budget,
            memory: Arc::default(),
            consolidating: Arc::default(),
        }
    }

    /// The memory budget in bytes, if there is one.
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory_budget
    }

    /// A place for one call of `agent_id` among its calls in flight, held
    /// until the permit drops; [`EngineError::Busy`] past
    /// `server.max_calls_per_agent`.
    pub fn admit(&self, agent_id: &str) -> error::Result<AgentPermit> {
        self.calls.admit(agent_id)
    }

    /// The store under the engine (health, metrics, shutdown).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The summarizer's name, for the start-up log.
    pub fn summarizer_name(&self) -> String {
        self.compactor.summarizer().name()
    }

    /// True while the summarizer's circuit breaker is open.
    pub fn circuit_open(&self) -> bool {
        self.compactor.circuit_open()
    }

    /// The budget of `agent` calling `model` (the request's output limit
    /// applied), as prompts are held to it.
    pub fn budget(
        &self,
        agent: &str,
        model: &str,
        max_output: Option<u32>,
    ) -> engram_core::budget::TokenBudget {
        self.budgets.budget(agent, model, max_output)
    }

    /// Drops the prompt caches of agents idle for the store's idle-evict
    /// time (never, without one), notes the agents served in the store,
    /// summarizes the users' conversations that went quiet (`idle.rs`),
    /// and has the store delete the facts that expired. Runs until the task is aborted.
    pub fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let evict = async {
                let Some(idle) = engine.idle_evict else {
                    return;
                };
                let mut tick = tokio::time::interval(idle.min(Duration::from_secs(60)));
                loop {
                    tick.tick().await;
                    let n = engine.caches.evict_idle(idle);
                    if n > 0 {
                        tracing::debug!(evicted = n, "dropped the prompt caches of idle agents");
                    }
                    let n = engine.compactor.drop_ahead_older_than(idle);
                    if n > 0 {
                        tracing::debug!(
                            dropped = n,
                            "dropped the summaries of agents that went quiet before their trigger"
                        );
                    }
                }
            };
            let summarize = async {
                let Some(every) = engine.idle_sweep_every() else {
                    return;
                };
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    engine.summarize_idle().await;
                }
            };
            let note = async {
                if engine.idle_sweep_every().is_none() {
                    return;
                }
                let mut tick = tokio::time::interval(idle::NOTE_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    engine.note_used().await;
                }
            };
            // The facts that expired lose their text (they left search and
            // prompts at their time already).
            let purge = async {
                let mut tick = tokio::time::interval(PURGE_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    match engine.store.purge_expired().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(facts = n, "deleted expired facts"),
                        Err(e) => {
                            tracing::warn!(error = %e, "deleting expired facts failed; trying again later");
                        }
                    }
                }
            };
            // Summaries a forget hid and no rewrite has shown again yet (the
            // summarizer failed, or the server stopped first).
            let rewrite = async {
                let mut tick = tokio::time::interval(PURGE_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    engine.rewrite_awaiting().await;
                }
            };
            // The memory budget, often enough that a burst of loads is
            // answered within a fraction of a second; without one, only
            // the gauge of what is accounted, now and then.
            let budget = async {
                let every = match engine.memory_budget {
                    Some(_) => BUDGET_EVERY,
                    None => ACCOUNT_EVERY,
                };
                engine.note_heap_baseline();
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    engine.keep_to_budget().await;
                }
            };
            tokio::join!(evict, summarize, note, purge, rewrite, budget);
        })
    }
}
