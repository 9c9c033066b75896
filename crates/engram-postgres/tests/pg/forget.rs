//! Forgetting on PostgreSQL past what the conformance case sees: another
//! replica's cache and copies of vectors (the agent's and its user's), the
//! user's last conversation, a fold that read the agent before the
//! forget, the rewrite embedded again. Needs the test PostgreSQL, as the
//! conformance suite does.
#![cfg(feature = "fault-injection")]

use std::sync::Arc;
use std::time::Duration;

use engram_core::compaction::{NewFact, Summary};
use engram_core::forget::Forget;
use engram_core::{AgentId, NewEvent, UserId};
use engram_postgres::{PgConfig, PgStore};
use engram_store::prelude::*;
use engram_store::{Begun, MemoryQuery, Policy, RankedMemories};

use super::Topics;

/// Said in the forgotten turn only (and in what is drawn from it).
const SECRET: &str = "zebra-77";

const POLICY: Policy = Policy {
    raw_tail_turns: 1,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

async fn config() -> PgConfig {
    let checkout = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    config_in(engram_postgres::testing::url_or_panic(
        "ENGRAM_TEST_PG_URL",
        checkout,
    ))
    .await
}

/// A schema in a database of its own: its VACUUM waits for no other
/// test's transaction.
async fn config_in_own_database() -> PgConfig {
    let checkout = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let url = engram_postgres::testing::url_or_panic("ENGRAM_TEST_PG_URL", checkout);
    let own = engram_postgres::testing::fresh_database(&url, "erase")
        .await
        .expect("the test PostgreSQL answers");
    config_in(own).await
}

async fn config_in(url: String) -> PgConfig {
    let schema = engram_postgres::testing::fresh_schema(&url, "f")
        .await
        .expect("the test PostgreSQL answers");
    let mut config = PgConfig::new(url);
    config.schema = Some(schema);
    config.pool_size = 4;
    config.embedder = Some(Arc::new(Topics));
    config
}

fn query(text: &str) -> MemoryQuery {
    MemoryQuery {
        query: text.into(),
        limit: 10,
        neighbours: 1,
        wait_for_index: Some(Duration::from_secs(60)),
        archived_only: false,
        episodic: 5,
        semantic: 5,
        as_of: None,
    }
}

/// Whether a ranking shows `text` anywhere.
fn shows(ranked: &RankedMemories, text: &str) -> bool {
    format!(
        "{:?}",
        (&ranked.memories, &ranked.episodic, &ranked.semantic)
    )
    .contains(text)
}

fn fact(text: &str) -> NewFact {
    NewFact {
        fact: text.into(),
        tags: vec![],
        confidence: 0.9,
        salience: 0.9,
    }
}

#[tokio::test]
async fn a_forget_reaches_every_replica_and_the_users_copies() {
    let config = config_in_own_database().await;
    let (one, two) = (
        PgStore::open(config.clone()).await.expect("opens"),
        PgStore::open(config.clone()).await.expect("opens"),
    );
    let schema = config.schema.clone().expect("a schema of its own");
    let on_disk = || engram_postgres::testing::files_holding(&config.url, &schema, SECRET);
    let ana = UserId::parse("ana").unwrap();
    let a = AgentId::parse("ana-1").unwrap();
    let mut secret_turn = String::new();
    for (n, text) in [
        "We cooked pasta for dinner",
        &format!("A storm with heavy rain comes tomorrow, code {SECRET}"),
        "We went to a guitar concert",
        "Nothing much today",
        "Still nothing",
    ]
    .into_iter()
    .enumerate()
    {
        let ingested = one
            .ingest(&a, &[NewEvent::user(text)], None, None, Some(&ana))
            .await
            .expect("ingest accepted");
        if n == 1 {
            secret_turn = ingested.current_turn_id;
        }
    }
    let Begun::Job(job) = one.begin_compaction(&a, POLICY).await.unwrap() else {
        panic!("a window to compact");
    };
    assert_eq!(job.turn_ids.len(), 3);
    let summary = Summary {
        episodic_summary: format!("Pasta, a storm warning ({SECRET}), a concert."),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![fact(&format!("Storm code {SECRET}"))],
        ..Default::default()
    };
    one.finish_compaction(&a, job, Some(summary), POLICY)
        .await
        .unwrap();
    let before = one.bundle(&a, 0).await.unwrap();
    one.fold_into_user(&ana, &a, &[], &before.episodic)
        .await
        .unwrap();
    let last = one.last_conversation(&ana).await.unwrap().expect("kept");
    assert!(format!("{last:?}").contains(SECRET));
    let stored = on_disk().await.unwrap();
    for table in ["traces", "memories", "user_conversations"] {
        assert!(stored.iter().any(|r| r == table), "{table}: {stored:?}");
    }

    // The other replica holds the agent, its vectors and its user's.
    let umbrella = query("umbrella");
    assert!(shows(
        &two.rank_memories(&a, &umbrella).await.unwrap(),
        "rain"
    ));
    let of_user = two.rank_user_memories(&ana, &umbrella, None).await.unwrap();
    assert!(shows(&of_user, "rain"));
    assert!(format!("{:?}", two.context(&a).await.unwrap().messages).contains(SECRET));

    let forgotten = one
        .forget(&a, &Forget::Turn(secret_turn), POLICY)
        .await
        .unwrap();
    assert_eq!(
        (forgotten.traces_erased, forgotten.facts_deleted),
        (1, 1),
        "{forgotten:?}"
    );
    assert_eq!(forgotten.summaries_rewritten, 1);

    // Nothing of it on the other replica, by words or by meaning.
    for ranked in [
        two.rank_memories(&a, &umbrella).await.unwrap(),
        two.rank_memories(&a, &query(SECRET)).await.unwrap(),
        two.rank_user_memories(&ana, &umbrella, None).await.unwrap(),
        two.rank_user_memories(&ana, &query(SECRET), None)
            .await
            .unwrap(),
    ] {
        assert!(!shows(&ranked, "rain"), "{ranked:?}");
        assert!(!shows(&ranked, SECRET), "{ranked:?}");
    }
    assert!(!format!("{:?}", two.context(&a).await.unwrap().messages).contains(SECRET));
    assert!(two.bundle(&a, 10).await.unwrap().episodic.is_empty());
    // The user's last conversation was that summary alone.
    assert!(one.last_conversation(&ana).await.unwrap().is_none());

    // A fold that read the agent before the forget brings nothing back.
    one.fold_into_user(&ana, &a, &before.semantic, &before.episodic)
        .await
        .unwrap();
    assert!(one.last_conversation(&ana).await.unwrap().is_none());
    let user_facts = one.user_facts(&ana).await.unwrap();
    assert!(
        !format!("{user_facts:?}").contains(SECRET),
        "{user_facts:?}"
    );

    // Rewritten: shown again, and embedded again for its new words.
    assert_eq!(
        two.awaiting_rewrite().await.unwrap(),
        std::slice::from_ref(&a)
    );
    let jobs = two.rewrite_jobs(&a).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].traces.len(), 2, "turns 1 and 3");
    let rewrite = Summary {
        episodic_summary: "Pasta for dinner, then a guitar concert.".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![],
        ..Default::default()
    };
    assert!(
        two.finish_rewrite(&a, &jobs[0], rewrite, POLICY)
            .await
            .unwrap()
    );
    assert!(two.awaiting_rewrite().await.unwrap().is_empty());
    let song = one.rank_memories(&a, &query("song")).await.unwrap();
    assert!(
        song.episodic
            .iter()
            .any(|e| e.summary.contains("guitar concert")),
        "{song:?}"
    );
    assert!(
        format!("{:?}", one.context(&a).await.unwrap().messages)
            .contains("Pasta for dinner, then a guitar concert.")
    );

    // The operator's erasure: after VACUUM FULL, no byte of it in any
    // file of the tables or their indexes.
    one.close().await;
    two.close().await;
    assert_eq!(on_disk().await.unwrap(), Vec::<String>::new());
}

