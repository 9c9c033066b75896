//! The tools' arguments: their JSON schemas (what an MCP client shows the
//! model) come from these types and their doc comments.

use schemars::JsonSchema;
use serde::Deserialize;

/// Which memory a tool acts on. Neither given: the caller's default (the
/// token's `default_agent` / `default_user`, else the server's
/// `mcp.agent_id` / `mcp.user_id`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct Target {
    /// The agent (one conversation) whose memory to use.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The user whose memory, across all their conversations, to use
    /// (when no agent_id is given).
    #[serde(default)]
    pub user_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Search {
    /// What to look for: words or a question in natural language.
    pub query: String,
    /// How many results at most (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<u32>,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewMemory {
    /// The fact, in one sentence ("Prefers window seats").
    pub text: String,
    /// Labels to find it by.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Always shown to the model, never expires, never dropped.
    #[serde(default)]
    pub pinned: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddMemories {
    /// The facts to remember; one the memory already holds in the same
    /// words is merged, not repeated.
    pub memories: Vec<NewMemory>,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UpdateMemory {
    /// The fact's id, as list_memories or search_memory give it.
    pub memory_id: String,
    /// Its new text; the old one stays in its history.
    pub text: String,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeleteMemory {
    /// The fact's id, as list_memories or search_memory give it.
    pub memory_id: String,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListMemories {
    /// Only facts containing every one of these words.
    #[serde(default)]
    pub query: Option<String>,
    /// How many at most (default 100, at most 1000); pinned first, then
    /// newest first.
    #[serde(default)]
    pub limit: Option<u32>,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadBlock {
    /// The block's label, e.g. "persona" or "notes".
    pub label: String,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AppendBlock {
    /// The block's label; a block that does not exist yet is created.
    pub label: String,
    /// The text to add, on a line of its own at the end.
    pub text: String,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReplaceInBlock {
    /// The block's label.
    pub label: String,
    /// Text that occurs exactly once in the block.
    pub old_text: String,
    /// What replaces it ("" to remove it).
    pub new_text: String,
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct Stats {
    #[serde(flatten)]
    pub target: Target,
}
