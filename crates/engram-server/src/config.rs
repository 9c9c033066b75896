//! Configuration: embedded defaults (`default.toml`), then an optional TOML
//! file, then `ENGRAM__<SECTION>__<KEY>` environment variables. Unknown keys
//! and invalid values fail at start with a message naming the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{Environment, File, FileFormat};
use engram_core::turns::IngestLimits;
use engram_files::{FsyncPolicy, StoreConfig};
use serde::Deserialize;

pub use crate::auth::TokenConfig;
pub use engram_engine::settings::{
    BlocksSection, BudgetOverride, BudgetSection, MemorySection, PolicySection, RecallSection,
    UsersSection,
};

/// The built-in defaults, also shipped as documentation.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

mod explain;
mod postgres;
mod validate;
pub use postgres::PostgresSection;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerSection,
    pub http: HttpSection,
    pub mcp: McpSection,
    pub auth: AuthSection,
    pub log: LogSection,
    pub store: StoreSection,
    pub limits: LimitsSection,
    pub budget: BudgetSection,
    pub llm: LlmSection,
    pub policy: PolicySection,
    pub embed: EmbedSection,
    pub recall: RecallSection,
    pub search: SearchSection,
    pub blocks: BlocksSection,
    pub users: UsersSection,
    pub memory: MemorySection,
    /// Crash tests of the binary: abort before this compaction step
    /// (`ENGRAM_TEST_CRASH_AT`; builds with `fault-injection` only).
    #[cfg(feature = "fault-injection")]
    #[serde(skip)]
    pub crash_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSection {
    pub base_url: String,
    pub model: String,
    /// The key itself, or (after loading) the value of `api_key_env`.
    pub api_key: Secret,
    pub api_key_env: String,
    /// The summarizer model's context window; larger windows are chunked.
    pub context_tokens: u32,
    pub timeout_secs: u64,
    pub max_retries: u32,
    pub json_mode: bool,
    /// Outages in a row that open the endpoint's circuit.
    pub circuit_failures: u32,
    /// Its first cool-down; doubled on each failed trial, up to the max.
    pub circuit_cooldown_secs: u64,
    pub circuit_max_cooldown_secs: u64,
    /// Failed compactions of one agent in a row that pause its automatic
    /// compaction for `agent_cooldown_secs`.
    pub agent_failures: u32,
    pub agent_cooldown_secs: u64,
}

/// A secret from the configuration: its Debug output hides it.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl Secret {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<hidden>"
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedProvider {
    Local,
    Http,
    None,
}

/// How the local model multiplies (`embed.precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedPrecision {
    /// int8 where the CPU has AVX-512 VNNI, else f32.
    Auto,
    Int8,
    F32,
}

/// How the local model's background threads are scheduled
/// (`embed.background_priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedPriority {
    Idle,
    Low,
    Normal,
}

/// `[embed]`: the model that makes memories searchable by meaning.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedSection {
    pub provider: EmbedProvider,
    pub model_dir: PathBuf,
    pub precision: EmbedPrecision,
    pub background_priority: EmbedPriority,
    /// `provider = "http"`: an OpenAI-compatible `/embeddings` endpoint.
    pub base_url: String,
    pub model: String,
    /// The length of the model's vectors.
    pub dimensions: usize,
    /// The key itself, or (after loading) the value of `api_key_env`.
    pub api_key: Secret,
    pub api_key_env: String,
    pub timeout_secs: u64,
    pub max_retries: u32,
    pub batch_size: usize,
    pub query_timeout_ms: u64,
    pub circuit_failures: u32,
    pub circuit_cooldown_secs: u64,
    pub circuit_max_cooldown_secs: u64,
}

/// Longest vectors accepted (the largest common models give 4,096).
const MAX_DIMENSIONS: usize = 16_384;

