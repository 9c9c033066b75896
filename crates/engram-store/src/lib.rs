//! Engram's storage interface: the [`Store`] trait the engine depends on,
//! the owned values that cross it, and what every backend shares. The
//! backends are crates of their own (`engram-files`, `engram-postgres`).
//!
//! - [`Store`] (`traits`): the interface, in parts each backend implements
//!   where that part's I/O lives; `api`: the values that cross it.
//! - [`error`]: store errors, and the client-safe message of each.
//! - [`derived`], [`intent`]: what an agent *is* and a compaction's
//!   commit as written down, re-exported from core (`engram_core::state`,
//!   pure), which every backend keeps the same way; [`unix_now`] and
//!   [`new_id`] are the clock and the ids the backends pass it.
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
mod memo;
pub mod ranked;
pub mod ranking;
pub mod search;
mod traits;

use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

pub use api::{
    AgentContext, Begun, Bundle, CommitStep, Committed, Forgotten, Hidden, Hit, Imported,
    IndexState, Ingested, Job, MatchedBy, Memory, MemoryQuery, Policy, PrepareInput, Prepared,
    RankedMemories, Recalled, RewriteJob, Search, SearchMode, SearchPage, SeenBlocks, Visible,
    VisibleAgent,
};
pub use traits::{
    Admin, Blocks, Compacts, Facts, Forgets, Portable, Ranks, Reads, Runtime, Searches, Store,
    UserMemory, Writes,
};

/// The storage traits, for `use engram_store::prelude::*`: on a concrete
/// backend (`FileStore`, `PgStore`) or a generic `S: Store`, a part's
/// methods are callable only with its trait in scope (on a `dyn Store`
/// they are callable as they are).
pub mod prelude {
    pub use crate::ranking::RankedReads;
    pub use crate::traits::{
        Admin, Blocks, Compacts, Facts, Forgets, Portable, Ranks, Reads, Runtime, Searches, Store,
        UserMemory, Writes,
    };
}
pub use derived::AgentMeta;
pub use embedding::{Outcome as Embedding, embed_batch, embed_words, expect_query, query_vector};
pub use engram_core::state::Hiding;
pub use error::{Result, StoreError};
pub use items::{
    CONTEXT_CHARS, MAX_EMBEDDED_CHARS, context_of, episodic_item, for_embedding, model_of_vectors,
    searched_text, semantic_item, trace_item, vector_model,
};
pub use memo::Remembering;

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

/// A new item id: a UUIDv7, so that ids sort by creation.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Deletes the expired fact `id` of `scope`, found at `version` (an
/// agent's snapshot showing as many facts as before); `false` when it
/// changed or went meanwhile (deleted, changed to last longer, or its
/// agent or user deleted: a race with a client or another replica's
/// upkeep answers as if that came first).
pub async fn purge_fact<S: Facts + ?Sized>(
    store: &S,
    scope: &engram_core::blocks::Scope,
    id: String,
    version: u64,
) -> Result<bool> {
    let op = engram_core::facts::Op::Delete {
        id,
        expected_version: version,
    };
    match store.change_facts(scope, op, None).await {
        Ok(_) => Ok(true),
        Err(StoreError::Core(_) | StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whose facts a scope names (a backend's two branches).
#[derive(Debug, Clone, Copy)]
pub enum FactOwner<'a> {
    Agent(&'a engram_core::AgentId),
    User(&'a engram_core::UserId),
}

/// The owner of a scope's facts; the global scope has none
/// (INVALID_ARGUMENT).
pub fn fact_owner(scope: &engram_core::blocks::Scope) -> Result<FactOwner<'_>> {
    use engram_core::blocks::Scope;
    match scope {
        Scope::Agent(id) => Ok(FactOwner::Agent(id)),
        Scope::User(user) => Ok(FactOwner::User(user)),
        Scope::Global => Err(StoreError::Core(engram_core::CoreError::Invalid(
            "facts belong to an agent_id or a user_id, not the global scope".into(),
        ))),
    }
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

/// Runs blocking `f` on the blocking pool and waits for it. A panic in `f`
/// (a bug) goes on unwinding here, as if `f` had run inline: the request
/// boundary answers INTERNAL and an agent's lock guard drops its state.
/// A runtime that shuts down before `f` starts cancels it: the call then
/// fails as unavailable (a retry reaches a server that runs). The one way
/// Engram waits for blocking work.
pub async fn blocking<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => Err(E::from(StoreError::Unavailable {
                detail: "blocking work cancelled: the server is shutting down".into(),
                retry: true,
            })),
        },
    }
}

/// Locks `mutex`, whatever a panic left there: what it guards is repaired
/// by `repair` first (a cache starts over), or taken as it is (a registry,
/// whose every change is one call on a map). The one way Engram treats a
/// poisoned lock.
pub fn lock_or<T>(mutex: &Mutex<T>, repair: impl FnOnce(&mut T)) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| {
        let mut guard = poisoned.into_inner();
        repair(&mut guard);
        mutex.clear_poison();
        guard
    })
}