/// A forgotten last turn's number is given to the next turn; the other
/// replica's copy of the vectors must not place the forgotten message's
/// meaning on the new one.
#[tokio::test]
async fn a_turn_number_given_again_does_not_carry_the_forgotten_meaning() {
    let config = config().await;
    let (one, two) = (
        PgStore::open(config.clone()).await.expect("opens"),
        PgStore::open(config).await.expect("opens"),
    );
    let a = AgentId::parse("solo").unwrap();
    one.ingest(&a, &[NewEvent::user("We cooked pasta")], None, None, None)
        .await
        .unwrap();
    let secret_turn = one
        .ingest(&a, &[NewEvent::user("A storm with rain")], None, None, None)
        .await
        .unwrap()
        .current_turn_id;
    let umbrella = query("umbrella");
    assert!(shows(
        &two.rank_memories(&a, &umbrella).await.unwrap(),
        "rain"
    ));

    one.forget(&a, &Forget::Turn(secret_turn.clone()), POLICY)
        .await
        .unwrap();
    let next = one
        .ingest(
            &a,
            &[NewEvent::user("Nothing much today")],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        next.current_turn_id, secret_turn,
        "the number is free again"
    );
    let ranked = two.rank_memories(&a, &umbrella).await.unwrap();
    assert_eq!(
        ranked.index.embedded, 2,
        "no vector of the forgotten message"
    );
    assert!(!shows(&ranked, "rain"), "{ranked:?}");
    assert!(
        ranked
            .memories
            .iter()
            .all(|m| m.matched_by != engram_store::MatchedBy::Semantic || m.score < 0.5),
        "{ranked:?}"
    );
}
