//! The conformance suite: what every [`Store`] backend must do, written
//! against the trait alone. A backend runs it from its tests with
//! [`conformance_suite!`](crate::conformance_suite) and a [`Harness`] that
//! opens it on fresh storage; every case becomes one test.
//!
//! The cases cover the contract's guarantees: turn assignment, `event_id`
//! idempotency, tool results in their call's turn, refused writes that
//! change nothing, PrepareRequest's write, the compaction mark, the
//! compaction commit (all or nothing at every step a fault can hit, before
//! and after a restart), microcompact, the compaction log, fork, delete, listing, search (all
//! words, and ranked over an index that catches up with every acknowledged
//! write, across restarts and compactions), and acknowledged writes
//! surviving a restart.

mod agents;
mod blocks;
mod compaction;
mod compaction_log;
mod consolidate;
mod facts;
mod forget;
mod memory;
mod portable;
mod quiet;
mod search;
mod user_facts;
mod users;
mod writes;

use std::sync::Arc;

use crate::ranking::RankedReads;
use async_trait::async_trait;
use engram_core::{AgentId, NewEvent, RawTrace};
use serde_json::json;

use crate::{Ingested, Search, SearchMode, Store, StoreError};

pub use agents::*;
pub use blocks::*;
pub use compaction::*;
pub use compaction_log::*;
pub use consolidate::*;
pub use facts::*;
pub use forget::*;
pub use memory::*;
pub use portable::*;
pub use quiet::*;
pub use search::*;
pub use user_facts::*;
pub use users::*;
pub use writes::*;

/// Opens one backend on storage of its own (a temp dir, a database
/// schema) for one test case.
#[async_trait]
pub trait Harness: Send + Sync {
    type Backend: Store + 'static;

    /// The store, on this harness's storage.
    async fn open(&self) -> Arc<Self::Backend>;

    /// Closes `store` (the caller holds no other handle to it) and opens
    /// it again on the same storage, as a restart would.
    async fn reopen(&self, store: Arc<Self::Backend>) -> Arc<Self::Backend>;

    /// The steps of a compaction's commit at which a fault can be injected.
    fn commit_steps(&self) -> Vec<crate::CommitStep>;

    /// The named step of `store`'s compaction commits fails until cleared
    /// with `None`.
    fn fail_commit_at(&self, store: &Self::Backend, step: Option<crate::CommitStep>);

    /// Where in `store`'s storage the bytes of `text` are (file paths,
    /// tables): the proof that an erasure left nothing.
    async fn holding(&self, store: &Self::Backend, text: &str) -> Vec<String>;
}

/// One test per conformance case for the harness `$make` builds (an
/// expression evaluated afresh in every test).
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            turns_are_numbered_by_user_messages,
            event_ids_make_ingest_idempotent,
            tool_results_keep_their_calls_turn,
            refused_writes_change_nothing,
            prepare_stores_the_system_prompt_and_the_input,
            the_compaction_mark_is_durable_and_per_epoch,
            acknowledged_writes_survive_a_restart,
            usage_reports_count_from_the_first_write,
            compaction_commits_summary_archive_and_epoch,
            a_trim_archives_the_window_with_no_summary,
            one_compaction_of_an_agent_at_a_time,
            a_stale_job_commits_nothing,
            the_commit_is_all_or_nothing_at_every_step,
            microcompact_hides_old_results_and_loses_nothing,
            snip_and_microcompact_hide_old_messages_in_one_epoch,
            the_compaction_log_keeps_each_agents_records,
            fork_copies_everything_and_then_diverges,
            delete_removes_the_agent_and_everything_it_holds,
            list_agents_pages_in_order_and_filters,
            list_users_pages_the_users_with_memory,
            loaded_agents_are_accounted_and_unloaded_to_a_target,
            search_finds_active_and_archived_traces_in_pages,
            ranked_search_orders_by_relevance_with_context_and_filters,
            a_question_naming_one_participant_prefers_their_messages,
            a_message_that_mostly_asks_ranks_after_one_that_tells,
            a_sitting_that_holds_the_question_lifts_its_messages,
            ranked_search_covers_every_acknowledged_write_after_a_restart,
            ranked_search_pages_and_refuses_foreign_tokens,
            a_plan_ranks_and_reads_back_each_want,
            hostile_text_is_stored_whole_and_found,
            blocks_keep_versions_and_reach_the_prompt,
            an_agents_user_is_fixed_once,
            delete_user_erases_everything_it_owns,
            a_users_facts_are_folded_across_conversations,
            a_users_facts_are_consolidated_and_logged,
            a_replaced_fact_is_found_as_replaced,
            a_users_new_conversation_starts_once,
            recall_spans_a_users_conversations,
            quiet_conversations_are_noted_and_taken_once,
            facts_are_added_corrected_and_forgotten,
            a_users_facts_are_managed_like_an_agents,
            forgetting_a_turn_erases_every_byte_of_it,
            export_then_import_gives_the_same_memory,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = $make;
                $crate::conformance::$case(&harness).await;
            }
        )*
    };
}

