//! An append-only file with group commit.
//!
//! Appends are made durable by [`DurableFile::sync_to`]: the first caller
//! that finds no commit running becomes the leader and starts one commit
//! covering every byte appended so far; callers arriving meanwhile wait for
//! it, and the next leader covers all of them at once. Concurrency therefore
//! raises the number of appends per `fdatasync` instead of queueing on it.
//!
//! Each append is written at once, under the caller's lock, so a full disk
//! (ENOSPC, EDQUOT) surfaces there: the partial bytes are cut back off and
//! the caller undoes its own change, nothing of it visible. A commit only
//! flushes.
//!
//! A commit runs on the blocking pool to completion and records its outcome
//! itself, so a leader whose caller goes away (a cancelled RPC) can neither
//! wedge the file nor lose a failure.
//!
//! A failed `fdatasync` poisons the file for good: after a failed flush the
//! kernel may have dropped the dirty pages and marked them clean, so a retry
//! could "succeed" without the data. Nothing is acknowledged after that, and
//! the [`StorageHealth`] the file reports to turns failed: the store refuses
//! everything until a restart replays its log (as PostgreSQL does).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

use crate::error::{Result, StoreError};

/// When appends reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Group commit before every acknowledgement (default): nothing
    /// acknowledged is lost on power loss.
    Always,
    /// A background flush every `store.fsync_interval_ms`: a power loss can
    /// lose that much acknowledged data; a process crash loses nothing.
    Interval,
    /// Leave flushing to the OS (tests, scratch data).
    Never,
}

/// Whether the store's files can still be trusted. A failed flush ends that
/// for the life of the process.
#[derive(Debug)]
pub struct StorageHealth(watch::Sender<Option<String>>);

impl StorageHealth {
    pub fn new() -> Arc<Self> {
        Arc::new(Self(watch::channel(None).0))
    }

    /// Records the first failure (later ones add nothing).
    pub fn fail(&self, reason: &str) {
        self.0.send_if_modified(|failed| {
            if failed.is_some() {
                return false;
            }
            tracing::error!(%reason, "storage failed; refusing every request until restart");
            *failed = Some(reason.to_owned());
            true
        });
    }

    /// Why the store stopped, if it did.
    pub fn failure(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// Changes to [`failure`](Self::failure), for health reporting.
    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.0.subscribe()
    }
}

#[derive(Debug, Clone, Default)]
struct Progress {
    /// Bytes appended so far (the file's logical length).
    written: u64,
    /// Bytes known durable.
    synced: u64,
    syncing: bool,
    /// Why the file is poisoned, once it is.
    failed: Option<String>,
    /// Appends since the last commit began: the size of the next group.
    unsynced_appends: u64,
}

#[derive(Debug)]
pub struct DurableFile {
    path: PathBuf,
    file: Arc<File>,
    progress: Arc<watch::Sender<Progress>>,
    health: Arc<StorageHealth>,
    /// Serializes appends so the offsets they report are exact. Callers
    /// already serialize per agent; this makes it true for any caller.
    appending: std::sync::Mutex<()>,
    /// Test hook: the next sync reports a failure.
    fail_next_sync: AtomicBool,
}

