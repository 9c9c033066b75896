//! Keeping a user's index current (`user_index`): which agents changed
//! (noted by the writes and the indexer, and at open by the agents' file
//! lengths), and reading each into the index under the lock order the
//! user's index slot, an agent's index slot (never waited for), the agent.

use std::collections::HashMap;
use std::sync::Arc;

use engram_core::{AgentId, UserId};

use crate::index::{blocking, delta};
use crate::user_index::{Stamp, UserIndex, UserSlot};
use crate::{FileStore, Result, StoreError};

impl FileStore {
    /// The slot of `user`'s index (opened at its first use).
    pub(crate) fn user_slot(&self, user: &UserId) -> UserSlot {
        let mut slots = engram_store::lock(&self.inner.user_indexes);
        Arc::clone(slots.entry(user.clone()).or_default())
    }

    /// Notes that agent `id` changed, for its user's index (an agent of no
    /// user, or one not seen with its user yet, is nobody's business here:
    /// its user's index finds it by its marker and stamp).
    pub(crate) fn note_change(&self, id: &AgentId) {
        let user = engram_store::lock(&self.inner.agent_users).get(id).cloned();
        if let Some(user) = user {
            self.note_change_of(&user, id);
        }
    }

    /// Notes that agent `id` of `user` changed (or went).
    pub(crate) fn note_change_of(&self, user: &UserId, id: &AgentId) {
        let mut dirty = engram_store::lock(&self.inner.user_dirty);
        dirty.entry(user.clone()).or_default().insert(id.clone());
    }

    /// Brings the index of `id`'s user (if it has one) up to date, in the
    /// background work that calls it (the indexer, after embedding).
    pub(crate) async fn user_catch_up_later(&self, id: &AgentId) {
        let user = engram_store::lock(&self.inner.agent_users).get(id).cloned();
        if let Some(user) = user {
            if let Err(e) = self.user_caught_up(&user, None).await {
                tracing::debug!(user = %user, error = %e, "a user's index was not caught up; its next search does it");
            }
            self.persist_user_index(&user).await;
        }
    }

    /// Writes out what the user's open index holds in memory only (what
    /// prompts read in): background work, so that requests write no index
    /// file. Failing, it stays in memory until the next try.
    pub(crate) async fn persist_user_index(&self, user: &UserId) {
        let mut guard = self.user_slot(user).lock_owned().await;
        let persisted = blocking(move || match guard.as_mut() {
            Some(index) => index.persist(),
            None => Ok(()),
        })
        .await;
        if let Err(e) = persisted {
            tracing::warn!(user = %user, error = %e, "a user's index commit was not written out; kept in memory until the next try");
        }
    }

    /// Brings every open user index with changed agents up to date (the
    /// upkeep's tick), so that a user's next prompt finds them read in
    /// (without a model there is no indexer to do it after embedding).
    pub(crate) async fn catch_up_user_indexes(&self) {
        let users: Vec<UserId> = engram_store::lock(&self.inner.user_dirty)
            .iter()
            .filter(|(_, agents)| !agents.is_empty())
            .map(|(user, _)| user.clone())
            .collect();
        for user in users {
            let open = engram_store::lock(&self.inner.user_indexes)
                .get(&user)
                .is_some_and(|slot| slot.try_lock().is_ok_and(|s| s.is_some()));
            if open && let Err(e) = self.user_caught_up(&user, None).await {
                tracing::debug!(user = %user, error = %e, "a user's index was not caught up; its next search does it");
            }
        }
        // What prompts staged or read in since, in memory only.
        let unpersisted: Vec<UserId> = engram_store::lock(&self.inner.user_indexes)
            .iter()
            .filter(|(_, slot)| {
                slot.try_lock().is_ok_and(|s| {
                    s.as_ref().is_some_and(|i| {
                        i.lexical.unpersisted_bytes() > 0 || i.lexical.staged() > 0
                    })
                })
            })
            .map(|(user, _)| user.clone())
            .collect();
        for user in unpersisted {
            self.persist_user_index(&user).await;
        }
        // Facts a client wrote that an earlier try could not embed.
        let waiting: Vec<UserId> = engram_store::lock(&self.inner.user_indexes)
            .iter()
            .filter(|(_, slot)| {
                slot.try_lock()
                    .is_ok_and(|s| s.as_ref().is_some_and(UserIndex::awaits_embedding))
            })
            .map(|(user, _)| user.clone())
            .collect();
        for user in waiting {
            self.embed_user_facts(&user).await;
        }
    }

