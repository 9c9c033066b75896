//! A user's search index: every conversation of the user, and the user's
//! facts, in one index (`users/<id>/.index/`), so that a new conversation
//! recalls from all of them in one search, however many there are.
//!
//! It is derived twice over: each agent's items are read from the agent's
//! files, from where this index last read them (a [`Cursor`] per agent, as
//! the agent's own index keeps), and their vectors are copied from the
//! agent's own index once its indexer has embedded them (never embedded
//! twice). Each agent has an ordinal, and its items are placed in the
//! ordinal's range of conversation order ([`place`]), so neighbours stay
//! within a conversation and one conversation's items can be hidden (its
//! active transcript) or removed (a deleted agent) by range. Ordinal 0 is
//! the user's facts.
//!
//! What changed is known from the writes (`FileStore::note_change`, in
//! memory), and at open from the agents' file lengths ([`Stamp`]) against
//! those this index recorded: an agent written while the index was not
//! told (a crash, a restart) is read again. Lock order: the user's index
//! slot, an agent's index slot (only tried, never waited for), the agent;
//! the user's blocks lock is never held with the user's index slot except
//! by DeleteUser, which takes it first.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use engram_core::users::UserFact;
use engram_index::{Embedded, Item, Lexical, Vectors, WordVectors};
use engram_store::items::{episodic_item, trace_item};
use engram_store::ranked::{key_of, place, range, split_key};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex as AsyncMutex;

use crate::agent::{EPISODIC, RAW_ARCHIVE, RAW_TRACES};
use crate::index::{
    BATCH, Cursor, Delta, INDEX_DIR, ModelId, VECTORS_FILE, index_error, read_archive,
};
use crate::{Result, StoreError};

/// What this version indexes; another is read again from the start.
const FORMAT: u32 = 1;

/// Ordinal of the user's facts.
const FACTS: u32 = 0;

/// An agent's file lengths: what changed while nobody told the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    pub raw: u64,
    pub archive: u64,
    pub episodic: u64,
}

impl Stamp {
    pub fn of(agent_dir: &Path) -> Self {
        let len = |name: &str| std::fs::metadata(agent_dir.join(name)).map_or(0, |m| m.len());
        Self {
            raw: len(RAW_TRACES),
            archive: len(RAW_ARCHIVE),
            episodic: len(EPISODIC),
        }
    }
}

/// One conversation as the index holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mirrored {
    ordinal: u32,
    cursor: Option<Cursor>,
    stamp: Stamp,
}

/// What each commit records.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Payload {
    format: u32,
    agents: BTreeMap<String, Mirrored>,
    next_ordinal: u32,
    /// Length of the facts file last read.
    facts: u64,
}

/// A user's open index.
pub(crate) struct UserIndex {
    pub lexical: Lexical,
    pub vectors: Option<Vectors>,
    payload: Payload,
    /// Items still without a vector, by the agent whose own index will
    /// have it: (key here, key there).
    unvectored: HashMap<String, HashSet<(String, String)>>,
    /// The user's facts that are embedded here (a client wrote them: no
    /// conversation's index has their words), by key: their items.
    to_embed: HashMap<String, Item>,
    /// Each user fact as last read in (a hash of its line), by id: what
    /// the next read compares (empty after opening: all read once).
    seen_facts: HashMap<String, u64>,
    /// Items were written since the last commit.
    written: bool,
    /// The commit whose words the table of word vectors was last asked
    /// about (query expansion), and the table's evictions then.
    words_at: Option<(u64, u64)>,
    /// Conversations with items staged since the last commit: their words
    /// are not in the committed vocabulary that [`Self::agents_missing_words`]
    /// asks the table about.
    staged_agents: HashSet<String>,
    /// Of those, the ones not handed to the indexer yet for their words.
    unchecked: Vec<String>,
}

impl std::fmt::Debug for UserIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserIndex")
            .field("agents", &self.payload.agents.len())
            .finish()
    }
}

/// The slot a user's index lives in: one holder at a time.
pub(crate) type UserSlot = Arc<AsyncMutex<Option<UserIndex>>>;

