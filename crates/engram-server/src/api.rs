//! The API over the engine, in the contract's messages and statuses,
//! whatever protocol brings a call: gRPC (`service`) and the JSON API
//! (`http`) both call these, with the caller their auth found. Each call is
//! auth → convert → engine → convert; the blocks', facts' and
//! export/import calls are in `blocks`, `facts` and `portable`.

use engram_engine::Engine;
use engram_engine::consolidate::Cause;
use engram_proto::pb;
use tonic::Status;

use crate::auth::{self, Access, Caller};
use crate::convert;
use crate::convert::facts::consolidation_to_pb;
use crate::status::from_engine;

/// ExportMemory's answer: the bundle's pieces.
pub type ExportStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<pb::MemoryBundleChunk, Status>> + Send>,
>;

/// The API over one engine.
#[derive(Debug, Clone)]
pub struct Api {
    engine: Engine,
    /// `server.max_message_bytes`: responses are held to it too.
    max_message_bytes: usize,
}

impl Api {
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
    pub(crate) fn fits<M: prost::Message>(&self, response: M, what: &str) -> Result<M, Status> {
        let len = response.encoded_len();
        if len > self.max_message_bytes {
            return Err(crate::status::answer_too_large(
                what,
                len,
                self.max_message_bytes,
            ));
        }
        Ok(response)
    }
}

/// The calls, each auth → convert → engine → convert; the protocols put
/// each behind the request boundary.
impl Api {
    pub async fn ingest(
        &self,
        caller: &Caller,
        req: pb::IngestRequest,
    ) -> Result<pb::IngestResponse, Status> {
        let access = Access::Agent {
            id: &req.agent_id,
            binds: &req.user_id,
        };
        let _agent = auth::authorize(&self.engine, caller, access).await?;
        let req = convert::ingest_from_pb(req);
        let out = self.engine.ingest(req).await.map_err(from_engine)?;
        Ok(convert::ingested_to_pb(out))
    }

    pub async fn prepare_request(
        &self,
        caller: &Caller,
        req: pb::PrepareRequestRequest,
    ) -> Result<pb::PrepareRequestResponse, Status> {
        let access = Access::Agent {
            id: &req.agent_id,
            binds: &req.user_id,
        };
        let _agent = auth::authorize(&self.engine, caller, access).await?;
        let req = convert::prepare_from_pb(req).map_err(from_engine)?;
        let prepared = self.engine.prepare(req).await.map_err(from_engine)?;
        self.fits(convert::prepared_to_pb(prepared), "prompt")
    }

    pub async fn compact(
        &self,
        caller: &Caller,
        req: pb::CompactRequest,
    ) -> Result<pb::CompactResponse, Status> {
        let _agent = auth::authorize(&self.engine, caller, Access::agent(&req.agent_id)).await?;
        let strategy = convert::strategy_from_pb(&req.strategy).map_err(from_engine)?;
        let report = self
            .engine
            .compact(&req.agent_id, Some(req.focus.as_str()), strategy)
            .await
            .map_err(from_engine)?;
        Ok(pb::CompactResponse {
            report: Some(convert::report_to_pb(&report)),
        })
    }

    pub async fn retrieve(
        &self,
        caller: &Caller,
        req: pb::RetrieveRequest,
    ) -> Result<pb::RetrieveResponse, Status> {
        let access = Access::AgentOrUser {
            agent: &req.agent_id,
            user: &req.user_id,
        };
        let _agent = auth::authorize(&self.engine, caller, access).await?;
        let req = convert::retrieve_from_pb(req);
        let retrieved = self.engine.retrieve(req).await.map_err(from_engine)?;
        self.fits(convert::retrieved_to_pb(retrieved), "answer")
    }

    pub async fn search_history(
        &self,
        caller: &Caller,
        req: pb::SearchHistoryRequest,
    ) -> Result<pb::SearchHistoryResponse, Status> {
        let access = Access::AgentOrUser {
            agent: &req.agent_id,
            user: &req.user_id,
        };
        let _agent = auth::authorize(&self.engine, caller, access).await?;
        let req = convert::search_from_pb(req).map_err(from_engine)?;
        let page = self.engine.search(req).await.map_err(from_engine)?;
        let response = pb::SearchHistoryResponse {
            matches: page.hits.into_iter().map(convert::hit_into_pb).collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
            index: Some(convert::index_state_into_pb(page.index)),
        };
        self.fits(response, "page")
    }

    pub async fn get_context_stats(
        &self,
        caller: &Caller,
        req: pb::GetContextStatsRequest,
    ) -> Result<pb::GetContextStatsResponse, Status> {
        let _agent = auth::authorize(&self.engine, caller, Access::agent(&req.agent_id)).await?;
        let stats = self
            .engine
            .context_stats(&req.agent_id, Some(req.model.as_str()))
            .await
            .map_err(from_engine)?;
        Ok(convert::stats_to_pb(stats))
    }

