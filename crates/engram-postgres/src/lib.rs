//! Engram on PostgreSQL (`store.backend = "postgres"`): any number of
//! stateless replicas serve any agent from one database, which carries
//! durability, replication and failover.
//!
//! The records are the file store's, one row each (`migrations/`): an
//! agent row (its settings, counters and lock), its traces active and
//! archived, its summaries and facts, large tool results. What a replica
//! derives from them — turns, the transcript, memories ([`Derived`](engram_core::state::Derived), shared
//! with the file store) — is a cache, checked against the agent row's
//! `version` on every call and caught up from the rows written since:
//!
//! - A write takes the agent row `FOR UPDATE` in its transaction: writers of
//!   one agent on every replica go one at a time, so turns are consecutive
//!   and retries find their first attempt; `event_id` is also unique in the
//!   table. Acknowledged means committed.
//! - A compaction's summary is computed with no transaction open; its commit
//!   is one transaction that first checks the window is still the agent's
//!   (the file store's stale-job rule), so a compaction that raced another
//!   replica's writes or compaction commits nothing and no turn is
//!   summarized twice. A lease in the agent row keeps two replicas from
//!   summarizing the same agent at once; a replica that dies holds it only
//!   until it expires.
//! - Locks are taken in one order, so no two writers deadlock: a user's
//!   scope lock (`lock_scope`), then agent rows, then the agents' vector
//!   locks (`vectors::lock_vector_writes`).
//!
//! Modules: `cache` (the per-agent cache and how it is brought current),
//! `write` (Ingest, PrepareRequest, the compaction mark), `read`, `rows`
//! (how traces become rows), `compact`, `agents` (list, delete, fork),
//! `search` (MATCH_ALL_WORDS) and `ranked`, `vectors` (the indexer and the
//! replica's copies), `portable` (export and import; `imported` the rows
//! an import writes), `upkeep` (health, metrics, eviction). Each part of
//! the `Store` trait is implemented in the module of its I/O: `write`
//! (`Writes`), `read` (`Reads`), `search` (`Searches`), `ranked`
//! (`Ranks`), `compact` (`Compacts`), `agents` (`Admin`), `forget` and
//! `erase` (`Forgets`), `portable` (`Portable`), `upkeep` (`Runtime`).

mod agents;
mod blocks;
mod cache;
mod compact;
mod compaction_log;
mod consolidations;
mod covered;
mod erase;
mod expand;
mod facts;
mod forget;
mod group;
mod import_rows;
mod leases;
mod portable;
mod ranked;
mod read;
mod recalled;
mod rows;
mod search;
mod sittings;
mod source;
mod speakers;
#[cfg(feature = "testing")]
pub mod testing;
mod upkeep;
mod user_fact_changes;
mod user_facts;
mod user_rank;
mod user_vectors;
mod vectors;
mod vocabulary;
mod words;
mod write;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram_core::embed::Embedder;
use engram_core::turns::IngestLimits;
use engram_store::{Result, StoreError};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use cache::Handle;

/// The key of a memory scope: its blocks' rows, and the advisory lock its
/// writers (blocks, a user's facts, DeleteUser) take.
pub(crate) fn scope_key(scope: &engram_core::blocks::Scope) -> String {
    use engram_core::blocks::Scope;
    match scope {
        Scope::Global => "global".into(),
        Scope::User(u) => format!("user/{u}"),
        Scope::Agent(a) => format!("agent/{a}"),
    }
}

/// Takes the transaction's lock on a shared scope (global, a user's): the
/// writers of its blocks, of a user's facts and DeleteUser go one at a
/// time, across replicas.
pub(crate) async fn lock_scope(
    tx: &mut sqlx::PgConnection,
    scope: &engram_core::blocks::Scope,
) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(scope_key(scope))
        .execute(&mut *tx)
        .await
        .map_err(db("locking a memory scope"))?;
    Ok(())
}

/// The embedded schema migrations (`migrations/*.sql`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// `[store.postgres]` settings.
#[derive(Clone)]
pub struct PgConfig {
    /// `postgres://user:password@host:port/database?sslmode=…`.
    pub url: String,
    /// Connections this replica keeps open at most.
    pub pool_size: u32,
    /// Statements running longer are cancelled by the server.
    pub statement_timeout: Duration,
    /// How long a caller waits for a free connection.
    pub acquire_timeout: Duration,
    /// How long one replica's compaction of an agent keeps others from
    /// starting one (the summarizer's whole budget, retries included).
    pub compaction_lease: Duration,
    /// Run the migrations at open (else `engramd migrate` must have).
    pub migrate: bool,
    /// The schema Engram's tables live in (`search_path`); `None`: the
    /// role's default (`public`).
    pub schema: Option<String>,
    pub limits: IngestLimits,
    /// Drop the cache of an agent unused this long; `None` keeps it.
    pub idle_evict: Option<Duration>,
    /// The model that embeds items for semantic search; `None`: lexical
    /// search only.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// How ranked searches rank (the `[search]` settings).
    pub ranking: engram_index::Params,
}