impl UserIndex {
    pub fn open(user_dir: &Path, model: Option<&ModelId>) -> Result<Self> {
        let dir = user_dir.join(INDEX_DIR);
        std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
        let opened = Lexical::open(&dir).and_then(|lexical| {
            let payload = lexical
                .payload()?
                .and_then(|p| serde_json::from_str::<Payload>(&p).ok())
                .filter(|p| p.format == FORMAT);
            Ok((lexical, payload))
        });
        let (mut lexical, payload) = match opened {
            Ok((lexical, Some(payload))) => (lexical, payload),
            // Derived data: an unreadable or older index starts over.
            other => {
                if let Err(e) = &other {
                    tracing::warn!(dir = %dir.display(), error = %e, "a user's search index is unreadable; rebuilding it");
                }
                // Closed before its directory goes.
                drop(other);
                std::fs::remove_dir_all(&dir).map_err(StoreError::io("removing", &dir))?;
                let lexical = Lexical::open(&dir).map_err(index_error)?;
                (
                    lexical,
                    Payload {
                        format: FORMAT,
                        next_ordinal: FACTS + 1,
                        ..Payload::default()
                    },
                )
            }
        };
        // A sitting never spans two conversations (the issue 28 sittings:
        // each conversation's runs of messages are scored as wholes).
        lexical.set_conversation_bits(engram_store::ranked::CONVERSATION_BITS);
        let vectors = model
            .map(|m| {
                Vectors::open(
                    &dir.join(VECTORS_FILE),
                    &engram_store::vector_model(&m.id),
                    m.dim,
                )
            })
            .transpose()
            .map_err(index_error)?;
        let mut index = Self {
            lexical,
            vectors,
            payload,
            unvectored: HashMap::new(),
            to_embed: HashMap::new(),
            seen_facts: HashMap::new(),
            written: false,
            words_at: None,
            staged_agents: HashSet::new(),
            unchecked: Vec::new(),
        };
        index.find_unvectored()?;
        Ok(index)
    }

    /// After opening: the items without a vector, by the agent whose index
    /// has it (a fact's by its first source).
    fn find_unvectored(&mut self) -> Result<()> {
        let Some(vectors) = &self.vectors else {
            return Ok(());
        };
        let missing = self
            .lexical
            .items_except(|key| vectors.contains(key), usize::MAX)
            .map_err(index_error)?;
        for item in missing {
            match split_key(&item.key) {
                (Some(agent), key) => {
                    let there = key.to_owned();
                    self.unvectored
                        .entry(agent.to_owned())
                        .or_default()
                        .insert((item.key, there));
                }
                (None, _) => {
                    if let Ok(fact) = serde_json::from_str::<UserFact>(&item.body) {
                        self.await_vector(&fact, item);
                    }
                }
            }
        }
        Ok(())
    }

    /// The conversations this index holds, with what they looked like.
    pub fn stamps(&self) -> Vec<(String, Stamp)> {
        let agents = self.payload.agents.iter();
        agents.map(|(a, m)| (a.clone(), m.stamp)).collect()
    }

    /// The ordinal of `agent`, if it is here.
    pub fn ordinal(&self, agent: &str) -> Option<u32> {
        self.payload.agents.get(agent).map(|m| m.ordinal)
    }

    /// Length of the facts file last read.
    pub fn facts_len(&self) -> u64 {
        self.payload.facts
    }

    /// The user's conversations to hand to the indexer when `table` lacks
    /// words of this index (after a restart the table starts empty, and a
    /// conversation nobody searches or writes is not visited by it); asked
    /// once per commit and per change of the table's evictions. The
    /// vocabulary is the committed one: a conversation staged since (read
    /// in by a search, as one that changed while the index was not told is
    /// after a restart) is handed over once per commit unasked, its own
    /// index knowing its words. Blocking.
    pub fn agents_missing_words(&mut self, table: &WordVectors) -> Result<Vec<String>> {
        if self.vectors.is_none() {
            return Ok(Vec::new());
        }
        let stamp = (self.lexical.generation(), table.evictions());
        if self.words_at != Some(stamp) {
            self.words_at = Some(stamp);
            let missing = self
                .lexical
                .words_without_vectors(table)
                .map_err(index_error)?;
            if !missing.is_empty() {
                self.unchecked.clear();
                return Ok(self.payload.agents.keys().cloned().collect());
            }
        }
        Ok(std::mem::take(&mut self.unchecked))
    }

