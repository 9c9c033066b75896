//! The `engram.v1.MemoryService` implementation: validation at the edge,
//! the store for state, `engram_core` for the rules.

use engram_core::AgentId;
use std::sync::Arc;

use engram_core::compaction::Trigger;
use engram_core::memory::{recent_episodic, top_semantic};
use engram_core::retrieve::tool_interactions;
use engram_proto::pb;
use engram_proto::pb::memory_service_server::MemoryService;
use engram_store::Store;
use tonic::{Request, Response, Status};

use crate::auth;
use crate::boundary::catch_panics;
use crate::budget::Budgets;
use crate::caches::ContextCaches;
use crate::compactor::Compactor;
use crate::config::RecallSection;
use crate::status::{from_core, from_store};
use crate::{context, convert, sizing};

const DEFAULT_MAX_EPISODIC: u32 = 3;
const DEFAULT_MAX_SEMANTIC: u32 = 20;
const DEFAULT_RAW_TAIL_TURNS: u32 = 4;
const DEFAULT_PAGE_SIZE: u32 = 100;
const MAX_PAGE_SIZE: u32 = 1000;

/// The gRPC service over one store.
#[derive(Debug, Clone)]
pub struct Engram {
    store: Arc<dyn Store>,
    caches: Arc<ContextCaches>,
    budgets: Arc<Budgets>,
    compactor: Compactor,
    /// `server.max_message_bytes`: responses are held to it too.
    max_message_bytes: usize,
    recall: RecallSection,
}

impl Engram {
    pub fn new(
        store: Arc<dyn Store>,
        caches: Arc<ContextCaches>,
        budgets: Arc<Budgets>,
        compactor: Compactor,
        max_message_bytes: usize,
        recall: RecallSection,
    ) -> Self {
        Self {
            store,
            caches,
            budgets,
            compactor,
            max_message_bytes,
            recall,
        }
    }

    /// RESOURCE_EXHAUSTED, with the way out, for an answer over the limit
    /// (tonic would fail it with a bare OUT_OF_RANGE in the trailers).
    fn fits<M: prost::Message>(&self, response: M, what: &str) -> Result<Response<M>, Status> {
        let len = response.encoded_len();
        if len > self.max_message_bytes {
            return Err(Status::resource_exhausted(format!(
                "the {what} is {len} bytes, over server.max_message_bytes ({}); compact the agent or raise the limit",
                self.max_message_bytes
            )));
        }
        Ok(Response::new(response))
    }
}

fn agent(raw: &str) -> Result<AgentId, Status> {
    AgentId::parse(raw).map_err(from_core)
}

/// The handlers; the trait impl below puts each behind the request boundary.
impl Engram {
    async fn handle_ingest(
        &self,
        request: Request<pb::IngestRequest>,
    ) -> Result<Response<pb::IngestResponse>, Status> {
        auth::authorize(&request, &request.get_ref().agent_id)?;
        let req = request.into_inner();
        let id = agent(&req.agent_id)?;
        let events: Vec<_> = req.events.into_iter().map(convert::event_from_pb).collect();
        let model = (!req.model.is_empty()).then_some(req.model.as_str());
        let usage = req.usage.map(convert::usage_from_pb);
        let mut out = self
            .store
            .ingest(&id, &events, usage, model)
            .await
            .map_err(from_store)?;
        if let Some(reported) = usage.map(|u| u.prompt_tokens)
            && !out.compaction_required
        {
            let model = out.model.as_deref().unwrap_or_default();
            let trigger = self.budgets.budget(id.as_str(), model, None).trigger_tokens;
            if reported > trigger {
                tracing::info!(agent = %id, reported, trigger, "reported prompt passed the compaction trigger");
                // The traces are stored: this request is not refused for
                // want of the mark. Without it the reported usage, kept in
                // the trace, still triggers by the estimate.
                match self.store.mark_compaction_required(&id, out.epoch).await {
                    Ok(marked) => out.compaction_required = marked,
                    Err(e) => {
                        tracing::warn!(agent = %id, error = %e, "could not store the compaction mark");
                    }
                }
            }
        }
        tracing::debug!(agent = %id, events = events.len(), turn = %out.current_turn_id, "ingested");
        metrics::counter!("engram_traces_ingested_total").increment(out.traces.len() as u64);
        Ok(Response::new(pb::IngestResponse {
            traces: out.traces.into_iter().map(convert::trace_into_pb).collect(),
            current_turn_id: out.current_turn_id,
            compaction_required: out.compaction_required,
        }))
    }

