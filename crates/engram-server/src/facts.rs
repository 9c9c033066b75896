//! The managed-fact handlers of `MemoryService` (auth → convert → engine →
//! convert): AddMemories, ListMemories, GetMemory, GetMemoryHistory,
//! UpdateMemory and DeleteMemory, authorized as memory blocks are (a
//! token covering the agent, or the user); ForgetTurn and ForgetEvents, by
//! a token covering the agent.

use engram_proto::pb;
use tonic::{Request, Response, Status};

use engram_engine::limits;

use crate::auth;
use crate::convert;
use crate::convert::facts::{change_from_pb, listing_from_pb, new_fact_from_pb};
use crate::convert::semantic_to_pb as fact_to_pb;
use crate::service::Engram;
use crate::status::from_engine;

impl Engram {
    pub(crate) async fn handle_add_memories(
        &self,
        request: Request<pb::AddMemoriesRequest>,
    ) -> Result<Response<pb::AddMemoriesResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", true).await?;
        let req = request.into_inner();
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
        Ok(Response::new(pb::AddMemoriesResponse { results }))
    }

    pub(crate) async fn handle_list_memories(
        &self,
        request: Request<pb::ListMemoriesRequest>,
    ) -> Result<Response<pb::ListMemoriesResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", false).await?;
        let req = request.into_inner();
        let listing = listing_from_pb(&req);
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let page = self
            .engine()
            .list_memories(&scope, &listing, req.page_size, &req.page_token)
            .await
            .map_err(from_engine)?;
        self.fits(
            pb::ListMemoriesResponse {
                memories: page.facts.iter().map(fact_to_pb).collect(),
                next_page_token: page.next_page_token,
            },
            "the page of facts",
        )
    }

    pub(crate) async fn handle_get_memory(
        &self,
        request: Request<pb::GetMemoryRequest>,
    ) -> Result<Response<pb::GetMemoryResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", false).await?;
        let req = request.into_inner();
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let fact = self
            .engine()
            .get_memory(&scope, &req.id)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::GetMemoryResponse {
            memory: Some(fact_to_pb(&fact)),
        }))
    }

    pub(crate) async fn handle_get_memory_history(
        &self,
        request: Request<pb::GetMemoryHistoryRequest>,
    ) -> Result<Response<pb::GetMemoryHistoryResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", false).await?;
        let req = request.into_inner();
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

    pub(crate) async fn handle_update_memory(
        &self,
        request: Request<pb::UpdateMemoryRequest>,
    ) -> Result<Response<pb::UpdateMemoryResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", true).await?;
        let mut req = request.into_inner();
        let scope = convert::scope_from_pb(req.scope.take()).map_err(from_engine)?;
        let id = std::mem::take(&mut req.id);
        let change = change_from_pb(req).map_err(from_engine)?;
        let fact = self
            .engine()
            .update_memory(&scope, &id, change)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::UpdateMemoryResponse {
            memory: Some(fact_to_pb(&fact)),
        }))
    }

    pub(crate) async fn handle_delete_memory(
        &self,
        request: Request<pb::DeleteMemoryRequest>,
    ) -> Result<Response<pb::DeleteMemoryResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", true).await?;
        let req = request.into_inner();
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let version = self
            .engine()
            .delete_memory(&scope, &req.id, req.expected_version)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::DeleteMemoryResponse { version }))
    }

    pub(crate) async fn handle_forget_turn(
        &self,
        request: Request<pb::ForgetTurnRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        auth::authorize(self.engine(), &request, &agent, "").await?;
        let what = limits::forget_turn(&request.get_ref().turn_id).map_err(from_engine)?;
        self.forget(&agent, what).await
    }

    pub(crate) async fn handle_forget_events(
        &self,
        request: Request<pb::ForgetEventsRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        auth::authorize(self.engine(), &request, &agent, "").await?;
        let what = limits::forget_events(&request.get_ref().ids).map_err(from_engine)?;
        self.forget(&agent, what).await
    }

    async fn forget(
        &self,
        agent: &str,
        what: engram_core::forget::Forget,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        let forgotten = self
            .engine()
            .forget(agent, what)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::ForgetResponse {
            traces_erased: forgotten.traces_erased,
            facts_deleted: forgotten.facts_deleted,
            summaries_rewritten: forgotten.summaries_rewritten,
        }))
    }
}