    /// Each conversation by its ordinal.
    pub fn agents_by_ordinal(&self) -> HashMap<u32, String> {
        let agents = self.payload.agents.iter();
        agents.map(|(a, m)| (m.ordinal, a.clone())).collect()
    }

    /// How far `agent` was read (none: from the start).
    pub fn cursor(&self, agent: &str) -> Option<Cursor> {
        self.payload.agents.get(agent).and_then(|m| m.cursor)
    }

    /// Reads `delta` of `agent` (whose directory is `agent_dir`) in, with
    /// the vectors its own index has, and commits; or, to `stage` (a
    /// prompt's recall), stages it ([`Lexical::stage`]: searched at once,
    /// no commit), for the next commit to write ([`Self::commit`]).
    pub fn mirror(
        &mut self,
        agent: &str,
        agent_dir: &Path,
        delta: Option<Delta>,
        own: Option<&Vectors>,
        (stamp, stage): (Stamp, bool),
    ) -> Result<()> {
        if !stage {
            // Before anything is written: a staged item is older than it.
            self.fold_staged()?;
        }
        let ordinal = match self.payload.agents.get(agent) {
            Some(m) => m.ordinal,
            None => {
                let n = self.payload.next_ordinal.max(FACTS + 1);
                self.payload.next_ordinal = n + 1;
                self.payload.agents.insert(
                    agent.to_owned(),
                    Mirrored {
                        ordinal: n,
                        cursor: None,
                        stamp: Stamp::default(),
                    },
                );
                n
            }
        };
        let from = self.cursor(agent).unwrap_or_default();
        let mut to = self.cursor(agent);
        if let Some(delta) = delta {
            let rekey = |item: Item| Item {
                key: key_of(agent, &item.key),
                order: place(ordinal, item.order),
                ..item
            };
            if delta.full {
                // Traces a compaction archived before this index read them.
                let path = agent_dir.join(RAW_ARCHIVE);
                let mut batch = Vec::new();
                let (lo, hi) = (from.archive.min(delta.to.archive), delta.to.archive);
                read_archive(&path, lo, hi, |t| {
                    batch.push(rekey(trace_item(&t)));
                    if batch.len() == BATCH {
                        self.add(agent, std::mem::take(&mut batch), own, stage)?;
                    }
                    Ok(())
                })?;
                self.add(agent, batch, own, stage)?;
            }
            let mut items: Vec<Item> = delta.traces.iter().map(|t| rekey(trace_item(t))).collect();
            items.extend(
                delta
                    .episodic
                    .iter()
                    .filter(|e| e.is_shown())
                    .map(|e| rekey(episodic_item(e))),
            );
            self.add(agent, items, own, stage)?;
            to = Some(delta.to);
        }
        self.copy_vectors(agent, own)?;
        if let Some(m) = self.payload.agents.get_mut(agent) {
            m.cursor = to;
            m.stamp = stamp;
        }
        match stage {
            // The cursor moved with what was staged: the commit that
            // writes those records it.
            true => Ok(()),
            false => self.commit(),
        }
    }

    /// Indexes `items` of `agent`, with the vectors its own index has.
    fn add(
        &mut self,
        agent: &str,
        items: Vec<Item>,
        own: Option<&Vectors>,
        stage: bool,
    ) -> Result<()> {
        if stage {
            self.lexical.stage(&items).map_err(index_error)?;
            if !items.is_empty() && self.staged_agents.insert(agent.to_owned()) {
                self.unchecked.push(agent.to_owned());
            }
        } else {
            self.lexical.upsert(&items).map_err(index_error)?;
            self.written = true;
        }
        if let Some(vectors) = &self.vectors {
            let pending = self.unvectored.entry(agent.to_owned()).or_default();
            // Read in again (after a compaction), an item keeps its vector.
            for item in items.into_iter().filter(|i| !vectors.contains(&i.key)) {
                let there = split_key(&item.key).1.to_owned();
                pending.insert((item.key, there));
            }
            self.copy_vectors(agent, own)?;
        }
        Ok(())
    }

