//! Users on files: which agents belong to a user, and erasing a user.
//!
//! A user's directory (`users/<id>/`) holds its blocks and an empty file
//! per agent bound to it (`users/<id>/agents/<agent>`). The file is made
//! before the agent's settings name the user, so it is a superset: a
//! crash between the two, or an agent deleted since, leaves one that the
//! agent's own settings (the truth) do not confirm, and readers skip it.
//! Markers are made under the user's blocks lock. DeleteUser closes a
//! gate under that lock and lists the markers once: a binding marked
//! before lands before the erasure (its agent is erased), one that meets
//! the closed gate releases its locks, waits, and lands after (in a new
//! directory). So an erasure takes one pass however busy the user is, and
//! holds no lock that a binder waits on while it waits on the binder.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use engram_core::{AgentId, UserId};

use crate::agent::{AgentMeta, STATE};
use crate::gate::{Gate, Mark};
use crate::{FileStore, Result, StoreError, TRASH_PREFIX, jsonl};

pub(crate) const AGENTS: &str = "agents";

impl FileStore {
    /// Records that `agent` is about to be bound to `user` (durably),
    /// before its settings say so.
    pub(crate) async fn mark_user(&self, user: &str, agent: &AgentId) -> Result<Mark> {
        let user = UserId::parse(user)?;
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(&user));
        let mut shared = slot.lock().await;
        let dir = self.user_dir(&user).join(AGENTS);
        let marker = dir.join(agent.as_str());
        let gate = Gate::live(&mut shared.erasing);
        let erasing = gate.is_some();
        let made = engram_store::blocking(move || {
            if marker.exists() {
                // Bound before: an erasure under way lists it.
                return Ok(true);
            }
            if erasing {
                return Ok(false);
            }
            std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
            jsonl::atomic_write(&marker, b"").map(|()| true)
        })
        .await?;
        if let (false, Some(gate)) = (made, gate) {
            // (Should the erasure have ended meanwhile, the wait is none.)
            return Ok(Mark::Wait(gate));
        }
        self.note_user(agent, user.as_str());
        Ok(Mark::Made)
    }

    /// The agents bound to `user`, sorted: the markers their settings
    /// confirm.
    pub(crate) async fn agents_of(&self, user: &UserId) -> Result<Vec<AgentId>> {
        let dir = self.user_dir(user).join(AGENTS);
        let agents = self.inner.agents_dir.clone();
        let user = user.as_str().to_owned();
        engram_store::blocking(move || {
            let mut ids: Vec<AgentId> = marked(&dir)?
                .into_iter()
                .filter(|id| owner(&agents.join(id.as_str())).as_deref() == Some(&user))
                .collect();
            ids.sort();
            Ok(ids)
        })
        .await
    }

    /// Drops `agent`'s marker of `user`; called under the agent's lock, so
    /// that no binding of it is under way.
    pub(crate) fn unmark_user(&self, user: &UserId, agent: &AgentId) -> Result<()> {
        let marker = self.user_dir(user).join(AGENTS).join(agent.as_str());
        crate::offload(|| match std::fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(StoreError::io("removing", &marker)(e))
            }
            _ => Ok(()),
        })
    }

    /// Whether the agent whose directory is `dir` belongs to `user` (its
    /// settings on disk: called under the agent's lock).
    pub(crate) async fn owned_by(&self, dir: &Path, user: &UserId) -> bool {
        let dir = dir.to_path_buf();
        let user = user.as_str().to_owned();
        engram_store::blocking(move || {
            Ok::<_, StoreError>(owner(&dir).as_deref() == Some(user.as_str()))
        })
        .await
        .unwrap_or(false)
    }

    /// The user the agent whose directory is `dir` belongs to, by its
    /// settings on disk (called under the agent's lock).
    pub(crate) async fn user_of(&self, dir: &Path) -> Option<UserId> {
        let dir = dir.to_path_buf();
        let owner = engram_store::blocking(move || Ok::<_, StoreError>(owner(&dir)))
            .await
            .ok()??;
        UserId::parse(&owner).ok()
    }

    /// Erases every agent of `user` and the user's directory (blocks,
    /// markers), then checkpoints so that no log segment keeps their text.
    /// Returns how many agents were erased; 0 for an unknown user.
    pub(crate) async fn erase_user(&self, user: &UserId) -> Result<usize> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        // The gate closed and the markers listed under the user's lock:
        // no marker is made after, so the list is every agent bound before.
        let (_closed, marked) = loop {
            let mut shared = slot.lock().await;
            if let Some(gate) = Gate::live(&mut shared.erasing) {
                // Another erasure of the user: this one comes after it.
                drop(shared);
                gate.passed().await;
                continue;
            }
            let (gate, closed) = Gate::closed();
            shared.erasing = Some(gate);
            let dir = self.user_dir(user).join(AGENTS);
            // On an error the guard drops and the gate is found stale.
            let marked = engram_store::blocking(move || marked(&dir)).await?;
            break (closed, marked);
        };
        let mut erased = 0;
        for id in &marked {
            // Removes the marker too, under the agent's lock.
            match self.delete_through(id, self.handle(id), Some(user)).await {
                Ok(()) => erased += 1,
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.remove_user_dir(user).await?;
        self.checkpoint().await?;
        Ok(erased)
    }

    /// Renames the user's directory away and removes it, under the user's
    /// blocks lock, and opens the gate (the slot starts empty).
    async fn remove_user_dir(&self, user: &UserId) -> Result<()> {
        let slot = self.inner.blocks.slot(&crate::blocks::user_key(user));
        let mut cached = slot.lock().await;
        let dir = self.user_dir(user);
        let users = self.users_dir();
        let trash = users.join(format!("{TRASH_PREFIX}{}", uuid::Uuid::new_v4()));
        // Closed before its directory goes (it is derived: a search that
        // comes later opens a new one).
        self.close_user_index(user).await?;
        engram_store::blocking(move || -> Result<()> {
            match std::fs::rename(&dir, &trash) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                other => other.map_err(StoreError::io("renaming", &dir))?,
            }
            jsonl::sync_dir(&users)?;
            std::fs::remove_dir_all(&trash).map_err(StoreError::io("removing", &trash))
        })
        .await?;
        *cached = crate::blocks::Shared::default();
        Ok(())
    }
}

/// The agent ids marked in `dir` (none if it does not exist).
pub(crate) fn marked(dir: &Path) -> Result<Vec<AgentId>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(StoreError::io("listing", dir)(e)),
    };
    let mut ids = vec![];
    for entry in entries {
        let entry = entry.map_err(StoreError::io("listing", dir))?;
        if let Ok(id) = AgentId::parse(&entry.file_name().to_string_lossy()) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Every agent id some user's directory marks (a superset of the bound
/// agents: [`owner`] is the truth).
pub(crate) fn marked_agents(users: &Path) -> Result<HashSet<String>> {
    let entries = match std::fs::read_dir(users) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(StoreError::io("listing", users)(e)),
    };
    let mut all = HashSet::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io("listing", users))?;
        let ids = marked(&entry.path().join(AGENTS))?;
        all.extend(ids.into_iter().map(|id| id.as_str().to_owned()));
    }
    Ok(all)
}

/// The user the agent in `dir` belongs to, by its settings on disk.
pub(crate) fn owner(dir: &Path) -> Option<String> {
    let path: PathBuf = dir.join(STATE);
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice::<AgentMeta>(&bytes).ok()?.user_id
}
