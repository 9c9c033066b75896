//! The storage interface the engine depends on. [`Store`] is every part
//! together; each part is a trait of its own so that a backend implements
//! it in the module that holds that part's I/O, with no delegation layer:
//! a new method is written in its part here, once in each backend's
//! module for that part, and once in the conformance suite.
//!
//! | part | methods | files backend | PostgreSQL backend |
//! |---|---|---|---|
//! | [`Writes`] | ingest, mark, prepare | `write.rs` | `write.rs` |
//! | [`Reads`] | context, bundle, sizes | `read.rs` | `read.rs` |
//! | [`Searches`] | SearchHistory's MATCH_ALL_WORDS | `search.rs` | `search.rs` |
//! | [`Ranks`] | a ranked read's plan run (`crate::ranking`), index state | `ranked.rs`, `user_rank.rs` | `ranked.rs`, `user_rank.rs` |
//! | [`Compacts`] | begin, abort, finish, microcompact, the compaction log | `compact.rs` | `compact.rs` |
//! | [`Admin`] | list, delete, fork | `registry.rs` | `agents.rs` |
//! | [`Blocks`] | memory blocks of every scope | `blocks.rs` | `blocks.rs` |
//! | [`Facts`] | facts clients manage, an agent's or a user's | `facts.rs` | `facts.rs` |
//! | [`Forgets`] | erase a turn or events; rewrite the summaries that covered them | `forget.rs` | `forget.rs` |
//! | [`Portable`] | export and import records (ExportMemory, ImportMemory) | `portable.rs` | `portable.rs` |
//! | [`UserMemory`] | a user's facts and last conversation; the conversations to summarize once quiet | `user_facts.rs`, `quiet.rs` | `user_facts.rs` |
//! | [`Runtime`] | health, metrics, memory, upkeep, close | `registry.rs` | `upkeep.rs` |
//!
//! Callers `use engram_store::prelude::*` so that every part's methods are
//! callable on a `dyn Store`.
//!
//! Every method is one short, self-contained step: it takes the agent's
//! lock (or the backend's equivalent) only for its own storage work and
//! returns owned data. Counting, deciding and rendering happen in the
//! caller, after the lock is released; the summarizer runs between
//! [`Compacts::begin_compaction`] and [`Compacts::finish_compaction`],
//! with no lock held.

use async_trait::async_trait;
use engram_core::blocks::{Block, Change, Scope};
use engram_core::bundle::{AgentRecords, MemoryBundle, UserRecords};
use engram_core::compaction::{CompactionRecord, Summary};
use engram_core::facts::{Applied, Op};
use engram_core::forget::Forget;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::users::consolidate::{self, Consolidated, ConsolidationRecord};
use engram_core::users::{Folded, LastConversation, UserFact};
use engram_core::{AgentId, NewEvent, Usage, UserId};

use crate::ranking::{Found, Over, Plan};
use crate::{
    AgentContext, Begun, Bundle, Committed, Forgotten, Hidden, Hiding, Imported, IndexState,
    Ingested, Job, Policy, PrepareInput, Prepared, Result, RewriteJob, Search, SearchPage, Visible,
    VisibleAgent,
};

/// Engram's storage. Every write that returns `Ok` is durable (per the
/// backend's fsync policy); a refused write changes nothing and is never
/// visible to a read. Implemented for whatever implements every part.
pub trait Store:
    Writes
    + Reads
    + Searches
    + Ranks
    + Compacts
    + Admin
    + Blocks
    + Facts
    + Forgets
    + Portable
    + UserMemory
    + Runtime
    + Send
    + Sync
    + std::fmt::Debug
{
}

impl<T> Store for T where
    T: Writes
        + Reads
        + Searches
        + Ranks
        + Compacts
        + Admin
        + Blocks
        + Facts
        + Forgets
        + Portable
        + UserMemory
        + Runtime
        + Send
        + Sync
        + std::fmt::Debug
{
}

/// What changes an agent's transcript.
#[async_trait]
pub trait Writes {
    /// Validates and stores `events` (one turn rule, `event_id`
    /// idempotency, tool results in their call's turn), creating the agent
    /// on its first accepted write. All or nothing. `user` binds a new or
    /// unbound agent to that user; an agent of another user refuses the
    /// write (FAILED_PRECONDITION).
    async fn ingest(
        &self,
        id: &AgentId,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
        user: Option<&UserId>,
    ) -> Result<Ingested>;

