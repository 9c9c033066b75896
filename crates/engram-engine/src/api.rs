//! The engine's requests and answers: plain values, one per operation,
//! that any protocol fills from its own messages and turns back into its
//! own. Fields a client may leave out are `Option`s or empty; the engine
//! applies the defaults and limits (`limits.rs`) and parses agent ids, so
//! every protocol refuses the same input with the same message.

use engram_core::budget::TokenBudget;
use engram_core::compaction::{CompactionReport, Strategy};
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::render::Format;
use engram_core::retrieve::ToolInteraction;
use engram_core::transcript::Message;
use engram_core::{NewEvent, RawTrace, TraceType, Usage};
use engram_store::{IndexState, Recalled, SearchMode};

/// Ingest: events of one agent, stored all or nothing.
#[derive(Debug, Clone, Default)]
pub struct IngestRequest {
    pub agent_id: String,
    pub events: Vec<NewEvent>,
    /// The provider's usage report of the call these events answer.
    pub usage: Option<Usage>,
    pub model: Option<String>,
    /// The user the agent belongs to ("" or `None`: the stored one).
    pub user_id: Option<String>,
}

/// PrepareRequest: the prompt of the agent's next LLM call.
#[derive(Debug, Clone, Default)]
pub struct PrepareRequest {
    pub agent_id: String,
    pub system_prompt: Option<String>,
    /// The new turn's user message (its type may be left unset).
    pub user_input: Option<NewEvent>,
    pub model: Option<String>,
    /// A provider's payload to render the prompt as.
    pub format: Option<Format>,
    pub max_output_tokens: Option<u32>,
    pub force_compaction: bool,
    /// Recall on or off for this prompt (default: `[recall] enabled`).
    pub recall: Option<bool>,
    /// The recall block's token cap (default: `[recall] max_tokens`).
    pub recall_max_tokens: Option<u32>,
    /// As in [`IngestRequest::user_id`].
    pub user_id: Option<String>,
    /// The prompt as it stands, nothing stored, compacted or started
    /// (`prepare.rs`).
    pub preview: bool,
    /// The compaction strategy for this prompt (default: the agent's
    /// `policy.strategy`).
    pub strategy: Option<Strategy>,
    /// Epoch seconds: recall memories as they stood then.
    pub recall_as_of: Option<f64>,
}

/// The prompt, ready to send.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The system prompt (when there is one) first, then the transcript.
    pub messages: PromptMessages,
    /// The payload for `PrepareRequest::format` ("" without one).
    pub rendered: String,
    pub turn_id: String,
    pub estimated_prompt_tokens: u32,
    pub budget: TokenBudget,
    /// The transcript's tokens (the recall block left out).
    pub transcript_tokens: u32,
    /// The compaction that ran before the prompt was built, if one did.
    pub compaction: Option<CompactionReport>,
    pub epoch: u32,
    pub warnings: Vec<String>,
    /// What the recall block attached to the current user message holds.
    pub recalled: Vec<Recalled>,
    /// What recall ranked and left out (`None`: recall did not run).
    pub recall: Option<crate::RecallReport>,
    /// The memory blocks in the system message, in order.
    pub blocks: Vec<engram_core::blocks::Shown>,
}

/// A prompt's messages, sharing the agent's transcript instead of copying
/// it: a large agent's is megabytes, and a protocol converts each message
/// once anyway.
#[derive(Debug, Clone, Default)]
pub struct PromptMessages {
    pub(crate) system: Option<Message>,
    pub(crate) shared: std::sync::Arc<Vec<Message>>,
    /// How many of `shared` come first.
    pub(crate) shared_len: usize,
    pub(crate) tail: Vec<Message>,
}

impl PromptMessages {
    /// In the prompt's order.
    pub fn iter(&self) -> impl Iterator<Item = &Message> {
        self.system
            .iter()
            .chain(&self.shared[..self.shared_len])
            .chain(&self.tail)
    }