    pub async fn list_compactions(
        &self,
        caller: &Caller,
        req: pb::ListCompactionsRequest,
    ) -> Result<pb::ListCompactionsResponse, Status> {
        let _agent = auth::authorize(&self.engine, caller, Access::agent(&req.agent_id)).await?;
        let req = engram_engine::ListCompactionsRequest {
            agent_id: req.agent_id,
            page_size: req.page_size,
            page_token: req.page_token,
        };
        let page = self
            .engine
            .list_compactions(&req)
            .await
            .map_err(from_engine)?;
        Ok(convert::compaction_page_to_pb(page))
    }

    pub async fn list_agents(
        &self,
        caller: &Caller,
        req: pb::ListAgentsRequest,
    ) -> Result<pb::ListAgentsResponse, Status> {
        if !req.user_id.is_empty() {
            // A user's agents: only for a token that covers the user.
            let _user = auth::authorize(&self.engine, caller, Access::User(&req.user_id)).await?;
        }
        let req = engram_engine::ListAgentsRequest {
            page_size: req.page_size,
            page_token: req.page_token,
            user_id: req.user_id,
            id_contains: req.id_contains,
        };
        let page = self
            .engine
            .list_agents(&req, &|id, owner| caller.sees_agent(id, owner))
            .await
            .map_err(from_engine)?;
        Ok(convert::agent_page_to_pb(page))
    }

    pub async fn list_users(
        &self,
        caller: &Caller,
        req: pb::ListUsersRequest,
    ) -> Result<pb::ListUsersResponse, Status> {
        let req = engram_engine::ListUsersRequest {
            page_size: req.page_size,
            page_token: req.page_token,
        };
        let page = self
            .engine
            .list_users(&req, &|user| caller.sees_user(user))
            .await
            .map_err(from_engine)?;
        Ok(convert::user_page_to_pb(page))
    }

    pub async fn delete_agent(
        &self,
        caller: &Caller,
        req: pb::DeleteAgentRequest,
    ) -> Result<pb::DeleteAgentResponse, Status> {
        let _admin = auth::authorize(&self.engine, caller, Access::Admin("DeleteAgent")).await?;
        let id = req.agent_id;
        self.engine.delete_agent(&id).await.map_err(from_engine)?;
        Ok(pb::DeleteAgentResponse {})
    }

    pub async fn delete_user(
        &self,
        caller: &Caller,
        req: pb::DeleteUserRequest,
    ) -> Result<pb::DeleteUserResponse, Status> {
        let _admin = auth::authorize(&self.engine, caller, Access::Admin("DeleteUser")).await?;
        let user = req.user_id;
        let erased = self.engine.delete_user(&user).await.map_err(from_engine)?;
        Ok(pb::DeleteUserResponse {
            agents_deleted: u32::try_from(erased).unwrap_or(u32::MAX),
        })
    }

    pub async fn consolidate_user(
        &self,
        caller: &Caller,
        req: pb::ConsolidateUserRequest,
    ) -> Result<pb::ConsolidateUserResponse, Status> {
        let _user = auth::authorize(&self.engine, caller, Access::User(&req.user_id)).await?;
        let run = self
            .engine
            .consolidate_user(&req.user_id, Cause::Request)
            .await
            .map_err(from_engine)?;
        Ok(pb::ConsolidateUserResponse {
            consolidation: Some(consolidation_to_pb(&run)),
        })
    }

    pub async fn list_consolidations(
        &self,
        caller: &Caller,
        req: pb::ListConsolidationsRequest,
    ) -> Result<pb::ListConsolidationsResponse, Status> {
        let _user = auth::authorize(&self.engine, caller, Access::User(&req.user_id)).await?;
        let limit = match req.page_size {
            0 => 20,
            n => n.min(100) as usize,
        };
        let runs = self
            .engine
            .consolidations(&req.user_id, limit)
            .await
            .map_err(from_engine)?;
        Ok(pb::ListConsolidationsResponse {
            consolidations: runs.iter().map(consolidation_to_pb).collect(),
        })
    }

    pub async fn fork_agent(
        &self,
        caller: &Caller,
        req: pb::ForkAgentRequest,
    ) -> Result<pb::ForkAgentResponse, Status> {
        let _source =
            auth::authorize(&self.engine, caller, Access::agent(&req.source_agent_id)).await?;
        let into = Access::ForkInto {
            source: &req.source_agent_id,
            target: &req.target_agent_id,
        };
        let _target = auth::authorize(&self.engine, caller, into).await?;
        let agent_id = self
            .engine
            .fork_agent(&req.source_agent_id, &req.target_agent_id)
            .await
            .map_err(from_engine)?;
        Ok(pb::ForkAgentResponse { agent_id })
    }
}
