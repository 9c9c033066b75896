//! The conformance suite against a real PostgreSQL: `scripts/pg.sh start`
//! (which `make test` runs) or `ENGRAM_TEST_PG_URL`. Each case gets a
//! schema of its own.
#![cfg(feature = "fault-injection")]

use std::sync::Arc;

use async_trait::async_trait;
use engram_postgres::{PgConfig, PgStore};
use engram_store::Store;
use engram_store::conformance::Harness;

struct Postgres {
    config: PgConfig,
}

impl Postgres {
    async fn new() -> Self {
        let checkout = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let url = engram_postgres::testing::url_or_panic("ENGRAM_TEST_PG_URL", checkout);
        let schema = engram_postgres::testing::fresh_schema(&url, "t")
            .await
            .expect("the test PostgreSQL answers");
        let mut config = PgConfig::new(url);
        config.schema = Some(schema);
        config.pool_size = 4;
        Self { config }
    }
}

#[async_trait]
impl Harness for Postgres {
    type Backend = PgStore;

    async fn open(&self) -> Arc<PgStore> {
        Arc::new(
            PgStore::open(self.config.clone())
                .await
                .expect("the store opens"),
        )
    }

    async fn reopen(&self, store: Arc<PgStore>) -> Arc<PgStore> {
        store.close().await;
        drop(store);
        self.open().await
    }

    fn commit_steps(&self) -> Vec<&'static str> {
        vec!["episodic", "semantic", "archive", "finalize"]
    }

    fn fail_commit_at(&self, store: &PgStore, step: Option<&'static str>) {
        store.inject_compaction_fault(step);
    }
}

engram_store::conformance_suite!(Postgres::new().await);
