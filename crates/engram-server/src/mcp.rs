//! MCP at `/mcp` on the HTTP listener: Engram's memory as the tools of
//! DESIGN §13, over the Model Context Protocol's Streamable HTTP transport
//! (rmcp, the official SDK), stateless, answering plain JSON.
//!
//! Every tool is a call of the API (`api`) with the caller's token
//! (checked before rmcp sees the request: 401 without a valid one), so a
//! token's scope holds as it does over gRPC. A refused or failed call is a
//! tool result with `isError` and the reason, which the model can read
//! and act on; only protocol faults (an unknown tool) are JSON-RPC errors.
//! rmcp checks the Host header (`mcp.allowed_hosts`), the Accept and
//! Content-Type headers and the protocol version.

use std::sync::Arc;
use std::time::Instant;

use axum::http::request::Parts;
use engram_proto::pb;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use tonic::{Code, Status};

use crate::api::Api;
use crate::auth::Caller;
use crate::http::json::Json;

mod args;
mod blocks;

use args::Target;

/// What `[mcp]` configures.
#[derive(Debug, Clone, Default)]
pub struct McpSettings {
    pub allowed_hosts: Vec<String>,
    /// The memory of a call that names none and whose token sets none.
    pub agent_id: String,
    pub user_id: String,
}

/// The tools over one API.
#[derive(Clone)]
pub struct Tools {
    api: Api,
    json: Arc<Json>,
    settings: Arc<McpSettings>,
    /// Shared: stateless mode makes a `Tools` for every request.
    tool_router: Arc<ToolRouter<Tools>>,
}

/// The MCP service to mount at `/mcp`.
pub fn service(
    api: Api,
    json: Arc<Json>,
    settings: McpSettings,
    max_body_bytes: usize,
) -> StreamableHttpService<Tools, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        // Stateless: no session to keep (any replica answers any call),
        // and answers as plain JSON instead of an event stream.
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(settings.allowed_hosts.clone())
        // The same limit as every other request's.
        .with_max_request_body_bytes(max_body_bytes);
    let tools = Tools {
        api,
        json,
        settings: Arc::new(settings),
        tool_router: Arc::new(Tools::tool_router()),
    };
    // Made for every request in stateless mode: a clone of a few Arcs.
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The memory a call acts on.
enum Memory {
    Agent(String),
    User(String),
}

impl Memory {
    fn scope(&self) -> pb::MemoryScope {
        use pb::memory_scope::Scope;
        pb::MemoryScope {
            scope: Some(match self {
                Memory::Agent(a) => Scope::AgentId(a.clone()),
                Memory::User(u) => Scope::UserId(u.clone()),
            }),
        }
    }

    /// (agent_id, user_id) for the calls that take either.
    fn ids(&self) -> (String, String) {
        match self {
            Memory::Agent(a) => (a.clone(), String::new()),
            Memory::User(u) => (String::new(), u.clone()),
        }
    }
}

