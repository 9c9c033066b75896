//! The engine's settings: the `[budget]`, `[policy]`, `[recall]` and `[blocks]`
//! sections of the server's configuration, defined here (the server's
//! config embeds them) so the engine and the config file say the same.
//! Values are checked by the server's config validation before an
//! [`crate::Engine`] is built.

use std::collections::BTreeMap;
use std::time::Duration;

use engram_core::compaction::Strategy;
use serde::Deserialize;

/// Everything an [`crate::Engine`] is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub budget: BudgetSection,
    pub policy: PolicySection,
    pub recall: RecallSection,
    pub blocks: BlocksSection,
    pub users: UsersSection,
    pub memory: MemorySection,
    /// Consecutive failed compactions after which an agent's automatic
    /// compaction pauses (`llm.agent_failures`), and for how long
    /// (`llm.agent_cooldown_secs`).
    pub agent_failures: u32,
    pub agent_cooldown: Duration,
    /// Prompt caches of agents idle this long are dropped (the store's
    /// `idle_evict_secs`); `None`: kept.
    pub idle_evict: Option<Duration>,
    /// Calls of one agent in flight at most (`server.max_calls_per_agent`;
    /// 0: no limit).
    pub max_calls_per_agent: usize,
    /// What loaded agents and their caches may hold, in bytes
    /// (`store.memory_budget_mb`); `None`: no budget.
    pub memory_budget: Option<u64>,
}

/// `[memory]`: how long what compaction learns is kept.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySection {
    /// The facts a compaction writes expire this long (seconds) after it:
    /// they leave search and prompts then, and the upkeep deletes them.
    /// 0: never (a client's facts expire only as the client says).
    pub default_ttl_secs: u64,
    /// The largest bundle ImportMemory takes, in MiB (it is held in memory
    /// whole and checked before anything is written).
    pub import_max_mb: u64,
}

/// `[recall]`: memories PrepareRequest adds to the current user message.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallSection {
    pub enabled: bool,
    pub max_tokens: u32,
    pub min_score: f32,
    /// A memory scoring under this share of the best score of the same
    /// question is not recalled (0: no floor).
    pub relative_floor: f32,
}

/// `[users]`: memory that follows a user across conversations.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersSection {
    /// A user's new conversation starts with the summary of the user's
    /// previous one (`[MEMORY:PREVIOUS CONVERSATION]`).
    pub inject_last_summary: bool,
    /// A user's conversation idle this long with turns not yet summarized
    /// is summarized in the background, so that the next one has a
    /// summary to start from (0: never).
    pub summarize_idle_after_secs: u64,
}

/// `[blocks]`: the memory blocks in the system message.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlocksSection {
    /// The share of the input budget the blocks may take (0 < share <= 1);
    /// past it each is cut, with a warning.
    pub max_share: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    pub max_tool_result_chars: usize,
    pub raw_tail_turns: usize,
    pub max_active_turns: usize,
    pub max_episodic_items: usize,
    pub max_semantic_items: usize,
    /// Most tokens of the snapshot's carry-forward section: what the
    /// summaries in view do not hold of the rules, open tasks, decisions,
    /// errors and identifiers (0: none).
    #[serde(default = "default_max_carried_tokens")]
    pub max_carried_tokens: u32,
    /// What compactions may do (`strategy.rs`).
    #[serde(default)]
    pub strategy: Strategy,
    /// Whole turns `trim` keeps before the current one.
    #[serde(default = "default_keep_last_turns")]
    pub keep_last_turns: usize,
    /// `strategy` and `keep_last_turns` by model name prefix.
    #[serde(default)]
    pub models: BTreeMap<String, PolicyOverride>,
    /// By agent id; wins over the model's.
    #[serde(default)]
    pub agents: BTreeMap<String, PolicyOverride>,
}

fn default_max_carried_tokens() -> u32 {
    800
}

fn default_keep_last_turns() -> usize {
    8
}

/// The policy keys a model or an agent may set otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverride {
    pub strategy: Option<Strategy>,
    pub keep_last_turns: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSection {
    pub safety_margin_tokens: u32,
    pub compaction_ratio: f64,
    /// Past this share of the input budget the next compaction's summary
    /// is written in the background (0: off; at or above
    /// `compaction_ratio`: off).
    #[serde(default = "default_precompact_ratio")]
    pub precompact_ratio: f64,
    pub default_context_tokens: u32,
    pub default_max_output_tokens: u32,
    /// By model name prefix.
    #[serde(default)]
    pub models: BTreeMap<String, BudgetOverride>,
    /// By agent id; wins over the model's.
    #[serde(default)]
    pub agents: BTreeMap<String, BudgetOverride>,
}

fn default_precompact_ratio() -> f64 {
    0.6
}

/// Any subset of a budget's settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetOverride {
    pub context_tokens: Option<u32>,
    pub max_output_tokens: Option<u32>,
    pub compaction_ratio: Option<f64>,
    pub precompact_ratio: Option<f64>,
    pub safety_margin_tokens: Option<u32>,
}
