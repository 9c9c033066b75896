//! The store as a whole: listing, deleting and forking agents (see `fork`
//! for how a copy is made atomic), unloading idle ones, checkpoints (flushing agent files so the log can be trimmed), the
//! background upkeep, and the data directory's size.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use engram_core::{AgentId, CoreError, UserId};
use engram_store::{Admin, Runtime};

use crate::agent::AgentState;
use crate::gate::Mark;
use crate::index::blocking;
use crate::{
    AgentHandle, FileStore, FsyncPolicy, Result, StoreError, TRASH_PREFIX, Visible, VisibleAgent,
    jsonl, offload, wal,
};

/// Agents whose settings a listing reads at a time, at most, for their
/// users.
const OWNER_BATCH: usize = 256;

#[async_trait]
impl Admin for FileStore {
    /// Agent ids after `page_token`, sorted, at most `page_size`; the token
    /// of the next page when more remain.
    /// Only ids `visible` accepts count (an auth scope), so pages stay full.
    /// Each is shown its user: the settings of the agents some user marked
    /// (`users`) are read, a batch at a time, as the page fills.
    async fn list_agents(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: VisibleAgent<'_>,
    ) -> Result<(Vec<String>, Option<String>)> {
        let dir = self.inner.agents_dir.clone();
        let users = self.users_dir();
        let (mut ids, marked) = engram_store::blocking(move || -> Result<_> {
            let ids = list_dirs(&dir, |name| AgentId::parse(name).is_ok())?;
            Ok((ids, crate::users::marked_agents(&users)?))
        })
        .await?;
        ids.sort_unstable();
        ids.retain(|id| page_token.is_none_or(|t| id.as_str() > t));
        let mut page = Vec::new();
        let mut rest = ids.as_slice();
        while !rest.is_empty() {
            // As many as the page still wants (and the one that says a next
            // page exists), up to a batch: a short page reads few settings.
            let take = (page_size + 1 - page.len())
                .clamp(1, OWNER_BATCH)
                .min(rest.len());
            let (batch, after) = rest.split_at(take);
            rest = after;
            let dir = self.inner.agents_dir.clone();
            let asked: Vec<Option<String>> = batch
                .iter()
                .map(|id| marked.contains(id).then(|| id.clone()))
                .collect();
            let owners = engram_store::blocking(move || -> Result<Vec<Option<String>>> {
                Ok(asked
                    .into_iter()
                    .map(|id| id.and_then(|id| crate::users::owner(&dir.join(id))))
                    .collect())
            })
            .await?;
            for (id, owner) in batch.iter().zip(owners) {
                if !visible(id, owner.as_deref()) {
                    continue;
                }
                if page.len() == page_size {
                    // One more visible id exists: the page has a successor.
                    let next = page.last().cloned();
                    return Ok((page, next));
                }
                page.push(id.clone());
            }
        }
        Ok((page, None))
    }

    /// The users with a directory (agents bound, blocks, facts).
    async fn list_users(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: Visible<'_>,
    ) -> Result<(Vec<String>, Option<String>)> {
        let dir = self.users_dir();
        let ids = engram_store::blocking(move || -> Result<Vec<String>> {
            if !dir.exists() {
                return Ok(vec![]);
            }
            let mut ids = list_dirs(&dir, |name| UserId::parse(name).is_ok())?;
            // An erasure's directory on its way out.
            ids.retain(|name| !name.starts_with(TRASH_PREFIX));
            Ok(ids)
        })
        .await?;
        Ok(page_of(ids, page_size, page_token, visible))
    }

    /// Removes every file of the agent. In-flight calls on it finish first;
    /// later calls see NOT_FOUND (or, for Ingest, a new empty agent).
    async fn delete_agent(&self, id: &AgentId) -> Result<()> {
        self.delete_through(id, self.handle(id), None).await
    }

