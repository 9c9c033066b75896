//! Forgetting, on PostgreSQL (`Forgets`): not built yet.

use async_trait::async_trait;
use engram_core::AgentId;
use engram_core::compaction::Summary;
use engram_core::forget::Forget;
use engram_store::{Forgets, Forgotten, Policy, Result, RewriteJob, StoreError};

use crate::PgStore;

fn unimplemented() -> StoreError {
    StoreError::Unimplemented("forgetting a turn is not built for PostgreSQL yet".into())
}

#[async_trait]
impl Forgets for PgStore {
    async fn forget(&self, _id: &AgentId, _what: &Forget, _policy: Policy) -> Result<Forgotten> {
        Err(unimplemented())
    }

    async fn rewrite_jobs(&self, _id: &AgentId) -> Result<Vec<RewriteJob>> {
        Ok(vec![])
    }

    async fn finish_rewrite(
        &self,
        _id: &AgentId,
        _job: &RewriteJob,
        _summary: Summary,
        _policy: Policy,
    ) -> Result<bool> {
        Err(unimplemented())
    }

    async fn awaiting_rewrite(&self) -> Result<Vec<AgentId>> {
        Ok(vec![])
    }
}
