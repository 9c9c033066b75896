//! Memory blocks on files: each scope's versions in one append-only JSONL
//! file (`global/blocks.jsonl`, `users/<id>/blocks.jsonl`, and
//! `agents/<id>/blocks.jsonl`, which goes with its agent when it is
//! deleted or forked). A write appends one line and syncs it before it
//! answers; the current blocks of each scope are kept in memory.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use engram_core::blocks::{self, Block, Change, Scope};
use engram_core::{AgentId, UserId};
use engram_store::Blocks;
use tokio::sync::Mutex as AsyncMutex;

use crate::fact_file::UserFacts;
use crate::gate::Mark;
use crate::jsonl::{self, append_sync, line};
use crate::{FileStore, Result, SeenBlocks, StoreError, unix_now};

pub(crate) const BLOCKS: &str = "blocks.jsonl";

/// One shared scope, behind its writers' lock: its blocks once loaded,
/// and for a user its facts once loaded (`user_facts.rs`).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    blocks: Option<ScopeBlocks>,
    facts: Option<UserFacts>,
    /// For a user: closed while a DeleteUser of it runs (`users.rs`).
    pub(crate) erasing: Option<crate::gate::Gate>,
}

impl Shared {
    /// The scope's blocks, loaded from `path` at first use.
    async fn blocks(&mut self, path: PathBuf) -> Result<&mut ScopeBlocks> {
        if self.blocks.is_none() {
            self.blocks = Some(engram_store::blocking(move || ScopeBlocks::load(&path)).await?);
        }
        Ok(self.blocks.as_mut().expect("loaded"))
    }

    /// The user's facts, loaded from `path` at first use.
    pub(crate) async fn facts(&mut self, path: PathBuf) -> Result<&mut UserFacts> {
        if self.facts.is_none() {
            self.facts = Some(engram_store::blocking(move || UserFacts::load(&path)).await?);
        }
        Ok(self.facts.as_mut().expect("loaded"))
    }

    /// Drops what is loaded: the files were replaced (an import).
    pub(crate) fn forget_loaded(&mut self) {
        self.blocks = None;
        self.facts = None;
    }

    /// The user's facts if they are loaded (nothing is read).
    pub(crate) fn loaded_facts(&self) -> Option<&UserFacts> {
        self.facts.as_ref()
    }
}

type ScopeSlot = Arc<AsyncMutex<Shared>>;

/// A scope's blocks as its file holds them: the last version of each
/// label (a deletion's tombstone included, so that versions go on from
/// it) and the live ones, shared with every prompt that shows them.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScopeBlocks {
    last: BTreeMap<String, Block>,
    live: Arc<Vec<Block>>,
}

impl ScopeBlocks {
    /// From every version, oldest first.
    pub(crate) fn of(versions: Vec<Block>) -> Self {
        let mut last = BTreeMap::new();
        for v in versions {
            last.insert(v.label.clone(), v);
        }
        let live = Arc::new(last.values().filter(|b| !b.deleted).cloned().collect());
        Self { last, live }
    }

    /// Loads the scope's file. Blocking; a torn or corrupt line is
    /// repaired (and logged) by the load.
    pub(crate) fn load(path: &Path) -> Result<Self> {
        load_versions(path).map(Self::of)
    }

    /// The live blocks, by label.
    pub(crate) fn live(&self) -> &Arc<Vec<Block>> {
        &self.live
    }

    fn last(&self, label: &str) -> Option<&Block> {
        self.last.get(label)
    }

    /// Takes in a version just stored.
    fn record(&mut self, block: Block) {
        self.last.insert(block.label.clone(), block);
        self.live = Arc::new(self.last.values().filter(|b| !b.deleted).cloned().collect());
    }
}

/// The current blocks of the global and user scopes, loaded at first use.
/// One async lock per scope: writers of a scope go one at a time.
#[derive(Debug, Default)]
pub(crate) struct ScopeCache {
    scopes: std::sync::Mutex<HashMap<String, ScopeSlot>>,
}

impl ScopeCache {
    pub(crate) fn slot(&self, key: &str) -> ScopeSlot {
        let mut scopes = engram_store::lock(&self.scopes);
        Arc::clone(scopes.entry(key.to_owned()).or_default())
    }

    /// Every scope seen so far, with its slot.
    pub(crate) fn slots(&self) -> Vec<(String, ScopeSlot)> {
        let scopes = engram_store::lock(&self.scopes);
        scopes
            .iter()
            .map(|(k, s)| (k.clone(), Arc::clone(s)))
            .collect()
    }
}

/// Every version stored in `path`, oldest first. Blocking.
pub(crate) fn load_versions(path: &Path) -> Result<Vec<Block>> {
    // A torn or corrupt line is repaired (and logged) by the load.
    jsonl::load::<Block>(path).map(|(versions, _)| versions)
}

/// The cache key of a user's scope (its lock is the user's).
pub(crate) fn user_key(user: &UserId) -> String {
    format!("user/{user}")
}

impl FileStore {
    pub(crate) fn users_dir(&self) -> PathBuf {
        self.inner.config.data_dir.join("users")
    }

    pub(crate) fn user_dir(&self, user: &UserId) -> PathBuf {
        self.users_dir().join(user.as_str())
    }

