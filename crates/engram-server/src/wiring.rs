//! The parts `[store]`, `[embed]`, `[llm]` and the engine's sections ask
//! for, built from the configuration: the store with its embedding model,
//! the summarizer stack, the engine's settings.

use std::sync::Arc;
use std::time::Duration;

use engram_engine::Settings;
use engram_files::FileStore;
use engram_llm::{Chunked, CircuitBreaker, Extractive, HttpConfig, HttpSummarizer, Summarizer};
use engram_store::{Admin, Runtime, Store, StoreError};

use crate::config::{self, Config};
use crate::{ServerError, lock_data_dir};

/// The store `[store]` asks for, with the embedding model of `[embed]`.
pub async fn open_store(config: &Config) -> Result<Arc<dyn Store>, ServerError> {
    let embedder = embedder(&config.embed).await?;
    match config.store.backend {
        config::BackendSetting::Files => {
            let mut store_config = config.store_config();
            store_config.embedder = embedder;
            let store = FileStore::open(store_config).await?;
            #[cfg(feature = "fault-injection")]
            store.inject_compaction_crash(
                config
                    .crash_at
                    .as_deref()
                    .and_then(engram_store::CommitStep::parse),
            );
            #[cfg(feature = "fault-injection")]
            store.inject_forget_crash(config.crash_at.as_deref());
            Ok(Arc::new(store))
        }
        config::BackendSetting::Postgres => {
            let mut pg = config.postgres_config();
            pg.embedder = embedder;
            let store = engram_postgres::PgStore::open(pg).await?;
            tracing::info!(
                pool_size = config.store.postgres.pool_size,
                "storing agents in PostgreSQL"
            );
            Ok(Arc::new(store))
        }
    }
}

