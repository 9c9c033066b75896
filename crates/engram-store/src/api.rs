//! The owned values that cross the [`crate::Store`] interface (`traits`):
//! requests, results and the steps of a compaction's commit.

use std::sync::Arc;

use engram_core::blocks::Block;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::{NewEvent, RawTrace, TraceType};

pub use engram_core::state::{AgentContext, Bundle, Ingested, Job, Policy};

use crate::Result;

/// What PrepareRequest writes before the prompt is built.
#[derive(Debug, Clone, Default)]
pub struct PrepareInput<'a> {
    /// Binds a new or unbound agent to this user (another user's agent
    /// refuses the request, FAILED_PRECONDITION).
    pub user: Option<&'a engram_core::UserId>,
    /// Stored when it differs from the agent's current one.
    pub system_prompt: Option<&'a str>,
    /// Ingested as the new turn's user message.
    pub user_input: Option<NewEvent>,
    /// The request's model.
    pub model: Option<&'a str>,
    /// The request is refused, with nothing written, unless `model` or the
    /// agent's last reported model is known (a rendered payload names it).
    pub needs_model: bool,
}

impl PrepareInput<'_> {
    /// Refuses the input, before anything is written, when it needs a model
    /// and neither it nor the agent's Ingests (`last_model`) named one.
    pub fn check_model(&self, last_model: Option<&str>) -> Result<()> {
        if self.needs_model && self.model.or(last_model).is_none() {
            return Err(engram_core::CoreError::Invalid(
                "model is required to render this format: none was given and no Ingest reported one".into(),
            )
            .into());
        }
        Ok(())
    }
}

/// The result of [`crate::Writes::prepare`].
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The prompt as it stands after the write.
    pub context: AgentContext,
    /// The stored user input (a retry returns the first one).
    pub user_trace: Option<RawTrace>,
    /// The memory blocks the agent sees, as they stood then.
    pub blocks: SeenBlocks,
}

/// The live memory blocks an agent sees, each scope's by label, and its
/// user's pinned facts (oldest first): shared, since every prompt of every
/// agent of a scope shows the same ones.
#[derive(Debug, Clone, Default)]
pub struct SeenBlocks {
    pub global: Arc<Vec<Block>>,
    pub user: Arc<Vec<Block>>,
    pub agent: Arc<Vec<Block>>,
    pub user_pinned: Arc<Vec<SemanticItem>>,
}

impl SeenBlocks {
    /// In the prompt's order, each with its scope's name.
    pub fn in_order(&self) -> Vec<(&'static str, &Block)> {
        [
            ("global", &self.global),
            ("user", &self.user),
            ("agent", &self.agent),
        ]
        .into_iter()
        .flat_map(|(name, blocks)| blocks.iter().map(move |b| (name, b)))
        .collect()
    }
}

/// How SearchHistory matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    /// By relevance to the query, best first (the search index).
    #[default]
    Ranked,
    /// Every word of the query as a substring, newest first.
    AllWords,
}

/// A SearchHistory request, validated.
#[derive(Debug, Clone, Default)]
pub struct Search {
    pub query: String,
    pub mode: SearchMode,
    /// Only these trace types (all when empty).
    pub trace_types: Vec<TraceType>,
    /// Inclusive turn numbers.
    pub turns: Option<(u32, u32)>,
    /// Inclusive event times, epoch seconds.
    pub ts: Option<(f64, f64)>,
    /// Neighbouring messages to return on each side of a ranked hit.
    pub neighbours: usize,
    pub limit: usize,
    /// From the previous page's `next_page_token`.
    pub page_token: Option<String>,
    /// Wait up to this long for the agent's items to be embedded before
    /// ranking (read-your-writes for semantic matches).
    pub wait_for_index: Option<std::time::Duration>,
}

/// Why a trace matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchedBy {
    /// Contains every word (`SearchMode::AllWords`).
    #[default]
    AllWords,
    /// Its own words match the query.
    Lexical,
    /// Close in meaning to the query, sharing no ranked word with it.
    Semantic,
    /// Both its words and its meaning.
    Both,
    /// Only the messages around it match: it is their context.
    Context,
}

/// One SearchHistory match.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub trace: RawTrace,
    /// In the archive (compacted away), not in the active transcript.
    pub archived: bool,
    /// Relevance (ranked mode; 0 otherwise): higher is better.
    pub score: f32,
    pub matched_by: MatchedBy,
    /// Up to `Search::neighbours` traces before it, oldest first.
    pub before: Vec<RawTrace>,
    /// Up to `Search::neighbours` traces after it, oldest first.
    pub after: Vec<RawTrace>,
    /// The conversation it is from, when searching a user's.
    pub agent_id: Option<String>,
}

impl Hit {
    /// A ranked trace as SearchHistory returns it (`None`: not a trace).
    pub fn of(r: Recalled) -> Option<Self> {
        match r.memory {
            Memory::Trace { trace, archived } => Some(Self {
                trace: *trace,
                archived,
                score: r.score,
                matched_by: r.matched_by,
                before: r.before,
                after: r.after,
                agent_id: r.agent_id,
            }),
            _ => None,
        }
    }