    /// Where a shared scope's blocks are, and its cache key.
    fn shared_path(&self, scope: &Scope) -> (PathBuf, String) {
        match scope {
            Scope::User(u) => (self.user_dir(u).join(BLOCKS), user_key(u)),
            _ => (
                self.inner.config.data_dir.join("global").join(BLOCKS),
                "global".into(),
            ),
        }
    }

    /// The live blocks of a shared scope (global, a user's).
    pub(crate) async fn shared_blocks(&self, scope: &Scope) -> Result<Arc<Vec<Block>>> {
        let (path, key) = self.shared_path(scope);
        let slot = self.inner.blocks.slot(&key);
        let mut cached = slot.lock().await;
        let blocks = cached.blocks(path).await?;
        Ok(Arc::clone(blocks.live()))
    }

    /// What an agent of `user` sees beside its own blocks.
    pub(crate) async fn seen_blocks(
        &self,
        user: Option<&str>,
        agent: Arc<Vec<Block>>,
    ) -> Result<SeenBlocks> {
        let global = self.shared_blocks(&Scope::Global).await?;
        let (user, user_pinned) = match user.map(UserId::parse).transpose()? {
            // The user's blocks and pinned facts, under one hold of its lock.
            Some(u) => {
                let (path, key) = self.shared_path(&Scope::User(u.clone()));
                let slot = self.inner.blocks.slot(&key);
                let mut cached = slot.lock().await;
                let blocks = Arc::clone(cached.blocks(path).await?.live());
                let facts = cached.facts(self.user_dir(&u).join(crate::fact_file::FACTS));
                (blocks, Arc::clone(&facts.await?.pinned))
            }
            None => Default::default(),
        };
        Ok(SeenBlocks {
            global,
            user,
            agent,
            user_pinned,
        })
    }

    async fn write_shared(
        &self,
        scope: &Scope,
        label: &str,
        change: Change,
        expected: Option<u64>,
    ) -> Result<Block> {
        let (path, key) = self.shared_path(scope);
        let slot = self.inner.blocks.slot(&key);
        let mut cached = slot.lock().await;
        let blocks = cached.blocks(path.clone()).await?;
        let last = blocks.last(label);
        let next = blocks::apply(scope, label, last, change, expected, unix_now())?;
        let bytes = line(&next);
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        engram_store::blocking(move || {
            std::fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
            append_sync(&path, &bytes)
        })
        .await?;
        blocks.record(next.clone());
        Ok(next)
    }

    async fn write_agent(
        &self,
        id: &AgentId,
        label: &str,
        change: Change,
        expected: Option<u64>,
        user: Option<&UserId>,
    ) -> Result<Block> {
        loop {
            let handle = self.handle(id);
            let mut slot = handle.lock().await;
            let state = self.loaded(id, &mut slot).await?;
            if state.deleted {
                continue;
            }
            let settings = state.settings_for(user, None)?;
            if let Some(user) = state.meta.binds(settings.as_ref())
                && let Mark::Wait(gate) = self.mark_user(user, id).await?
            {
                drop(slot);
                gate.passed().await;
                continue;
            }
            let scope = Scope::Agent(id.clone());
            let last = state.blocks.last(label);
            let next = blocks::apply(&scope, label, last, change, expected, unix_now())?;
            if !state.exists() {
                state.create(&self.inner.health)?;
            }
            if let Some(meta) = settings {
                state.save_meta(meta)?;
            }
            let path = state.dir.join(BLOCKS);
            crate::offload(|| append_sync(&path, &line(&next)))?;
            state.blocks.record(next.clone());
            return Ok(next);
        }
    }
}

#[async_trait]
impl Blocks for FileStore {
    async fn list_blocks(&self, scope: &Scope) -> Result<Vec<Block>> {
        match scope {
            Scope::Agent(id) => match self.read(id, |s| Arc::clone(s.blocks.live())).await {
                Ok(blocks) => Ok(blocks.to_vec()),
                Err(StoreError::NotFound(_)) => Ok(vec![]),
                Err(e) => Err(e),
            },
            shared => Ok(self.shared_blocks(shared).await?.to_vec()),
        }
    }

    async fn block_history(&self, scope: &Scope, label: &str) -> Result<Vec<Block>> {
        let path = match scope {
            Scope::Agent(id) => {
                // A delete removes the file.
                let label = label.to_owned();
                return self
                    .read_locked(id, BLOCKS, move |path| {
                        let versions = load_versions(&path)?;
                        Ok(versions.into_iter().filter(|b| b.label == label).collect())
                    })
                    .await;
            }
            shared => self.shared_path(shared),
        };
        let (path, key) = path;
        let slot = self.inner.blocks.slot(&key);
        let _held = slot.lock().await;
        let versions = engram_store::blocking(move || load_versions(&path)).await?;
        Ok(versions.into_iter().filter(|b| b.label == label).collect())
    }

    async fn write_block(
        &self,
        scope: &Scope,
        label: &str,
        change: Change,
        expected_version: Option<u64>,
        user: Option<&UserId>,
    ) -> Result<Block> {
        match scope {
            Scope::Agent(id) => {
                self.write_agent(id, label, change, expected_version, user)
                    .await
            }
            shared => {
                self.write_shared(shared, label, change, expected_version)
                    .await
            }
        }
    }
}