    /// Marks the agent for compaction at its next prompt, unless a
    /// compaction started a new epoch since `epoch` (the mark was for a
    /// prompt that no longer exists). Returns whether it is marked.
    async fn mark_compaction_required(&self, id: &AgentId, epoch: u32) -> Result<bool>;

    /// PrepareRequest's write: vets the request ([`PrepareInput::needs_model`]),
    /// stores a changed system prompt and the user input (creating the
    /// agent), and returns the prompt as it then stands. NOT_FOUND for an
    /// agent that does not exist when there is no user input.
    async fn prepare(&self, id: &AgentId, input: PrepareInput<'_>) -> Result<Prepared>;

    /// Starts the first epoch of a user's conversation with `snapshot`
    /// (the summary of the user's previous conversation; none: nothing),
    /// once: the agent's prompt as it is then, or `None` if it had started
    /// already (or the agent is not a user's conversation in its first
    /// epoch). NOT_FOUND for an agent that does not exist.
    async fn start_first_epoch(
        &self,
        id: &AgentId,
        snapshot: Option<String>,
    ) -> Result<Option<AgentContext>>;
}

/// What reads an agent as it stands.
#[async_trait]
pub trait Reads {
    /// The prompt of an existing agent as it stands.
    async fn context(&self, id: &AgentId) -> Result<AgentContext>;

    /// Every memory of the agent and the traces of its last
    /// `raw_tail_turns` turns.
    async fn bundle(&self, id: &AgentId, raw_tail_turns: usize) -> Result<Bundle>;

    /// What the agent occupies, by part (name, bytes), sorted by name.
    async fn file_sizes(&self, id: &AgentId) -> Result<Vec<(String, u64)>>;
}

/// SearchHistory's MATCH_ALL_WORDS mode (the ranked mode is a plan run
/// by [`Ranks::rank`]; `crate::ranking` has both).
#[async_trait]
pub trait Searches {
    /// Every word of the query, in active and archived traces, newest
    /// first, paged.
    async fn search_all_words(&self, id: &AgentId, search: &Search) -> Result<SearchPage>;
}

/// Ranked reads' one duty of a backend: a [`Plan`] run. The ranking is
/// `engram_index::pipeline`'s, over the backend's primitives; what is
/// asked and what is made of it is `crate::ranking`'s (SearchHistory,
/// Retrieve, recall, of an agent or a user).
#[async_trait]
pub trait Ranks {
    /// Each of `plan`'s wants ranked over `over`'s memory (every
    /// acknowledged write searchable; once `plan.wait`, at most, has let
    /// what is searched be embedded) and its `read` range read back.
    /// NOT_FOUND for an agent that does not exist; nothing found for a
    /// user with no memory.
    async fn rank(&self, over: Over<'_>, plan: &Plan) -> Result<Found>;

    /// Starts embedding `text`, which a search is about to ask for (a
    /// prompt's recall of the message it is storing), so that the model
    /// runs while the message is written; the search then takes the
    /// vector or waits for the run. Nothing without a model.
    fn expect_query(&self, _text: &str) {}

    /// How far the agent's search index has read its memory (caught up
    /// first, like a search).
    async fn index_state(&self, id: &AgentId) -> Result<IndexState>;
}

/// A compaction's steps.
#[async_trait]
pub trait Compacts {
    /// Picks the turns to summarize and marks the agent as compacting; or
    /// says why not (nothing to compact, or a compaction of this agent is
    /// already running).
    async fn begin_compaction(&self, id: &AgentId, policy: Policy) -> Result<Begun>;

    /// Gives up a job: nothing is written but, when the failure was this
    /// agent's (`failed`), the failure count. Returns the consecutive
    /// failures so far.
    async fn abort_compaction(&self, id: &AgentId, failed: bool) -> Result<u32>;

    /// Commits `summary` for `job` all or nothing: the episodic item and
    /// facts stored, the window's traces archived, the new epoch and its
    /// snapshot started. With no summary it is a trim: the window's traces
    /// archived with nothing written for them, the kept turns messages of
    /// the new epoch. CONFLICT (nothing written) when the window changed
    /// meanwhile.
    async fn finish_compaction(
        &self,
        id: &AgentId,
        job: Job,
        summary: Option<Summary>,
        policy: Policy,
    ) -> Result<Committed>;