/// A tool's refusal, for the model to read.
fn refused(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

impl Tools {
    /// The caller the auth layer found, and the memory `target` names (or
    /// the caller's default).
    fn resolve(&self, parts: &Parts, target: Target) -> Result<(Caller, Memory), String> {
        // Put there by `authenticate` for every request that reaches the
        // tools; its absence is refused, never taken as "auth off".
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| "UNAUTHENTICATED: no caller on this request".to_owned())?;
        let given = |id: Option<String>| id.filter(|s| !s.is_empty());
        let defaults = caller.scope();
        let memory = if let Some(agent) = given(target.agent_id) {
            Memory::Agent(agent)
        } else if let Some(user) = given(target.user_id) {
            Memory::User(user)
        } else if let Some(agent) = defaults.and_then(|s| s.default_agent.clone()) {
            Memory::Agent(agent)
        } else if let Some(user) = defaults.and_then(|s| s.default_user.clone()) {
            Memory::User(user)
        } else if !self.settings.agent_id.is_empty() {
            Memory::Agent(self.settings.agent_id.clone())
        } else if !self.settings.user_id.is_empty() {
            Memory::User(self.settings.user_id.clone())
        } else {
            return Err(
                "INVALID_ARGUMENT: name the memory: agent_id (one conversation) or user_id (a user's, across conversations); this server sets no default".to_owned(),
            );
        };
        Ok((caller, memory))
    }

    /// Runs a tool's call of the API: the caller and the memory resolved
    /// from the request and `target` (or refused), then `call` with them,
    /// behind the request boundary (a panic is INTERNAL) and counted under
    /// `method`'s metrics. Its answer is the tool's result as JSON (the
    /// JSON API's form); a refusal is `isError` with its code's name.
    async fn act<T, F, Fut>(
        &self,
        method: &'static str,
        parts: &Parts,
        target: Target,
        call: F,
    ) -> CallToolResult
    where
        T: prost::Message + Send + 'static,
        F: FnOnce(Api, Caller, Memory) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let started = Instant::now();
        let (caller, memory) = match self.resolve(parts, target) {
            Ok(found) => found,
            Err(why) => return refused(why),
        };
        let call = call(self.api.clone(), caller, memory);
        let answer = crate::boundary::catch_panics(method, "", call).await;
        let code = answer.as_ref().map_or_else(Status::code, |_| Code::Ok);
        crate::observe::record_call(method, code, started);
        let answer = match answer {
            Ok(answer) => answer,
            Err(status) => {
                return refused(format!(
                    "{}: {}",
                    crate::observe::code_name(status.code()),
                    status.message()
                ));
            }
        };
        let (_, output) = self.json.method(method).expect("a method of the service");
        match self.json.encode(output, answer).await {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(
                String::from_utf8(text).unwrap_or_default(),
            )]),
            Err(status) => refused(status.message().to_owned()),
        }
    }
}