    /// A MATCH_ALL_WORDS match.
    pub fn all_words(trace: RawTrace, archived: bool) -> Self {
        Self {
            trace,
            archived,
            score: 0.0,
            matched_by: MatchedBy::AllWords,
            before: Vec::new(),
            after: Vec::new(),
            agent_id: None,
        }
    }
}

/// How far an agent's search index has read its memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexState {
    /// Items searchable by their words (traces, summaries, live facts):
    /// always every acknowledged item.
    pub items: u64,
    /// Items searchable by meaning too; the rest wait for the indexer.
    pub embedded: u64,
    /// Items waiting to be embedded.
    pub pending: u64,
    /// The embedding model (empty: lexical search only).
    pub model: String,
}

/// One page of SearchHistory.
#[derive(Debug, Clone, Default)]
pub struct SearchPage {
    pub hits: Vec<Hit>,
    /// Opaque; passed back unchanged for the next page.
    pub next_page_token: Option<String>,
    pub index: IndexState,
}

/// Retrieve(query) and recall: memories of every kind ranked together for
/// a text.
#[derive(Debug, Clone, Default)]
pub struct MemoryQuery {
    pub query: String,
    pub limit: usize,
    /// Neighbouring messages to return on each side of a trace.
    pub neighbours: usize,
    /// Wait up to this long for the agent's items to be embedded first.
    pub wait_for_index: Option<std::time::Duration>,
    /// Leave out the active transcript (what the prompt already shows).
    pub archived_only: bool,
    /// Also the best this many summaries, and facts, each kind ranked alone.
    pub episodic: usize,
    pub semantic: usize,
    /// Epoch seconds: only memories as they stood then ([`Memory::stood_at`]).
    pub as_of: Option<f64>,
}

/// One memory of any kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Memory {
    Trace {
        trace: Box<RawTrace>,
        /// Compacted away: no longer in the active transcript.
        archived: bool,
    },
    Episodic(EpisodicItem),
    Semantic(SemanticItem),
}

impl Memory {
    /// Whether this memory stood at `at` (event time): a message said by
    /// then, a summary of what was said by then, a fact true then (replaced
    /// or ended since or not; one replaced before time was kept ends when
    /// it began, as the fact that replaced it then stands for it).
    pub fn stood_at(&self, at: f64) -> bool {
        match self {
            Memory::Trace { trace, .. } => trace.ts <= at,
            Memory::Episodic(e) => e.said_by(at),
            Memory::Semantic(f) => {
                f.managed.deleted_at.is_none()
                    && f.valid_since() <= at
                    && f.valid_until(|_| None).is_none_or(|end| end > at)
            }
        }
    }
}

/// A memory ranked for a [`MemoryQuery`].
#[derive(Debug, Clone)]
pub struct Recalled {
    pub memory: Memory,
    /// Relevance: higher is better.
    pub score: f32,
    pub matched_by: MatchedBy,
    /// A trace's neighbours (up to `MemoryQuery::neighbours` each side,
    /// oldest first); empty for summaries and facts.
    pub before: Vec<RawTrace>,
    pub after: Vec<RawTrace>,
    /// The conversation it is from, when ranked across a user's
    /// conversations (`None`: the agent asked about, or the user's facts).
    pub agent_id: Option<String>,
}

/// The best memories for a query, best first.
#[derive(Debug, Clone, Default)]
pub struct RankedMemories {
    /// Every kind together, up to `MemoryQuery::limit`.
    pub memories: Vec<Recalled>,
    /// Summaries alone and facts alone, up to `MemoryQuery::episodic` and
    /// `MemoryQuery::semantic`; only those that match at all.
    pub episodic: Vec<EpisodicItem>,
    pub semantic: Vec<SemanticItem>,
    pub index: IndexState,
}

/// What [`crate::Compacts::begin_compaction`] found.
#[derive(Debug, Clone)]
pub enum Begun {
    /// The window to summarize; the agent is marked as compacting.
    Job(Job),
    /// Every finished turn is in the kept raw tail (or waits for a tool
    /// result): nothing to summarize.
    Nothing,
    /// Another compaction of the agent holds it (another replica's lease).
    Busy,
}

impl Begun {
    /// The job, if one began.
    pub fn job(self) -> Option<Job> {
        match self {
            Self::Job(job) => Some(job),
            Self::Nothing | Self::Busy => None,
        }
    }
}

/// The steps of a compaction's commit, in order: where a backend can be
/// interrupted (and a test can inject a fault). A backend that commits in
/// one transaction has no rewrite of its own: it skips that step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitStep {
    /// The summary stored.
    Episodic,
    /// The facts stored (added, superseded).
    Semantic,
    /// The window's traces moved to the archive.
    Archive,
    /// The active traces rewritten without the window (files).
    Rewrite,
    /// The new epoch started.
    Finalize,
}