impl EmbedSection {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.provider != EmbedProvider::Http {
            return Ok(());
        }
        engram_llm::transport::endpoint(&self.base_url, "embeddings")
            .map_err(|e| invalid("embed.base_url", &e))?;
        if self.model.trim().is_empty() {
            return Err(invalid(
                "embed.model",
                "must be set with provider = \"http\"",
            ));
        }
        if !(1..=MAX_DIMENSIONS).contains(&self.dimensions) {
            return Err(invalid(
                "embed.dimensions",
                "must be the model's vector length (1 to 16384) with provider = \"http\"",
            ));
        }
        if !(1..=2048).contains(&self.batch_size) {
            return Err(invalid("embed.batch_size", "must be 1 to 2048"));
        }
        if self.timeout_secs == 0 || self.query_timeout_ms == 0 || self.circuit_failures == 0 {
            return Err(invalid(
                "embed.timeout_secs/query_timeout_ms/circuit_failures",
                "must be > 0",
            ));
        }
        if self.circuit_max_cooldown_secs < self.circuit_cooldown_secs {
            return Err(invalid(
                "embed.circuit_max_cooldown_secs",
                "must be at least embed.circuit_cooldown_secs",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: String,
    pub max_message_bytes: usize,
    pub shutdown_grace_secs: u64,
    /// Calls of one method in flight at most, over gRPC and JSON together
    /// (0: no limit); past it a call is refused UNAVAILABLE at once.
    pub max_calls_per_method: usize,
    /// Calls of one agent in flight at most (0: no limit); past it a call
    /// is refused RESOURCE_EXHAUSTED at once.
    pub max_calls_per_agent: usize,
    /// Empty: no metrics endpoint.
    pub metrics_listen: String,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub tls_client_ca: PathBuf,
}

/// The HTTP listener: the JSON API (and what else is served over HTTP).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// Empty: no HTTP listener.
    pub listen: String,
}

/// `[search]`: how ranked searches rank (SearchHistory, Retrieve with a
/// query, recall).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSection {
    /// When a question names exactly one participant, the share of their
    /// score the other participants' messages keep (1: no preference).
    pub speaker_prior: f32,
    /// Words of the conversation closest in meaning to a question added to
    /// its word query (0: none).
    pub expansion_words: usize,
    /// The share of the question's own words' weight those words carry
    /// together.
    pub expansion_weight: f32,
    /// How much its sitting's score (the sitting scored as one document)
    /// weighs a message: its score times 1 + this × the sitting's (0:
    /// sittings not scored).
    pub sitting_weight: f32,
    /// The share of its score a message that mostly asks keeps (1: no
    /// preference).
    pub question_prior: f32,
}

impl SearchSection {
    /// The ranking these settings make.
    pub fn ranking(&self) -> engram_index::Params {
        engram_index::Params {
            other_speakers: self.speaker_prior,
            expansion_words: self.expansion_words,
            expansion_weight: self.expansion_weight,
            sitting_weight: self.sitting_weight,
            question_prior: self.question_prior,
            ..engram_index::Params::default()
        }
    }
}

/// MCP at `/mcp` on the HTTP listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    pub enabled: bool,
    /// Host headers accepted (a name without a port: any port).
    pub allowed_hosts: Vec<String>,
    /// The memory a tool acts on when it names none and the caller's
    /// token gives no default: an agent, else a user ("" for none).
    pub agent_id: String,
    pub user_id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    pub tokens_file: PathBuf,
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
}

/// The shape of `auth.tokens_file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    tokens: Vec<TokenConfig>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    pub format: LogFormat,
    pub level: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncSetting {
    Always,
    Interval,
    Never,
}

/// Where agents are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendSetting {
    /// Per-agent JSONL files under `data_dir`: one node.
    Files,
    /// A Postgres-protocol database: any number of stateless replicas.
    Postgres,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    pub backend: BackendSetting,
    pub data_dir: PathBuf,
    pub fsync: FsyncSetting,
    pub fsync_interval_ms: u64,
    pub checkpoint_bytes: u64,
    pub idle_evict_secs: u64,
    /// What loaded agents and their caches may hold in memory, in MiB;
    /// 0: half the cgroup's memory limit when there is one, else none.
    pub memory_budget_mb: u64,
    pub postgres: PostgresSection,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub max_events_per_request: usize,
    pub max_trace_bytes: usize,
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // Not `#[from]`: the message already holds the cause, and a source
    // would print it twice in `{:#}` chains.
    #[error("configuration: {0}")]
    Load(String),
    #[error("configuration key {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

