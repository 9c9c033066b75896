//! The matrix's rows: each method of the service (and each MCP tool) in
//! each form a client can call it — on an agent, on a user, on the global
//! scope, binding an agent to a user — with the request it sends for a
//! cell's ids, what that request touches (for the rule's model in
//! `tenancy.rs`), and the code it answers when allowed, on a target that
//! exists and on one that does not.

use serde_json::{Value, json};

use super::surfaces::Req;

/// The ids a cell's request names.
#[derive(Debug, Clone)]
pub struct Ids {
    pub agent: String,
    /// The user `agent` belongs to, if any (the world's model).
    pub owner: Option<String>,
    /// The user a user-form request names.
    pub user: String,
    /// A new agent id in the token's own namespace (bindings, forks,
    /// imports make it).
    pub fresh: String,
    pub agent_fact: String,
    pub user_fact: String,
    /// The bundles ImportMemory sends: one agent with no user, one agent of
    /// a user, a user's (each a template with its ids put in).
    pub bundles: std::sync::Arc<Bundles>,
}

#[derive(Debug, Clone, Default)]
pub struct Bundles {
    pub solo: String,
    pub bound: String,
    pub user: String,
}

impl Ids {
    fn solo_bundle(&self) -> Vec<u8> {
        self.bundles
            .solo
            .replace("tpl-solo", &self.agent)
            .into_bytes()
    }

    fn bound_bundle(&self) -> Vec<u8> {
        let b = &self.bundles.bound;
        b.replace("tpl-conv", &self.fresh)
            .replace("tpl-1", &self.user)
            .into_bytes()
    }

    fn user_bundle(&self) -> Vec<u8> {
        let b = &self.bundles.user;
        b.replace("tpl-conv", &self.fresh)
            .replace("tpl-1", &self.user)
            .into_bytes()
    }
}

/// What a request touches, for the rule's model.
#[derive(Debug, Clone)]
pub enum Part {
    /// An agent of `owner` (none: it has none, or does not exist), which
    /// the request binds to `binds`.
    Agent {
        id: String,
        owner: Option<String>,
        binds: Option<String>,
    },
    User(String),
    GlobalWrite,
    Admin,
}

/// Whether a row aims at a target (own, another tenant's, missing) or
/// not (a listing, the global scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aimed {
    Yes,
    No,
}

pub struct Row {
    pub method: &'static str,
    pub form: &'static str,
    pub aimed: Aimed,
    /// Whether it may change what it touches (the cell's target is made
    /// again before the next one that uses it).
    pub write: bool,
    pub req: fn(&Ids) -> Req,
    pub touches: fn(&Ids) -> Vec<Part>,
    /// The code when allowed on a target that exists, and on a missing one.
    pub present: &'static str,
    pub missing: &'static str,
}

fn agent(ids: &Ids) -> Vec<Part> {
    vec![Part::Agent {
        id: ids.agent.clone(),
        owner: ids.owner.clone(),
        binds: None,
    }]
}

fn user(ids: &Ids) -> Vec<Part> {
    vec![Part::User(ids.user.clone())]
}

fn binds(ids: &Ids) -> Vec<Part> {
    vec![Part::Agent {
        id: ids.fresh.clone(),
        owner: None,
        binds: Some(ids.user.clone()),
    }]
}

fn nothing(_: &Ids) -> Vec<Part> {
    vec![]
}

fn global_write(_: &Ids) -> Vec<Part> {
    vec![Part::GlobalWrite]
}

fn admin(_: &Ids) -> Vec<Part> {
    vec![Part::Admin]
}

fn j(value: Value) -> Req {
    Req::Json(value)
}

fn user_event(text: &str) -> Value {
    json!({"trace_type": "TRACE_TYPE_USER", "content": text})
}

fn agent_scope(ids: &Ids) -> Value {
    json!({"agent_id": ids.agent})
}

fn user_scope(ids: &Ids) -> Value {
    json!({"user_id": ids.user})
}

const GLOBAL: &str = r#"{"global": true}"#;

fn global_scope() -> Value {
    serde_json::from_str(GLOBAL).unwrap()
}

macro_rules! row {
    ($method:literal, $form:literal, $aimed:ident, $write:literal, $touches:expr,
     $present:literal / $missing:literal, |$ids:ident| $req:expr) => {
        Row {
            method: $method,
            form: $form,
            aimed: Aimed::$aimed,
            write: $write,
            req: |$ids: &Ids| $req,
            touches: $touches,
            present: $present,
            missing: $missing,
        }
    };
}

