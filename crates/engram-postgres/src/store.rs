//! The database store as a [`Store`]: each method is its own step of the
//! same name (in `write`, `compact`, `agents`, `search`).

use async_trait::async_trait;
use engram_core::compaction::Summary;
use engram_core::{AgentId, NewEvent, Usage};
use engram_store::{
    AgentContext, Begun, Bundle, Committed, IndexState, Ingested, Job, MemoryQuery, Microcompacted,
    Policy, PrepareInput, Prepared, RankedMemories, Result, Search, SearchPage, Store, Visible,
};

use crate::PgStore;

#[async_trait]
impl Store for PgStore {
    async fn ingest(
        &self,
        id: &AgentId,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
    ) -> Result<Ingested> {
        PgStore::ingest(self, id, events, usage, model).await
    }

    async fn mark_compaction_required(&self, id: &AgentId, epoch: u32) -> Result<bool> {
        PgStore::mark_compaction_required(self, id, epoch).await
    }

    async fn prepare(&self, id: &AgentId, input: PrepareInput<'_>) -> Result<Prepared> {
        PgStore::prepare(self, id, input).await
    }

    async fn context(&self, id: &AgentId) -> Result<AgentContext> {
        PgStore::context(self, id).await
    }

    async fn bundle(&self, id: &AgentId, raw_tail_turns: usize) -> Result<Bundle> {
        PgStore::bundle(self, id, raw_tail_turns).await
    }

    async fn search(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        PgStore::search(self, id, search).await
    }

    async fn rank_memories(&self, id: &AgentId, query: &MemoryQuery) -> Result<RankedMemories> {
        PgStore::rank_memories(self, id, query).await
    }

    async fn index_state(&self, id: &AgentId) -> Result<IndexState> {
        PgStore::index_state(self, id).await
    }

    async fn file_sizes(&self, id: &AgentId) -> Result<Vec<(String, u64)>> {
        PgStore::file_sizes(self, id).await
    }

    async fn begin_compaction(&self, id: &AgentId, policy: Policy) -> Result<Begun> {
        PgStore::begin_compaction(self, id, policy).await
    }

    async fn abort_compaction(&self, id: &AgentId, failed: bool) -> Result<u32> {
        PgStore::abort_compaction(self, id, failed).await
    }

    async fn finish_compaction(
        &self,
        id: &AgentId,
        job: Job,
        summary: Summary,
        policy: Policy,
    ) -> Result<Committed> {
        PgStore::finish_compaction(self, id, job, summary, policy).await
    }

    async fn microcompact(
        &self,
        id: &AgentId,
        keep_turns: usize,
    ) -> Result<Option<Microcompacted>> {
        PgStore::microcompact(self, id, keep_turns).await
    }

    async fn list_agents(
        &self,
        page_size: usize,
        page_token: Option<&str>,
        visible: Visible<'_>,
    ) -> Result<(Vec<String>, Option<String>)> {
        PgStore::list_agents(self, page_size, page_token, visible).await
    }

    async fn delete_agent(&self, id: &AgentId) -> Result<()> {
        PgStore::delete_agent(self, id).await
    }

    async fn fork_agent(&self, source: &AgentId, target: &AgentId) -> Result<()> {
        PgStore::fork_agent(self, source, target).await
    }

    fn failure(&self) -> Option<String> {
        self.inner.failure.borrow().clone()
    }

    fn failure_is_fatal(&self) -> bool {
        false
    }

    fn watch_failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.failure.subscribe()
    }

    fn loaded_agents(&self) -> usize {
        engram_store::lock(&self.inner.agents).len()
    }

    fn unembedded_items(&self) -> u64 {
        self.inner
            .unembedded
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn disk_bytes(&self) -> u64 {
        PgStore::disk_bytes(self).await
    }

    fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        PgStore::spawn_upkeep(self)
    }

    async fn close(&self) {
        self.inner.pool.close().await;
    }
}