    /// Reads the user's facts into its index and embeds those a client
    /// wrote: the background work after a client's change. A failure is
    /// logged; the upkeep's tick or the next search tries again.
    pub(crate) async fn user_facts_later(&self, user: &UserId) {
        if let Err(e) = self.user_caught_up(user, None).await {
            tracing::debug!(user = %user, error = %e, "a user's index was not caught up; its next search does it");
            return;
        }
        self.embed_user_facts(user).await;
    }

    /// Embeds the user's facts its index embeds itself, a batch at a time
    /// (with the model, off the index's lock).
    async fn embed_user_facts(&self, user: &UserId) {
        let Some(indexer) = self.inner.indexer.clone() else {
            return;
        };
        let slot = self.user_slot(user);
        loop {
            let batch = match slot.lock().await.as_ref() {
                Some(index) => index.to_embed(crate::indexer::BATCH),
                None => return,
            };
            if batch.is_empty() {
                return;
            }
            // Facts stand alone: no text before them.
            let batch = batch.into_iter().map(|item| (item, None)).collect();
            let outcome = engram_store::embed_batch(indexer.embedder.as_ref(), batch).await;
            let embedded = outcome.embedded;
            let done = embedded.is_empty();
            let mut guard = Arc::clone(&slot).lock_owned().await;
            let written = blocking(move || match guard.as_mut() {
                Some(index) => index.embedded(embedded),
                None => Ok(()),
            })
            .await;
            if let Err(e) = written {
                tracing::warn!(user = %user, error = %e, "a user's facts' vectors were not stored");
                return;
            }
            if let Some(why) = outcome.failed {
                tracing::warn!(user = %user, error = %why, "a user's facts were not embedded; retrying later");
                return;
            }
            if done {
                return;
            }
        }
    }

    /// Remembers that `id` belongs to `user` (loaded or bound).
    pub(crate) fn note_user(&self, id: &AgentId, user: &str) {
        if let Ok(user) = UserId::parse(user) {
            engram_store::lock(&self.inner.agent_users).insert(id.clone(), user);
        }
    }

    /// Brings `user`'s index up to date with every acknowledged write of
    /// the user's agents and facts, opening it (and checking every agent
    /// against what it recorded) at first use. `current` (an agent, and
    /// its epoch now) is the conversation whose prompt asks: its active
    /// transcript is hidden from the search, so it is read in only when a
    /// compaction has archived something since (a prompt does not pay for
    /// reading in its own new message), and vectors still to be copied
    /// from loaded agents are left to the background.
    pub(crate) async fn user_caught_up(
        &self,
        user: &UserId,
        current: Option<(&AgentId, u32)>,
    ) -> Result<()> {
        self.user_caught_up_as(user, current, false).await
    }