/// Every method in every form (DESIGN §3, §9).
#[rustfmt::skip]
pub fn rpc_rows() -> Vec<Row> {
    vec![
        row!("Ingest", "agent", Yes, true, agent, "OK" / "OK", |ids| j(json!({
            "agent_id": ids.agent, "events": [user_event("a new message")]}))),
        row!("Ingest", "binds", Yes, true, binds, "OK" / "OK", |ids| j(json!({
            "agent_id": ids.fresh, "user_id": ids.user, "events": [user_event("bound")]}))),
        row!("PrepareRequest", "agent", Yes, true, agent, "OK" / "OK", |ids| j(json!({
            "agent_id": ids.agent, "user_input": user_event("what do you remember?")}))),
        row!("PrepareRequest", "binds", Yes, true, binds, "OK" / "OK", |ids| j(json!({
            "agent_id": ids.fresh, "user_id": ids.user,
            "user_input": user_event("what do you remember?")}))),
        row!("Compact", "agent", Yes, true, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent}))),
        row!("Retrieve", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent, "query": "remember"}))),
        row!("Retrieve", "user", Yes, false, user, "OK" / "OK", |ids| j(json!({
            "user_id": ids.user, "query": "remember"}))),
        row!("SearchHistory", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent, "query": "message"}))),
        row!("SearchHistory", "user", Yes, false, user, "OK" / "OK", |ids| j(json!({
            "user_id": ids.user, "query": "message"}))),
        row!("GetContextStats", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent}))),
        row!("ListCompactions", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent}))),
        row!("ListAgents", "all", No, false, nothing, "OK" / "OK", |_ids| j(json!({}))),
        row!("ListAgents", "user", Yes, false, user, "OK" / "OK", |ids| j(json!({
            "user_id": ids.user}))),
        row!("ListUsers", "all", No, false, nothing, "OK" / "OK", |_ids| j(json!({}))),
        row!("DeleteAgent", "agent", Yes, true, admin, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent}))),
        row!("ForkAgent", "agent", Yes, true, fork, "OK" / "NOT_FOUND", |ids| j(json!({
            "source_agent_id": ids.agent, "target_agent_id": ids.fresh}))),
        row!("DeleteUser", "user", Yes, true, admin, "OK" / "OK", |ids| j(json!({
            "user_id": ids.user}))),
        row!("ConsolidateUser", "user", Yes, true, user, "OK" / "OK", |ids| j(json!({
            "user_id": ids.user}))),
        row!("ListConsolidations", "user", Yes, false, user, "OK" / "OK", |ids| j(json!({
            "user_id": ids.user}))),
        row!("ListMemoryBlocks", "agent", Yes, false, agent, "OK" / "OK", |ids| j(json!({
            "scope": agent_scope(ids)}))),
        row!("ListMemoryBlocks", "user", Yes, false, user, "OK" / "OK", |ids| j(json!({
            "scope": user_scope(ids)}))),
        row!("ListMemoryBlocks", "global", No, false, nothing, "OK" / "OK", |_ids| j(json!({
            "scope": global_scope()}))),
        row!("GetMemoryBlock", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids), "label": "notes", "include_history": true}))),
        row!("GetMemoryBlock", "user", Yes, false, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids), "label": "profile", "include_history": true}))),
        row!("GetMemoryBlock", "global", No, false, nothing, "OK" / "OK", |_ids| j(json!({
            "scope": global_scope(), "label": "house"}))),
        row!("PutMemoryBlock", "agent", Yes, true, agent, "OK" / "OK", |ids| j(json!({
            "scope": agent_scope(ids), "label": "notes", "value": "overwritten"}))),
        row!("PutMemoryBlock", "user", Yes, true, user, "OK" / "OK", |ids| j(json!({
            "scope": user_scope(ids), "label": "profile", "value": "overwritten"}))),
        row!("PutMemoryBlock", "global", No, true, global_write, "OK" / "OK", |_ids| j(json!({
            "scope": global_scope(), "label": "house", "value": "House rules."}))),
        row!("PutMemoryBlock", "binds", Yes, true, binds, "OK" / "OK", |ids| j(json!({
            "scope": {"agent_id": ids.fresh}, "user_id": ids.user,
            "label": "notes", "value": "bound"}))),
        row!("EditMemoryBlock", "agent", Yes, true, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids), "label": "notes", "edit": {"append": "more"}}))),
        row!("EditMemoryBlock", "user", Yes, true, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids), "label": "profile", "edit": {"append": "more"}}))),
        row!("EditMemoryBlock", "global", No, true, global_write, "OK" / "OK", |_ids| j(json!({
            "scope": global_scope(), "label": "house", "edit": {"append": "More."}}))),
        row!("EditMemoryBlock", "binds", Yes, true, binds, "NOT_FOUND" / "NOT_FOUND", |ids| j(json!({
            "scope": {"agent_id": ids.fresh}, "user_id": ids.user, "label": "notes",
            "edit": {"append": "bound"}}))),
        row!("DeleteMemoryBlock", "agent", Yes, true, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids), "label": "notes"}))),
        row!("DeleteMemoryBlock", "user", Yes, true, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids), "label": "profile"}))),
        row!("DeleteMemoryBlock", "global", No, true, global_write, "OK" / "OK", |_ids| j(json!({
            "scope": global_scope(), "label": "house"}))),
        row!("AddMemories", "agent", Yes, true, agent, "OK" / "OK", |ids| j(json!({
            "scope": agent_scope(ids), "memories": [{"text": "Likes green tea."}]}))),
        row!("AddMemories", "user", Yes, true, user, "OK" / "OK", |ids| j(json!({
            "scope": user_scope(ids), "memories": [{"text": "Likes green tea."}]}))),
        row!("ListMemories", "agent", Yes, false, agent, "OK" / "OK", |ids| j(json!({
            "scope": agent_scope(ids), "include_superseded": true}))),
        row!("ListMemories", "user", Yes, false, user, "OK" / "OK", |ids| j(json!({
            "scope": user_scope(ids), "include_superseded": true}))),
        row!("GetMemory", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids), "id": ids.agent_fact}))),
        row!("GetMemory", "user", Yes, false, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids), "id": ids.user_fact}))),
        row!("GetMemoryHistory", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids), "id": ids.agent_fact}))),
        row!("GetMemoryHistory", "user", Yes, false, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids), "id": ids.user_fact}))),
        row!("UpdateMemory", "agent", Yes, true, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids), "id": ids.agent_fact, "text": "Likes black tea."}))),
        row!("UpdateMemory", "user", Yes, true, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids), "id": ids.user_fact, "text": "Likes black tea."}))),
        row!("DeleteMemory", "agent", Yes, true, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids), "id": ids.agent_fact}))),
        row!("DeleteMemory", "user", Yes, true, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids), "id": ids.user_fact}))),
        row!("ForgetTurn", "agent", Yes, true, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent, "turn_id": "turn_0001"}))),
        row!("ForgetEvents", "agent", Yes, true, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "agent_id": ids.agent, "ids": ["no-such-event"]}))),
        row!("ExportMemory", "agent", Yes, false, agent, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": agent_scope(ids)}))),
        row!("ExportMemory", "user", Yes, false, user, "OK" / "NOT_FOUND", |ids| j(json!({
            "scope": user_scope(ids)}))),
        row!("ImportMemory", "agent", Yes, true, agent, "OK" / "OK", |ids| Req::Bundle {
            lines: ids.solo_bundle(), replace: true }),
        row!("ImportMemory", "binds", Yes, true, binds, "OK" / "OK", |ids| Req::Bundle {
            lines: ids.bound_bundle(), replace: true }),
        row!("ImportMemory", "user", Yes, true, user_and_binds, "OK" / "OK", |ids| Req::Bundle {
            lines: ids.user_bundle(), replace: true }),
    ]
}

