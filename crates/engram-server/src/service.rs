//! The `engram.v1.MemoryService` over gRPC: each call takes its caller
//! from the request (auth's hook put the token's scope there) and runs the
//! API's call (`api`) behind the request boundary. A method is one line of
//! the table below: the `Api` call of the same name does the work.

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

/// The service's methods: `name(request) -> answer, "Method"`, and the
/// request's field naming what the call is about (an agent or a user),
/// which a panic's log line names. Each is the `Api` call `name` behind
/// the request boundary.
macro_rules! methods {
    ($($name:ident($request:ty) -> $answer:ty, $method:literal $(, $about:ident)?;)*) => {
        #[tonic::async_trait]
        impl MemoryService for Engram {
            type ExportMemoryStream = ExportStream;

            $(
                async fn $name(
                    &self,
                    request: Request<$request>,
                ) -> Result<Response<$answer>, Status> {
                    let about = methods!(@about request $(, $about)?);
                    let caller = auth::caller(&request);
                    catch_panics($method, &about, self.api.$name(&caller, request.into_inner()))
                        .await
                        .map(Response::new)
                }
            )*
        }
    };
    (@about $request:ident) => {
        String::new()
    };
    (@about $request:ident, $about:ident) => {
        $request.get_ref().$about.clone()
    };
}

methods! {
    ingest(pb::IngestRequest) -> pb::IngestResponse, "Ingest", agent_id;
    prepare_request(pb::PrepareRequestRequest) -> pb::PrepareRequestResponse, "PrepareRequest", agent_id;
    compact(pb::CompactRequest) -> pb::CompactResponse, "Compact", agent_id;
    retrieve(pb::RetrieveRequest) -> pb::RetrieveResponse, "Retrieve", agent_id;
    search_history(pb::SearchHistoryRequest) -> pb::SearchHistoryResponse, "SearchHistory", agent_id;
    get_context_stats(pb::GetContextStatsRequest) -> pb::GetContextStatsResponse, "GetContextStats", agent_id;
    list_compactions(pb::ListCompactionsRequest) -> pb::ListCompactionsResponse, "ListCompactions", agent_id;
    list_agents(pb::ListAgentsRequest) -> pb::ListAgentsResponse, "ListAgents";
    list_users(pb::ListUsersRequest) -> pb::ListUsersResponse, "ListUsers";
    delete_agent(pb::DeleteAgentRequest) -> pb::DeleteAgentResponse, "DeleteAgent", agent_id;
    fork_agent(pb::ForkAgentRequest) -> pb::ForkAgentResponse, "ForkAgent", source_agent_id;
    delete_user(pb::DeleteUserRequest) -> pb::DeleteUserResponse, "DeleteUser", user_id;
    consolidate_user(pb::ConsolidateUserRequest) -> pb::ConsolidateUserResponse, "ConsolidateUser", user_id;
    list_consolidations(pb::ListConsolidationsRequest) -> pb::ListConsolidationsResponse, "ListConsolidations", user_id;
    list_memory_blocks(pb::ListMemoryBlocksRequest) -> pb::ListMemoryBlocksResponse, "ListMemoryBlocks";
    get_memory_block(pb::GetMemoryBlockRequest) -> pb::GetMemoryBlockResponse, "GetMemoryBlock";
    put_memory_block(pb::PutMemoryBlockRequest) -> pb::PutMemoryBlockResponse, "PutMemoryBlock";
    edit_memory_block(pb::EditMemoryBlockRequest) -> pb::EditMemoryBlockResponse, "EditMemoryBlock";
    delete_memory_block(pb::DeleteMemoryBlockRequest) -> pb::DeleteMemoryBlockResponse, "DeleteMemoryBlock";
    add_memories(pb::AddMemoriesRequest) -> pb::AddMemoriesResponse, "AddMemories";
    list_memories(pb::ListMemoriesRequest) -> pb::ListMemoriesResponse, "ListMemories";
    get_memory(pb::GetMemoryRequest) -> pb::GetMemoryResponse, "GetMemory";
    get_memory_history(pb::GetMemoryHistoryRequest) -> pb::GetMemoryHistoryResponse, "GetMemoryHistory";
    update_memory(pb::UpdateMemoryRequest) -> pb::UpdateMemoryResponse, "UpdateMemory";
    delete_memory(pb::DeleteMemoryRequest) -> pb::DeleteMemoryResponse, "DeleteMemory";
    forget_turn(pb::ForgetTurnRequest) -> pb::ForgetResponse, "ForgetTurn", agent_id;
    forget_events(pb::ForgetEventsRequest) -> pb::ForgetResponse, "ForgetEvents", agent_id;
    export_memory(pb::ExportMemoryRequest) -> ExportStream, "ExportMemory";
    import_memory(tonic::Streaming<pb::ImportMemoryRequest>) -> pb::ImportMemoryResponse, "ImportMemory";
}