    /// Copies the vectors `own` (the agent's index) has for items here
    /// that lack one.
    fn copy_vectors(&mut self, agent: &str, own: Option<&Vectors>) -> Result<()> {
        let ordinal = self.ordinal(agent).unwrap_or(FACTS);
        let (Some(vectors), Some(own)) = (self.vectors.as_mut(), own) else {
            return Ok(());
        };
        let Some(pending) = self.unvectored.get_mut(agent) else {
            return Ok(());
        };
        let mut copied = Vec::new();
        pending.retain(|(here, there)| match own.get(there) {
            Some(e) => {
                copied.push((here.clone(), e));
                false
            }
            None => true,
        });
        if pending.is_empty() {
            self.unvectored.remove(agent);
        }
        if copied.is_empty() {
            return Ok(());
        }
        let mut add = Vec::with_capacity(copied.len());
        for (here, e) in copied {
            // The place here (a fact keeps the one the index gave it).
            let order = match split_key(&here).0 {
                Some(_) => place(ordinal, e.order),
                None => place(FACTS, 0),
            };
            add.push(Embedded {
                key: here,
                order,
                ..e
            });
        }
        vectors_write(vectors, &add, &[])
    }

    /// Drops `agent` (deleted, or no longer the user's): its items, its
    /// vectors, its place.
    pub fn forget(&mut self, agent: &str) -> Result<()> {
        // Written first, so that the removal below covers it.
        self.fold_staged()?;
        let Some(m) = self.payload.agents.remove(agent) else {
            return Ok(());
        };
        let (lo, hi) = range(m.ordinal);
        self.lexical.remove_between(lo, hi).map_err(index_error)?;
        self.written = true;
        if let Some(vectors) = self.vectors.as_mut() {
            let keys = vectors.keys_between(lo, hi);
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            vectors_write(vectors, &[], &keys)?;
        }
        self.unvectored.remove(agent);
        self.commit()
    }

    /// Rewrites the segments that still hold removed items' text (a
    /// deleted fact's).
    pub fn purge_removed(&mut self) -> Result<()> {
        self.lexical.purge_removed().map_err(index_error)
    }

    /// Commits what was written, with the payload. Nothing written, no
    /// commit (the writer stays open, so a commit would always cost its
    /// fsyncs): a cursor or stamp moved alone is recorded by the next one.
    fn commit(&mut self) -> Result<()> {
        self.fold_staged()?;
        if !self.written {
            return Ok(());
        }
        let payload = serde_json::to_string(&self.payload).expect("a payload serializes");
        // The writer stays open, its merges running in the background:
        // a prompt that reads a conversation in must not wait for them (a
        // user's index is one per user, not per conversation). `close`,
        // which DeleteUser calls before the directory goes, waits. In
        // memory: a prompt that reads a conversation in writes no file;
        // the background work after it persists (`persist`).
        self.lexical
            .commit_in_memory(&payload)
            .map_err(index_error)?;
        self.written = false;
        Ok(())
    }

    /// Writes what prompts staged to the writer, to be committed with
    /// the cursors that moved with it.
    fn fold_staged(&mut self) -> Result<()> {
        // Committed next: the vocabulary then holds their words.
        self.staged_agents.clear();
        self.unchecked.clear();
        if self.lexical.staged() == 0 {
            return Ok(());
        }
        let (items, removed) = self.lexical.take_staged();
        self.lexical.upsert(&items).map_err(index_error)?;
        let removed: Vec<&str> = removed.iter().map(String::as_str).collect();
        self.lexical.remove(&removed).map_err(index_error)?;
        self.written = true;
        Ok(())
    }

    /// Commits what prompts staged and writes out the commits held in
    /// memory (background work only).
    pub fn persist(&mut self) -> Result<()> {
        self.commit()?;
        if self.lexical.unpersisted_bytes() == 0 {
            return Ok(());
        }
        self.lexical.persist().map_err(index_error)
    }

    pub fn close(self) -> Result<()> {
        self.lexical.close().map_err(index_error)
    }

    /// Conversations with vectors still to copy, whose own index may have
    /// them by now.
    pub fn waiting_for_vectors(&self) -> Vec<String> {
        self.unvectored
            .keys()
            .filter(|a| *a != "~")
            .cloned()
            .collect()
    }
}

fn vectors_write(vectors: &mut Vectors, add: &[Embedded], remove: &[&str]) -> Result<()> {
    vectors.write(add, remove).map_err(index_error)
}

mod facts;