pub(crate) fn id(s: &str) -> AgentId {
    AgentId::parse(s).expect("a valid agent id")
}

/// Every stored trace contains this word, so a search for it lists them.
pub(crate) const MARK: &str = "zebra";

/// A turn of the kind agents write: question, tool call and result,
/// answer, each with a stable event id.
pub(crate) fn turn(n: usize) -> Vec<NewEvent> {
    vec![
        NewEvent::user(format!("{MARK} question {n}")).with_event_id(format!("q{n}")),
        NewEvent::tool_call(format!("c{n}"), format!("{MARK}_lookup"), json!({"n": n}))
            .with_event_id(format!("c{n}")),
        NewEvent::tool_result(format!("c{n}"), json!(format!("{MARK} result {n}")))
            .with_event_id(format!("r{n}")),
        NewEvent::assistant(format!("{MARK} answer {n}")).with_event_id(format!("a{n}")),
    ]
}

pub(crate) async fn ingest(store: &dyn Store, agent: &AgentId, events: &[NewEvent]) -> Ingested {
    store
        .ingest(agent, events, None, None, None)
        .await
        .expect("ingest accepted")
}

/// Turns `1..=n` of [`turn`].
pub(crate) async fn conversation(store: &dyn Store, agent: &AgentId, n: usize) {
    for t in 1..=n {
        ingest(store, agent, &turn(t)).await;
    }
}

/// Every stored trace of the agent, active and archived, by search.
pub(crate) async fn all_traces(store: &dyn Store, agent: &AgentId) -> Vec<(RawTrace, bool)> {
    let mut out = vec![];
    let mut token: Option<String> = None;
    loop {
        let page = store
            .search(agent, &words(MARK, 50, token.clone()))
            .await
            .expect("search");
        out.extend(page.hits.into_iter().map(|h| (h.trace, h.archived)));
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return out,
        }
    }
}

/// A MATCH_ALL_WORDS search.
pub(crate) fn words(query: &str, limit: usize, page_token: Option<String>) -> Search {
    Search {
        query: query.into(),
        mode: SearchMode::AllWords,
        limit,
        page_token,
        ..Search::default()
    }
}

/// A ranked search.
pub(crate) fn ranked(query: &str, limit: usize) -> Search {
    Search {
        query: query.into(),
        limit,
        ..Search::default()
    }
}

/// The ids of `traces`, sorted.
pub(crate) fn ids<'a>(traces: impl IntoIterator<Item = &'a RawTrace>) -> Vec<String> {
    let mut ids: Vec<String> = traces.into_iter().map(|t| t.id.clone()).collect();
    ids.sort();
    ids
}

pub(crate) fn is_not_found<T: std::fmt::Debug>(r: crate::Result<T>) -> bool {
    matches!(r, Err(StoreError::NotFound(_)))
}

pub(crate) fn is_invalid<T: std::fmt::Debug>(r: &crate::Result<T>) -> bool {
    matches!(r, Err(StoreError::Core(engram_core::CoreError::Invalid(_))))
}
