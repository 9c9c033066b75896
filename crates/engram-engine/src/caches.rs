//! The context engine's caches: per agent, the token counts and the
//! rendered JSON of its transcript's messages, so a prompt costs only what
//! changed since the last one, and the current turn's recall. They are caches, not state: kept here, not
//! in storage, keyed by the transcript's identity (a new epoch or a
//! reloaded agent starts them over), and dropped when idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use engram_core::AgentId;
use engram_core::render::RenderCache;
use engram_core::tokens::TokenCache;
use engram_store::Recalled;

/// One agent's caches.
#[derive(Debug, Default)]
pub struct Caches {
    pub tokens: TokenCache,
    pub render: RenderCache,
    /// The current turn's recall, for the turn's later prompts.
    pub recall: Option<Arc<TurnRecall>>,
    /// The memory blocks' section, under a hash of what it was made from.
    pub blocks: Option<(u64, Arc<engram_core::blocks::Section>)>,
    /// Token counts of recalled entries (`recall::attach`).
    pub recall_tokens: EntryTokens,
    /// What the last prompt served had that the next one will not (its
    /// recall block), in tokens: taken off the usage the client reports
    /// for it ([`ContextCaches::served_extra`]).
    pub served_extra: Option<u32>,
}

impl Caches {
    /// About how many bytes these caches hold (the memory budget's
    /// account).
    pub fn memory_bytes(&self) -> u64 {
        let recall = self
            .recall
            .as_ref()
            .map_or(0, |r| r.entries.iter().map(|e| e.text.len() + 256).sum());
        let blocks = self.blocks.as_ref().map_or(0, |(_, s)| s.text.len());
        (self.render.memory_bytes()
            + self.tokens.memory_bytes()
            + recall
            + blocks
            + self.recall_tokens.0.len() * 16) as u64
    }
}

/// Token counts of recall entries by a hash of their encoding and text:
/// the same memories come back turn after turn, and counting them was a
/// fifth of a recalling prompt's time. Emptied when it holds
/// [`EntryTokens::MAX`].
#[derive(Debug, Default)]
pub struct EntryTokens(std::collections::HashMap<u64, u32>);

impl EntryTokens {
    const MAX: usize = 1024;

    /// The tokens of `text` in `encoding`, counted once.
    pub fn count(&mut self, encoding: engram_core::tokens::Encoding, text: &str) -> u32 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (encoding, text).hash(&mut h);
        let key = h.finish();
        if let Some(&n) = self.0.get(&key) {
            return n;
        }
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        let n = engram_core::tokens::count_text(encoding, text);
        self.0.insert(key, n);
        n
    }
}

/// One memory as the block shows it, and as the response lists it.
#[derive(Debug, Clone)]
pub struct RecallEntry {
    pub text: String,
    pub memory: Recalled,
}

/// What one turn recalls; the same for each of the turn's prompts.
#[derive(Debug)]
pub struct TurnRecall {
    /// The transcript it was made for: an agent deleted and made again is
    /// a new one (at the same epoch and turn).
    pub transcript: u64,
    pub epoch: u32,
    pub turn_id: String,
    pub floor: crate::recall::floor::Floor,
    /// Ranked as of this time (`recall_as_of`).
    pub as_of: Option<f64>,
    /// The index of the current user message in the epoch's messages.
    pub at: usize,
    pub entries: Vec<RecallEntry>,
    /// What the ranking held and the entries leave out.
    pub report: crate::recall::floor::Report,
}

#[derive(Debug)]
struct Entry {
    caches: Arc<Mutex<Caches>>,
    used: Instant,
    /// What the caches held when last free to look at.
    bytes: u64,
}

#[derive(Debug, Default)]
pub struct ContextCaches {
    agents: Mutex<HashMap<AgentId, Entry>>,
}

impl ContextCaches {
    /// The caches of `agent` (new ones the first time), held until the
    /// guard drops. Callers hold them for one count or render: a second
    /// request of the same agent waits that long.
    pub fn of(&self, agent: &AgentId) -> Arc<Mutex<Caches>> {
        let mut agents = self.lock();
        let entry = agents.entry(agent.clone()).or_insert_with(|| Entry {
            caches: Arc::default(),
            used: Instant::now(),
            bytes: 0,
        });
        entry.used = Instant::now();
        Arc::clone(&entry.caches)
    }