    async fn user_agents(&self, user: &UserId) -> Result<Vec<AgentId>> {
        self.agents_of(user).await
    }

    async fn delete_user(&self, user: &UserId) -> Result<usize> {
        self.erase_user(user).await
    }

    /// Copies `source` to the new agent `target`.
    async fn fork_agent(&self, source: &AgentId, target: &AgentId) -> Result<()> {
        if source == target {
            return Err(CoreError::Invalid(
                "target_agent_id must differ from source_agent_id".into(),
            )
            .into());
        }
        loop {
            let handle = self.existing_handle(source)?;
            let mut slot = handle.lock().await;
            let state = self.loaded(source, &mut slot).await?;
            if !state.exists() {
                return Err(StoreError::NotFound(source.to_string()));
            }
            let target_dir = self.agent_dir(target);
            if target_dir.exists() {
                return Err(StoreError::AlreadyExists(target.to_string()));
            }
            // The copy belongs to the source's user: marked before it appears.
            let user = state.meta.user_id.clone();
            if let Some(user) = &user
                && let Mark::Wait(gate) = self.mark_user(user, target).await?
            {
                // The source's user is being erased: the fork starts over
                // after it (and finds the source gone).
                drop(slot);
                gate.passed().await;
                continue;
            }
            let staging = self.staging_dir();
            let from = state.dir.clone();
            let to = staging.clone();
            engram_store::blocking(move || crate::fork::copy_agent(&from, &to)).await?;
            self.put_in_place(&staging, target).await?;
            drop(slot);
            if user.is_some() {
                self.note_change(target);
            }
            break;
        }
        tracing::info!(source = %source, target = %target, "agent forked");
        Ok(())
    }
}

#[async_trait]
impl Runtime for FileStore {
    fn embedder(&self) -> Option<Arc<dyn engram_core::embed::Embedder>> {
        self.inner.indexer.as_ref().map(|i| Arc::clone(&i.embedder))
    }

    /// Why the store stopped serving, if it did (a failed flush).
    fn failure(&self) -> Option<String> {
        self.inner.health.failure()
    }

    /// Changes to [`failure`](Self::failure), for health reporting.
    fn watch_failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.health.subscribe()
    }

    /// Number of agents currently in memory.
    fn loaded_agents(&self) -> usize {
        engram_store::lock(&self.inner.agents).len()
    }

    /// Items of the loaded agents that wait for the embedding model.
    fn unembedded_items(&self) -> u64 {
        let agents = engram_store::lock(&self.inner.agents);
        agents.values().map(|h| *h.embedded.borrow() as u64).sum()
    }

    fn memory_bytes(&self) -> u64 {
        FileStore::memory_bytes(self)
    }

    async fn shrink_to(&self, target: u64) -> Vec<AgentId> {
        FileStore::shrink_to(self, target).await
    }

    /// Bytes of every file under the data directory (a walk: meant for a
    /// metrics scrape, not a hot path).
    async fn disk_bytes(&self) -> u64 {
        let root = self.inner.config.data_dir.clone();
        tokio::task::spawn_blocking(move || tree_bytes(&root))
            .await
            .unwrap_or(0)
    }

    /// Background upkeep: the interval flush, checkpoints when the log
    /// grows, idle eviction. Runs until the returned task is aborted.
    fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let config = &store.inner.config;
            let mut tick = Duration::from_secs(1);
            if config.fsync == FsyncPolicy::Interval {
                tick = tick.min(config.fsync_interval);
            }
            if let Some(idle) = config.idle_evict {
                tick = tick.min((idle / 4).max(Duration::from_millis(50)));
            }
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if config.fsync == FsyncPolicy::Interval {
                    store.flush_all().await;
                }
                if store.inner.wal.segment_len() > config.wal_segment_bytes
                    && let Err(e) = store.checkpoint().await
                {
                    tracing::error!(error = %e, "checkpoint failed");
                }
                if let Some(max_idle) = config.idle_evict {
                    let n = store.evict_idle(max_idle).await;
                    if n > 0 {
                        tracing::debug!(evicted = n, "unloaded idle agents");
                    }
                }
                store.catch_up_user_indexes().await;
            }
        })
    }

    /// Flushes and checkpoints: the last call before the process exits.
    /// The open indexes write out what requests read in (in memory only
    /// until then; lost, it would be read in again at the next start).
    async fn close(&self) {
        self.persist_open_indexes().await;
        if let Err(e) = self.checkpoint().await {
            tracing::error!(error = %e, "final checkpoint failed; the log will be replayed at start");
        }
    }
}

