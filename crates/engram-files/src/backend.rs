//! The file store as a [`Store`]: each method is the file store's own step
//! of the same name (in `write`, `compact`, `search`, `fork`, `registry`).

use async_trait::async_trait;
use engram_core::compaction::Summary;
use engram_core::{AgentId, NewEvent, Usage};

use crate::{
    AgentContext, Begun, Bundle, Committed, FileStore, IndexState, Ingested, Job, MemoryQuery,
    Microcompacted, Policy, PrepareInput, Prepared, RankedMemories, Result, Search, SearchPage,
    Store, Visible,
};

#[async_trait]
impl Store for FileStore {
    async fn ingest(
        &self,
        id: &AgentId,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
    ) -> Result<Ingested> {
        let ingested = FileStore::ingest(self, id, events, usage, model).await?;
        self.index_later(id);
        Ok(ingested)
    }

    async fn mark_compaction_required(&self, id: &AgentId, epoch: u32) -> Result<bool> {
        FileStore::mark_compaction_required(self, id, epoch).await
    }

    async fn prepare(&self, id: &AgentId, input: PrepareInput<'_>) -> Result<Prepared> {
        let prepared = FileStore::prepare(self, id, input).await?;
        self.index_later(id);
        Ok(prepared)
    }

    async fn context(&self, id: &AgentId) -> Result<AgentContext> {
        FileStore::context(self, id).await
    }

    async fn bundle(&self, id: &AgentId, raw_tail_turns: usize) -> Result<Bundle> {
        FileStore::bundle(self, id, raw_tail_turns).await
    }

    async fn search(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        FileStore::search(self, id, search).await
    }

    async fn rank_memories(&self, id: &AgentId, query: &MemoryQuery) -> Result<RankedMemories> {
        FileStore::rank_memories(self, id, query).await
    }

    async fn index_state(&self, id: &AgentId) -> Result<IndexState> {
        let mut current = self.caught_up(id).await?;
        Ok(current.index().state())
    }

    async fn file_sizes(&self, id: &AgentId) -> Result<Vec<(String, u64)>> {
        // Listed under the agent's lock: a delete renames the directory and
        // removes its files, and a file gone between the listing and its
        // size would be a storage error rather than the NOT_FOUND the
        // caller would see a moment later.
        let handle = self.existing_handle(id)?;
        let slot = handle.lock().await;
        if handle.is_retired() || slot.as_ref().is_some_and(|s| s.deleted) {
            return Err(crate::StoreError::NotFound(id.to_string()));
        }
        let sizes = FileStore::file_sizes(self, id).await;
        drop(slot);
        sizes
    }

    async fn begin_compaction(&self, id: &AgentId, policy: Policy) -> Result<Begun> {
        FileStore::begin_compaction(self, id, policy).await
    }

    async fn abort_compaction(&self, id: &AgentId, failed: bool) -> Result<u32> {
        FileStore::abort_compaction(self, id, failed).await
    }

    async fn finish_compaction(
        &self,
        id: &AgentId,
        job: Job,
        summary: Summary,
        policy: Policy,
    ) -> Result<Committed> {
        let committed = FileStore::finish_compaction(self, id, job, summary, policy).await?;
        self.index_later(id);
        Ok(committed)
    }

    async fn microcompact(
        &self,
        id: &AgentId,
        keep_turns: usize,
    ) -> Result<Option<Microcompacted>> {
        FileStore::microcompact(self, id, keep_turns).await
    }

    async fn list_agents(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: Visible<'_>,
    ) -> Result<(Vec<String>, Option<String>)> {
        FileStore::list_agents(self, page_size, page_token, visible).await
    }

    async fn delete_agent(&self, id: &AgentId) -> Result<()> {
        FileStore::delete_agent(self, id).await
    }

    async fn fork_agent(&self, source: &AgentId, target: &AgentId) -> Result<()> {
        FileStore::fork_agent(self, source, target).await
    }

    fn failure(&self) -> Option<String> {
        FileStore::failure(self)
    }

    fn watch_failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        FileStore::watch_failure(self)
    }

    fn loaded_agents(&self) -> usize {
        FileStore::loaded_agents(self)
    }

    fn unembedded_items(&self) -> u64 {
        FileStore::unembedded_items(self)
    }

    async fn disk_bytes(&self) -> u64 {
        FileStore::disk_bytes(self).await
    }

    fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        FileStore::spawn_upkeep(self)
    }

    async fn close(&self) {
        FileStore::close(self).await;
    }
}
