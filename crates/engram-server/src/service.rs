//! The `engram.v1.MemoryService` implementation: each handler is auth →
//! convert → engine → convert.

use engram_engine::Engine;
use engram_proto::pb;
use engram_proto::pb::memory_service_server::MemoryService;
use tonic::{Request, Response, Status};

use crate::auth;
use crate::boundary::catch_panics;
use crate::convert;
use crate::status::from_engine;

/// ExportMemory's answer: the bundle's pieces.
pub type ExportStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<pb::MemoryBundleChunk, Status>> + Send>,
>;

/// The gRPC service over one engine.
#[derive(Debug, Clone)]
pub struct Engram {
    engine: Engine,
    /// `server.max_message_bytes`: responses are held to it too.
    max_message_bytes: usize,
}

impl Engram {
    pub fn new(engine: Engine, max_message_bytes: usize) -> Self {
        Self {
            engine,
            max_message_bytes,
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// RESOURCE_EXHAUSTED, with the way out, for an answer over the limit
    /// (tonic would fail it with a bare OUT_OF_RANGE in the trailers).
    pub(crate) fn fits<M: prost::Message>(
        &self,
        response: M,
        what: &str,
    ) -> Result<Response<M>, Status> {
        let len = response.encoded_len();
        if len > self.max_message_bytes {
            return Err(crate::status::answer_too_large(
                what,
                len,
                self.max_message_bytes,
            ));
        }
        Ok(Response::new(response))
    }
}

/// The handlers; the trait impl below puts each behind the request boundary.
impl Engram {
    /// A read of one agent, or (no agent named) of all of a user's
    /// conversations: the token must cover the agent, or the user.
    async fn authorize_agent_or_user<T>(
        &self,
        request: &Request<T>,
        agent_id: &str,
        user_id: &str,
    ) -> Result<(), Status> {
        if agent_id.is_empty() && !user_id.is_empty() {
            auth::authorize_user(request, user_id)
        } else {
            auth::authorize(&self.engine, request, agent_id, "").await
        }
    }

    async fn handle_ingest(
        &self,
        request: Request<pb::IngestRequest>,
    ) -> Result<Response<pb::IngestResponse>, Status> {
        let r = request.get_ref();
        auth::authorize(&self.engine, &request, &r.agent_id, &r.user_id).await?;
        let req = convert::ingest_from_pb(request.into_inner());
        let out = self.engine.ingest(req).await.map_err(from_engine)?;
        Ok(Response::new(convert::ingested_to_pb(out)))
    }

    async fn handle_prepare_request(
        &self,
        request: Request<pb::PrepareRequestRequest>,
    ) -> Result<Response<pb::PrepareRequestResponse>, Status> {
        let r = request.get_ref();
        auth::authorize(&self.engine, &request, &r.agent_id, &r.user_id).await?;
        let req = convert::prepare_from_pb(request.into_inner()).map_err(from_engine)?;
        let prepared = self.engine.prepare(req).await.map_err(from_engine)?;
        self.fits(convert::prepared_to_pb(prepared), "prompt")
    }

    async fn handle_compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        auth::authorize(&self.engine, &request, &request.get_ref().agent_id, "").await?;
        let req = request.into_inner();
        let report = self
            .engine
            .compact(&req.agent_id, Some(req.focus.as_str()))
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::CompactResponse {
            report: Some(convert::report_to_pb(&report)),
        }))
    }

    async fn handle_retrieve(
        &self,
        request: Request<pb::RetrieveRequest>,
    ) -> Result<Response<pb::RetrieveResponse>, Status> {
        let r = request.get_ref();
        self.authorize_agent_or_user(&request, &r.agent_id, &r.user_id)
            .await?;
        let req = convert::retrieve_from_pb(request.into_inner());
        let retrieved = self.engine.retrieve(req).await.map_err(from_engine)?;
        self.fits(convert::retrieved_to_pb(retrieved), "answer")
    }

    async fn handle_search_history(
        &self,
        request: Request<pb::SearchHistoryRequest>,
    ) -> Result<Response<pb::SearchHistoryResponse>, Status> {
        let r = request.get_ref();
        self.authorize_agent_or_user(&request, &r.agent_id, &r.user_id)
            .await?;
        let req = convert::search_from_pb(request.into_inner()).map_err(from_engine)?;
        let page = self.engine.search(req).await.map_err(from_engine)?;
        let response = pb::SearchHistoryResponse {
            matches: page.hits.into_iter().map(convert::hit_into_pb).collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
            index: Some(convert::index_state_into_pb(page.index)),
        };
        self.fits(response, "page")
    }

    async fn handle_get_context_stats(
        &self,
        request: Request<pb::GetContextStatsRequest>,
    ) -> Result<Response<pb::GetContextStatsResponse>, Status> {
        auth::authorize(&self.engine, &request, &request.get_ref().agent_id, "").await?;
        let req = request.into_inner();
        let stats = self
            .engine
            .context_stats(&req.agent_id, Some(req.model.as_str()))
            .await
            .map_err(from_engine)?;
        Ok(Response::new(convert::stats_to_pb(stats)))
    }

    async fn handle_list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let scope = auth::scope(&request);
        let req = request.into_inner();
        // A token that covers the user sees all of its agents; otherwise
        // (and without a user) the ids its agent patterns match.
        let user_covered =
            !req.user_id.is_empty() && scope.as_ref().is_none_or(|s| s.covers_user(&req.user_id));
        let req = engram_engine::ListAgentsRequest {
            page_size: req.page_size,
            page_token: req.page_token,
            user_id: req.user_id,
        };
        let page = self
            .engine
            .list_agents(&req, &|id| {
                user_covered || scope.as_ref().is_none_or(|s| s.allows(id))
            })
            .await
            .map_err(from_engine)?;
        Ok(Response::new(convert::agent_page_to_pb(page)))
    }

    async fn handle_delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        auth::require_admin(&request, "DeleteAgent")?;
        let id = request.into_inner().agent_id;
        self.engine.delete_agent(&id).await.map_err(from_engine)?;
        Ok(Response::new(pb::DeleteAgentResponse {}))
    }

    async fn handle_delete_user(
        &self,
        request: Request<pb::DeleteUserRequest>,
    ) -> Result<Response<pb::DeleteUserResponse>, Status> {
        auth::require_admin(&request, "DeleteUser")?;
        let user = request.into_inner().user_id;
        let erased = self.engine.delete_user(&user).await.map_err(from_engine)?;
        Ok(Response::new(pb::DeleteUserResponse {
            agents_deleted: u32::try_from(erased).unwrap_or(u32::MAX),
        }))
    }

    async fn handle_fork_agent(
        &self,
        request: Request<pb::ForkAgentRequest>,
    ) -> Result<Response<pb::ForkAgentResponse>, Status> {
        let r = request.get_ref();
        auth::authorize(&self.engine, &request, &r.source_agent_id, "").await?;
        // The copy belongs to the source's user.
        let user = self
            .engine
            .agent_user(&r.source_agent_id)
            .await
            .map_err(from_engine)?
            .unwrap_or_default();
        auth::authorize(&self.engine, &request, &r.target_agent_id, &user).await?;
        let req = request.into_inner();
        let agent_id = self
            .engine
            .fork_agent(&req.source_agent_id, &req.target_agent_id)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::ForkAgentResponse { agent_id }))
    }
}