impl std::fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("PgConfig")
            .field("pool_size", &self.pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("compaction_lease", &self.compaction_lease)
            .finish_non_exhaustive()
    }
}

impl PgConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_size: 16,
            statement_timeout: Duration::from_secs(30),
            acquire_timeout: Duration::from_secs(10),
            compaction_lease: Duration::from_secs(600),
            migrate: true,
            schema: None,
            limits: IngestLimits::default(),
            ranking: engram_index::Params::default(),
            idle_evict: Some(Duration::from_secs(600)),
            embedder: None,
        }
    }
}

/// The PostgreSQL-backed store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: PgPool,
    config: PgConfig,
    /// This replica's cached agents.
    agents: Mutex<HashMap<String, Arc<Handle>>>,
    /// This replica's copies of users' vectors, for searches across a
    /// user's conversations.
    users: Mutex<HashMap<String, Arc<user_vectors::UserSlot>>>,
    failure: tokio::sync::watch::Sender<Option<String>>,
    faults: Faults,
    opened: std::time::Instant,
    /// Items waiting for the model, as the upkeep last counted them.
    unembedded: std::sync::atomic::AtomicU64,
    /// Ingest's appends, committed in groups across agents.
    group: group::Group,
    /// The compaction leases this replica took.
    leases: leases::Leases,
    /// This replica's agents' sittings (ranking).
    sittings: sittings::SittingCache,
    /// This replica's agents' vocabularies (query expansion).
    vocabulary: vocabulary::VocabularyCache,
    /// The vectors of their words, with a model (query expansion).
    words: Option<Arc<std::sync::RwLock<engram_index::WordVectors>>>,
    /// Whether a round of embedding words runs in the background.
    embedding_words: std::sync::atomic::AtomicBool,
}

