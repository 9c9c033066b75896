//! Engram's storage interface: the [`Store`] trait the engine depends on,
//! the owned values that cross it, and what every backend shares. The
//! backends are crates of their own (`engram-files`, `engram-postgres`).
//!
//! - [`Store`] (`api`): the interface and its values.
//! - [`error`]: store errors, and the client-safe message of each.
//! - [`derived`]: what an agent *is* (turns, transcript, memories, the
//!   compaction job, plan and commit), computed from its records the same
//!   way by every backend; [`intent`]: a compaction's commit as written
//!   down before it is carried out.
//! - [`items`], [`embedding`], [`ranked`], [`search`]: search items, how
//!   they and queries are embedded, ranked pages and filters, and the
//!   all-words matcher, shared so both backends answer alike.
//! - `conformance`: the test suite every backend must pass (`conformance`
//!   feature).

mod api;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod derived;
pub mod embedding;
pub mod error;
pub mod intent;
pub mod items;
pub mod ranked;
pub mod search;

use std::time::{SystemTime, UNIX_EPOCH};

pub use api::{
    AgentContext, Begun, Bundle, CommitStep, Committed, Hit, IndexState, Ingested, Job, MatchedBy,
    Memory, MemoryQuery, Microcompacted, Policy, PrepareInput, Prepared, RankedMemories, Recalled,
    Search, SearchMode, SearchPage, Store, Visible,
};
pub use derived::AgentMeta;
pub use embedding::{Outcome as Embedding, embed_batch, query_vector};
pub use error::{Result, StoreError};
pub use items::{MAX_EMBEDDED_CHARS, episodic_item, for_embedding, semantic_item, trace_item};

/// Work over more bytes than this (an agent's active traces and prompt, a
/// request's events) runs off the async workers: below it, handing the
/// worker's tasks to another thread would cost more than the work.
pub const OFFLOAD_BYTES: usize = 64 * 1024;

/// Runs `f` (CPU-heavy or blocking work) without stalling the async
/// workers: on a multi-threaded runtime the worker first hands its other
/// tasks to a fresh thread (`block_in_place`); on a current-thread runtime
/// (some tests) there is nobody to hand them to, and `f` runs inline.
pub fn offload<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// [`offload`] for work over `bytes` bytes, inline below [`OFFLOAD_BYTES`].
pub fn offload_over<T>(bytes: u64, f: impl FnOnce() -> T) -> T {
    if bytes > OFFLOAD_BYTES as u64 {
        offload(f)
    } else {
        f()
    }
}

/// The clock, in epoch seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Frees `value` on the blocking pool. Dropping a compacted window (thousands
/// of traces, the old transcript and its caches, the replaced file) is
/// milliseconds of `free` and block freeing that need not happen while the
/// agent is locked.
pub fn drop_later<T: Send + 'static>(value: T) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(move || drop(value));
        }
        Err(_) => drop(value),
    }
}