#[tonic::async_trait]
impl MemoryService for Engram {
    async fn ingest(
        &self,
        request: Request<pb::IngestRequest>,
    ) -> Result<Response<pb::IngestResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics("Ingest", &agent, self.handle_ingest(request)).await
    }

    async fn prepare_request(
        &self,
        request: Request<pb::PrepareRequestRequest>,
    ) -> Result<Response<pb::PrepareRequestResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics(
            "PrepareRequest",
            &agent,
            self.handle_prepare_request(request),
        )
        .await
    }

    async fn compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics("Compact", &agent, self.handle_compact(request)).await
    }

    async fn retrieve(
        &self,
        request: Request<pb::RetrieveRequest>,
    ) -> Result<Response<pb::RetrieveResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics("Retrieve", &agent, self.handle_retrieve(request)).await
    }

    async fn search_history(
        &self,
        request: Request<pb::SearchHistoryRequest>,
    ) -> Result<Response<pb::SearchHistoryResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics("SearchHistory", &agent, self.handle_search_history(request)).await
    }

    async fn get_context_stats(
        &self,
        request: Request<pb::GetContextStatsRequest>,
    ) -> Result<Response<pb::GetContextStatsResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics(
            "GetContextStats",
            &agent,
            self.handle_get_context_stats(request),
        )
        .await
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let agent = String::new();
        catch_panics("ListAgents", &agent, self.handle_list_agents(request)).await
    }

    async fn delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics("DeleteAgent", &agent, self.handle_delete_agent(request)).await
    }

    async fn fork_agent(
        &self,
        request: Request<pb::ForkAgentRequest>,
    ) -> Result<Response<pb::ForkAgentResponse>, Status> {
        let agent = request.get_ref().source_agent_id.clone();
        catch_panics("ForkAgent", &agent, self.handle_fork_agent(request)).await
    }

    async fn delete_user(
        &self,
        request: Request<pb::DeleteUserRequest>,
    ) -> Result<Response<pb::DeleteUserResponse>, Status> {
        let user = request.get_ref().user_id.clone();
        catch_panics("DeleteUser", &user, self.handle_delete_user(request)).await
    }

    async fn list_memory_blocks(
        &self,
        request: Request<pb::ListMemoryBlocksRequest>,
    ) -> Result<Response<pb::ListMemoryBlocksResponse>, Status> {
        catch_panics(
            "ListMemoryBlocks",
            "",
            self.handle_list_memory_blocks(request),
        )
        .await
    }

    async fn get_memory_block(
        &self,
        request: Request<pb::GetMemoryBlockRequest>,
    ) -> Result<Response<pb::GetMemoryBlockResponse>, Status> {
        catch_panics("GetMemoryBlock", "", self.handle_get_memory_block(request)).await
    }

    async fn put_memory_block(
        &self,
        request: Request<pb::PutMemoryBlockRequest>,
    ) -> Result<Response<pb::PutMemoryBlockResponse>, Status> {
        catch_panics("PutMemoryBlock", "", self.handle_put_memory_block(request)).await
    }

    async fn edit_memory_block(
        &self,
        request: Request<pb::EditMemoryBlockRequest>,
    ) -> Result<Response<pb::EditMemoryBlockResponse>, Status> {
        catch_panics(
            "EditMemoryBlock",
            "",
            self.handle_edit_memory_block(request),
        )
        .await
    }

    async fn delete_memory_block(
        &self,
        request: Request<pb::DeleteMemoryBlockRequest>,
    ) -> Result<Response<pb::DeleteMemoryBlockResponse>, Status> {
        catch_panics(
            "DeleteMemoryBlock",
            "",
            self.handle_delete_memory_block(request),
        )
        .await
    }

    async fn add_memories(
        &self,
        request: Request<pb::AddMemoriesRequest>,
    ) -> Result<Response<pb::AddMemoriesResponse>, Status> {
        catch_panics("AddMemories", "", self.handle_add_memories(request)).await
    }

    async fn list_memories(
        &self,
        request: Request<pb::ListMemoriesRequest>,
    ) -> Result<Response<pb::ListMemoriesResponse>, Status> {
        catch_panics("ListMemories", "", self.handle_list_memories(request)).await
    }

    async fn get_memory(
        &self,
        request: Request<pb::GetMemoryRequest>,
    ) -> Result<Response<pb::GetMemoryResponse>, Status> {
        catch_panics("GetMemory", "", self.handle_get_memory(request)).await
    }

    async fn get_memory_history(
        &self,
        request: Request<pb::GetMemoryHistoryRequest>,
    ) -> Result<Response<pb::GetMemoryHistoryResponse>, Status> {
        catch_panics(
            "GetMemoryHistory",
            "",
            self.handle_get_memory_history(request),
        )
        .await
    }

    async fn update_memory(
        &self,
        request: Request<pb::UpdateMemoryRequest>,
    ) -> Result<Response<pb::UpdateMemoryResponse>, Status> {
        catch_panics("UpdateMemory", "", self.handle_update_memory(request)).await
    }

    async fn delete_memory(
        &self,
        request: Request<pb::DeleteMemoryRequest>,
    ) -> Result<Response<pb::DeleteMemoryResponse>, Status> {
        catch_panics("DeleteMemory", "", self.handle_delete_memory(request)).await
    }

    async fn forget_turn(
        &self,
        request: Request<pb::ForgetTurnRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics("ForgetTurn", &agent, self.handle_forget_turn(request)).await
    }

    async fn forget_events(
        &self,
        request: Request<pb::ForgetEventsRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        catch_panics("ForgetEvents", &agent, self.handle_forget_events(request)).await
    }

    type ExportMemoryStream = ExportStream;

    async fn export_memory(
        &self,
        request: Request<pb::ExportMemoryRequest>,
    ) -> Result<Response<Self::ExportMemoryStream>, Status> {
        catch_panics("ExportMemory", "", self.handle_export_memory(request)).await
    }

    async fn import_memory(
        &self,
        request: Request<tonic::Streaming<pb::ImportMemoryRequest>>,
    ) -> Result<Response<pb::ImportMemoryResponse>, Status> {
        catch_panics("ImportMemory", "", self.handle_import_memory(request)).await
    }
}
