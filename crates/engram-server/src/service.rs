//! The `engram.v1.MemoryService` over gRPC: each call takes its caller
//! from the request (auth's hook put the token's scope there) and runs the
//! API's call (`api`) behind the request boundary.

use engram_engine::Engine;
use engram_proto::pb;
use engram_proto::pb::memory_service_server::MemoryService;
use tonic::{Request, Response, Status};

use crate::api::{Api, ExportStream};
use crate::auth;
use crate::boundary::catch_panics;

/// The gRPC service over one engine.
#[derive(Debug, Clone)]
pub struct Engram {
    api: Api,
}

impl Engram {
    pub fn new(engine: Engine, max_message_bytes: usize) -> Self {
        Self {
            api: Api::new(engine, max_message_bytes),
        }
    }
}

#[tonic::async_trait]
impl MemoryService for Engram {
    async fn ingest(
        &self,
        request: Request<pb::IngestRequest>,
    ) -> Result<Response<pb::IngestResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "Ingest",
            &agent,
            self.api.ingest(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn prepare_request(
        &self,
        request: Request<pb::PrepareRequestRequest>,
    ) -> Result<Response<pb::PrepareRequestResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "PrepareRequest",
            &agent,
            self.api.prepare_request(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "Compact",
            &agent,
            self.api.compact(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn retrieve(
        &self,
        request: Request<pb::RetrieveRequest>,
    ) -> Result<Response<pb::RetrieveResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "Retrieve",
            &agent,
            self.api.retrieve(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn search_history(
        &self,
        request: Request<pb::SearchHistoryRequest>,
    ) -> Result<Response<pb::SearchHistoryResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "SearchHistory",
            &agent,
            self.api.search_history(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn get_context_stats(
        &self,
        request: Request<pb::GetContextStatsRequest>,
    ) -> Result<Response<pb::GetContextStatsResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "GetContextStats",
            &agent,
            self.api.get_context_stats(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn list_compactions(
        &self,
        request: Request<pb::ListCompactionsRequest>,
    ) -> Result<Response<pb::ListCompactionsResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "ListCompactions",
            &agent,
            self.api.list_compactions(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let agent = String::new();
        let caller = auth::caller(&request);
        catch_panics(
            "ListAgents",
            &agent,
            self.api.list_agents(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn list_users(
        &self,
        request: Request<pb::ListUsersRequest>,
    ) -> Result<Response<pb::ListUsersResponse>, Status> {
        let agent = String::new();
        let caller = auth::caller(&request);
        catch_panics(
            "ListUsers",
            &agent,
            self.api.list_users(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "DeleteAgent",
            &agent,
            self.api.delete_agent(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn fork_agent(
        &self,
        request: Request<pb::ForkAgentRequest>,
    ) -> Result<Response<pb::ForkAgentResponse>, Status> {
        let agent = request.get_ref().source_agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "ForkAgent",
            &agent,
            self.api.fork_agent(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn delete_user(
        &self,
        request: Request<pb::DeleteUserRequest>,
    ) -> Result<Response<pb::DeleteUserResponse>, Status> {
        let user = request.get_ref().user_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "DeleteUser",
            &user,
            self.api.delete_user(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn list_memory_blocks(
        &self,
        request: Request<pb::ListMemoryBlocksRequest>,
    ) -> Result<Response<pb::ListMemoryBlocksResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "ListMemoryBlocks",
            "",
            self.api.list_memory_blocks(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn get_memory_block(
        &self,
        request: Request<pb::GetMemoryBlockRequest>,
    ) -> Result<Response<pb::GetMemoryBlockResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "GetMemoryBlock",
            "",
            self.api.get_memory_block(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn put_memory_block(
        &self,
        request: Request<pb::PutMemoryBlockRequest>,
    ) -> Result<Response<pb::PutMemoryBlockResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "PutMemoryBlock",
            "",
            self.api.put_memory_block(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn edit_memory_block(
        &self,
        request: Request<pb::EditMemoryBlockRequest>,
    ) -> Result<Response<pb::EditMemoryBlockResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "EditMemoryBlock",
            "",
            self.api.edit_memory_block(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn delete_memory_block(
        &self,
        request: Request<pb::DeleteMemoryBlockRequest>,
    ) -> Result<Response<pb::DeleteMemoryBlockResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "DeleteMemoryBlock",
            "",
            self.api.delete_memory_block(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn add_memories(
        &self,
        request: Request<pb::AddMemoriesRequest>,
    ) -> Result<Response<pb::AddMemoriesResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "AddMemories",
            "",
            self.api.add_memories(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn list_memories(
        &self,
        request: Request<pb::ListMemoriesRequest>,
    ) -> Result<Response<pb::ListMemoriesResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "ListMemories",
            "",
            self.api.list_memories(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn get_memory(
        &self,
        request: Request<pb::GetMemoryRequest>,
    ) -> Result<Response<pb::GetMemoryResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "GetMemory",
            "",
            self.api.get_memory(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn get_memory_history(
        &self,
        request: Request<pb::GetMemoryHistoryRequest>,
    ) -> Result<Response<pb::GetMemoryHistoryResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "GetMemoryHistory",
            "",
            self.api.get_memory_history(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn update_memory(
        &self,
        request: Request<pb::UpdateMemoryRequest>,
    ) -> Result<Response<pb::UpdateMemoryResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "UpdateMemory",
            "",
            self.api.update_memory(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn delete_memory(
        &self,
        request: Request<pb::DeleteMemoryRequest>,
    ) -> Result<Response<pb::DeleteMemoryResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "DeleteMemory",
            "",
            self.api.delete_memory(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn forget_turn(
        &self,
        request: Request<pb::ForgetTurnRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "ForgetTurn",
            &agent,
            self.api.forget_turn(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn forget_events(
        &self,
        request: Request<pb::ForgetEventsRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        let agent = request.get_ref().agent_id.clone();
        let caller = auth::caller(&request);
        catch_panics(
            "ForgetEvents",
            &agent,
            self.api.forget_events(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    type ExportMemoryStream = ExportStream;

    async fn export_memory(
        &self,
        request: Request<pb::ExportMemoryRequest>,
    ) -> Result<Response<Self::ExportMemoryStream>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "ExportMemory",
            "",
            self.api.export_memory(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }

    async fn import_memory(
        &self,
        request: Request<tonic::Streaming<pb::ImportMemoryRequest>>,
    ) -> Result<Response<pb::ImportMemoryResponse>, Status> {
        let caller = auth::caller(&request);
        catch_panics(
            "ImportMemory",
            "",
            self.api.import_memory(&caller, request.into_inner()),
        )
        .await
        .map(Response::new)
    }
}