impl CommitStep {
    pub const ALL: [CommitStep; 5] = [
        Self::Episodic,
        Self::Semantic,
        Self::Archive,
        Self::Rewrite,
        Self::Finalize,
    ];

    /// Its name (`ENGRAM_TEST_CRASH_AT`, logs).
    pub fn name(self) -> &'static str {
        match self {
            Self::Episodic => "episodic",
            Self::Semantic => "semantic",
            Self::Archive => "archive",
            Self::Rewrite => "rewrite",
            Self::Finalize => "finalize",
        }
    }

    /// The step of a name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl std::fmt::Display for CommitStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a finished compaction did.
#[derive(Debug, Clone)]
pub struct Committed {
    pub turn_ids: Vec<String>,
    pub episodic_id: String,
    pub semantic_added: u32,
    pub semantic_updated: u32,
    pub traces_pruned: u32,
    /// The carry-forward section's essentials, shown and dropped.
    pub carried: u32,
    pub carry_dropped: u32,
    pub epoch: u32,
    /// The prompt of the new epoch.
    pub context: AgentContext,
}

impl Committed {
    /// What committing `intent` (with the facts it `added` and `updated`)
    /// did, the agent now at `epoch` with prompt `context`.
    pub fn of(
        intent: engram_core::state::Intent,
        (added, updated): (u32, u32),
        epoch: u32,
        context: AgentContext,
    ) -> Self {
        Self {
            traces_pruned: u32::try_from(intent.trace_ids.len()).unwrap_or(u32::MAX),
            carried: intent.carried,
            carry_dropped: intent.carry_dropped,
            turn_ids: intent.turn_ids,
            episodic_id: intent.episodic.map(|e| e.id).unwrap_or_default(),
            semantic_added: added,
            semantic_updated: updated,
            epoch,
            context,
        }
    }
}

/// What a prompt-only tier (snip, microcompact) did.
#[derive(Debug, Clone)]
pub struct Hidden {
    /// Traces that show differently from now on (snipped, or placeholders).
    pub hidden: u32,
    /// The prompt of the new epoch.
    pub context: AgentContext,
}

/// Which ids a listing shows (an auth scope).
pub type Visible<'a> = &'a (dyn Fn(&str) -> bool + Send + Sync);

/// Which agents a listing shows (an auth scope): by the agent's id and the
/// user it belongs to, if any.
pub type VisibleAgent<'a> = &'a (dyn Fn(&str, Option<&str>) -> bool + Send + Sync);

/// What a forget erased (ForgetTurn, ForgetEvents).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Forgotten {
    /// Traces erased (0 when repeated: nothing was left).
    pub traces_erased: u32,
    /// Live facts deleted (every version of each erased).
    pub facts_deleted: u32,
    /// Summaries that covered the traces: hidden until rewritten, or
    /// removed when they covered nothing else.
    pub summaries_rewritten: u32,
    /// The agent's user.
    pub user_id: Option<String>,
}

impl Forgotten {
    /// What `erasure` erases from an agent with facts `semantic` and user
    /// `user_id`.
    pub fn of(
        erasure: &engram_core::forget::Erasure,
        semantic: &[engram_core::memory::SemanticItem],
        user_id: Option<String>,
    ) -> Self {
        let (traces_erased, facts_deleted, summaries_rewritten) = erasure.counts(semantic);
        Self {
            traces_erased,
            facts_deleted,
            summaries_rewritten,
            user_id,
        }
    }
}

/// A summary a forget hid, to be written again from its remaining traces
/// (`engram_core::forget::remaining`), with the facts the agent knows.
#[derive(Debug, Clone)]
pub struct RewriteJob {
    pub item: engram_core::memory::EpisodicItem,
    pub traces: Vec<engram_core::RawTrace>,
    pub known_facts: Vec<engram_core::memory::SemanticItem>,
    pub user_id: Option<String>,
}

/// What an import recreated (ImportMemory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    pub agents: u32,
    /// Facts (an agent's or the user's), each counted once however many
    /// versions it has.
    pub facts: u32,
    /// Blocks, each counted once.
    pub blocks: u32,
}

impl Imported {
    /// What `bundle` holds.
    pub fn of(bundle: &engram_core::bundle::MemoryBundle) -> Self {
        use std::collections::HashSet;
        let mut facts = 0;
        let mut blocks = 0;
        let count = |ids: &mut dyn Iterator<Item = &str>| ids.collect::<HashSet<_>>().len() as u32;
        for a in &bundle.agents {
            facts += count(&mut a.facts.iter().map(|f| f.id.as_str()));
            blocks += count(&mut a.blocks.iter().map(|b| b.label.as_str()));
        }
        if let Some(u) = &bundle.user {
            facts += count(&mut u.facts.iter().map(|f| f.fact.id.as_str()));
            blocks += count(&mut u.blocks.iter().map(|b| b.label.as_str()));
        }
        Self {
            agents: bundle.agents.len() as u32,
            facts,
            blocks,
        }
    }
}
