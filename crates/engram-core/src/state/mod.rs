//! An agent's state derived from its stored records, and the values it
//! hands out: pure, so both backends keep it the same way and the tests
//! need no storage. The clock and the id generator are passed in.
//!
//! - [`derived`]: turns, active traces, memories, settings, the epoch's
//!   transcript, and the steps that change them (a compaction's job, its
//!   commit plan and adoption).
//! - [`hide`]: the prompt-only tiers (snip, microcompact).
//! - [`intent`]: a compaction's commit as written down before any change.
//! - `forgotten.rs`: a forget's intent and its settings, a rewrite's
//!   commit.
//!
//! The values here cross the store's interface (`engram_store` re-exports
//! them): the prompt as it stands ([`AgentContext`]), a compaction's
//! [`Job`] and [`Policy`], an Ingest's answer ([`Ingested`]) and
//! Retrieve's [`Bundle`], each built by one method of [`Derived`].

pub mod derived;
mod forgotten;
pub mod hide;
pub mod intent;

use std::sync::Arc;

use crate::memory::{EpisodicItem, SemanticItem};
use crate::transcript::Message;
use crate::{RawTrace, Usage};

pub use derived::{AgentMeta, Derived, Discarded, Stale};
pub use forgotten::RewriteCommit;
pub use hide::{Hiding, microcompacted};
pub use intent::Intent;

/// An agent's prompt as it stands, owned and cheap to take (the messages
/// are shared, not copied): what PrepareRequest and GetContextStats count
/// and render once the agent is unlocked.
#[derive(Debug, Clone)]
pub struct AgentContext {
    /// Identity of the transcript's contents (for the caller's caches: the
    /// same id means the same messages, the last one excepted).
    pub transcript: u64,
    pub messages: Arc<Vec<Message>>,
    /// Placeholders for calls still waiting for results (rendered last).
    pub tail: Vec<Message>,
    pub system: Option<String>,
    /// The user the agent belongs to.
    pub user_id: Option<String>,
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
    /// A user's conversation whose first epoch has yet to be given its
    /// start (the summary of the user's previous conversation).
    pub awaits_first_epoch: bool,
    /// About how much text there is (to keep big counts off the async
    /// workers).
    pub bytes: u64,
    /// Event time of the agent's last trace (its last summary's end when
    /// every trace is archived); `None` with none.
    pub last_event_at: Option<f64>,
}

impl AgentContext {
    /// The model a prompt is for: the request's, or the last one the
    /// agent's Ingests reported ("" for neither: the default budget).
    pub fn model(&self, requested: Option<&str>) -> String {
        requested
            .or(self.last_model.as_deref())
            .unwrap_or_default()
            .to_owned()
    }
}

/// Compaction settings (`[policy]`).
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Whole turns kept raw before the current one.
    pub raw_tail_turns: usize,
    pub max_episodic: usize,
    pub max_semantic: usize,
    /// Most tokens of the snapshot's carry-forward section
    /// (`policy.max_carried_tokens`).
    pub carry_tokens: u32,
    /// The facts a compaction writes expire this long (seconds) after it
    /// (`memory.default_ttl_secs`); `None`: never.
    pub fact_ttl: Option<f64>,
}

/// A compaction in progress: what the summarizer gets, and what the commit
/// checks the agent against.
#[derive(Debug, Clone)]
pub struct Job {
    pub epoch: u32,
    /// The epoch the compaction starts: `epoch + 1`, or `epoch` when a
    /// cheaper tier of the same compaction already started a new one (one
    /// compaction, one epoch: the provider's prompt cache breaks once).
    pub next_epoch: u32,
    pub turn_ids: Vec<String>,
    /// The window's traces, in storage order.
    pub traces: Vec<RawTrace>,
    /// Live facts, so the summarizer can update rather than repeat them.
    pub known_facts: Vec<SemanticItem>,
    /// The latest turn when the job began; it and later turns stay messages.
    pub current_turn: u32,
    /// The agent's user: its facts go to the user's store too.
    pub user_id: Option<String>,
}

/// The result of an Ingest.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// One trace per request event, in request order.
    pub traces: Vec<RawTrace>,
    pub current_turn_id: String,
    /// The agent is marked for compaction at its next prompt.
    pub compaction_required: bool,
    /// The model this request or, failing that, an earlier one reported.
    pub model: Option<String>,
    /// The agent's epoch after the write (for
    /// `Store::mark_compaction_required`).
    pub epoch: u32,
}

/// What Retrieve shows of an agent: every memory, and the raw traces of the
/// last turns.
#[derive(Debug, Clone, Default)]
pub struct Bundle {
    pub episodic: Vec<EpisodicItem>,
    /// Live and superseded facts, latest version of each.
    pub semantic: Vec<SemanticItem>,
    /// Ordered by turn, then seq.
    pub raw_tail: Vec<RawTrace>,
}
