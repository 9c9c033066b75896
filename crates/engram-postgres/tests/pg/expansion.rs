//! Query expansion on PostgreSQL with the real local model: the words of an
//! agent's rows closest in meaning to a question join its word query (the
//! file store's own test says the same of its index), the vocabulary
//! follows writes and forgets, and a user's conversations are expanded
//! together. A trace is embedded after the trace before it, and again
//! once that is forgotten.
#![cfg(feature = "fault-injection")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use engram_core::forget::Forget;
use engram_core::{AgentId, NewEvent, UserId};
use engram_embed::LocalModel;
use engram_postgres::testing::{has_word_vector, held_vocabulary};
use engram_postgres::{PgConfig, PgStore};
use engram_store::conformance::{
    AFTER_LATE_CALL, PET_MEMORIES, PETS, TEST_POLICY, late_call, lead,
};
use engram_store::prelude::*;
use engram_store::{Memory, MemoryQuery, Search, SearchPage};

use super::Postgres;

const WAIT: Duration = Duration::from_secs(60);

fn local_model() -> Arc<LocalModel> {
    // Other tests' processes share the machine: idle priority would let
    // them starve the indexer past these tests' deadlines.
    engram_embed::set_background_priority(engram_embed::BackgroundPriority::Normal);
    let dir = std::env::var_os("ENGRAM_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        });
    Arc::new(
        LocalModel::load(&dir).unwrap_or_else(|e| {
            panic!("{e}: the local model is missing; `make models` installs it")
        }),
    )
}

async fn open(config: &PgConfig, model: &Arc<LocalModel>, expansion_words: usize) -> PgStore {
    let mut config = config.clone();
    config.embedder = Some(Arc::clone(model) as Arc<dyn engram_core::embed::Embedder>);
    config.ranking.expansion_words = expansion_words;
    PgStore::open(config).await.expect("the store opens")
}

/// Ranked search, waiting for the index.
async fn search(store: &PgStore, agent: &AgentId, query: &str) -> SearchPage {
    let search = Search {
        query: query.into(),
        limit: 3,
        wait_for_index: Some(WAIT),
        ..Search::default()
    };
    store.search(agent, &search).await.expect("searches")
}

/// The day the next message is said on.
static DAYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Ingests each text as a user message; the turn of each.
async fn ingest(
    store: &PgStore,
    agent: &AgentId,
    texts: &[&str],
    user: Option<&UserId>,
) -> Vec<String> {
    let mut turns = Vec::new();
    for text in texts {
        // Unrelated statements, each a sitting of its own (a day apart):
        // none is read in the context of another.
        let day = DAYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let event = NewEvent {
            ts: Some(1_700_000_000.0 + 86_400.0 * day as f64),
            ..NewEvent::user(*text)
        };
        let ingested = store
            .ingest(agent, &[event], None, None, user)
            .await
            .expect("ingest accepted");
        turns.push(ingested.current_turn_id);
    }
    turns
}

/// A question naming a category ("pets") shares no word with the message
/// naming the instance ("puppy"), and names a participant both of whose
/// messages match it by that name alone. The nearest words of the agent's
/// rows join its word query: the puppy's message leads the other by more
/// than without them. The vocabulary then follows the rows: a new
/// message's words join it, and a forgotten turn's leave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_naming_a_category_finds_the_instance_by_the_agents_words() {
    let model = local_model();
    let pg = Postgres::new().await;
    let store = open(&pg.config, &model, 10).await;
    let a = AgentId::parse("pets").unwrap();
    let turns = ingest(&store, &a, &PET_MEMORIES, None).await;
    let expanded = search(&store, &a, PETS).await;
    assert!(
        expanded.hits[0].trace.content.contains("puppy"),
        "{expanded:?}"
    );
    let words =
        |store: &PgStore| ["puppy", "shelter", "sunrise"].map(|w| has_word_vector(store, w));
    assert_eq!(words(&store), [true; 3], "the wait covered the words");

    let off_pg = Postgres::new().await;
    let off = open(&off_pg.config, &model, 0).await;
    ingest(&off, &a, &PET_MEMORIES, None).await;
    let plain = search(&off, &a, PETS).await;
    assert_eq!(words(&off), [false; 3], "no expansion: no word embedded");
    let (with, without) = (
        lead(&expanded, "puppy", "support group"),
        lead(&plain, "puppy", "support group"),
    );
    assert!(with > without + 0.05, "{with} against {without}");

    // Written after the vocabulary was read: read on from the last row.
    ingest(&store, &a, &["Melanie: my kitten naps all day"], None).await;
    let page = search(&store, &a, "Which pets does Melanie have?").await;
    assert!(page.hits[0].trace.content.contains("kitten"), "{page:?}");
    assert!(held_vocabulary(&store, a.as_str()).contains(&"kitten".to_owned()));

    // A forget moves the agent's generation: its rows are read again, and
    // the forgotten turn's words are gone from what this replica holds.
    let policy = TEST_POLICY;
    store
        .forget(&a, &Forget::Turn(turns[0].clone()), policy)
        .await
        .expect("forgets");
    search(&store, &a, PETS).await;
    let held = held_vocabulary(&store, a.as_str());
    assert!(held.contains(&"kitten".to_owned()), "{held:?}");
    for gone in ["puppy", "shelter", "adopted"] {
        assert!(!held.contains(&gone.to_owned()), "{gone}: {held:?}");
    }
}

