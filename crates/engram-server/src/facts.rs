//! The managed-fact handlers of `MemoryService` (auth → convert → engine →
//! convert): AddMemories, ListMemories, GetMemory, GetMemoryHistory,
//! UpdateMemory and DeleteMemory, authorized as memory blocks are (a
//! token covering the agent, or the user); ForgetTurn and ForgetEvents, by
//! a token covering the agent.

use engram_proto::pb;
use tonic::Status;

use engram_engine::limits;

use crate::api::Api;
use crate::auth::{self, Access, Caller};
use crate::convert;
use crate::convert::facts::{
    change_from_pb, fact_with_sources_to_pb, listing_from_pb, new_fact_from_pb,
};
use crate::convert::semantic_to_pb as fact_to_pb;
use crate::status::from_engine;

impl Api {
    pub async fn add_memories(
        &self,
        caller: &Caller,
        req: pb::AddMemoriesRequest,
    ) -> Result<pb::AddMemoriesResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, true)).await?;
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let new = req.memories.into_iter().map(new_fact_from_pb).collect();
        let added = self
            .engine()
            .add_memories(&scope, new)
            .await
            .map_err(from_engine)?;
        let results = added
            .into_iter()
            .map(|a| pb::AddedMemory {
                id: a.id,
                outcome: if a.merged {
                    pb::AddOutcome::Merged
                } else {
                    pb::AddOutcome::Added
                }
                .into(),
                version: a.version,
            })
            .collect();
        Ok(pb::AddMemoriesResponse { results })
    }

    pub async fn list_memories(
        &self,
        caller: &Caller,
        req: pb::ListMemoriesRequest,
    ) -> Result<pb::ListMemoriesResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, false)).await?;
        let listing = listing_from_pb(&req);
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let page = self
            .engine()
            .list_memories(
                &scope,
                &listing,
                &req.source_agent_id,
                (req.page_size, &req.page_token),
            )
            .await
            .map_err(from_engine)?;
        self.fits(
            pb::ListMemoriesResponse {
                memories: page
                    .facts
                    .iter()
                    .zip(&page.sources)
                    .map(|(fact, sources)| fact_with_sources_to_pb(fact, sources))
                    .collect(),
                next_page_token: page.next_page_token,
            },
            "the page of facts",
        )
    }

    pub async fn get_memory(
        &self,
        caller: &Caller,
        req: pb::GetMemoryRequest,
    ) -> Result<pb::GetMemoryResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, false)).await?;
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let (fact, sources) = self
            .engine()
            .get_memory(&scope, &req.id)
            .await
            .map_err(from_engine)?;
        Ok(pb::GetMemoryResponse {
            memory: Some(fact_with_sources_to_pb(&fact, &sources)),
        })
    }

    pub async fn get_memory_history(
        &self,
        caller: &Caller,
        req: pb::GetMemoryHistoryRequest,
    ) -> Result<pb::GetMemoryHistoryResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, false)).await?;
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let versions = self
            .engine()
            .memory_history(&scope, &req.id)
            .await
            .map_err(from_engine)?;
        self.fits(
            pb::GetMemoryHistoryResponse {
                versions: versions.iter().map(fact_to_pb).collect(),
            },
            "the fact's history",
        )
    }

    pub async fn update_memory(
        &self,
        caller: &Caller,
        req: pb::UpdateMemoryRequest,
    ) -> Result<pb::UpdateMemoryResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, true)).await?;
        let mut req = req;
        let scope = convert::scope_from_pb(req.scope.take()).map_err(from_engine)?;
        let id = std::mem::take(&mut req.id);
        let change = change_from_pb(req).map_err(from_engine)?;
        let fact = self
            .engine()
            .update_memory(&scope, &id, change)
            .await
            .map_err(from_engine)?;
        Ok(pb::UpdateMemoryResponse {
            memory: Some(fact_to_pb(&fact)),
        })
    }

    pub async fn delete_memory(
        &self,
        caller: &Caller,
        req: pb::DeleteMemoryRequest,
    ) -> Result<pb::DeleteMemoryResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, true)).await?;
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let version = self
            .engine()
            .delete_memory(&scope, &req.id, req.expected_version)
            .await
            .map_err(from_engine)?;
        Ok(pb::DeleteMemoryResponse { version })
    }

    pub async fn forget_turn(
        &self,
        caller: &Caller,
        req: pb::ForgetTurnRequest,
    ) -> Result<pb::ForgetResponse, Status> {
        let agent = req.agent_id.clone();
        let _agent = auth::authorize(self.engine(), caller, Access::agent(&agent)).await?;
        let what = limits::forget_turn(&req.turn_id).map_err(from_engine)?;
        self.forget(&agent, what).await
    }

    pub async fn forget_events(
        &self,
        caller: &Caller,
        req: pb::ForgetEventsRequest,
    ) -> Result<pb::ForgetResponse, Status> {
        let agent = req.agent_id.clone();
        let _agent = auth::authorize(self.engine(), caller, Access::agent(&agent)).await?;
        let what = limits::forget_events(&req.ids).map_err(from_engine)?;
        self.forget(&agent, what).await
    }

    async fn forget(
        &self,
        agent: &str,
        what: engram_core::forget::Forget,
    ) -> Result<pb::ForgetResponse, Status> {
        let forgotten = self
            .engine()
            .forget(agent, what)
            .await
            .map_err(from_engine)?;
        Ok(pb::ForgetResponse {
            traces_erased: forgotten.traces_erased,
            facts_deleted: forgotten.facts_deleted,
            summaries_rewritten: forgotten.summaries_rewritten,
        })
    }
}