    async fn handle_prepare_request(
        &self,
        request: Request<pb::PrepareRequestRequest>,
    ) -> Result<Response<pb::PrepareRequestResponse>, Status> {
        auth::authorize(&request, &request.get_ref().agent_id)?;
        let response = context::prepare_request(
            self.store.as_ref(),
            &self.caches,
            &self.budgets,
            &self.compactor,
            &self.recall,
            request.into_inner(),
        )
        .await?;
        self.fits(response, "prompt")
    }

    async fn handle_compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        auth::authorize(&request, &request.get_ref().agent_id)?;
        let req = request.into_inner();
        let id = agent(&req.agent_id)?;
        let focus = Some(req.focus.trim()).filter(|f| !f.is_empty());
        let store = self.store.as_ref();
        let before = context::prompt_tokens(store, &self.caches, &self.budgets, &id).await?;
        let compacted = self
            .compactor
            .compact(&id, Trigger::Manual, focus, before)
            .await;
        let mut report = compacted.report;
        report.tokens_after = match compacted.context {
            Some(context) => sizing::over_trigger(&self.caches, &self.budgets, &id, &context).1,
            None => context::prompt_tokens(store, &self.caches, &self.budgets, &id).await?,
        };
        Ok(Response::new(pb::CompactResponse {
            report: Some(convert::report_to_pb(&report)),
        }))
    }

    async fn handle_retrieve(
        &self,
        request: Request<pb::RetrieveRequest>,
    ) -> Result<Response<pb::RetrieveResponse>, Status> {
        auth::authorize(&request, &request.get_ref().agent_id)?;
        let req = request.into_inner();
        let id = agent(&req.agent_id)?;
        let max_episodic = req.max_episodic.unwrap_or(DEFAULT_MAX_EPISODIC) as usize;
        let max_semantic = req.max_semantic.unwrap_or(DEFAULT_MAX_SEMANTIC) as usize;
        let tail_turns = req.raw_tail_turns.unwrap_or(DEFAULT_RAW_TAIL_TURNS) as usize;
        let recall = self
            .store
            .recall(&id, tail_turns)
            .await
            .map_err(from_store)?;
        let query = req.query.trim();
        let found = if query.is_empty() {
            None
        } else {
            let memory_query =
                crate::search::memory_query_from_pb(&req, query, max_episodic, max_semantic)
                    .map_err(from_core)?;
            let found = self.store.rank_memories(&id, &memory_query).await;
            Some(found.map_err(from_store)?)
        };
        // Picking from every memory is CPU work: off the async workers
        // when there are many.
        let memories = (recall.episodic.len() + recall.semantic.len()) as u64 * 256;
        let (recent, salient) = engram_store::offload_over(memories, || {
            (
                recent_episodic(&recall.episodic, max_episodic),
                top_semantic(&recall.semantic, max_semantic),
            )
        });
        // With a query, the most relevant come first, and the usual picks
        // (recency, salience) fill what is left.
        let (episodic, semantic, recalled, index) = match found {
            None => (recent, salient, vec![], None),
            Some(found) => (
                crate::search::relevant_first(found.episodic, recent, max_episodic, |e| {
                    e.id.clone()
                }),
                crate::search::relevant_first(found.semantic, salient, max_semantic, |f| {
                    f.id.clone()
                }),
                found
                    .memories
                    .into_iter()
                    .map(crate::search::recalled_into_pb)
                    .collect(),
                Some(crate::search::index_state_into_pb(found.index)),
            ),
        };
        let response = pb::RetrieveResponse {
            bundle: Some(pb::MemoryBundle {
                episodic: episodic.iter().map(convert::episodic_to_pb).collect(),
                semantic: semantic.iter().map(convert::semantic_to_pb).collect(),
            }),
            tool_interactions: if req.include_tool_interactions {
                tool_interactions(&recall.raw_tail)
                    .iter()
                    .map(convert::interaction_to_pb)
                    .collect()
            } else {
                vec![]
            },
            raw_tail: recall.raw_tail.iter().map(convert::trace_to_pb).collect(),
            recalled,
            index,
        };
        self.fits(response, "answer")
    }

    async fn handle_search_history(
        &self,
        request: Request<pb::SearchHistoryRequest>,
    ) -> Result<Response<pb::SearchHistoryResponse>, Status> {
        auth::authorize(&request, &request.get_ref().agent_id)?;
        let req = request.into_inner();
        let id = agent(&req.agent_id)?;
        let search = crate::search::search_from_pb(&req).map_err(from_core)?;
        let page = self.store.search(&id, &search).await.map_err(from_store)?;
        let response = pb::SearchHistoryResponse {
            matches: page
                .hits
                .into_iter()
                .map(crate::search::hit_into_pb)
                .collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
            index: Some(crate::search::index_state_into_pb(page.index)),
        };
        self.fits(response, "page")
    }

    async fn handle_get_context_stats(
        &self,
        request: Request<pb::GetContextStatsRequest>,
    ) -> Result<Response<pb::GetContextStatsResponse>, Status> {
        auth::authorize(&request, &request.get_ref().agent_id)?;
        context::context_stats(
            self.store.as_ref(),
            &self.caches,
            &self.budgets,
            request.into_inner(),
        )
        .await
        .map(Response::new)
    }

    async fn handle_list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let scope = auth::scope(&request);
        let req = request.into_inner();
        let page_size = match req.page_size {
            0 => DEFAULT_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        };
        let token = (!req.page_token.is_empty()).then_some(req.page_token.as_str());
        if let Some(t) = token {
            AgentId::parse(t).map_err(|_| {
                Status::invalid_argument(
                    "page_token is not one this server issued; pass next_page_token unchanged",
                )
            })?;
        }
        let (agent_ids, next) = self
            .store
            .list_agents(page_size as usize, token, &|id| {
                scope.as_ref().is_none_or(|s| s.allows(id))
            })
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::ListAgentsResponse {
            agent_ids,
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn handle_delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        auth::require_admin(&request, "DeleteAgent")?;
        let id = agent(&request.into_inner().agent_id)?;
        self.store.delete_agent(&id).await.map_err(from_store)?;
        tracing::info!(agent = %id, "agent deleted");
        Ok(Response::new(pb::DeleteAgentResponse {}))
    }

    async fn handle_fork_agent(
        &self,
        request: Request<pb::ForkAgentRequest>,
    ) -> Result<Response<pb::ForkAgentResponse>, Status> {
        auth::authorize(&request, &request.get_ref().source_agent_id)?;
        auth::authorize(&request, &request.get_ref().target_agent_id)?;
        let req = request.into_inner();
        let source = AgentId::parse(&req.source_agent_id)
            .map_err(|e| Status::invalid_argument(format!("source_agent_id: {e}")))?;
        let target = AgentId::parse(&req.target_agent_id)
            .map_err(|e| Status::invalid_argument(format!("target_agent_id: {e}")))?;
        self.store
            .fork_agent(&source, &target)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::ForkAgentResponse {
            agent_id: target.to_string(),
        }))
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
}
