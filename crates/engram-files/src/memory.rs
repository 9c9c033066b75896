//! What the loaded agents hold in memory, estimated per agent, and
//! unloading the least recently used ones to a target (the engine's memory
//! budget). An agent's estimate is refreshed whenever its state and index
//! are free; an agent in use keeps its last one (it is not unloaded
//! anyway). The factors were measured with `engram-bench memory`
//! (docs/BENCHMARKS.md): resident memory per loaded agent against the
//! bytes of its files.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use engram_core::AgentId;

use crate::index::AgentIndex;
use crate::{AgentHandle, FileStore, agent::AgentState};

/// A loaded agent with nothing in it: its state, handle, open trace file.
const AGENT_BASE: u64 = 16 << 10;
/// Memory per byte of the active traces' file: the traces parsed, the
/// transcript's messages made of them, the turn and call maps.
const PER_ACTIVE_BYTE: u64 = 3;
/// An open search index: its reader and segment readers, the analyzer.
const INDEX_BASE: u64 = 192 << 10;
/// Per item the index holds: its place and time, kept for neighbours, and
/// who said it (the speaker prior): two map entries.
const PER_INDEXED: u64 = 80;
/// Per item waiting for the embedding model: its text.
const PER_PENDING: u64 = 1 << 10;
/// Agents flushed and unloaded at once.
const UNLOADS_AT_ONCE: usize = 16;

fn state_bytes(state: &AgentState) -> u64 {
    if !state.exists() {
        return 0;
    }
    AGENT_BASE + PER_ACTIVE_BYTE * state.bytes()
}

fn index_bytes(index: &AgentIndex) -> u64 {
    INDEX_BASE
        + PER_INDEXED * index.lexical.len()
        + index
            .vectors
            .as_ref()
            .map_or(0, |v| v.memory_bytes() as u64)
        + PER_PENDING * index.pending.len() as u64
        + index.lexical.cached_bytes() as u64
}

impl AgentHandle {
    /// The agent's estimate, refreshed if its state and index are free.
    fn memory(&self) -> u64 {
        let state = self
            .state
            .try_lock()
            .ok()
            .map(|s| s.as_ref().map_or(0, state_bytes));
        let index = self
            .index
            .try_lock()
            .ok()
            .map(|i| i.as_ref().map_or(0, index_bytes));
        if let (Some(state), Some(index)) = (state, index) {
            self.bytes.store(state + index, Ordering::Relaxed);
        }
        self.bytes.load(Ordering::Relaxed)
    }
}

impl FileStore {
    /// The loaded agents' estimates, summed, and the word vectors every
    /// agent shares (bounded; unloading agents does not shrink them).
    pub(crate) fn memory_bytes(&self) -> u64 {
        let handles: Vec<Arc<AgentHandle>> = engram_store::lock(&self.inner.agents)
            .values()
            .map(Arc::clone)
            .collect();
        let words = self
            .inner
            .indexer
            .as_ref()
            .map_or(0, |i| i.words().memory_bytes() as u64);
        handles.iter().map(|h| h.memory()).sum::<u64>() + words
    }

    /// Unloads agents, least recently used first, until the estimates sum
    /// to at most `target` (or no agent nobody uses is left). Those chosen
    /// are flushed and unloaded at once, not one after the other: each
    /// flush is a sync of its file, and a burst of loads must be answered
    /// within the budget's tick, not over seconds.
    pub(crate) async fn shrink_to(&self, target: u64) -> Vec<AgentId> {
        let handles: Vec<(AgentId, Arc<AgentHandle>)> = engram_store::lock(&self.inner.agents)
            .iter()
            .map(|(id, h)| (id.clone(), Arc::clone(h)))
            .collect();
        let mut sized: Vec<(AgentId, Arc<AgentHandle>, u64)> = handles
            .into_iter()
            .map(|(id, h)| {
                let bytes = h.memory();
                (id, h, bytes)
            })
            .collect();
        sized.sort_by_key(|(_, h, _)| h.last_used.load(Ordering::Relaxed));
        let total: u64 = sized.iter().map(|(_, _, b)| b).sum();
        // The least recently used, until their bytes cover the excess; one
        // plainly in use (a call holds its handle or its state) is passed
        // over, and any other the unload finds in use stays.
        let mut excess = total.saturating_sub(target);
        let mut chosen = tokio::task::JoinSet::new();
        let mut unloaded = vec![];
        for (id, handle, bytes) in sized {
            if excess == 0 {
                break;
            }
            // The registry's and this one.
            if Arc::strong_count(&handle) > 2 || handle.state.try_lock().is_err() {
                continue;
            }
            excess = excess.saturating_sub(bytes);
            let store = self.clone();
            chosen.spawn(async move { store.unload(&id, handle).await.then_some(id) });
            // A few at a time: each flush holds a blocking thread.
            if chosen.len() >= UNLOADS_AT_ONCE {
                collect(&mut chosen, 1, &mut unloaded).await;
            }
        }
        collect(&mut chosen, 0, &mut unloaded).await;
        if !unloaded.is_empty() {
            metrics::counter!("engram_memory_unloads_total").increment(unloaded.len() as u64);
        }
        unloaded
    }
}

/// Waits for unloads until at most `left` are running, noting those done.
async fn collect(
    running: &mut tokio::task::JoinSet<Option<AgentId>>,
    left: usize,
    unloaded: &mut Vec<AgentId>,
) {
    while running.len() > left {
        if let Some(Ok(Some(id))) = running.join_next().await {
            unloaded.push(id);
        }
    }
}
