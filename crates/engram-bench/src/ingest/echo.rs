//! A MemoryService that answers Ingest with nothing stored: what tonic
//! alone costs, next to Engram's numbers.

use engram_proto::pb;
use engram_proto::pb::memory_service_server::MemoryService;
use tonic::{Request, Response, Status};

/// The framework ceiling: Engram's messages, no storage, no rules.
pub(super) struct Echo;

#[tonic::async_trait]
impl MemoryService for Echo {
    async fn ingest(
        &self,
        request: Request<pb::IngestRequest>,
    ) -> Result<Response<pb::IngestResponse>, Status> {
        let req = request.into_inner();
        let traces = req
            .events
            .into_iter()
            .map(|e| pb::RawTrace {
                id: "echo".into(),
                turn_id: "turn_0001".into(),
                trace_type: e.trace_type,
                content: e.content,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(pb::IngestResponse {
            traces,
            current_turn_id: "turn_0001".into(),
            compaction_required: false,
        }))
    }
    async fn prepare_request(
        &self,
        _: Request<pb::PrepareRequestRequest>,
    ) -> Result<Response<pb::PrepareRequestResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn compact(
        &self,
        _: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn retrieve(
        &self,
        _: Request<pb::RetrieveRequest>,
    ) -> Result<Response<pb::RetrieveResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn search_history(
        &self,
        _: Request<pb::SearchHistoryRequest>,
    ) -> Result<Response<pb::SearchHistoryResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn get_context_stats(
        &self,
        _: Request<pb::GetContextStatsRequest>,
    ) -> Result<Response<pb::GetContextStatsResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn list_agents(
        &self,
        _: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn delete_agent(
        &self,
        _: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn fork_agent(
        &self,
        _: Request<pb::ForkAgentRequest>,
    ) -> Result<Response<pb::ForkAgentResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn delete_user(
        &self,
        _: Request<pb::DeleteUserRequest>,
    ) -> Result<Response<pb::DeleteUserResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn consolidate_user(
        &self,
        _: Request<pb::ConsolidateUserRequest>,
    ) -> Result<Response<pb::ConsolidateUserResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn list_consolidations(
        &self,
        _: Request<pb::ListConsolidationsRequest>,
    ) -> Result<Response<pb::ListConsolidationsResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn list_compactions(
        &self,
        _: Request<pb::ListCompactionsRequest>,
    ) -> Result<Response<pb::ListCompactionsResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn list_users(
        &self,
        _: Request<pb::ListUsersRequest>,
    ) -> Result<Response<pb::ListUsersResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn list_memory_blocks(
        &self,
        _: Request<pb::ListMemoryBlocksRequest>,
    ) -> Result<Response<pb::ListMemoryBlocksResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn get_memory_block(
        &self,
        _: Request<pb::GetMemoryBlockRequest>,
    ) -> Result<Response<pb::GetMemoryBlockResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn put_memory_block(
        &self,
        _: Request<pb::PutMemoryBlockRequest>,
    ) -> Result<Response<pb::PutMemoryBlockResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn edit_memory_block(
        &self,
        _: Request<pb::EditMemoryBlockRequest>,
    ) -> Result<Response<pb::EditMemoryBlockResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn delete_memory_block(
        &self,
        _: Request<pb::DeleteMemoryBlockRequest>,
    ) -> Result<Response<pb::DeleteMemoryBlockResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn add_memories(
        &self,
        _: Request<pb::AddMemoriesRequest>,
    ) -> Result<Response<pb::AddMemoriesResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn list_memories(
        &self,
        _: Request<pb::ListMemoriesRequest>,
    ) -> Result<Response<pb::ListMemoriesResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn get_memory(
        &self,
        _: Request<pb::GetMemoryRequest>,
    ) -> Result<Response<pb::GetMemoryResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn get_memory_history(
        &self,
        _: Request<pb::GetMemoryHistoryRequest>,
    ) -> Result<Response<pb::GetMemoryHistoryResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn update_memory(
        &self,
        _: Request<pb::UpdateMemoryRequest>,
    ) -> Result<Response<pb::UpdateMemoryResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn delete_memory(
        &self,
        _: Request<pb::DeleteMemoryRequest>,
    ) -> Result<Response<pb::DeleteMemoryResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn forget_turn(
        &self,
        _: Request<pb::ForgetTurnRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn forget_events(
        &self,
        _: Request<pb::ForgetEventsRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
    type ExportMemoryStream = tokio_stream::Empty<Result<pb::MemoryBundleChunk, Status>>;
    async fn export_memory(
        &self,
        _: Request<pb::ExportMemoryRequest>,
    ) -> Result<Response<Self::ExportMemoryStream>, Status> {
        Err(Status::unimplemented("echo"))
    }
    async fn import_memory(
        &self,
        _: Request<tonic::Streaming<pb::ImportMemoryRequest>>,
    ) -> Result<Response<pb::ImportMemoryResponse>, Status> {
        Err(Status::unimplemented("echo"))
    }
}
