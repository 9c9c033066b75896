//! Engram's domain, free of I/O: what a trace is, how events become traces,
//! and how memories are chosen for an answer.
//!
//! - [`agent_id`]: the agent id rule (validated before any file is touched).
//! - [`budget`]: the model table and token budget arithmetic.
//! - [`tokens`]: token estimates (tiktoken) cached per message.
//! - [`trace`]: raw traces as stored in `raw_traces.jsonl`, and incoming events.
//! - [`turns`]: turn and seq assignment, tool-call pairing, idempotency.
//! - [`memory`]: episodic and semantic items and their ranking.
//! - [`embed`]: what the search index asks of an embedding model.
//! - [`compaction`]: when to compact (triggers, tiers, the prompt's size),
//!   window selection, the commit plan (summary, facts, snapshot), the
//!   report.
//! - [`forget`]: what forgetting a turn or events erases.
//! - [`bundle`]: the portable bundle of ExportMemory / ImportMemory.
//! - [`render`]: provider request bodies (OpenAI, Anthropic, Gemini).
//! - [`retrieve`]: the raw tail and tool interactions of an agent.
//! - [`spill`]: the tool-result budget (large results stored aside).
//! - [`state`]: an agent's state derived from its records (turns, active
//!   traces, memories, transcript) and the steps that change it, the same
//!   for every backend; the prompt, job and commit values they hand out.
//! - [`text`]: small text helpers.
//! - [`transcript`]: the active transcript as structured messages.
//! - [`error`]: validation errors, split by the status they map to.

pub mod agent_id;
pub mod blocks;
pub mod budget;
pub mod bundle;
pub mod compaction;
pub mod dates;
pub mod embed;
pub mod error;
pub mod essentials;
pub mod facts;
pub mod forget;
pub mod later;
pub mod load;
pub mod memory;
pub mod render;
pub mod retrieve;
pub mod spill;
pub mod state;
pub mod text;
pub mod tokens;
pub mod trace;
pub mod transcript;
pub mod turns;
pub mod users;

pub use agent_id::{AgentId, UserId};
pub use error::CoreError;
pub use trace::{Media, NewEvent, RawTrace, TraceType, Usage};
pub use turns::{IngestLimits, IngestPlan, Outcome, TurnTracker};