    /// Turns older than the last `keep_turns` (and the current one) show
    /// as `hiding` shows them from now on (snip: without what carries
    /// nothing for the model; microcompact: tool results as placeholders),
    /// in a new epoch. Nothing is archived or lost: the prompt changes, the
    /// raw traces do not. `opened`: the epoch an earlier tier of the same
    /// compaction started, changed in place if the agent is still at it
    /// (one compaction, one epoch). `None` when nothing changed, or while
    /// a summary of the agent is being written (a new epoch would make it
    /// stale).
    async fn hide_old(
        &self,
        id: &AgentId,
        hiding: Hiding,
        keep_turns: usize,
        opened: Option<u32>,
    ) -> Result<Option<Hidden>>;

    /// Appends `record` to the agent's compaction log, durably, with the
    /// next `seq` of the agent (which it returns); the log keeps the last
    /// [`engram_core::compaction::log::KEEP`] records. NOT_FOUND for an
    /// agent that does not exist (deleted meanwhile: nothing is written).
    async fn record_compaction(&self, id: &AgentId, record: CompactionRecord) -> Result<u64>;

    /// The agent's compaction log, newest first: at most `limit` records
    /// with a `seq` below `before` (none: from the newest). Empty for an
    /// agent that does not exist.
    async fn compaction_log(
        &self,
        id: &AgentId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<CompactionRecord>>;
}

/// Agents as a whole.
#[async_trait]
pub trait Admin {
    /// Agent ids after `page_token`, sorted, at most `page_size`, of those
    /// `visible` accepts (shown each agent's id and user); the token of the
    /// next page when more remain.
    async fn list_agents(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: VisibleAgent<'_>,
    ) -> Result<(Vec<String>, Option<String>)>;

    /// A page of the users the store holds memory of (agents bound to
    /// them, blocks, facts), sorted, of those `visible` accepts, after
    /// `page_token` (the last user of the previous page); the next token
    /// when more follow.
    async fn list_users(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: Visible<'_>,
    ) -> Result<(Vec<String>, Option<String>)>;

    /// Removes the agent and everything it holds. In-flight calls on it
    /// finish first; later calls see NOT_FOUND (Ingest: a new agent).
    async fn delete_agent(&self, id: &AgentId) -> Result<()>;

    /// Copies `source`, memories and archive included, to the new agent
    /// `target` (ALREADY_EXISTS if it exists).
    async fn fork_agent(&self, source: &AgentId, target: &AgentId) -> Result<()>;

    /// The agents bound to `user`, sorted; none for a user nobody named.
    async fn user_agents(&self, user: &UserId) -> Result<Vec<AgentId>>;

    /// Erases everything `user` owns (its agents, as `delete_agent` does,
    /// and its blocks and memories), leaving none of its text in storage.
    /// Idempotent: a user with nothing is erased with 0. Returns how many
    /// agents went. An agent bound to the user while this runs goes too or
    /// is bound after (and stays), never half.
    async fn delete_user(&self, user: &UserId) -> Result<usize>;
}

/// Memory blocks: documents in a scope (global, a user's, an agent's),
/// every version kept. Reads of the blocks an agent sees come with
/// [`Writes::prepare`].
#[async_trait]
pub trait Blocks {
    /// The current blocks of `scope`, by label (deleted ones left out).
    /// Empty for a scope with none, an agent or user that does not exist
    /// included.
    async fn list_blocks(&self, scope: &Scope) -> Result<Vec<Block>>;

    /// Every stored version of the block, oldest first (deletions
    /// included, as versions with no text); empty if it was never written.
    async fn block_history(&self, scope: &Scope, label: &str) -> Result<Vec<Block>>;

    /// Applies `change` to the block (`engram_core::blocks::apply`: the
    /// expected version, the limit and the edit's rules checked against
    /// the block's last version) and stores the new version durably, one
    /// writer per scope at a time. For an agent scope, a write creates the
    /// agent when it does not exist, and `user` binds it as an Ingest does.
    async fn write_block(
        &self,
        scope: &Scope,
        label: &str,
        change: Change,
        expected_version: Option<u64>,
        user: Option<&UserId>,
    ) -> Result<Block>;
}

/// Facts that clients manage (docs/DESIGN.md §9a) in an agent's or a user's
/// scope, every version kept: `engram_core::facts` decides, the store
/// keeps.
#[async_trait]
pub trait Facts {
    /// The scope's facts, the last version of each, oldest first (deleted
    /// ones left out; superseded and expired ones in, for the caller to
    /// show or not). Empty for a scope that does not exist.
    async fn facts(&self, scope: &Scope) -> Result<Vec<SemanticItem>>;

