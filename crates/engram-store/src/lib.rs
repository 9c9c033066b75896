//! Engram's file store: per-agent JSONL files under `<data_dir>/agents/`.
//!
//! - [`Store`]: the registry of agents. Agents load lazily on first use (so
//!   start-up cost does not grow with their number) and idle ones are
//!   evicted from memory. Each agent has one async lock: one writer at a
//!   time per agent, different agents in parallel.
//! - [`durable`]: append-only files with group commit and fsync policies.
//! - [`jsonl`]: loading with torn-tail and corrupt-line recovery, and the
//!   atomic rewrite helper.
//! - [`agent`]: one agent's files and derived state.

pub mod agent;
pub mod durable;
pub mod error;
pub mod jsonl;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use engram_core::turns::IngestLimits;
use engram_core::{AgentId, NewEvent, Outcome, RawTrace, Usage};
use tokio::sync::Mutex as AsyncMutex;

use agent::AgentState;
pub use agent::AgentView;
pub use durable::FsyncPolicy;
pub use error::{Result, StoreError};

/// Store settings (the `[store]` and `[limits]` config sections).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    pub fsync: FsyncPolicy,
    /// Flush period of [`FsyncPolicy::Interval`].
    pub fsync_interval: Duration,
    /// Unload agents unused for this long; `None` keeps them loaded.
    pub idle_evict: Option<Duration>,
    pub limits: IngestLimits,
}

impl StoreConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            fsync: FsyncPolicy::Always,
            fsync_interval: Duration::from_secs(1),
            idle_evict: Some(Duration::from_secs(600)),
            limits: IngestLimits::default(),
        }
    }
}

/// The result of an Ingest.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// One trace per request event, in request order.
    pub traces: Vec<RawTrace>,
    pub current_turn_id: String,
}

#[derive(Debug)]
struct AgentHandle {
    /// `None` until first loaded.
    state: AsyncMutex<Option<AgentState>>,
    /// Milliseconds since the store opened, at the last use.
    last_used: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    config: StoreConfig,
    agents_dir: PathBuf,
    agents: Mutex<HashMap<AgentId, Arc<AgentHandle>>>,
    opened: Instant,
}

/// The file-backed store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

const TRASH_PREFIX: &str = ".deleted-";

