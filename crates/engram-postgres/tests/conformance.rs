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
use engram_store::{Memory, MemoryQuery};

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

// The forget's cases past the conformance suite's, in this one test binary.
#[path = "pg/expansion.rs"]
mod expansion;
#[path = "pg/forget.rs"]
mod forget;
#[path = "pg/groups.rs"]
mod groups;
#[path = "pg/portable.rs"]
mod portable;
#[path = "pg/users.rs"]
mod users;

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

/// A model for the indexer that knows three topics: a text's vector says
/// which of them its words belong to, so a query can match a message by
/// meaning alone ("umbrella" finds "rain").
#[derive(Debug)]
struct Topics;

impl engram_core::embed::Embedder for Topics {
    fn model(&self) -> &str {
        "topics"
    }

    fn dim(&self) -> usize {
        3
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> engram_core::embed::EmbedFuture<'a> {
        const TOPICS: [&[&str]; 3] = [
            &["rain", "umbrella", "storm"],
            &["pasta", "cooked", "dinner"],
            &["guitar", "song", "concert"],
        ];
        Box::pin(async move {
            Ok(texts
                .iter()
                .map(|t| {
                    let t = t.to_lowercase();
                    let mut v: Vec<f32> = TOPICS
                        .iter()
                        .map(|words| words.iter().filter(|w| t.contains(**w)).count() as f32)
                        .collect();
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                    v.iter_mut().for_each(|x| *x /= norm);
                    v
                })
                .collect())
        })
    }
}

/// One search across a user's conversations ranks each one's vectors too:
/// a message of another conversation found by meaning alone, naming its
/// conversation; an agent made again under the same id shows none of the
/// old one's vectors; SearchHistory by user finds the same.
#[tokio::test]
async fn a_users_conversations_are_ranked_by_meaning_together() {
    let pg = Postgres::new().await;
    let mut config = pg.config.clone();
    config.embedder = Some(Arc::new(Topics));
    let store = PgStore::open(config).await.expect("the store opens");
    let ana = engram_core::UserId::parse("ana").unwrap();
    let (a, b) = (
        engram_core::AgentId::parse("ana-1").unwrap(),
        engram_core::AgentId::parse("ana-2").unwrap(),
    );
    let wait = Some(std::time::Duration::from_secs(60));
    let say = async |id: &engram_core::AgentId, text: &str| {
        store
            .ingest(
                id,
                &[engram_core::NewEvent::user(text)],
                None,
                None,
                Some(&ana),
            )
            .await
            .expect("ingest accepted");
        let embedded = engram_store::Search {
            query: "x".into(),
            limit: 1,
            wait_for_index: wait,
            ..Default::default()
        };
        store.search(id, &embedded).await.expect("searches");
    };
    say(&a, "It will pour with rain all day tomorrow").await;
    say(&b, "I cooked pasta for dinner").await;
    let query = MemoryQuery {
        query: "umbrella".into(),
        limit: 3,
        ..Default::default()
    };
    let ranked = store
        .rank_user_memories(&ana, &query, Some(&b))
        .await
        .expect("ranks");
    let first = &ranked.memories[0];
    assert_eq!(first.agent_id.as_deref(), Some("ana-1"));
    assert_eq!(first.matched_by, engram_store::MatchedBy::Semantic);
    assert!(
        matches!(&first.memory, Memory::Trace { trace, .. } if trace.content.contains("rain")),
        "{first:?}"
    );
    assert_eq!(ranked.index.embedded, 2);

    // The same id made again: the old conversation's vectors are gone.
    store.delete_agent(&a).await.expect("deleted");
    say(&a, "We went to a guitar concert").await;
    let ranked = store
        .rank_user_memories(&ana, &query, None)
        .await
        .expect("ranks");
    assert!(
        ranked.memories.iter().all(|m| !matches!(
            &m.memory,
            Memory::Trace { trace, .. } if trace.content.contains("rain")
        )),
        "{:?}",
        ranked.memories
    );
    assert_eq!(ranked.index.embedded, 2);
    let page = store
        .search_user(
            &ana,
            &engram_store::Search {
                query: "song".into(),
                limit: 5,
                ..Default::default()
            },
        )
        .await
        .expect("searches");
    assert_eq!(page.hits[0].agent_id.as_deref(), Some("ana-1"));
    assert!(page.hits[0].trace.content.contains("guitar"));
}

/// The rarest words of a query pick the rows a search scores; when they
/// find fewer than a page, every word does: a page of "weather Paris" is
/// full of weather though Paris is in one message.
#[tokio::test]
async fn a_page_is_filled_by_the_commoner_words_when_the_rare_ones_find_few() {
    let pg = Postgres::new().await;
    let store = PgStore::open(pg.config.clone())
        .await
        .expect("the store opens");
    let id = engram_core::AgentId::parse("weather-log").unwrap();
    let mut events: Vec<engram_core::NewEvent> = (0..300)
        .map(|n| engram_core::NewEvent::user(format!("the weather report number {n}")))
        .collect();
    events.push(engram_core::NewEvent::user("a sunny weekend in Paris"));
    for chunk in events.chunks(100) {
        store
            .ingest(&id, chunk, None, None, None)
            .await
            .expect("ingest accepted");
    }
    let page = store
        .search(
            &id,
            &engram_store::Search {
                query: "weather Paris".into(),
                limit: 20,
                ..Default::default()
            },
        )
        .await
        .expect("searches");
    assert_eq!(page.hits.len(), 20, "a full page");
    assert!(page.hits[0].trace.content.contains("Paris"));
    assert!(page.hits[1].trace.content.contains("weather"));
}
