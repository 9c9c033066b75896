//! The conformance suite against a real PostgreSQL: `scripts/pg.sh start`
//! (which `make test` runs) or `ENGRAM_TEST_PG_URL`. Each case gets a
//! schema of its own.
#![cfg(feature = "fault-injection")]

use engram_store::CommitStep;
use std::sync::Arc;

use async_trait::async_trait;
use engram_postgres::{PgConfig, PgStore};
use engram_store::conformance::Harness;
use engram_store::prelude::*;

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

    fn commit_steps(&self) -> Vec<CommitStep> {
        // One transaction: no rewrite step of its own.
        CommitStep::ALL
            .into_iter()
            .filter(|s| *s != CommitStep::Rewrite)
            .collect()
    }

    fn fail_commit_at(&self, store: &PgStore, step: Option<CommitStep>) {
        store.inject_compaction_fault(step);
    }

    async fn holding(&self, _: &PgStore, text: &str) -> Vec<String> {
        let schema = self.config.schema.as_deref().expect("a schema per case");
        engram_postgres::testing::tables_holding(&self.config.url, schema, text)
            .await
            .expect("the test PostgreSQL answers")
    }
}

engram_store::conformance_suite!(Postgres::new().await);

/// A model for the indexer that needs no weights: a vector from the text.
#[derive(Debug)]
struct Lengths;

impl engram_core::embed::Embedder for Lengths {
    fn model(&self) -> &str {
        "lengths"
    }

    fn dim(&self) -> usize {
        2
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> engram_core::embed::EmbedFuture<'a> {
        Box::pin(async move { Ok(texts.iter().map(|t| vec![1.0, t.len() as f32]).collect()) })
    }
}

/// Two writers of one agent's vectors (two replicas' indexers, or one and
/// a compaction) take turns: otherwise the later `vector_seq` can commit
/// first, and a replica that read it skips the earlier one for good.
#[tokio::test]
async fn vector_writes_wait_for_the_agents_lock() {
    let pg = Postgres::new().await;
    let schema = pg.config.schema.clone().expect("a schema");
    let agent = format!("vectors-{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&pg.config.url)
        .await
        .expect("connects");
    // What another replica holds while it writes the agent's vectors.
    let mut other = admin.begin().await.expect("begins");
    engram_postgres::testing::lock_agent_vectors(&mut other, &agent)
        .await
        .expect("locks");

    let mut config = pg.config.clone();
    config.embedder = Some(Arc::new(Lengths));
    let store = PgStore::open(config).await.expect("the store opens");
    let id = engram_core::AgentId::parse(&agent).expect("a valid id");
    store
        .ingest(
            &id,
            &[engram_core::NewEvent::user("remember the blue door")],
            None,
            None,
            None,
        )
        .await
        .expect("ingest accepted");

    let stored =
        format!("SELECT count(*) FROM {schema}.traces WHERE agent_id = $1 AND vector IS NOT NULL");
    let count = || {
        sqlx::query_scalar::<_, i64>(&stored)
            .bind(&agent)
            .fetch_one(&admin)
    };
    // The indexer embeds the message, then waits for the lock, writing
    // nothing meanwhile.
    let mut conn = admin.acquire().await.expect("connects");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !engram_postgres::testing::waits_for_agent_vectors(&mut conn, &agent)
        .await
        .expect("pg_locks")
    {
        assert_eq!(
            count().await.expect("counts"),
            0,
            "written while another writer held the agent"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the indexer never waited for the lock"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(count().await.expect("counts"), 0);

    other.commit().await.expect("commits");
    let found = store
        .search(
            &id,
            &engram_store::Search {
                query: "blue door".into(),
                limit: 5,
                wait_for_index: Some(std::time::Duration::from_secs(60)),
                ..Default::default()
            },
        )
        .await
        .expect("searches");
    assert_eq!(found.index.embedded, 1, "embedded once the lock was free");
    assert_eq!(
        count().await.expect("counts"),
        1,
        "written once the lock was free"
    );
}
