//! Facts that clients manage (`Facts`), on files. An agent's are lines of
//! its `semantic.jsonl`, compaction's and clients' alike: every version a
//! line, the last line of an id the fact as it stands. A delete appends
//! the deleting version, then rewrites the file with no text left in the
//! fact's earlier versions; a crash between the two is finished at the
//! next load (a deleted fact's text is never read back in).

use async_trait::async_trait;
use engram_core::AgentId;
use engram_core::blocks::Scope;
use engram_core::facts::{self, Applied, Op};
use engram_core::memory::SemanticItem;
use engram_store::{FactOwner, Facts, fact_owner, new_id, unix_now};

use crate::agent::{AgentState, SEMANTIC};
use crate::jsonl::append_sync;
use crate::{FileStore, Result, StoreError};

#[async_trait]
impl Facts for FileStore {
    async fn facts(&self, scope: &Scope) -> Result<Vec<SemanticItem>> {
        let live = |f: &&SemanticItem| f.managed.deleted_at.is_none();
        match fact_owner(scope)? {
            FactOwner::User(user) => {
                let (facts, _) = self.read_user_facts(user).await?;
                Ok(facts
                    .iter()
                    .map(|f| &f.fact)
                    .filter(live)
                    .cloned()
                    .collect())
            }
            FactOwner::Agent(id) => {
                match self
                    .read(id, |s| s.semantic.iter().filter(live).cloned().collect())
                    .await
                {
                    Err(StoreError::NotFound(_)) => Ok(vec![]),
                    read => read,
                }
            }
        }
    }

    async fn fact_history(&self, scope: &Scope, id: &str) -> Result<Vec<SemanticItem>> {
        let agent = match fact_owner(scope)? {
            FactOwner::User(user) => return self.user_fact_history(user, id).await,
            FactOwner::Agent(agent) => agent,
        };
        // A delete rewrites the file.
        let id = id.to_owned();
        self.read_locked(agent, SEMANTIC, move |path| {
            let (mut lines, _) = crate::jsonl::load::<SemanticItem>(&path)?;
            lines.retain(|f| f.id == id);
            // One line per version: a compaction that superseded the fact
            // stored its version again.
            Ok(engram_core::bundle::fact_versions(&lines, |f| f))
        })
        .await
    }

    async fn change_facts(&self, scope: &Scope, op: Op, limit: Option<u32>) -> Result<Applied> {
        match fact_owner(scope)? {
            FactOwner::User(user) => {
                let applied = self.change_user_facts(user, op).await?;
                if applied.erase.is_some() {
                    // The user's index drops the deleted fact's text from
                    // its files before the delete answers.
                    self.purge_user_index(user).await?;
                }
                // Read into the user's index, and embedded, in the
                // background.
                let (store, user) = (self.clone(), user.clone());
                tokio::spawn(async move { store.user_facts_later(&user).await });
                Ok(applied)
            }
            FactOwner::Agent(id) => {
                let applied = self.change_facts_of(id, op, limit).await?;
                if applied.erase.is_some() {
                    // The search index drops the deleted fact's text from
                    // its files before the delete answers.
                    self.purge_index(id).await?;
                }
                Ok(applied)
            }
        }
    }

    async fn purge_expired(&self) -> Result<usize> {
        let now = unix_now();
        let mut expired: Vec<(Scope, String, u64)> = self
            .scan_loaded(|agent, state| {
                let scope = Scope::Agent(agent.clone());
                let of_agent: Vec<_> = state
                    .semantic
                    .iter()
                    .filter(|f| f.is_live() && f.is_expired(now))
                    .map(|f| (scope.clone(), f.id.clone(), f.version()))
                    .collect();
                Some(of_agent)
            })
            .into_iter()
            .flatten()
            .collect();
        for (user, facts) in self.expired_user_facts() {
            let scope = Scope::User(user);
            expired.extend(facts.into_iter().map(|(id, v)| (scope.clone(), id, v)));
        }
        let mut purged = 0;
        for (scope, id, version) in expired {
            purged += usize::from(engram_store::purge_fact(self, &scope, id, version).await?);
        }
        Ok(purged)
    }
}

impl FileStore {
    /// The change itself, under the agent's lock.
    async fn change_facts_of(&self, id: &AgentId, op: Op, limit: Option<u32>) -> Result<Applied> {
        loop {
            let handle = match op {
                // An add may start the agent; other changes need its facts.
                Op::Add(_) => self.handle(id),
                _ => self.existing_handle(id)?,
            };
            let mut slot = handle.lock().await;
            let state = self.loaded(id, &mut slot).await?;
            if state.deleted {
                continue;
            }
            if !state.exists() && !matches!(op, Op::Add(_)) {
                return Err(StoreError::NotFound(id.to_string()));
            }
            let now = unix_now();
            let applied = facts::apply(&state.semantic, op.clone(), now, new_id)?;
            if !state.exists() {
                state.create(&self.inner.health)?;
            }
            store_change(state, &applied)?;
            state.facts_changed(now);
            if let Some(meta) = state.facts_meta(limit, now) {
                state.save_meta(meta)?;
                engram_store::drop_later(state.rebuild_epoch());
            }
            self.index_later(id);
            return Ok(applied);
        }
    }

    /// Rewrites the agent's search index without the items it removed (a
    /// deleted fact's text), when it has one on disk.
    async fn purge_index(&self, id: &AgentId) -> Result<()> {
        if !self.agent_dir(id).join(crate::index::INDEX_DIR).exists() {
            return Ok(());
        }
        let current = match self.caught_up(id).await {
            Ok(current) => current,
            Err(StoreError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        engram_store::blocking(move || {
            let mut current = current;
            current
                .index()
                .lexical
                .purge_removed()
                .map_err(crate::index::index_error)
        })
        .await
    }
}

/// Appends `applied`'s versions to the agent's facts (and erases the text
/// of a deleted fact's earlier versions), then folds them into its state.
fn store_change(state: &mut AgentState, applied: &Applied) -> Result<()> {
    let path = state.dir.join(SEMANTIC);
    let bytes = crate::jsonl::lines(&applied.lines);
    crate::offload(|| append_sync(&path, &bytes))?;
    state.fact_lines += applied.lines.len();
    if applied.erase.is_some() {
        let path = path.clone();
        crate::offload(move || crate::fact_file::scrub::<SemanticItem>(&path).map(drop))?;
    }
    for line in &applied.lines {
        match state.semantic.iter_mut().find(|f| f.id == line.id) {
            Some(old) => *old = line.clone(),
            None => state.semantic.push(line.clone()),
        }
    }
    Ok(())
}

/// Renders the snapshot's facts again when one expired since (a prompt
/// shows an expired fact no more, from the first request after it).
pub(crate) fn expire_facts(state: &mut AgentState) -> Result<()> {
    let now = unix_now();
    if !state.facts_due(now) {
        return Ok(());
    }
    state.facts_changed(now);
    if let Some(meta) = state.facts_meta(None, now) {
        state.save_meta(meta)?;
        engram_store::drop_later(state.rebuild_epoch());
    }
    Ok(())
}