    /// Every stored version of fact `id`, oldest first (a deletion last,
    /// and no version of a deleted fact with text); empty if it never was.
    async fn fact_history(&self, scope: &Scope, id: &str) -> Result<Vec<SemanticItem>>;

    /// Works `op` out over the scope's facts (`engram_core::facts::apply`)
    /// and stores it durably, one change per scope at a time: the new
    /// versions appended; for a delete, the text of every earlier version
    /// erased from the files (or rows) and the index. For an agent, the
    /// snapshot's facts section then shows `limit` facts besides the
    /// pinned ones (`None`: as many as it showed), and an add creates the
    /// agent when it does not exist.
    async fn change_facts(&self, scope: &Scope, op: Op, limit: Option<u32>) -> Result<Applied>;

    /// Deletes the facts past their `expires_at` (as a delete does: no
    /// text left), of the agents and users the backend can find them in
    /// cheaply (the files backend: the agents it has loaded and the users
    /// whose facts it holds in memory; PostgreSQL: all). Returns
    /// how many went. The engine's upkeep calls it every 30 s; a fact that
    /// expired is out of search and prompts before this runs.
    async fn purge_expired(&self) -> Result<usize>;
}

/// Forgetting a turn or events (docs/DESIGN.md §9a): every byte of them
/// erased, and what was drawn from them (`engram_core::forget`).
#[async_trait]
pub trait Forgets {
    /// Erases the traces `what` names, with the pair partner of a tool
    /// call or result, from the active transcript, the archive, stored
    /// tool results, the log once checkpointed and the search index (and
    /// the user's); deletes the facts drawn from a window that held one;
    /// hides the summaries that covered one (no text) until
    /// [`Forgets::finish_rewrite`], or removes those that covered nothing
    /// else; renders the snapshot again and starts a new epoch. Durable
    /// and crash-safe: an interrupted forget is finished at the agent's
    /// next use. A repeated forget erases nothing (and finishes what a
    /// crash left). NOT_FOUND for an agent that does not exist.
    async fn forget(&self, id: &AgentId, what: &Forget, policy: Policy) -> Result<Forgotten>;

    /// The agent's hidden summaries, each with its remaining traces.
    async fn rewrite_jobs(&self, id: &AgentId) -> Result<Vec<RewriteJob>>;

    /// Writes `job`'s summary again with `summary` (and its facts, merged
    /// as a compaction's), shown again, the snapshot rendered again; false
    /// (nothing written) if the summary no longer awaits that rewrite.
    async fn finish_rewrite(
        &self,
        id: &AgentId,
        job: &RewriteJob,
        summary: Summary,
        policy: Policy,
    ) -> Result<bool>;

    /// Agents with hidden summaries, as far as the backend finds them
    /// cheaply (files: loaded agents; PostgreSQL: all).
    async fn awaiting_rewrite(&self) -> Result<Vec<AgentId>>;
}

/// Memory moved between stores (ExportMemory / ImportMemory): records as
/// stored, the same whichever backend holds them (`engram_core::bundle`).
#[async_trait]
pub trait Portable {
    /// Every record of the agent, one consistent state of it (an
    /// interrupted compaction or forget finished first). NOT_FOUND for an
    /// agent that does not exist.
    async fn export_agent(&self, id: &AgentId) -> Result<AgentRecords>;

    /// The user's own records (every version of its facts and blocks, its
    /// last conversation); empty for a user with none. Its agents are
    /// exported one by one.
    async fn export_user(&self, user: &UserId) -> Result<UserRecords>;

    /// Recreates what `bundle` holds (checked), ids and times kept, and
    /// indexes its agents again. ALREADY_EXISTS, with nothing written, if
    /// one of its agents exists, or (a user's bundle) the user has facts
    /// or blocks; with `replace` those agents are replaced whole, and the
    /// user's facts, blocks and last conversation by the bundle's (the
    /// user's other agents stay). Durable when it returns; each agent
    /// appears whole or not at all.
    async fn import(&self, bundle: &MemoryBundle, replace: bool) -> Result<Imported>;
}

/// A user's long-term memory: one fact store per user, fed by the
/// compactions of all of its conversations (`engram_core::users`).
#[async_trait]
pub trait UserMemory {
    /// The user's facts, the last version of each (superseded ones
    /// included, for their history), oldest first; none for a user with
    /// none.
    async fn user_facts(&self, user: &UserId) -> Result<Vec<UserFact>>;