/// The page after `token` of the sorted `ids` that `visible` accepts: at
/// most `size`, and the token of the next when more remain.
pub fn page<'a>(
    ids: impl Iterator<Item = &'a str>,
    size: usize,
    token: Option<&str>,
    visible: Visible<'_>,
) -> (Vec<String>, Option<String>) {
    let mut rest = ids.filter(|id| token.is_none_or(|t| *id > t) && visible(id));
    let page: Vec<String> = rest.by_ref().take(size).map(str::to_owned).collect();
    let next = rest.next().and(page.last().cloned());
    (page, next)
}

/// [`lock_or`] that takes what it finds.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    lock_or(mutex, |_| {})
}

/// Reads what `lock` holds, as a writer that panicked left it (a table of
/// derived data: at worst a half-made entry, which a reader tolerates).
pub fn read<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Changes what `lock` holds ([`read`] says why poison is ignored).
pub fn write<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_each_other_past_hidden_ids() {
        let ids = ["a", "b", "c", "d", "e"];
        let visible = |id: &str| id != "c";
        let (first, next) = page(ids.into_iter(), 2, None, &visible);
        assert_eq!(
            (first, next.as_deref()),
            (vec!["a".into(), "b".into()], Some("b"))
        );
        let (second, next) = page(ids.into_iter(), 2, Some("b"), &visible);
        assert_eq!(
            (second, next.as_deref()),
            (vec!["d".into(), "e".into()], None)
        );
        let (all, next) = page(ids.into_iter(), 10, None, &|_: &str| true);
        assert_eq!((all.len(), next), (5, None));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_work_returns_and_its_panic_unwinds_in_the_caller() {
        assert_eq!(blocking(|| Ok::<_, StoreError>(7)).await.unwrap(), 7);
        let caught = tokio::spawn(async { blocking(|| -> Result<()> { panic!("a bug") }).await })
            .await
            .unwrap_err();
        let panic = caught.into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"a bug"));
    }

    #[test]
    fn blocking_work_cancelled_by_a_shutdown_fails_as_unavailable() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        runtime.shutdown_background();
        // Work handed to a runtime that has shut down is cancelled, as is
        // work still queued when it shuts down.
        let _inside = handle.enter();
        let mut work = Box::pin(blocking(|| Ok::<_, StoreError>(1)));
        let mut cx = Context::from_waker(Waker::noop());
        let answer = loop {
            match work.as_mut().poll(&mut cx) {
                Poll::Ready(answer) => break answer,
                Poll::Pending => std::thread::yield_now(),
            }
        };
        assert!(
            matches!(answer, Err(StoreError::Unavailable { retry: true, .. })),
            "{answer:?}"
        );
    }

    #[test]
    fn a_poisoned_lock_is_repaired_once_then_used() {
        let m = std::sync::Arc::new(Mutex::new(vec![1]));
        let poisoner = std::sync::Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let _g = poisoner.lock().unwrap();
            panic!("poison");
        })
        .join();
        assert!(m.is_poisoned());
        assert!(lock_or(&m, |v| v.clear()).is_empty(), "repaired");
        assert!(!m.is_poisoned());
        lock(&m).push(2);
        assert_eq!(*lock_or(&m, |v| v.clear()), [2], "not repaired again");
    }
}