/// A user's conversations are expanded together: a question in one
/// conversation finds the instance another names, leading by more than
/// without the expansion; every conversation's vocabulary is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_conversations_are_expanded_together() {
    let model = local_model();
    let (on, off) = (Postgres::new().await, Postgres::new().await);
    let (expanding, plain) = (
        open(&on.config, &model, 10).await,
        open(&off.config, &model, 0).await,
    );
    let ana = UserId::parse("ana").unwrap();
    let (a, b) = (
        AgentId::parse("ana-1").unwrap(),
        AgentId::parse("ana-2").unwrap(),
    );
    let query = MemoryQuery {
        query: PETS.into(),
        limit: 3,
        wait_for_index: Some(WAIT),
        ..Default::default()
    };
    let mut leads = Vec::new();
    for store in [&expanding, &plain] {
        ingest(store, &a, &PET_MEMORIES[..2], Some(&ana)).await;
        ingest(store, &b, &PET_MEMORIES[2..], Some(&ana)).await;
        // The other conversation's items embedded (the wait below covers
        // the current one's).
        search(store, &a, "sunrise").await;
        let ranked = store
            .rank_user_memories(&ana, &query, Some(&b))
            .await
            .expect("ranks");
        let first = &ranked.memories[0];
        assert_eq!(first.agent_id.as_deref(), Some("ana-1"));
        let score = |part: &str| {
            let found = ranked.memories.iter().find(
                |m| matches!(&m.memory, Memory::Trace { trace, .. } if trace.content.contains(part)),
            );
            found.unwrap_or_else(|| panic!("{part}: {ranked:?}")).score
        };
        assert_eq!(first.score, score("puppy"), "{first:?}");
        leads.push(score("puppy") - score("support group"));
    }
    assert!(leads[0] > leads[1] + 0.05, "{leads:?}");
    assert!(has_word_vector(&expanding, "puppy"));
    assert!(held_vocabulary(&expanding, "ana-2").contains(&"tuesday".to_owned()));
}

