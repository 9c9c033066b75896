//! A user's facts on files: `users/<id>/facts.jsonl`, one line per version
//! of a fact (the last line of an id wins), appended and synced by each
//! fold under the user's lock (the one its blocks and agent markers use,
//! and DeleteUser holds while it removes the directory); and its last
//! summarized conversation, `users/<id>/last_conversation.json`, replaced
//! whole by each fold that brings summaries.

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::users::{self, Folded, LastConversation, UserFact};
use engram_core::{AgentId, UserId};
use engram_store::UserMemory;

use crate::jsonl::{self, append_sync};
use crate::{FileStore, Result, StoreError};

pub(crate) const FACTS: &str = "facts.jsonl";
const LAST: &str = "last_conversation.json";

/// The last version of each fact in `path`, in the order facts first
/// appeared. Blocking; a torn line is repaired (and logged) by the load.
fn load_facts(path: &Path) -> Result<Vec<UserFact>> {
    let (versions, _) = jsonl::load::<UserFact>(path)?;
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut facts: Vec<UserFact> = vec![];
    for v in versions {
        match at.get(&v.fact.id) {
            Some(&i) => facts[i] = v,
            None => {
                at.insert(v.fact.id.clone(), facts.len());
                facts.push(v);
            }
        }
    }
    Ok(facts)
}

#[async_trait]
impl UserMemory for FileStore {
    async fn user_facts(&self, user: &UserId) -> Result<Vec<UserFact>> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        let path = self.user_dir(user).join(FACTS);
        engram_store::blocking(move || load_facts(&path)).await
    }

    async fn last_conversation(&self, user: &UserId) -> Result<Option<LastConversation>> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        let path = self.user_dir(user).join(LAST);
        engram_store::blocking(move || match std::fs::read(&path) {
            // Written whole (atomically): damage means outside hands.
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io("reading", &path)(e)),
        })
        .await
    }

    async fn note_used(&self, used: &[(AgentId, f64)]) -> Result<()> {
        self.inner.quiet.note(used).await
    }

    async fn take_quiet(&self, before: f64) -> Result<Vec<AgentId>> {
        self.inner.quiet.take(before).await
    }

    async fn fold_into_user(
        &self,
        user: &UserId,
        agent: &AgentId,
        items: &[SemanticItem],
        summaries: &[EpisodicItem],
    ) -> Result<Folded> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        // Under the user's lock: an erasure removes the directory under it
        // after the agents, so an agent found here is erased after this
        // fold, with what it wrote.
        if !self.owned_by(&self.agent_dir(agent), user).await {
            return Err(StoreError::NotFound(agent.to_string()));
        }
        let dir = self.user_dir(user);
        let last = LastConversation::of(agent.as_str(), summaries);
        let (agent, items) = (agent.to_string(), items.to_vec());
        engram_store::blocking(move || {
            if let Some(last) = last {
                std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
                let json = serde_json::to_vec(&last).expect("summaries serialize");
                jsonl::atomic_write(&dir.join(LAST), &json)?;
            }
            let path = dir.join(FACTS);
            let known = load_facts(&path)?;
            let folded = users::fold(&known, &agent, &items, || uuid::Uuid::now_v7().to_string());
            if folded.changed.is_empty() {
                return Ok(folded);
            }
            let mut lines = vec![];
            for f in &folded.changed {
                serde_json::to_writer(&mut lines, f).expect("facts serialize");
                lines.push(b'\n');
            }
            append_sync(&path, &lines)?;
            Ok(folded)
        })
        .await
    }
}

impl FileStore {
    /// The user's facts and their file's length (what the user's index
    /// compares), read under the user's lock; `None` without any.
    pub(crate) async fn read_user_facts(
        &self,
        user: &UserId,
    ) -> Result<Option<(Vec<UserFact>, u64)>> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        let path = self.user_dir(user).join(FACTS);
        engram_store::blocking(move || {
            let len = match std::fs::metadata(&path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(StoreError::io("reading", &path)(e)),
            };
            Ok(Some((load_facts(&path)?, len)))
        })
        .await
    }
}