/// A fork: the source, and the new agent, which inherits its user.
fn fork(ids: &Ids) -> Vec<Part> {
    let mut parts = agent(ids);
    parts.push(Part::Agent {
        id: ids.fresh.clone(),
        owner: None,
        binds: ids.owner.clone(),
    });
    parts
}

/// A user's bundle: the user, and the agent it binds to the user.
fn user_and_binds(ids: &Ids) -> Vec<Part> {
    let mut parts = user(ids);
    parts.extend(binds(ids));
    parts
}

/// An MCP tool in one form: its arguments for a cell's ids.
pub struct Tool {
    pub tool: &'static str,
    pub form: &'static str,
    pub write: bool,
    pub args: fn(&Ids) -> Value,
    pub touches: fn(&Ids) -> Vec<Part>,
    pub present: &'static str,
    pub missing: &'static str,
}

macro_rules! tool {
    ($tool:literal, $form:literal, $write:literal, $touches:expr,
     $present:literal / $missing:literal, |$ids:ident| $args:expr) => {
        Tool {
            tool: $tool,
            form: $form,
            write: $write,
            args: |$ids: &Ids| $args,
            touches: $touches,
            present: $present,
            missing: $missing,
        }
    };
}

/// Every tool (DESIGN §13), on an agent and on a user.
#[rustfmt::skip]
pub fn mcp_rows() -> Vec<Tool> {
    vec![
        tool!("search_memory", "agent", false, agent, "OK" / "NOT_FOUND", |ids| json!({
            "agent_id": ids.agent, "query": "remember"})),
        tool!("search_memory", "user", false, user, "OK" / "OK", |ids| json!({
            "user_id": ids.user, "query": "remember"})),
        tool!("add_memories", "agent", true, agent, "OK" / "OK", |ids| json!({
            "agent_id": ids.agent, "memories": [{"text": "Likes green tea."}]})),
        tool!("add_memories", "user", true, user, "OK" / "OK", |ids| json!({
            "user_id": ids.user, "memories": [{"text": "Likes green tea."}]})),
        tool!("update_memory", "agent", true, agent, "OK" / "NOT_FOUND", |ids| json!({
            "agent_id": ids.agent, "memory_id": ids.agent_fact, "text": "Likes black tea."})),
        tool!("update_memory", "user", true, user, "OK" / "NOT_FOUND", |ids| json!({
            "user_id": ids.user, "memory_id": ids.user_fact, "text": "Likes black tea."})),
        tool!("delete_memory", "agent", true, agent, "OK" / "NOT_FOUND", |ids| json!({
            "agent_id": ids.agent, "memory_id": ids.agent_fact})),
        tool!("delete_memory", "user", true, user, "OK" / "NOT_FOUND", |ids| json!({
            "user_id": ids.user, "memory_id": ids.user_fact})),
        tool!("list_memories", "agent", false, agent, "OK" / "OK", |ids| json!({
            "agent_id": ids.agent})),
        tool!("list_memories", "user", false, user, "OK" / "OK", |ids| json!({
            "user_id": ids.user})),
        tool!("read_memory_block", "agent", false, agent, "OK" / "NOT_FOUND", |ids| json!({
            "agent_id": ids.agent, "label": "notes"})),
        tool!("read_memory_block", "user", false, user, "OK" / "NOT_FOUND", |ids| json!({
            "user_id": ids.user, "label": "profile"})),
        tool!("append_memory_block", "agent", true, agent, "OK" / "OK", |ids| json!({
            "agent_id": ids.agent, "label": "notes", "text": "more"})),
        tool!("append_memory_block", "user", true, user, "OK" / "OK", |ids| json!({
            "user_id": ids.user, "label": "profile", "text": "more"})),
        tool!("replace_in_memory_block", "agent", true, agent, "OK" / "NOT_FOUND", |ids| json!({
            "agent_id": ids.agent, "label": "notes", "old_text": "NOTE", "new_text": "note"})),
        tool!("replace_in_memory_block", "user", true, user, "OK" / "NOT_FOUND", |ids| json!({
            "user_id": ids.user, "label": "profile", "old_text": "PROFILE", "new_text": "p"})),
        tool!("search_history", "agent", false, agent, "OK" / "NOT_FOUND", |ids| json!({
            "agent_id": ids.agent, "query": "message"})),
        tool!("search_history", "user", false, user, "OK" / "OK", |ids| json!({
            "user_id": ids.user, "query": "message"})),
        tool!("get_context_stats", "agent", false, agent, "OK" / "NOT_FOUND", |ids| json!({
            "agent_id": ids.agent})),
        // A user has no context window: refused before anything is read.
        tool!("get_context_stats", "user", false, nothing, "INVALID_ARGUMENT" / "INVALID_ARGUMENT",
            |ids| json!({"user_id": ids.user})),
    ]
}