impl DurableFile {
    /// Opens `path` for appending, creating it if needed. The bytes already
    /// in the file count as durable (recovery has checked them).
    pub fn open(path: &Path, health: &Arc<StorageHealth>) -> Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(StoreError::io("opening", path))?;
        let len = file
            .metadata()
            .map_err(StoreError::io("reading metadata of", path))?
            .len();
        Ok(Self::new(path, file, len, health))
    }

    /// Creates a new, empty file.
    pub fn create(path: &Path, health: &Arc<StorageHealth>) -> Result<Self> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)
            .map_err(StoreError::io("creating", path))?;
        Ok(Self::new(path, file, 0, health))
    }

    fn new(path: &Path, file: File, len: u64, health: &Arc<StorageHealth>) -> Self {
        let (progress, _) = watch::channel(Progress {
            written: len,
            synced: len,
            ..Progress::default()
        });
        Self {
            path: path.to_owned(),
            file: Arc::new(file),
            progress: Arc::new(progress),
            health: Arc::clone(health),
            appending: std::sync::Mutex::new(()),
            fail_next_sync: AtomicBool::new(false),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why this file refuses writes, if it does.
    pub fn failure(&self) -> Option<String> {
        self.progress.borrow().failed.clone()
    }

    pub fn len(&self) -> u64 {
        self.progress.borrow().written
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when bytes were written that no sync has covered yet.
    pub fn is_dirty(&self) -> bool {
        let p = self.progress.borrow();
        p.written > p.synced && p.failed.is_none()
    }

    /// Appends `bytes` (whole lines) and returns the end offset to pass to
    /// [`sync_to`](Self::sync_to).
    pub fn append(&self, bytes: &[u8]) -> Result<u64> {
        let _one_at_a_time = engram_store::lock(&self.appending);
        if let Some(reason) = self.failure() {
            return Err(self.poisoned(reason));
        }
        let start = self.len();
        if let Err(e) = (&*self.file).write_all(bytes) {
            // Cut a partial line back off so the file stays whole lines; if
            // even that fails the file's tail is unknown: poison it.
            if let Err(cut) = self.file.set_len(start) {
                self.poison(format!(
                    "write failed ({e}) and truncating back failed ({cut})"
                ));
            }
            return Err(StoreError::io("appending to", &self.path)(e));
        }
        let end = start + bytes.len() as u64;
        self.progress.send_if_modified(|p| {
            p.written = end;
            p.unsynced_appends += 1;
            false
        });
        Ok(end)
    }

    /// Returns once every byte up to `end` is durable, joining or leading a
    /// group commit.
    pub async fn sync_to(&self, end: u64) -> Result<()> {
        let mut rx = self.progress.subscribe();
        loop {
            let mut lead = false;
            self.progress.send_if_modified(|p| {
                if p.failed.is_none() && p.synced < end && !p.syncing {
                    p.syncing = true;
                    lead = true;
                }
                false
            });
            if lead {
                self.start_commit();
            }
            let p = rx
                .wait_for(|p| p.failed.is_some() || p.synced >= end || !p.syncing)
                .await
                .expect("the sender lives in self")
                .clone();
            if let Some(reason) = p.failed {
                return Err(self.poisoned(reason));
            }
            if p.synced >= end {
                return Ok(());
            }
        }
    }

    /// Makes everything written so far durable (shutdown, eviction, the
    /// interval policy).
    pub async fn sync_all(&self) -> Result<()> {
        self.sync_to(self.len()).await
    }

    /// Flushes on the blocking pool, in a task of its own that records the
    /// outcome and wakes every waiter.
    /// The waking happens on a runtime worker, where waking many tasks is
    /// cheap (from a blocking thread, each wake-up would be a cross-thread
    /// unpark).
    fn start_commit(&self) {
        let file = Arc::clone(&self.file);
        let progress = Arc::clone(&self.progress);
        let path = self.path.clone();
        let health = Arc::clone(&self.health);
        let inject = self.fail_next_sync.swap(false, Ordering::SeqCst);
        tokio::spawn(async move {
            // Taken only now that the task runs: calls queued on this worker
            // before it have appended meanwhile, and ride along.
            let (mut target, mut group, mut from) = (0, 0, 0);
            progress.send_if_modified(|p| {
                target = p.written;
                from = p.synced;
                group = std::mem::take(&mut p.unsynced_appends);
                false
            });
            metrics::histogram!("engram_fsync_batch_appends").record(group as f64);
            metrics::histogram!("engram_fsync_batch_bytes")
                .record(target.saturating_sub(from) as f64);
            let result = tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                if inject {
                    return Err(std::io::Error::other("injected fdatasync failure"));
                }
                file.sync_data()?;
                metrics::histogram!("engram_fsync_duration_seconds")
                    .record(started.elapsed().as_secs_f64());
                Ok(())
            })
            .await
            // Not `engram_store::blocking`: this is the flusher, not a
            // request, and a flush that did not complete is a failed flush
            // (the store stops, health says so), whatever stopped it.
            .unwrap_or_else(|join| Err(std::io::Error::other(join)));
            match result {
                Ok(()) => progress.send_modify(|p| {
                    p.syncing = false;
                    p.synced = p.synced.max(target);
                }),
                Err(e) => {
                    // Even ENOSPC here: the pages were accepted by write()
                    // and may now be gone. Never retried, never acknowledged.
                    let reason = format!("fdatasync of {} failed: {e}", path.display());
                    tracing::error!(path = %path.display(), error = %e,
                        "fdatasync failed; the file is poisoned and refuses writes until restart");
                    metrics::counter!("engram_fsync_failures_total").increment(1);
                    health.fail(&reason);
                    progress.send_modify(|p| {
                        p.syncing = false;
                        p.failed = Some(reason);
                    });
                }
            }
        });
    }

    fn poison(&self, reason: String) {
        tracing::error!(path = %self.path.display(), %reason, "file poisoned");
        self.health.fail(&reason);
        self.progress.send_modify(|p| p.failed = Some(reason));
    }

    fn poisoned(&self, reason: String) -> StoreError {
        StoreError::ReadOnly {
            agent: None,
            reason: format!("{}: {reason}", self.path.display()),
        }
    }

    /// Cuts the file back to `start`, undoing this writer's last append
    /// (whose log record could not be written). Poisons the file if even
    /// that fails, since its tail is then unknown.
    pub fn roll_back(&self, start: u64) {
        let _one_at_a_time = engram_store::lock(&self.appending);
        match self.file.set_len(start) {
            Ok(()) => self.progress.send_if_modified(|p| {
                p.written = start;
                p.synced = p.synced.min(start);
                false
            }),
            Err(e) => {
                self.poison(format!("rolling back an append failed: {e}"));
                false
            }
        };
    }

    /// Makes the next fdatasync fail, as a dying disk would.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn inject_sync_failure(&self) {
        self.fail_next_sync.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_share_syncs_and_all_become_durable() {
        let dir = tempfile::tempdir().unwrap();
        let f = Arc::new(
            DurableFile::open(&dir.path().join("log.jsonl"), &StorageHealth::new()).unwrap(),
        );
        let mut tasks = vec![];
        for i in 0..64 {
            let f = Arc::clone(&f);
            tasks.push(tokio::spawn(async move {
                let end = f.append(format!("{{\"n\":{i}}}\n").as_bytes()).unwrap();
                f.sync_to(end).await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(!f.is_dirty());
        let text = std::fs::read_to_string(f.path()).unwrap();
        assert_eq!(text.lines().count(), 64);
    }

    #[tokio::test]
    async fn a_cancelled_leader_neither_wedges_the_file_nor_loses_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        for create in [false, true] {
            let path = dir.path().join(format!("f-{create}"));
            let health = StorageHealth::new();
            let f = if create {
                DurableFile::create(&path, &health).unwrap()
            } else {
                DurableFile::open(&path, &health).unwrap()
            };
            let end = f.append(b"one\n").unwrap();
            // Poll the sync once (it becomes the leader and starts the
            // commit), then drop it, as tonic drops a cancelled call.
            tokio::select! {
                biased;
                _ = f.sync_to(end) => {}
                () = std::future::ready(()) => {}
            }
            let end = f.append(b"two\n").unwrap();
            let synced =
                tokio::time::timeout(std::time::Duration::from_secs(20), f.sync_to(end)).await;
            assert!(matches!(synced, Ok(Ok(()))), "create={create}: {synced:?}");
            assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
        }
    }

    #[tokio::test]
    async fn a_failed_sync_poisons_the_file_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let health = StorageHealth::new();
        let f = DurableFile::open(&dir.path().join("agent").join("x"), &health).err();
        assert!(f.is_some(), "missing parent dir is an error, not a panic");
        std::fs::create_dir(dir.path().join("agent")).unwrap();
        let f =
            DurableFile::open(&dir.path().join("agent").join("raw_traces.jsonl"), &health).unwrap();
        let end = f.append(b"{}\n").unwrap();
        f.inject_sync_failure();
        let err = f.sync_to(end).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::ReadOnly { agent: None, reason } if reason.contains("agent/raw_traces.jsonl")),
            "{err}"
        );
        // Never retried and then acknowledged.
        assert!(f.sync_to(end).await.is_err());
        assert!(f.append(b"{}\n").is_err());
        assert!(f.failure().unwrap().contains("fdatasync"));
        // The whole store is told, so it can stop serving.
        assert!(health.failure().unwrap().contains("fdatasync"));
    }
}