impl Config {
    /// Loads defaults, then `file`, then the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(file, std::env::vars())
    }

    /// Like [`load`](Self::load) with an explicit environment (tests).
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let all: Vec<(String, String)> = env.into_iter().collect();
        let lookup = |name: &str| {
            all.iter()
                .find(|(k, v)| k == name && !v.is_empty())
                .map(|(_, v)| v.clone())
        };
        let env: config::Map<String, String> = all
            .iter()
            .filter(|(k, _)| k.starts_with("ENGRAM__"))
            .cloned()
            .collect();
        let mut builder =
            config::Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
        if let Some(path) = file {
            builder = builder.add_source(File::from(path).format(FileFormat::Toml).required(true));
        }
        let built = builder
            .add_source(
                Environment::with_prefix("ENGRAM")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    // Lists in one variable, comma-separated.
                    .list_separator(",")
                    .with_list_parse_key("mcp.allowed_hosts")
                    .source(Some(env)),
            )
            .build()
            .map_err(|e| ConfigError::Load(explain::explain(&e.to_string(), &all, file)))?;
        let mut config: Self = built
            .try_deserialize()
            .map_err(|e| ConfigError::Load(explain::explain(&e.to_string(), &all, file)))?;
        if config.llm.api_key.is_empty()
            && let Some(key) = lookup(&config.llm.api_key_env)
        {
            config.llm.api_key = Secret(key);
        }
        if config.embed.api_key.is_empty()
            && let Some(key) = lookup(&config.embed.api_key_env)
        {
            config.embed.api_key = Secret(key);
        }
        #[cfg(feature = "fault-injection")]
        {
            config.crash_at = lookup("ENGRAM_TEST_CRASH_AT");
        }
        config.load_tokens_file()?;
        config.validate()?;
        Ok(config)
    }

    fn load_tokens_file(&mut self) -> Result<(), ConfigError> {
        let path = &self.auth.tokens_file;
        if path.as_os_str().is_empty() {
            return Ok(());
        }
        let file: TokensFile = config::Config::builder()
            .add_source(File::from(path.as_path()).format(FileFormat::Toml))
            .build()
            .and_then(config::Config::try_deserialize)
            .map_err(|e| invalid("auth.tokens_file", &e.to_string()))?;
        if file.tokens.is_empty() {
            // An empty file must not silently leave the server open.
            return Err(invalid(
                "auth.tokens_file",
                &format!("{} holds no [[tokens]]", path.display()),
            ));
        }
        self.auth.tokens.extend(file.tokens);
        Ok(())
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.server.listen.parse().map_err(|e| {
            invalid(
                "server.listen",
                &format!(
                    "{:?} is not a socket address like 127.0.0.1:50051 ({e})",
                    self.server.listen
                ),
            )
        })
    }

    /// The metrics endpoint, when `server.metrics_listen` is set.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        optional_addr(
            "server.metrics_listen",
            &self.server.metrics_listen,
            "0.0.0.0:9090",
        )
    }

    /// The HTTP listener, when `http.listen` is set.
    pub fn http_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(addr) = optional_addr("http.listen", &self.http.listen, "127.0.0.1:8080")? else {
            return Ok(None);
        };
        // Tokens must not cross the network in plain text when the
        // operator asked for TLS.
        if !self.server.tls_cert.as_os_str().is_empty() && !addr.ip().is_loopback() {
            return Err(invalid(
                "http.listen",
                &format!(
                    "{addr} is not a loopback address, and the HTTP listener speaks plain HTTP while server.tls_cert asks for TLS; listen on 127.0.0.1 behind a TLS proxy"
                ),
            ));
        }
        Ok(Some(addr))
    }

    /// The memory budget in bytes: `store.memory_budget_mb`, or with 0
    /// half of `cgroup_limit` (the container's memory limit) when there is
    /// one; `None`: no budget. Half: the binary, the model, the runtime
    /// and the allocator's slack live beside what the budget counts.
    pub fn memory_budget(&self, cgroup_limit: Option<u64>) -> Option<u64> {
        match self.store.memory_budget_mb {
            0 => cgroup_limit.map(|limit| limit / 2),
            mb => Some(mb.saturating_mul(1 << 20)),
        }
    }

    /// How long an idle agent stays in memory (`None`: for good).
    pub fn idle_evict(&self) -> Option<Duration> {
        (self.store.idle_evict_secs > 0).then(|| Duration::from_secs(self.store.idle_evict_secs))
    }

    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            data_dir: self.store.data_dir.clone(),
            fsync: match self.store.fsync {
                FsyncSetting::Always => FsyncPolicy::Always,
                FsyncSetting::Interval => FsyncPolicy::Interval,
                FsyncSetting::Never => FsyncPolicy::Never,
            },
            fsync_interval: Duration::from_millis(self.store.fsync_interval_ms),
            wal_segment_bytes: self.store.checkpoint_bytes,
            idle_evict: self.idle_evict(),
            limits: IngestLimits {
                max_events: self.limits.max_events_per_request,
                max_trace_bytes: self.limits.max_trace_bytes,
                max_tool_result_chars: self.policy.max_tool_result_chars,
            },
            embedder: None,
            ranking: self.search.ranking(),
        }
    }
}

impl From<config::ConfigError> for ConfigError {
    fn from(e: config::ConfigError) -> Self {
        Self::Load(e.to_string())
    }
}

/// The address of an optional listener `key` (empty: none).
fn optional_addr(
    key: &'static str,
    raw: &str,
    example: &str,
) -> Result<Option<SocketAddr>, ConfigError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse().map(Some).map_err(|e| {
        invalid(
            key,
            &format!("{raw:?} is not a socket address like {example} ({e})"),
        )
    })
}

fn invalid(key: &'static str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests;