/// The stored vector of the agent's trace whose text holds `text`.
async fn stored_vector(pg: &Postgres, agent: &AgentId, text: &str) -> Vec<f32> {
    let schema = pg.config.schema.as_deref().expect("a schema");
    let pool = sqlx::PgPool::connect(&pg.config.url)
        .await
        .expect("connects");
    let bytes: Vec<u8> = sqlx::query_scalar(&format!(
        "SELECT vector FROM {schema}.traces
         WHERE agent_id = $1 AND strpos(body, $2) > 0 AND vector IS NOT NULL"
    ))
    .bind(agent.as_str())
    .bind(text)
    .fetch_one(&pool)
    .await
    .expect("the trace's vector");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A trace is embedded after the end of the trace before it in its
/// sitting (what it answers); once that trace is forgotten, it is
/// embedded again, alone (the file store's own test says the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_is_embedded_after_what_it_answers_and_again_once_that_is_forgotten() {
    let model = local_model();
    let pg = Postgres::new().await;
    let store = open(&pg.config, &model, 10).await;
    let a = AgentId::parse("reply").unwrap();
    let asked = "We made coconut milk ice cream. How did it taste?";
    let reply = "Super good! Rich and creamy.";
    let at = |secs: f64, event: NewEvent| NewEvent {
        ts: Some(1_700_000_000.0 + secs),
        ..event
    };
    let events = [
        at(0.0, NewEvent::assistant(asked)),
        at(60.0, NewEvent::user(reply)),
    ];
    store
        .ingest(&a, &events, None, None, None)
        .await
        .expect("ingest accepted");
    search(&store, &a, "ice cream").await;
    let embed = |before: Option<&str>| {
        let item = (before.map(str::to_owned), reply.to_owned());
        model.embed_after_blocking(&[item]).unwrap().remove(0)
    };
    let cosine = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f32>();
    let (in_context, alone) = (embed(Some(asked)), embed(None));
    assert!(
        cosine(&in_context, &alone) < 0.99,
        "the two readings differ"
    );
    let stored = stored_vector(&pg, &a, reply).await;
    assert!(cosine(&stored, &in_context) > 0.999);

    let policy = TEST_POLICY;
    store
        .forget(&a, &Forget::Turn("turn_0001".into()), policy)
        .await
        .expect("forgets");
    search(&store, &a, "ice cream").await;
    let stored = stored_vector(&pg, &a, reply).await;
    assert!(cosine(&stored, &alone) > 0.999, "embedded again, alone");
}

/// A tool result that comes after the next turn began is placed in its
/// call's turn, before that turn's message: the message, embedded after
/// the call, is embedded again after the result (the file store's own
/// test says the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_after_a_late_tool_result_is_embedded_again_after_it() {
    let model = local_model();
    let pg = Postgres::new().await;
    let store = open(&pg.config, &model, 10).await;
    let a = AgentId::parse("late").unwrap();
    let next = AFTER_LATE_CALL;
    let written = store
        .ingest(&a, &late_call(1_700_000_000.0), None, None, None)
        .await
        .expect("ingest accepted");
    search(&store, &a, "bread").await;
    let embed = |before: &engram_core::RawTrace| {
        let text = engram_store::trace_item(before).full_text();
        let item = (Some(engram_store::context_of(&text)), next.to_owned());
        model.embed_after_blocking(&[item]).unwrap().remove(0)
    };
    let cosine = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f32>();
    let after_call = embed(&written.traces[1]);
    assert!(cosine(&stored_vector(&pg, &a, next).await, &after_call) > 0.999);

    let late = NewEvent {
        ts: Some(1_700_000_090.0),
        ..NewEvent::tool_result("c1", serde_json::json!("reached 220 degrees"))
    };
    let written = store
        .ingest(&a, &[late], None, None, None)
        .await
        .expect("ingest accepted");
    assert_eq!(written.traces[0].turn_id, "turn_0001", "in its call's turn");
    search(&store, &a, "bread").await;
    let after_result = embed(&written.traces[0]);
    assert!(cosine(&after_call, &after_result) < 0.99, "the two differ");
    let stored = stored_vector(&pg, &a, next).await;
    assert!(
        cosine(&stored, &after_result) > 0.999,
        "embedded again after it"
    );
}