    /// Folds `items` (agent `agent`'s facts, live and superseded) into the
    /// user's store (`engram_core::users::fold`) and stores what changed,
    /// and the agent's `summaries` as the user's last conversation (none:
    /// it stays), durably, one fold per user at a time. Idempotent.
    /// NOT_FOUND unless the agent exists and belongs to `user`: a fold that
    /// meets the erasure of its user never brings the user's memory back.
    async fn fold_into_user(
        &self,
        user: &UserId,
        agent: &AgentId,
        items: &[SemanticItem],
        summaries: &[EpisodicItem],
    ) -> Result<Folded>;

    /// The user's most recently summarized conversation, if any.
    async fn last_conversation(&self, user: &UserId) -> Result<Option<LastConversation>>;

    /// Carries out a consolidation `plan` over the user's facts
    /// (`engram_core::users::consolidate::apply`: each step checked
    /// against the facts as they are under the lock, so a plan made from
    /// an older read never undoes a fold or a client's change) and appends
    /// `record`, numbered and with what was done, to the user's
    /// consolidation log (the latest `LOG_KEEP` runs kept), durably and in
    /// one piece, one change per user at a time. Returns what changed and
    /// the record as logged.
    async fn consolidate_user(
        &self,
        user: &UserId,
        plan: &consolidate::Plan,
        record: ConsolidationRecord,
    ) -> Result<(Consolidated, ConsolidationRecord)>;

    /// The user's consolidation runs, newest first, at most `limit`;
    /// none for a user with none.
    async fn consolidations(&self, user: &UserId, limit: usize)
    -> Result<Vec<ConsolidationRecord>>;

    /// Notes that these agents served requests at these times (Unix
    /// seconds; of two times for an agent the later stays), so that a
    /// conversation that goes quiet is summarized even when the server
    /// that served it restarts meanwhile. Durable when it returns.
    async fn note_used(&self, used: &[(AgentId, f64)]) -> Result<()>;

    /// Takes the agents last used at or before `before` off that list and
    /// returns them: each is taken by one caller only (replicas share the
    /// list). A deleted agent leaves the list with it.
    async fn take_quiet(&self, before: f64) -> Result<Vec<AgentId>>;
}

/// The store as a running service: health, metrics, background work.
#[async_trait]
pub trait Runtime {
    /// Why the store stopped serving, if it did.
    fn failure(&self) -> Option<String>;

    /// Whether a failure is for good (a failed flush: only a restart
    /// recovers, so the process reports itself unhealthy) or passes by
    /// itself (a database out of reach: only readiness follows it).
    fn failure_is_fatal(&self) -> bool {
        true
    }

    /// Changes to [`failure`](Self::failure), for health reporting.
    fn watch_failure(&self) -> tokio::sync::watch::Receiver<Option<String>>;

    /// The embedding model the store indexes with (`None`: words only),
    /// for the engine's own comparisons of meaning (consolidation).
    fn embedder(&self) -> Option<std::sync::Arc<dyn engram_core::embed::Embedder>> {
        None
    }

    /// Agents held in this process's memory.
    fn loaded_agents(&self) -> usize;

    /// Items of the loaded agents that wait for the embedding model (the
    /// search index's lag).
    fn unembedded_items(&self) -> u64;

    /// About how much memory the loaded agents hold, in bytes: their
    /// traces and transcripts, memories, search indexes (readers, the
    /// queue for the model) and vectors' copies. Cheap (counts kept as
    /// agents change, read without waiting for any agent): the engine's
    /// memory budget reads it often.
    fn memory_bytes(&self) -> u64;

    /// Unloads the least recently used agents that nobody is using (no
    /// call, no background work on them), until the loaded agents hold at
    /// most `target` bytes or none is left that may go; each is flushed
    /// first, and its next call loads it again from storage. Returns the
    /// agents unloaded.
    async fn shrink_to(&self, target: u64) -> Vec<AgentId>;

    /// Bytes the whole store occupies (may be slow: for a metrics scrape).
    async fn disk_bytes(&self) -> u64;

    /// Starts the backend's background work (eviction, checkpoints).
    fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()>;

    /// Makes everything durable and stops; called once, at shutdown.
    async fn close(&self);
}
