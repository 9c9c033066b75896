//! A user's facts on files: `users/<id>/facts.jsonl`, one line per version
//! of a fact (the last line of an id wins), appended and synced by each
//! fold and each client's change under the user's lock (the one its
//! blocks and agent markers use, and DeleteUser holds while it removes the
//! directory), and kept in memory beside the user's blocks once read; and
//! its last summarized conversation, `users/<id>/last_conversation.json`,
//! replaced whole by each fold that brings summaries.
//!
//! A client's delete appends the deleting version, then rewrites the file
//! with no text left in the fact's earlier versions; a crash between the
//! two is finished at the next load.

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::facts::{Applied, Op};
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::users::consolidate::{Consolidated, ConsolidationRecord, Plan};
use engram_core::users::{self, Folded, LastConversation, UserFact};
use engram_core::{AgentId, UserId};
use engram_store::{UserMemory, new_id, unix_now};

use crate::fact_file::{FACTS, file_len};
use crate::jsonl::{self, append_sync};
use crate::{FileStore, Result, StoreError};

pub(crate) const LAST: &str = "last_conversation.json";

#[async_trait]
impl UserMemory for FileStore {
    async fn user_facts(&self, user: &UserId) -> Result<Vec<UserFact>> {
        Ok(self.read_user_facts(user).await?.0.to_vec())
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

    async fn consolidate_user(
        &self,
        user: &UserId,
        plan: &Plan,
        record: ConsolidationRecord,
    ) -> Result<(Consolidated, ConsolidationRecord)> {
        self.consolidate(user, plan, record).await
    }

    async fn consolidations(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ConsolidationRecord>> {
        self.read_consolidations(user, limit).await
    }

    async fn fold_into_user(
        &self,
        user: &UserId,
        agent: &AgentId,
        items: &[SemanticItem],
        summaries: &[EpisodicItem],
    ) -> Result<Folded> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let mut shared = slot.lock().await;
        // Under the user's lock: an erasure removes the directory under it
        // after the agents, so an agent found here is erased after this
        // fold, with what it wrote.
        if !self.owned_by(&self.agent_dir(agent), user).await {
            return Err(StoreError::NotFound(agent.to_string()));
        }
        let dir = self.user_dir(user);
        let last = LastConversation::of(agent.as_str(), summaries);
        if let Some(last) = last {
            let dir = dir.clone();
            engram_store::blocking(move || {
                std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
                let json = serde_json::to_vec(&last).expect("summaries serialize");
                jsonl::atomic_write(&dir.join(LAST), &json)
            })
            .await?;
        }
        let path = dir.join(FACTS);
        let facts = shared.facts(path.clone()).await?;
        let known = Arc::clone(&facts.all);
        let (agent, items) = (agent.to_string(), items.to_vec());
        let (folded, appended) = engram_store::blocking(move || {
            let folded = users::fold(&known, &agent, &items, new_id);
            let bytes = jsonl::lines(&folded.changed);
            if !bytes.is_empty() {
                append_sync(&path, &bytes)?;
            }
            Ok::<_, StoreError>((folded, bytes.len() as u64))
        })
        .await?;
        facts.len += appended;
        facts.record(folded.changed.iter().cloned());
        Ok(folded)
    }
}

impl FileStore {
    /// The user's facts (the last version of each) and their file's
    /// length (what the user's index compares; 0 without a file).
    pub(crate) async fn read_user_facts(&self, user: &UserId) -> Result<(Arc<Vec<UserFact>>, u64)> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let mut shared = slot.lock().await;
        let facts = shared.facts(self.user_dir(user).join(FACTS)).await?;
        Ok((Arc::clone(&facts.all), facts.len))
    }

    /// Every stored version of the user's fact `id`, oldest first.
    pub(crate) async fn user_fact_history(
        &self,
        user: &UserId,
        id: &str,
    ) -> Result<Vec<SemanticItem>> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let _held = slot.lock().await;
        let path = self.user_dir(user).join(FACTS);
        let id = id.to_owned();
        engram_store::blocking(move || {
            let (lines, _) = jsonl::load::<UserFact>(&path)?;
            Ok(users::history(lines, &id))
        })
        .await
    }

    /// A client's change of the user's facts, stored durably (a delete's
    /// text erased from the file before it answers; the index's copy is
    /// the caller's to purge).
    pub(crate) async fn change_user_facts(&self, user: &UserId, op: Op) -> Result<Applied> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let mut shared = slot.lock().await;
        let dir = self.user_dir(user);
        let path = dir.join(FACTS);
        let facts = shared.facts(path.clone()).await?;
        let known = Arc::clone(&facts.all);
        let bytes: usize = known.iter().map(|f| f.fact.fact.len()).sum();
        let (applied, lines) = engram_store::offload_over(bytes as u64, || {
            users::change(&known, op, unix_now(), new_id)
        })?;
        let erase = applied.erase.is_some();
        let bytes = jsonl::lines(&lines);
        let len = engram_store::blocking(move || {
            std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
            append_sync(&path, &bytes)?;
            if erase {
                crate::fact_file::scrub::<UserFact>(&path)?;
            }
            file_len(&path)
        })
        .await?;
        facts.record(lines);
        facts.len = len;
        Ok(applied)
    }

    /// The expired facts of the users whose facts are in memory (a busy
    /// user is looked at next time), by user: id and version.
    pub(crate) fn expired_user_facts(&self) -> Vec<(UserId, Vec<(String, u64)>)> {
        let now = unix_now();
        self.inner
            .blocks
            .slots()
            .into_iter()
            .filter_map(|(key, slot)| {
                let user = UserId::parse(key.strip_prefix("user/")?).ok()?;
                let shared = slot.try_lock().ok()?;
                let expired = shared.loaded_facts()?.expired(now);
                (!expired.is_empty()).then_some((user, expired))
            })
            .collect()
    }
}