    /// Whether `agent`'s last prompt recalled (its next one will, most
    /// likely); asks without making caches.
    /// What Engram added, for that call only, to the last prompt it served
    /// `agent` (0 when this replica served it none since its last usage
    /// report, or its caches were dropped).
    pub fn served_extra(&self, agent: &AgentId) -> u32 {
        let caches = self.lock().get(agent).map(|e| Arc::clone(&e.caches));
        caches.map_or(0, |c| lock(&c).served_extra.unwrap_or(0))
    }

    /// The report for the last prompt served is stored: a later one is of
    /// a later prompt.
    pub fn served_reported(&self, agent: &AgentId) {
        let caches = self.lock().get(agent).map(|e| Arc::clone(&e.caches));
        if let Some(c) = caches {
            lock(&c).served_extra = None;
        }
    }

    pub fn recalled_last(&self, agent: &AgentId) -> bool {
        let caches = self.lock().get(agent).map(|e| Arc::clone(&e.caches));
        caches.is_some_and(|c| lock(&c).recall.is_some())
    }

    /// Drops `agent`'s caches: what they hold (a turn's recall, rendered
    /// messages) may quote what was just forgotten.
    pub fn drop_agent(&self, agent: &AgentId) {
        self.lock().remove(agent);
    }

    /// Drops the caches of agents unused for longer than `max_idle`;
    /// returns how many.
    pub fn evict_idle(&self, max_idle: Duration) -> usize {
        let mut agents = self.lock();
        let before = agents.len();
        agents.retain(|_, e| e.used.elapsed() <= max_idle);
        before - agents.len()
    }

    /// What every agent's caches hold, estimated (those in use as last
    /// seen).
    pub fn memory_bytes(&self) -> u64 {
        let mut agents = self.lock();
        agents.values_mut().map(Entry::measure).sum()
    }

    /// Drops caches, least recently used first and none in use, until
    /// they hold at most `target` bytes; what they hold then.
    pub fn shrink_to(&self, target: u64) -> u64 {
        let mut agents = self.lock();
        let mut total: u64 = agents.values_mut().map(Entry::measure).sum();
        if total <= target {
            return total;
        }
        let mut order: Vec<(Instant, AgentId)> =
            agents.iter().map(|(id, e)| (e.used, id.clone())).collect();
        order.sort();
        for (_, id) in order {
            if total <= target {
                break;
            }
            if let Some(e) = agents.get(&id)
                && Arc::strong_count(&e.caches) == 1
            {
                total = total.saturating_sub(e.bytes);
                agents.remove(&id);
            }
        }
        total
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<AgentId, Entry>> {
        engram_store::lock(&self.agents)
    }
}

impl Entry {
    /// The caches' size, looked at if nobody holds them.
    fn measure(&mut self) -> u64 {
        if let Ok(caches) = self.caches.try_lock() {
            self.bytes = caches.memory_bytes();
        }
        self.bytes
    }
}

/// The caches behind `cell`, whatever a panic left there (a cache is
/// rebuilt from scratch by its next use at worst).
pub fn lock(cell: &Mutex<Caches>) -> MutexGuard<'_, Caches> {
    engram_store::lock_or(cell, |caches| *caches = Caches::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_get_their_own_caches_and_idle_ones_go() {
        let caches = ContextCaches::default();
        let (a, b) = (AgentId::parse("a").unwrap(), AgentId::parse("b").unwrap());
        assert!(Arc::ptr_eq(&caches.of(&a), &caches.of(&a)));
        assert!(!Arc::ptr_eq(&caches.of(&a), &caches.of(&b)));
        assert_eq!(caches.evict_idle(Duration::from_secs(60)), 0);
        assert_eq!(caches.evict_idle(Duration::ZERO), 2);
        assert!(caches.is_empty());
    }

    #[test]
    fn entry_tokens_are_counted_once_and_stay_bounded() {
        use engram_core::tokens::{Encoding, count_text};
        let mut counted = EntryTokens::default();
        let text = "- (2023-05-08, turn_0003)\n  Caroline: I went to the support group.";
        for encoding in [Encoding::O200k, Encoding::Cl100k] {
            assert_eq!(counted.count(encoding, text), count_text(encoding, text));
            assert_eq!(counted.count(encoding, text), count_text(encoding, text));
        }
        for n in 0..3 * EntryTokens::MAX {
            counted.count(Encoding::O200k, &n.to_string());
        }
        assert!(counted.0.len() <= EntryTokens::MAX);
    }
}