#[tool_router]
impl Tools {
    /// Search the memory (facts, summaries of earlier conversation, and
    /// messages) for what is relevant to a query, by words and meaning.
    #[tool(annotations(
        read_only_hint = true,
        destructive_hint = false,
        open_world_hint = false
    ))]
    async fn search_memory(
        &self,
        Parameters(a): Parameters<args::Search>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "Retrieve",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let (agent_id, user_id) = memory.ids();
                let request = pb::RetrieveRequest {
                    agent_id,
                    user_id,
                    query: a.query,
                    max_recalled: Some(a.limit.unwrap_or(10)),
                    max_episodic: Some(0),
                    max_semantic: Some(0),
                    raw_tail_turns: Some(0),
                    ..Default::default()
                };
                // Only what the query found: the bundle's other parts are the
                // prompt's business.
                let found = api.retrieve(&caller, request).await?;
                Ok(pb::RetrieveResponse {
                    recalled: found.recalled,
                    ..Default::default()
                })
            },
        )
        .await
    }

    /// Remember facts: each one sentence. The same fact added again is
    /// merged, not repeated.
    #[tool(annotations(
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn add_memories(
        &self,
        Parameters(a): Parameters<args::AddMemories>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "AddMemories",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let memories = a.memories.into_iter().map(|m| pb::NewMemory {
                    text: m.text,
                    tags: m.tags,
                    pinned: m.pinned,
                    ..Default::default()
                });
                let request = pb::AddMemoriesRequest {
                    scope: Some(memory.scope()),
                    memories: memories.collect(),
                };
                api.add_memories(&caller, request).await
            },
        )
        .await
    }

    /// Correct a fact: its new text replaces the old, which stays in the
    /// fact's history.
    #[tool(annotations(
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn update_memory(
        &self,
        Parameters(a): Parameters<args::UpdateMemory>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "UpdateMemory",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let request = pb::UpdateMemoryRequest {
                    scope: Some(memory.scope()),
                    id: a.memory_id,
                    text: Some(a.text),
                    ..Default::default()
                };
                api.update_memory(&caller, request).await
            },
        )
        .await
    }

    /// Forget a fact: no search or prompt shows it again.
    #[tool(annotations(
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn delete_memory(
        &self,
        Parameters(a): Parameters<args::DeleteMemory>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "DeleteMemory",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let request = pb::DeleteMemoryRequest {
                    scope: Some(memory.scope()),
                    id: a.memory_id,
                    expected_version: 0,
                };
                api.delete_memory(&caller, request).await
            },
        )
        .await
    }

    /// List the facts remembered, pinned first, then newest; optionally
    /// only those containing every word of a query.
    #[tool(annotations(
        read_only_hint = true,
        destructive_hint = false,
        open_world_hint = false
    ))]
    async fn list_memories(
        &self,
        Parameters(a): Parameters<args::ListMemories>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "ListMemories",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let request = pb::ListMemoriesRequest {
                    scope: Some(memory.scope()),
                    query: a.query.unwrap_or_default(),
                    page_size: a.limit.unwrap_or(0),
                    ..Default::default()
                };
                api.list_memories(&caller, request).await
            },
        )
        .await
    }

    /// Search the conversation's messages (earlier turns included, even
    /// those compacted away) by words and meaning.
    #[tool(annotations(
        read_only_hint = true,
        destructive_hint = false,
        open_world_hint = false
    ))]
    async fn search_history(
        &self,
        Parameters(a): Parameters<args::Search>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "SearchHistory",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let (agent_id, user_id) = memory.ids();
                let request = pb::SearchHistoryRequest {
                    agent_id,
                    user_id,
                    query: a.query,
                    limit: a.limit.unwrap_or(10),
                    ..Default::default()
                };
                api.search_history(&caller, request).await
            },
        )
        .await
    }

    /// How full the conversation's context window is: tokens against the
    /// budget and the compaction trigger, turns, compactions.
    #[tool(annotations(
        read_only_hint = true,
        destructive_hint = false,
        open_world_hint = false
    ))]
    async fn get_context_stats(
        &self,
        Parameters(a): Parameters<args::Stats>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "GetContextStats",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let Memory::Agent(agent_id) = memory else {
                    return Err(Status::invalid_argument(
                        "context stats are a conversation's: name its agent_id",
                    ));
                };
                let request = pb::GetContextStatsRequest {
                    agent_id,
                    model: String::new(),
                };
                api.get_context_stats(&caller, request).await
            },
        )
        .await
    }

    /// Read a memory block: a labelled text the model always sees in its
    /// prompt (a persona, notes, a plan).
    #[tool(annotations(
        read_only_hint = true,
        destructive_hint = false,
        open_world_hint = false
    ))]
    async fn read_memory_block(
        &self,
        Parameters(a): Parameters<args::ReadBlock>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act("GetMemoryBlock", &parts, a.target, |api, caller, memory| async move {
            blocks::read(&api, &caller, &memory, a.label).await
        })
        .await
    }

    /// Add a line at the end of a memory block (creating the block if it
    /// does not exist yet).
    #[tool(annotations(
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn append_memory_block(
        &self,
        Parameters(a): Parameters<args::AppendBlock>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "EditMemoryBlock",
            &parts,
            a.target,
            |api, caller, memory| async move {
                blocks::append(&api, &caller, &memory, a.label, a.text).await
            },
        )
        .await
    }

    /// Replace text that occurs exactly once in a memory block.
    #[tool(annotations(
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn replace_in_memory_block(
        &self,
        Parameters(a): Parameters<args::ReplaceInBlock>,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        self.act(
            "EditMemoryBlock",
            &parts,
            a.target,
            |api, caller, memory| async move {
                let edit = pb::block_edit::Edit::Replace(pb::BlockReplace {
                    old: a.old_text,
                    new: a.new_text,
                });
                blocks::edit(&api, &caller, &memory, a.label, edit).await
            },
        )
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("engram", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Engram is this assistant's long-term memory. search_memory before answering \
                 about the past; add_memories for facts worth keeping (one sentence each); \
                 update_memory or delete_memory when the user corrects or withdraws one; \
                 memory blocks hold text always shown in the prompt.",
            )
    }
}