impl Store {
    /// Opens (creating if needed) the store. Does not read any agent.
    pub async fn open(config: StoreConfig) -> Result<Self> {
        let agents_dir = config.data_dir.join("agents");
        let dir = agents_dir.clone();
        tokio::task::spawn_blocking(move || prepare_agents_dir(&dir))
            .await
            .expect("prepare task panicked")?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                agents_dir,
                agents: Mutex::new(HashMap::new()),
                opened: Instant::now(),
            }),
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Number of agents currently in memory.
    pub fn loaded_agents(&self) -> usize {
        self.inner.agents.lock().expect("registry lock").len()
    }

    fn agent_dir(&self, id: &AgentId) -> PathBuf {
        self.inner.agents_dir.join(id.as_str())
    }

    fn now_ms(&self) -> u64 {
        self.inner.opened.elapsed().as_millis() as u64
    }

    fn handle(&self, id: &AgentId) -> Arc<AgentHandle> {
        let mut agents = self.inner.agents.lock().expect("registry lock");
        let handle = agents.entry(id.clone()).or_insert_with(|| {
            Arc::new(AgentHandle {
                state: AsyncMutex::new(None),
                last_used: AtomicU64::new(0),
            })
        });
        handle.last_used.store(self.now_ms(), Ordering::Relaxed);
        Arc::clone(handle)
    }

    /// The handle of an agent that exists, without registering absent ids.
    fn existing_handle(&self, id: &AgentId) -> Result<Arc<AgentHandle>> {
        let known = self
            .inner
            .agents
            .lock()
            .expect("registry lock")
            .contains_key(id);
        if !known && !self.agent_dir(id).is_dir() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(self.handle(id))
    }

    async fn loaded<'a>(
        &self,
        id: &AgentId,
        slot: &'a mut Option<AgentState>,
    ) -> Result<&'a mut AgentState> {
        if slot.is_none() {
            let dir = self.agent_dir(id);
            let state = tokio::task::spawn_blocking(move || AgentState::load(dir))
                .await
                .expect("load task panicked")?;
            *slot = Some(state);
        }
        Ok(slot.as_mut().expect("just loaded"))
    }

    /// Validates and stores `events`, creating the agent on its first
    /// accepted write. Returns once the traces are durable (per policy).
    pub async fn ingest(
        &self,
        id: &AgentId,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
    ) -> Result<Ingested> {
        loop {
            let handle = self.handle(id);
            let mut slot = handle.state.lock().await;
            let state = self.loaded(id, &mut slot).await?;
            if state.deleted {
                continue; // deleted while we waited: start over on a fresh agent
            }
            if let Some(reason) = state.raw.as_ref().and_then(|r| r.failure()) {
                return Err(StoreError::ReadOnly {
                    agent: id.to_string(),
                    reason,
                });
            }
            let plan = state.tracker.plan(
                events,
                usage,
                model,
                self.inner.config.limits,
                unix_now(),
                || uuid::Uuid::now_v7().to_string(),
            )?;
            let raw = match &state.raw {
                Some(raw) => Arc::clone(raw),
                None => state.create()?,
            };
            let end = if plan.new_traces.is_empty() {
                raw.len()
            } else {
                raw.append(&plan.bytes)?
            };
            for trace in &plan.new_traces {
                state.tracker.apply(trace);
            }
            let mut traces = Vec::with_capacity(plan.outcomes.len());
            for outcome in &plan.outcomes {
                traces.push(match outcome {
                    Outcome::New(i) => plan.new_traces[*i].clone(),
                    Outcome::Existing(trace_id) => {
                        state.find_trace(trace_id)?.ok_or_else(|| StoreError::Io {
                            context: "finding the trace of a retried event in",
                            path: state.dir.clone(),
                            source: std::io::Error::other(format!("trace {trace_id} missing")),
                        })?
                    }
                });
            }
            state.traces.extend(plan.new_traces);
            let current_turn_id = state.tracker.current_turn_id().unwrap_or_default();
            drop(slot);
            // A retry waits too: the first attempt may still be in flight.
            self.settle(&raw, end).await?;
            return Ok(Ingested {
                traces,
                current_turn_id,
            });
        }
    }

    /// Waits until `end` is durable under the `Always` policy.
    async fn settle(&self, raw: &durable::DurableFile, end: u64) -> Result<()> {
        match self.inner.config.fsync {
            FsyncPolicy::Always => raw.sync_to(end).await,
            FsyncPolicy::Interval | FsyncPolicy::Never => Ok(()),
        }
    }

    /// Runs `f` over a consistent view of an existing agent. What `f` saw is
    /// durable when this returns (no read of data a crash could still lose).
    pub async fn read<T>(&self, id: &AgentId, f: impl FnOnce(AgentView<'_>) -> T) -> Result<T> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.state.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        let Some(raw) = state
            .raw
            .as_ref()
            .filter(|_| state.exists())
            .map(Arc::clone)
        else {
            return Err(StoreError::NotFound(id.to_string()));
        };
        let out = f(state.view());
        let end = raw.len();
        drop(slot);
        if let Err(e) = self.settle(&raw, end).await {
            // The agent is read-only now; what it holds is still the best
            // answer, and the write that failed was never acknowledged.
            tracing::warn!(agent = %id, error = %e, "serving a read after a failed flush");
        }
        Ok(out)
    }

    /// Agent ids after `page_token`, sorted, at most `page_size`; the token
    /// of the next page when more remain.
    pub async fn list_agents(
        &self,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>)> {
        let dir = self.inner.agents_dir.clone();
        let mut ids = tokio::task::spawn_blocking(move || list_dirs(&dir))
            .await
            .expect("list task panicked")?;
        ids.sort();
        let start = page_token.map_or(0, |t| ids.partition_point(|id| id.as_str() <= t));
        let page: Vec<String> = ids[start..].iter().take(page_size).cloned().collect();
        let next = (start + page.len() < ids.len())
            .then(|| page.last().cloned())
            .flatten();
        Ok((page, next))
    }

    /// Removes every file of the agent. In-flight calls on it finish first;
    /// later calls see NOT_FOUND (or, for Ingest, a new empty agent).
    pub async fn delete_agent(&self, id: &AgentId) -> Result<()> {
        let handle = self.handle(id);
        let mut slot = handle.state.lock().await;
        let dir = self.agent_dir(id);
        let forget = || {
            let mut agents = self.inner.agents.lock().expect("registry lock");
            if agents.get(id).is_some_and(|h| Arc::ptr_eq(h, &handle)) {
                agents.remove(id);
            }
        };
        if !dir.is_dir() {
            forget();
            return Err(StoreError::NotFound(id.to_string()));
        }
        // Rename first: one atomic step makes the agent gone, even if the
        // removal of its files is interrupted.
        let trash = self
            .inner
            .agents_dir
            .join(format!("{TRASH_PREFIX}{}", uuid::Uuid::new_v4()));
        std::fs::rename(&dir, &trash).map_err(StoreError::io("renaming", &dir))?;
        jsonl::sync_dir(&self.inner.agents_dir)?;
        let mut gone = AgentState::absent(dir.clone());
        gone.deleted = true;
        *slot = Some(gone);
        forget();
        drop(slot);
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&trash))
            .await
            .expect("remove task panicked")
            .map_err(StoreError::io("removing", &dir))?;
        Ok(())
    }

    /// Unloads agents idle for longer than `max_idle` that nobody is using,
    /// flushing their files first. Returns how many were unloaded.
    pub async fn evict_idle(&self, max_idle: Duration) -> usize {
        let cutoff = self.now_ms().saturating_sub(max_idle.as_millis() as u64);
        let evicted: Vec<Arc<AgentHandle>> = {
            let mut agents = self.inner.agents.lock().expect("registry lock");
            let idle: Vec<AgentId> = agents
                .iter()
                .filter(|(_, h)| {
                    Arc::strong_count(h) == 1 && h.last_used.load(Ordering::Relaxed) <= cutoff
                })
                .map(|(id, _)| id.clone())
                .collect();
            idle.iter().filter_map(|id| agents.remove(id)).collect()
        };
        for handle in &evicted {
            self.flush_handle(handle).await;
        }
        evicted.len()
    }

    /// Flushes every loaded agent's files (shutdown, the interval policy).
    pub async fn flush_all(&self) {
        let handles: Vec<Arc<AgentHandle>> = self
            .inner
            .agents
            .lock()
            .expect("registry lock")
            .values()
            .cloned()
            .collect();
        for handle in &handles {
            self.flush_handle(handle).await;
        }
    }

    async fn flush_handle(&self, handle: &AgentHandle) {
        let raw = handle
            .state
            .lock()
            .await
            .as_ref()
            .and_then(|s| s.raw.clone());
        if let Some(raw) = raw.filter(|r| r.is_dirty())
            && let Err(e) = raw.sync_all().await
        {
            tracing::error!(path = %raw.path().display(), error = %e, "flush failed");
        }
    }

    /// Background upkeep: idle eviction and the interval flush. Runs until
    /// the returned task is aborted.
    pub fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let config = &store.inner.config;
            let flush_every =
                (config.fsync == FsyncPolicy::Interval).then_some(config.fsync_interval);
            let evict_every = config
                .idle_evict
                .map(|d| (d / 4).max(Duration::from_millis(50)));
            let tick = match (flush_every, evict_every) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => return,
            };
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if flush_every.is_some() {
                    store.flush_all().await;
                }
                if let Some(max_idle) = config.idle_evict {
                    let n = store.evict_idle(max_idle).await;
                    if n > 0 {
                        tracing::debug!(evicted = n, "unloaded idle agents");
                    }
                }
            }
        })
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Creates `agents/` and finishes deletions a crash interrupted.
fn prepare_agents_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(StoreError::io("creating", dir))?;
    for entry in std::fs::read_dir(dir).map_err(StoreError::io("listing", dir))? {
        let entry = entry.map_err(StoreError::io("listing", dir))?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(TRASH_PREFIX)
        {
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(StoreError::io("removing", &path))?;
        }
    }
    Ok(())
}

fn list_dirs(dir: &Path) -> Result<Vec<String>> {
    let mut ids = vec![];
    for entry in std::fs::read_dir(dir).map_err(StoreError::io("listing", dir))? {
        let entry = entry.map_err(StoreError::io("listing", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if AgentId::parse(&name).is_ok() && entry.file_type().is_ok_and(|t| t.is_dir()) {
            ids.push(name);
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests;
