//! Fault injection for tests: a compaction step that fails (as an I/O error
//! there would leave things) or aborts the process (as `kill -9` would),
//! and a flush that fails. Compiled only into the crate's own tests and
//! builds with the `fault-injection` feature, which the project's test
//! runs enable and release builds do not: the production binary has no
//! way to turn a fault on.

#[cfg(any(test, feature = "fault-injection"))]
mod on {
    use std::sync::Mutex;

    use crate::{CommitStep, FileStore, Result, StoreError};

    #[derive(Debug, Default)]
    pub struct Faults {
        fail_at: Mutex<Option<CommitStep>>,
        crash_at: Mutex<Option<CommitStep>>,
        /// A step of a forget (`FORGET_STEPS`) to abort before.
        crash_forget: Mutex<Option<String>>,
    }

    impl Faults {
        /// Before `step` of a compaction's commit: abort or fail if asked.
        pub fn check(&self, step: CommitStep) -> Result<()> {
            let crash = *engram_store::lock(&self.crash_at);
            if crash == Some(step) {
                tracing::error!(step = step.name(), "crashing on purpose (fault injection)");
                std::process::abort();
            }
            if *engram_store::lock(&self.fail_at) == Some(step) {
                return Err(StoreError::Unavailable {
                    detail: format!("injected fault before {}", step.name()),
                    retry: true,
                });
            }
            Ok(())
        }

        /// Before step `name` of a forget: abort if asked.
        pub fn check_forget(&self, name: &str) {
            if engram_store::lock(&self.crash_forget).as_deref() == Some(name) {
                tracing::error!(step = name, "crashing on purpose (fault injection)");
                std::process::abort();
            }
        }
    }

    impl FileStore {
        /// The process aborts before step `name` of a forget (one of
        /// [`crate::FORGET_STEPS`]); other names are ignored.
        pub fn inject_forget_crash(&self, name: Option<&str>) {
            *engram_store::lock(&self.inner.faults.crash_forget) = name
                .filter(|n| crate::FORGET_STEPS.contains(n))
                .map(str::to_owned);
        }

        /// `step` of this store's compaction commits fails until cleared
        /// with `None`.
        pub fn inject_compaction_fault(&self, step: Option<CommitStep>) {
            *engram_store::lock(&self.inner.faults.fail_at) = step;
        }

        /// The process aborts (no cleanup) before `step` of a compaction's
        /// commit. Used by the crash tests of the binary.
        pub fn inject_compaction_crash(&self, step: Option<CommitStep>) {
            *engram_store::lock(&self.inner.faults.crash_at) = step;
        }

        /// The next flush of the write-ahead log fails, as a dying disk's
        /// would.
        pub fn inject_log_sync_failure(&self) {
            self.inner.wal.inject_sync_failure();
        }
    }
}

#[cfg(any(test, feature = "fault-injection"))]
pub(crate) use on::Faults;

/// Without fault injection: nothing to check.
#[cfg(not(any(test, feature = "fault-injection")))]
#[derive(Debug, Default)]
pub(crate) struct Faults {
    _none: (),
}

#[cfg(not(any(test, feature = "fault-injection")))]
impl Faults {
    #[inline]
    pub(crate) fn check(&self, _step: crate::CommitStep) -> crate::Result<()> {
        Ok(())
    }

    #[inline]
    pub(crate) fn check_forget(&self, _name: &str) {}
}