/// `engramd reindex`: the search index of `agent` (or of every agent)
/// deleted and built again from the files, with every item embedded when
/// there is a model. Reports each agent's index as it finishes.
pub async fn reindex(
    config: &Config,
    agent: Option<&str>,
    mut report: impl FnMut(&str, &engram_store::IndexState),
) -> Result<(), ServerError> {
    if config.store.backend == config::BackendSetting::Postgres {
        return Err(ServerError::DataDir(
            "engramd reindex rebuilds the file store's index; the postgres backend indexes words as it writes".into(),
        ));
    }
    let _held = lock_data_dir(&config.store.data_dir)?;
    let mut store_config = config.store_config();
    store_config.embedder = embedder(&config.embed).await?;
    let store = FileStore::open(store_config).await?;
    let agents = match agent {
        Some(id) => vec![id.to_owned()],
        None => {
            let mut all = vec![];
            let mut token: Option<String> = None;
            loop {
                let (page, next) =
                    Admin::list_agents(&store, 1000, token.as_deref(), &|_, _| true).await?;
                all.extend(page);
                match next {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
            all
        }
    };
    for id in agents {
        let parsed = engram_core::AgentId::parse(&id).map_err(StoreError::from)?;
        let state = store.reindex(&parsed).await?;
        report(&id, &state);
    }
    Runtime::close(&store).await;
    Ok(())
}

/// The embedding model `[embed]` asks for; `None`: search by words only.
pub async fn embedder(
    section: &config::EmbedSection,
) -> Result<Option<Arc<dyn engram_core::embed::Embedder>>, ServerError> {
    match section.provider {
        config::EmbedProvider::None => Ok(None),
        config::EmbedProvider::Http => {
            let http = engram_llm::HttpEmbedder::new(engram_llm::EmbedConfig {
                reach: engram_llm::transport::Reach {
                    api_key: Some(section.api_key.0.clone()).filter(|k| !k.is_empty()),
                    timeout: Duration::from_secs(section.timeout_secs),
                    max_retries: section.max_retries,
                    ..Default::default()
                },
                batch: section.batch_size,
                query_timeout: Duration::from_millis(section.query_timeout_ms),
                circuit_failures: section.circuit_failures,
                circuit_cooldown: Duration::from_secs(section.circuit_cooldown_secs),
                circuit_max_cooldown: Duration::from_secs(section.circuit_max_cooldown_secs),
                ..engram_llm::EmbedConfig::new(
                    &section.base_url,
                    &section.model,
                    section.dimensions,
                )
            })
            .map_err(ServerError::Embedder)?;
            tracing::info!(endpoint = %http.endpoint(), model = %section.model, "embedding over HTTP");
            Ok(Some(Arc::new(http)))
        }
        config::EmbedProvider::Local => {
            let Some(dir) = find_model(&section.model_dir) else {
                tracing::warn!(
                    model_dir = %absolute(&section.model_dir).display(),
                    "no embedding model there, nor in $XDG_DATA_HOME/engram/models or beside engramd (`make models` installs one): search is by words only"
                );
                return Ok(None);
            };
            tracing::info!(model_dir = %dir.display(), "loading the local embedding model");
            let precision = match section.precision {
                config::EmbedPrecision::Auto => engram_embed::Precision::fastest(),
                config::EmbedPrecision::Int8 => engram_embed::Precision::Int8,
                config::EmbedPrecision::F32 => engram_embed::Precision::F32,
            };
            engram_embed::set_background_priority(match section.background_priority {
                config::EmbedPriority::Idle => engram_embed::BackgroundPriority::Idle,
                config::EmbedPriority::Low => engram_embed::BackgroundPriority::Low,
                config::EmbedPriority::Normal => engram_embed::BackgroundPriority::Normal,
            });
            let model = tokio::task::spawn_blocking(move || {
                engram_embed::LocalModel::load_as(&dir, precision)
            })
            .await
            .map_err(|e| ServerError::Embedder(e.to_string()))?
            .map_err(|e| ServerError::Embedder(e.to_string()))?;
            tracing::info!(model = %engram_core::embed::Embedder::model(&model), "local embedding model loaded");
            Ok(Some(Arc::new(model)))
        }
    }
}

/// The summarizer `[llm]` asks for: an OpenAI-compatible endpoint behind a
/// circuit breaker, or the embedded extractive one when no base URL is set.
pub fn summarizer(llm: &config::LlmSection) -> Result<Arc<dyn Summarizer>, String> {
    if llm.base_url.trim().is_empty() {
        return Ok(Arc::new(Extractive));
    }
    let api_key = Some(llm.api_key.0.clone()).filter(|k| !k.is_empty());
    let http = HttpSummarizer::new(HttpConfig {
        api_key,
        timeout: Duration::from_secs(llm.timeout_secs),
        max_retries: llm.max_retries,
        json_mode: llm.json_mode,
        ..HttpConfig::new(&llm.base_url, &llm.model)
    })?;
    Ok(Arc::new(CircuitBreaker::new(
        Chunked::new(http, llm.context_tokens),
        llm.circuit_failures,
        Duration::from_secs(llm.circuit_cooldown_secs),
        Duration::from_secs(llm.circuit_max_cooldown_secs),
    )))
}

/// The engine's settings from the configuration.
pub fn engine_settings(config: &Config) -> Settings {
    Settings {
        budget: config.budget.clone(),
        policy: config.policy.clone(),
        recall: config.recall,
        blocks: config.blocks,
        users: config.users,
        memory: config.memory,
        agent_failures: config.llm.agent_failures,
        agent_cooldown: Duration::from_secs(config.llm.agent_cooldown_secs),
        idle_evict: config.idle_evict(),
        max_calls_per_agent: config.server.max_calls_per_agent,
        memory_budget: config.memory_budget(cgroup_memory_limit()),
    }
}

/// The memory limit of the cgroup engramd runs in (a container's), if it
/// has one: cgroup v2's `memory.max`, else v1's `memory.limit_in_bytes`
/// (whose "no limit" is a huge number, taken as none).
pub fn cgroup_memory_limit() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let v2 = read("/sys/fs/cgroup/memory.max");
    let v1 = || read("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    parse_limit(v2.or_else(v1)?.trim())
}

fn parse_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.parse().ok()?;
    // v1 reports no limit as the largest page-aligned i64.
    (bytes < 1 << 60).then_some(bytes)
}

/// Where the local model is: `model_dir` itself, or, when it is relative
/// and not under the working directory (engramd started from elsewhere),
/// the same model in `$XDG_DATA_HOME/engram/models` (default
/// `~/.local/share/engram/models`) or beside the binary. Absolute.
pub fn find_model(model_dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let has_model = |dir: &std::path::Path| dir.join("config.json").is_file();
    if has_model(model_dir) || model_dir.is_absolute() {
        return has_model(model_dir).then(|| absolute(model_dir));
    }
    let name = model_dir.file_name()?;
    let data_home = std::env::var_os("XDG_DATA_HOME")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".local/share"))
        });
    let beside_binary = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(model_dir)));
    data_home
        .map(|d| d.join("engram/models").join(name))
        .into_iter()
        .chain(beside_binary)
        .find(|d| has_model(d))
        .map(|d| absolute(&d))
}

/// `path` made absolute (and tidied), for the log: a relative path means
/// nothing without the directory engramd was started in.
pub fn absolute(path: &std::path::Path) -> std::path::PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_limit_is_a_number_below_v1s_no_limit() {
        assert_eq!(parse_limit("1073741824"), Some(1 << 30));
        assert_eq!(parse_limit("max"), None, "v2: no limit");
        assert_eq!(parse_limit("9223372036854771712"), None, "v1: no limit");
        assert_eq!(parse_limit(""), None);
    }

    #[test]
    fn the_budget_is_the_setting_or_half_the_limit() {
        let mut config = Config::load(None).unwrap();
        assert_eq!(config.memory_budget(None), None);
        assert_eq!(config.memory_budget(Some(1 << 30)), Some(1 << 29));
        config.store.memory_budget_mb = 256;
        assert_eq!(config.memory_budget(Some(1 << 30)), Some(256 << 20));
    }
}