    pub fn len(&self) -> usize {
        usize::from(self.system.is_some()) + self.shared_len + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Retrieve: an agent's memories, and with a query, the relevant first.
#[derive(Debug, Clone, Default)]
pub struct RetrieveRequest {
    pub agent_id: String,
    /// In place of `agent_id`: the user's memories across conversations.
    pub user_id: String,
    pub max_episodic: Option<u32>,
    pub max_semantic: Option<u32>,
    pub raw_tail_turns: Option<u32>,
    pub include_tool_interactions: bool,
    /// Empty: no ranking.
    pub query: String,
    pub max_recalled: Option<u32>,
    pub context_messages: u32,
    pub wait_for_index_ms: u32,
    /// Epoch seconds: memories as they stood then.
    pub as_of: Option<f64>,
}

#[derive(Debug, Clone, Default)]
pub struct Retrieved {
    pub episodic: Vec<EpisodicItem>,
    pub semantic: Vec<SemanticItem>,
    pub tool_interactions: Vec<ToolInteraction>,
    pub raw_tail: Vec<RawTrace>,
    /// Memories ranked for the query (none without one).
    pub recalled: Vec<Recalled>,
    /// The search index's state, when the query was ranked.
    pub index: Option<IndexState>,
}

/// SearchHistory, before validation.
#[derive(Debug, Clone, Default)]
pub struct SearchRequest {
    pub agent_id: String,
    /// In place of `agent_id`: every conversation of this user.
    pub user_id: String,
    pub query: String,
    pub mode: SearchMode,
    pub trace_types: Vec<TraceType>,
    /// "turn_0003"-style ids; empty ends are open.
    pub from_turn_id: String,
    pub to_turn_id: String,
    pub from_ts: Option<f64>,
    pub to_ts: Option<f64>,
    pub context_messages: u32,
    /// 0: the default.
    pub limit: u32,
    pub page_token: String,
    pub wait_for_index_ms: u32,
}

/// GetContextStats: what the agent's prompt holds now.
#[derive(Debug, Clone)]
pub struct ContextStats {
    pub estimated_tokens: u32,
    pub last_reported_prompt_tokens: u32,
    pub estimated_tokens_since_report: u32,
    pub budget: TokenBudget,
    pub percent_used: f64,
    pub messages: u32,
    pub turns: u32,
    pub epoch: u32,
    pub compactions: u32,
    pub consecutive_failures: u32,
    /// What the agent occupies, by part (name, bytes).
    pub files: Vec<(String, u64)>,
    pub compaction_required: bool,
    pub model: String,
    pub index: IndexState,
    /// The user the agent belongs to.
    pub user_id: Option<String>,
    /// Where the next summary starts in the background (0: off).
    pub precompact_tokens: u32,
    /// That summary: "" (none), "writing" or "ready".
    pub summary_ahead: &'static str,
    /// Event time of the agent's last event.
    pub last_event_at: Option<f64>,
    /// The compaction strategy the agent's compactions follow (for the
    /// model), and the turns `trim` keeps.
    pub strategy: crate::strategy::Chosen,
}

/// ListAgents.
#[derive(Debug, Clone, Default)]
pub struct ListAgentsRequest {
    /// 0: the default.
    pub page_size: u32,
    pub page_token: String,
    /// Only this user's agents ("": every agent).
    pub user_id: String,
    /// Only the ids containing this ("": every id).
    pub id_contains: String,
}

#[derive(Debug, Clone, Default)]
pub struct AgentPage {
    pub agent_ids: Vec<String>,
    pub next_page_token: Option<String>,
}

/// ListUsers.
#[derive(Debug, Clone, Default)]
pub struct ListUsersRequest {
    /// 0: the default.
    pub page_size: u32,
    pub page_token: String,
}

#[derive(Debug, Clone, Default)]
pub struct UserPage {
    pub user_ids: Vec<String>,
    pub next_page_token: Option<String>,
}

/// ListCompactions.
#[derive(Debug, Clone, Default)]
pub struct ListCompactionsRequest {
    pub agent_id: String,
    /// 0: the default.
    pub page_size: u32,
    pub page_token: String,
}

/// A page of an agent's compaction log, newest first.
#[derive(Debug, Clone, Default)]
pub struct CompactionPage {
    pub compactions: Vec<engram_core::compaction::CompactionRecord>,
    pub next_page_token: Option<String>,
}

/// Who a memory block belongs to, before validation: exactly one of the
/// three.
#[derive(Debug, Clone, PartialEq)]
pub enum ScopeRequest {
    Agent(String),
    User(String),
    Global,
}

/// PutMemoryBlock and EditMemoryBlock: a change to one block.
#[derive(Debug, Clone)]
pub struct BlockWrite {
    pub scope: ScopeRequest,
    pub label: String,
    pub change: engram_core::blocks::Change,
    /// 0: the block must not exist.
    pub expected_version: Option<u64>,
    /// For an agent scope: the agent's user ("" or `None`: the stored one).
    pub user_id: Option<String>,
}