impl PgStore {
    /// Connects (the pool opens its connections lazily, the first one now,
    /// so a wrong URL fails here) and, when configured, migrates.
    pub async fn open(mut config: PgConfig) -> Result<Self> {
        // A prompt's query and the same message's item embedded once.
        config.embedder = config.embedder.map(engram_store::Remembering::wrap);
        let options = connect_options(&config)?;
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_size.max(1))
            .acquire_timeout(config.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(db("connecting to the database"))?;
        if config.migrate {
            migrate(&pool).await?;
        } else {
            check_migrated(&pool).await?;
        }
        let per_agent: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin')",
        )
        .fetch_one(&pool)
        .await
        .map_err(db("reading the extensions"))?;
        if !per_agent {
            tracing::warn!(
                "the btree_gin extension is missing: word searches walk every agent's postings (CREATE EXTENSION btree_gin as the database owner, then run the migration again in a fresh schema)"
            );
        }
        let group = group::Group::start(pool.clone(), group_writers(config.pool_size));
        let words = config
            .embedder
            .as_ref()
            .and_then(|e| expand::word_table(&config.ranking, e.dim()));
        let store = Self {
            inner: Arc::new(Inner {
                group,
                pool,
                config,
                agents: Mutex::new(HashMap::new()),
                users: Mutex::new(HashMap::new()),
                failure: tokio::sync::watch::channel(None).0,
                faults: Faults::default(),
                opened: std::time::Instant::now(),
                unembedded: std::sync::atomic::AtomicU64::new(0),
                leases: leases::Leases::default(),
                sittings: sittings::SittingCache::default(),
                vocabulary: vocabulary::VocabularyCache::default(),
                words,
                embedding_words: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        store.spawn_indexer();
        Ok(store)
    }

    pub fn config(&self) -> &PgConfig {
        &self.inner.config
    }

    /// Ingest's groups written so far by this replica, and the appends in
    /// them: how much commits are shared across agents.
    pub fn ingest_groups(&self) -> (u64, u64) {
        self.inner.group.written()
    }

    /// Holds Ingest's next group until released (false), so that appends
    /// queue behind it (tests: one group of a known size).
    #[cfg(feature = "fault-injection")]
    pub fn hold_ingest_groups(&self, held: bool) {
        self.inner.group.hold(held);
    }

    /// Appends of Ingest waiting for a group writer.
    #[cfg(feature = "fault-injection")]
    pub fn queued_appends(&self) -> u64 {
        self.inner.group.queued()
    }

    /// The pool, for readiness checks.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// `step` of compaction commits fails until cleared with `None`
    /// (tests). The database commits in one transaction: it has no
    /// [`CommitStep::Rewrite`](engram_store::CommitStep::Rewrite).
    #[cfg(feature = "fault-injection")]
    pub fn inject_compaction_fault(&self, step: Option<engram_store::CommitStep>) {
        *engram_store::lock(&self.inner.faults.0) = step;
    }
}

/// Writers of Ingest's groups: a quarter of the pool (at least two), so
/// that groups form under load while the rest of the pool serves reads,
/// prompts and compactions. (Half the pool made groups half as large at
/// 64 agents, and the database's CPU per Ingest a third higher.)
fn group_writers(pool_size: u32) -> usize {
    (pool_size as usize / 4).max(2)
}

/// Fault injection (nothing happens without the `fault-injection` feature).
#[derive(Debug, Default)]
struct Faults(#[allow(dead_code)] Mutex<Option<engram_store::CommitStep>>);

impl Faults {
    fn check(&self, _step: engram_store::CommitStep) -> Result<()> {
        #[cfg(feature = "fault-injection")]
        if *engram_store::lock(&self.0) == Some(_step) {
            return Err(StoreError::Unavailable {
                detail: format!("injected fault at {}", _step.name()),
                retry: true,
            });
        }
        Ok(())
    }
}

fn connect_options(config: &PgConfig) -> Result<PgConnectOptions> {
    let options: PgConnectOptions = config
        .url
        .parse()
        .map_err(|e| broken(format!("store.postgres.url is not a valid URL: {e}")))?;
    let timeout_ms = config.statement_timeout.as_millis().max(1);
    let mut settings = vec![("statement_timeout", timeout_ms.to_string())];
    if let Some(schema) = &config.schema {
        settings.push(("search_path", schema.clone()));
    }
    Ok(options
        .options(settings)
        .application_name("engramd")
        .log_statements(tracing::log::LevelFilter::Trace))
}

/// Applies every migration not yet applied (`engramd migrate` and, by
/// default, every start). Concurrent replicas are serialized by sqlx's
/// advisory lock.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .map_err(|e| broken(format!("migrating the schema: {e}")))
}

/// Connects as `config` says and migrates (`engramd migrate`).
pub async fn migrate_url(config: &PgConfig) -> Result<()> {
    let options = connect_options(config)?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(db("connecting to the database"))?;
    migrate(&pool).await
}

/// Refuses to serve a schema older than this build's.
async fn check_migrated(pool: &PgPool) -> Result<()> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await
            .unwrap_or(None);
    if applied.unwrap_or(0) < latest {
        return Err(broken(format!(
            "the database schema is at version {} and this engramd needs {latest}: run `engramd migrate` (or set store.postgres.migrate = true)",
            applied.unwrap_or(0)
        )));
    }
    Ok(())
}

/// Maps a database error to the store's, with what was being done and
/// whether trying again may help.
fn db(context: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| StoreError::Unavailable {
        retry: transient(&e),
        detail: format!("database: {context}: {e}"),
    }
}

/// Whether the same call may succeed later: the connection or the pool
/// failed, or the server refused for now. SQLSTATE classes 08 (connection),
/// 40 (serialization failure, deadlock), 53 (insufficient resources), 57
/// (operator intervention: a shutdown, a statement timeout) and 55P03 (a
/// lock not available). Anything else (a constraint, data this build
/// cannot read) fails the same way again.
fn transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            ["08", "40", "53", "57"]
                .iter()
                .any(|class| code.starts_with(class))
                || code == "55P03"
        }),
        _ => false,
    }
}

/// A database error that a retry will not fix: what the store holds or
/// how it is configured is wrong.
fn broken(detail: String) -> StoreError {
    StoreError::Unavailable {
        detail: format!("database: {detail}"),
        retry: false,
    }
}

/// An agent's settings as the `meta` column holds them.
fn meta_json(meta: &engram_store::AgentMeta) -> String {
    serde_json::to_string(meta).expect("AgentMeta serializes")
}

/// A stored trace of agent `id`.
fn parse_trace(id: &str, body: &str) -> Result<engram_core::RawTrace> {
    engram_core::RawTrace::from_line(body.as_bytes())
        .map_err(|e| broken(format!("a stored trace of agent {id} is not valid: {e}")))
}

/// A stored JSON body of agent `id`.
fn parse<T: serde::de::DeserializeOwned>(id: &str, what: &str, json: &str) -> Result<T> {
    serde_json::from_str(json)
        .map_err(|e| broken(format!("a stored {what} of agent {id} is not valid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_may_be_retried_and_unreadable_data_may_not() {
        let retry = |e: sqlx::Error| match db("reading")(e) {
            StoreError::Unavailable { retry, .. } => retry,
            other => panic!("{other:?}"),
        };
        assert!(retry(sqlx::Error::PoolTimedOut));
        assert!(retry(sqlx::Error::Io(
            std::io::ErrorKind::ConnectionReset.into()
        )));
        assert!(!retry(sqlx::Error::RowNotFound));
        assert!(!retry(sqlx::Error::ColumnNotFound("body".into())));
        let unreadable = parse_trace("a", "not json").unwrap_err();
        assert!(matches!(
            unreadable,
            StoreError::Unavailable { retry: false, .. }
        ));
        assert!(
            unreadable.client_message().contains("a retry will not fix"),
            "{}",
            unreadable.client_message()
        );
    }
}