impl FileStore {
    /// Reads the agent's file `name` on a blocking thread, under the
    /// agent's lock (a delete or a rewrite of it waits, and is not seen
    /// half-done); nothing (the default) when there is no agent.
    pub(crate) async fn read_locked<T: Default + Send + 'static>(
        &self,
        id: &AgentId,
        name: &str,
        read: impl FnOnce(std::path::PathBuf) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let handle = match self.existing_handle(id) {
            Ok(h) => h,
            Err(StoreError::NotFound(_)) => return Ok(T::default()),
            Err(e) => return Err(e),
        };
        let _slot = handle.lock().await;
        if handle.is_retired() {
            return Ok(T::default());
        }
        let path = self.agent_dir(id).join(name);
        engram_store::blocking(move || read(path)).await
    }

    pub(crate) async fn delete_through(
        &self,
        id: &AgentId,
        handle: Arc<AgentHandle>,
        owner: Option<&UserId>,
    ) -> Result<()> {
        // The index slot first (the order of the two locks everywhere):
        // searches and catch-ups that hold the index finish before its
        // files go, and none opens it again after, so a read that meets
        // this delete answers as before it or as after it (NOT_FOUND),
        // never with an index whose files vanished under it.
        let mut index = handle.index.lock().await;
        let mut slot = handle.lock().await;
        let dir = self.agent_dir(id);
        // Deleted while this call waited for the lock, or dropped from the
        // registry (an id found absent): a directory there now belongs to a
        // new agent of the same id, under another handle. This delete came
        // first, when there was no agent.
        let gone = slot.as_ref().is_some_and(|s| s.deleted);
        let registered = self.is_registered(id, &handle);
        if gone || !registered || !dir.is_dir() {
            if let Some(owner) = owner
                && registered
                && !gone
            {
                // No agent, and none being made (that holds this lock).
                self.unmark_user(owner, id)?;
            }
            if !gone {
                // Whoever waits for this handle (an Ingest) looks the id up
                // again rather than create it under a handle the registry
                // no longer holds.
                let mut absent = AgentState::absent(dir);
                absent.deleted = true;
                *slot = Some(absent);
            }
            handle.retire();
            self.unregister(id, &handle);
            return Err(StoreError::NotFound(id.to_string()));
        }
        // Erasing a user: an agent of the id that is not the user's (one
        // deleted and made again since its marker) is left alone.
        if let Some(owner) = owner
            && !self.owned_by(&dir, owner).await
        {
            self.unmark_user(owner, id)?;
            return Err(StoreError::NotFound(id.to_string()));
        }
        // Read from its settings before they go (it may not be loaded).
        let user = self.user_of(&dir).await;
        if self.inner.config.fsync == FsyncPolicy::Always {
            // Logged before the files go, so a replay never revives them.
            let ticket = self
                .inner
                .wal
                .append(&wal::Record::Delete { agent: id.as_str() })?;
            ticket.wait().await.map_err(|e| e.for_agent(id.as_str()))?;
        }
        // Closed before its files go: nothing of it (a merge finishing)
        // may write in the directory once it is renamed away.
        if let Some(open) = index.take()
            && let Err(e) = blocking(move || open.close()).await
        {
            // Derived data about to be removed: nothing is lost.
            tracing::warn!(agent = %id, error = %e, "closing the search index of a deleted agent failed");
        }
        // Rename first: one atomic step makes the agent gone, even if the
        // removal of its files is interrupted.
        let trash = self
            .inner
            .agents_dir
            .join(format!("{TRASH_PREFIX}{}", uuid::Uuid::new_v4()));
        offload(|| {
            std::fs::rename(&dir, &trash).map_err(StoreError::io("renaming", &dir))?;
            jsonl::sync_dir(&self.inner.agents_dir)
        })?;
        if let Some(owner) = owner {
            // Under the agent's lock: a binding of a new agent of this id
            // waits for it, and marks the user again.
            self.unmark_user(owner, id)?;
        }
        if let Some(user) = &user {
            // Its user's index forgets it at its next search.
            self.note_change_of(user, id);
        }
        engram_store::lock(&self.inner.agent_users).remove(id);
        // Gone for good (renamed away): a failure here leaves only its id,
        // which the engine's sweep drops as not found.
        if let Err(e) = self.inner.quiet.forget(id).await {
            tracing::warn!(agent = %id, error = %e, "dropping a deleted agent from the quiet list failed");
        }
        let mut gone = AgentState::absent(dir.clone());
        gone.deleted = true;
        *slot = Some(gone);
        // Under both locks: a catch-up or search that waited for the index
        // finds it retired, not a new agent's directory.
        handle.retire();
        self.unregister(id, &handle);
        drop(slot);
        drop(index);
        engram_store::blocking(move || {
            std::fs::remove_dir_all(&trash).map_err(StoreError::io("removing", &dir))
        })
        .await?;
        Ok(())
    }

    /// What `look` finds in each loaded agent that no call holds at the
    /// moment (a busy one is looked at by the next pass): the upkeep's
    /// passes over what is in memory.
    pub(crate) fn scan_loaded<T>(
        &self,
        mut look: impl FnMut(&AgentId, &AgentState) -> Option<T>,
    ) -> Vec<T> {
        let loaded: Vec<(AgentId, Arc<AgentHandle>)> = engram_store::lock(&self.inner.agents)
            .iter()
            .map(|(id, h)| (id.clone(), Arc::clone(h)))
            .collect();
        loaded
            .into_iter()
            .filter_map(|(id, handle)| {
                let slot = handle.state.try_lock().ok()?;
                look(&id, slot.as_ref()?)
            })
            .collect()
    }

    /// Unloads agents idle for longer than `max_idle` that nobody is using,
    /// flushing their files first (while still registered, so a checkpoint
    /// never misses them), and closing their search index. Returns how many
    /// were unloaded.
    pub async fn evict_idle(&self, max_idle: Duration) -> usize {
        let cutoff = self.now_ms().saturating_sub(max_idle.as_millis() as u64);
        let idle = |h: &AgentHandle| h.last_used.load(Ordering::Relaxed) <= cutoff;
        let candidates: Vec<(AgentId, Arc<AgentHandle>)> = {
            let agents = engram_store::lock(&self.inner.agents);
            agents
                .iter()
                .filter(|(_, h)| idle(h))
                .map(|(id, h)| (id.clone(), Arc::clone(h)))
                .collect()
        };
        let mut evicted = 0;
        for (id, handle) in candidates {
            if self.unload_if(&id, handle, &idle).await {
                evicted += 1;
            }
        }
        evicted
    }

    /// Unloads the agent of `handle` if nobody uses it (the memory budget).
    pub(crate) async fn unload(&self, id: &AgentId, handle: Arc<AgentHandle>) -> bool {
        self.unload_if(id, handle, &|_| true).await
    }

    /// Unloads the agent of `handle`, flushed first and its index closed,
    /// if it is still `id`'s handle, `still` holds, and nobody uses it;
    /// whether it did.
    async fn unload_if(
        &self,
        id: &AgentId,
        handle: Arc<AgentHandle>,
        still: &(dyn Fn(&AgentHandle) -> bool + Sync),
    ) -> bool {
        // Still the agent's handle (a delete meanwhile may have put a new
        // agent's in its place, which is not this one's to unload), unused
        // (only the map and `handle` hold it), clean.
        let unused = |agents: &HashMap<AgentId, Arc<AgentHandle>>| {
            let clean = handle.state.try_lock().is_ok_and(|s| {
                s.as_ref()
                    .and_then(|s| s.raw.as_ref())
                    .is_none_or(|r| !r.is_dirty())
            });
            agents.get(id).is_some_and(|h| Arc::ptr_eq(h, &handle))
                && clean
                && still(&handle)
                && Arc::strong_count(&handle) == 2
        };
        self.flush_handle(&handle).await;
        // Only an agent whose index nobody holds (the lock order: index,
        // then the agent's state); a search or the indexer using it keeps
        // the agent loaded.
        let Ok(mut index) = Arc::clone(&handle.index).try_lock_owned() else {
            return false;
        };
        if !unused(&engram_store::lock(&self.inner.agents)) {
            return false;
        }
        // Closed before the agent is unloaded: a new handle for it may
        // open the same directory as soon as this one is gone.
        if let Some(open) = index.take()
            && let Err(e) = blocking(move || open.close()).await
        {
            tracing::warn!(agent = %id, error = %e, "closing the search index of an unloaded agent failed");
        }
        let mut agents = engram_store::lock(&self.inner.agents);
        // Used again meanwhile, it stays (its index opens again when it is
        // next searched).
        if unused(&agents) {
            agents.remove(id);
            return true;
        }
        false
    }

    /// Flushes every agent file, then drops the log segments that only
    /// covered what is now flushed. Bounds the log (and so start-up replay).
    pub async fn checkpoint(&self) -> Result<()> {
        let _one = self.inner.checkpointing.lock().await;
        let old = self.inner.wal.rotate()?;
        if self.flush_all().await {
            self.inner.wal.remove(&old)?;
        }
        Ok(())
    }

    /// Flushes every loaded agent's files (checkpoints, the interval
    /// policy). False if any flush failed.
    pub async fn flush_all(&self) -> bool {
        let handles: Vec<Arc<AgentHandle>> = engram_store::lock(&self.inner.agents)
            .values()
            .cloned()
            .collect();
        let mut ok = true;
        for handle in &handles {
            ok &= self.flush_handle(handle).await;
        }
        ok
    }

    async fn flush_handle(&self, handle: &AgentHandle) -> bool {
        let raw = handle
            .state
            .lock()
            .await
            .as_ref()
            .and_then(|s| s.raw.clone());
        match raw {
            Some(raw) if raw.failure().is_some() => false,
            Some(raw) if raw.is_dirty() => match raw.sync_all().await {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(path = %raw.path().display(), error = %e, "flush failed");
                    false
                }
            },
            _ => true,
        }
    }
}

/// The directories in `dir` whose names `valid` accepts.
fn list_dirs(dir: &Path, valid: impl Fn(&str) -> bool) -> Result<Vec<String>> {
    let mut ids = vec![];
    for entry in std::fs::read_dir(dir).map_err(StoreError::io("listing", dir))? {
        let entry = entry.map_err(StoreError::io("listing", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if valid(&name) && entry.file_type().is_ok_and(|t| t.is_dir()) {
            ids.push(name);
        }
    }
    Ok(ids)
}

/// [`engram_store::page`] of `ids`, sorted here (a directory lists them
/// in no order).
fn page_of(
    mut ids: Vec<String>,
    page_size: usize,
    token: Option<&str>,
    visible: Visible<'_>,
) -> (Vec<String>, Option<String>) {
    ids.sort_unstable();
    engram_store::page(ids.iter().map(String::as_str), page_size, token, visible)
}

fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