    /// [`user_caught_up`](Self::user_caught_up); to `stage` (a search),
    /// what the conversations add is staged, not committed
    /// ([`UserIndex::mirror`]), and the upkeep's tick or the indexer
    /// commits it.
    pub(crate) async fn user_caught_up_as(
        &self,
        user: &UserId,
        current: Option<(&AgentId, u32)>,
        stage: bool,
    ) -> Result<()> {
        let slot = self.user_slot(user);
        let opened = slot.lock().await.is_some();
        if !opened {
            self.open_user_index(user, &slot).await?;
        }
        self.mirror_user_facts(user, &slot).await?;
        let mut dirty: Vec<AgentId> = engram_store::lock(&self.inner.user_dirty)
            .remove(user)
            .map(|d| d.into_iter().collect())
            .unwrap_or_default();
        let (waiting, unchanged) = match slot.lock().await.as_ref() {
            Some(index) => {
                let unchanged = current.filter(|(id, epoch)| {
                    index
                        .cursor(id.as_str())
                        .map_or(*epoch == 0, |c| c.epoch == *epoch)
                });
                // A prompt leaves vectors to the background (the indexer
                // mirrors an agent after embedding it; until then its items
                // are found by their words): a search copies them.
                let waiting = match current {
                    Some(_) => vec![],
                    None => index.waiting_for_vectors(),
                };
                (waiting, unchanged.map(|(id, _)| id.clone()))
            }
            None => (vec![], None),
        };
        if let Some(own) = &unchanged
            && let Some(at) = dirty.iter().position(|d| d == own)
        {
            // Still to be read in, by a later search.
            dirty.remove(at);
            self.note_change_of(user, own);
        }
        for agent in waiting {
            if let Ok(id) = AgentId::parse(&agent)
                && !dirty.contains(&id)
                && unchanged.as_ref() != Some(&id)
                && engram_store::lock(&self.inner.agents).contains_key(&id)
            {
                // Loaded: its own index may have embedded them by now.
                dirty.push(id);
            }
        }
        dirty.sort();
        for id in dirty {
            if let Err(e) = self.mirror_agent(user, &id, &slot, stage).await {
                // Told again, so a later search tries again.
                engram_store::lock(&self.inner.user_dirty)
                    .entry(user.clone())
                    .or_default()
                    .insert(id);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Opens `user`'s index and notes as changed every agent of the user
    /// whose files it has not read as they are.
    async fn open_user_index(&self, user: &UserId, slot: &UserSlot) -> Result<()> {
        let dir = self.user_dir(user);
        if !crate::offload(|| dir.is_dir()) {
            // A user with nothing (or erased): no index is made for it.
            return Ok(());
        }
        let agents_dir = self.inner.agents_dir.clone();
        let model = self.model_id();
        let mut guard = slot.lock().await;
        if guard.is_some() {
            return Ok(());
        }
        let (index, stale) = blocking(move || {
            let index = UserIndex::open(&dir, model.as_ref())?;
            let mut known: HashMap<String, Stamp> = index.stamps().into_iter().collect();
            for marked in crate::users::marked(&dir.join(crate::users::AGENTS))? {
                known.entry(marked.to_string()).or_insert(Stamp {
                    raw: u64::MAX,
                    ..Stamp::default()
                });
            }
            let stale: Vec<String> = known
                .into_iter()
                .filter(|(agent, stamp)| Stamp::of(&agents_dir.join(agent)) != *stamp)
                .map(|(agent, _)| agent)
                .collect();
            Ok((index, stale))
        })
        .await?;
        *guard = Some(index);
        drop(guard);
        let mut dirty = engram_store::lock(&self.inner.user_dirty);
        let mine = dirty.entry(user.clone()).or_default();
        mine.extend(stale.iter().filter_map(|a| AgentId::parse(a).ok()));
        Ok(())
    }

    /// Reads the user's facts into its index when their file changed.
    async fn mirror_user_facts(&self, user: &UserId, slot: &UserSlot) -> Result<()> {
        // Read under the user's lock (a fold appends to the file), which
        // is released before the index's is taken; unchanged (its length):
        // nothing to do.
        let (facts, len) = self.read_user_facts(user).await?;
        if slot
            .lock()
            .await
            .as_ref()
            .is_none_or(|i| i.facts_len() == len)
        {
            return Ok(());
        }
        let mut guard = Arc::clone(slot).lock_owned().await;
        if guard.is_none() {
            return Ok(()); // erased meanwhile
        }
        blocking(move || {
            let index = guard.as_mut().expect("open");
            index.mirror_facts(&facts, len)
        })
        .await
    }

    /// Rewrites the segments of `user`'s index that still hold the text of
    /// a fact deleted since (after reading the deletion in).
    /// Closes and removes the user's index, to be made again from the
    /// files at its next use (they were replaced: an import).
    pub(crate) async fn drop_user_index(&self, user: &UserId) -> Result<()> {
        let mut guard = self.user_slot(user).lock_owned().await;
        let dir = self.user_dir(user).join(crate::index::INDEX_DIR);
        blocking(move || {
            if let Some(open) = guard.take() {
                open.close()?;
            }
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(StoreError::io("removing", &dir)(e))
                }
                _ => Ok(()),
            }
        })
        .await
    }

    pub(crate) async fn purge_user_index(&self, user: &UserId) -> Result<()> {
        if !self.user_dir(user).join(crate::index::INDEX_DIR).exists() {
            return Ok(());
        }
        self.user_caught_up(user, None).await?;
        let mut guard = self.user_slot(user).lock_owned().await;
        blocking(move || match guard.as_mut() {
            Some(index) => index.purge_removed(),
            None => Ok(()),
        })
        .await
    }

    /// Reads agent `id`'s changes into `user`'s index, from its files as
    /// loaded, with the vectors its own index has if that is open and free
    /// (never opened or caught up here: that costs commits, and is the
    /// agent's search's or indexer's work, after which the agent is noted
    /// again); forgets it if it is gone or not the user's. Mirrors of a
    /// user go one at a time, under its index's slot.
    async fn mirror_agent(
        &self,
        user: &UserId,
        id: &AgentId,
        slot: &UserSlot,
        stage: bool,
    ) -> Result<()> {
        let handle = match self.existing_handle(id) {
            Ok(handle) => handle,
            Err(StoreError::NotFound(_)) => return self.forget_in_user_index(id, slot).await,
            Err(e) => return Err(e),
        };
        let mut guard = Arc::clone(slot).lock_owned().await;
        let Some(from) = guard.as_ref().map(|i| i.cursor(id.as_str())) else {
            return Ok(()); // erased meanwhile
        };
        // Not waited for: whoever holds it may be waiting for this agent.
        let own = Arc::clone(&handle.index).try_lock_owned().ok();
        // The delta and the files' lengths, as one state of the agent.
        let read = self
            .read_through(id, &handle, |state| {
                let stamp = Stamp::of(&state.dir);
                (state.meta.user_id.clone(), delta(state, from), stamp)
            })
            .await;
        let (owner, delta, stamp) = match read {
            Ok(read) => read,
            Err(StoreError::NotFound(_)) => (None, None, Stamp::default()),
            Err(e) => return Err(e),
        };
        let agent_dir = self.agent_dir(id);
        let agent = id.to_string();
        let mine = owner.as_deref() == Some(user.as_str());
        blocking(move || {
            let vectors = own
                .as_ref()
                .and_then(|o| o.as_ref())
                .and_then(|i| i.vectors.as_ref());
            let index = guard.as_mut().expect("open");
            if mine {
                index.mirror(&agent, &agent_dir, delta, vectors, (stamp, stage))
            } else {
                index.forget(&agent)
            }
        })
        .await
    }

    pub(crate) async fn forget_in_user_index(&self, id: &AgentId, slot: &UserSlot) -> Result<()> {
        let mut guard = Arc::clone(slot).lock_owned().await;
        let agent = id.to_string();
        blocking(move || match guard.as_mut() {
            Some(index) => index.forget(&agent),
            None => Ok(()),
        })
        .await
    }

    /// Closes `user`'s index (DeleteUser: under the user's lock, before its
    /// directory goes).
    pub(crate) async fn close_user_index(&self, user: &UserId) -> Result<()> {
        let slot = self.user_slot(user);
        let mut guard = slot.lock().await;
        if let Some(index) = guard.take() {
            blocking(move || index.close()).await?;
        }
        engram_store::lock(&self.inner.user_dirty).remove(user);
        Ok(())
    }
}
