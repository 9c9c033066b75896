//! `[store.postgres]`: the database of `store.backend = "postgres"`, its
//! checks, and the backend's settings made from it.

use std::time::Duration;

use serde::Deserialize;

use super::{BackendSetting, Config, ConfigError, Secret, invalid};

/// `[store.postgres]`: the database of `backend = "postgres"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSection {
    /// `postgres://user:password@host:5432/db?sslmode=require`; usually
    /// from the environment (ENGRAM__STORE__POSTGRES__URL, a Secret).
    pub url: Secret,
    pub pool_size: u32,
    pub statement_timeout_ms: u64,
    pub acquire_timeout_ms: u64,
    pub compaction_lease_secs: u64,
    /// Apply schema migrations at start (else `engramd migrate` first).
    pub migrate: bool,
    /// Schema of Engram's tables; empty: the role's default.
    pub schema: String,
}

impl Config {
    pub(super) fn validate_postgres(&self) -> Result<(), ConfigError> {
        if self.store.backend != BackendSetting::Postgres {
            return Ok(());
        }
        let pg = &self.store.postgres;
        if pg.url.is_empty() {
            return Err(invalid(
                "store.postgres.url",
                "must be set with backend = \"postgres\" (e.g. from ENGRAM__STORE__POSTGRES__URL)",
            ));
        }
        if !(1..=1000).contains(&pg.pool_size) {
            return Err(invalid("store.postgres.pool_size", "must be 1 to 1000"));
        }
        if pg.statement_timeout_ms == 0
            || pg.acquire_timeout_ms == 0
            || pg.compaction_lease_secs == 0
        {
            return Err(invalid(
                "store.postgres.statement_timeout_ms/acquire_timeout_ms/compaction_lease_secs",
                "must be > 0",
            ));
        }
        let identifier = |s: &str| {
            s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        if !pg.schema.is_empty() && !identifier(&pg.schema) {
            return Err(invalid(
                "store.postgres.schema",
                "must be a plain lower-case identifier (letters, digits, _)",
            ));
        }
        Ok(())
    }

    /// The database store's settings (`backend = "postgres"`).
    pub fn postgres_config(&self) -> engram_postgres::PgConfig {
        let pg = &self.store.postgres;
        let store = self.store_config();
        engram_postgres::PgConfig {
            pool_size: pg.pool_size,
            statement_timeout: Duration::from_millis(pg.statement_timeout_ms),
            acquire_timeout: Duration::from_millis(pg.acquire_timeout_ms),
            compaction_lease: Duration::from_secs(pg.compaction_lease_secs),
            migrate: pg.migrate,
            schema: Some(pg.schema.clone()).filter(|s| !s.is_empty()),
            limits: store.limits,
            idle_evict: store.idle_evict,
            embedder: None,
            ranking: store.ranking,
            ..engram_postgres::PgConfig::new(pg.url.0.clone())
        }
    }
}
