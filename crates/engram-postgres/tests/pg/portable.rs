//! Export and import on PostgreSQL past the conformance case: an agent
//! whose rows take more than one statement each, replaced under another
//! replica that has it cached, and embedded again by the indexer.
#![cfg(feature = "fault-injection")]

use std::sync::Arc;
use std::time::Duration;

use engram_core::blocks::Scope;
use engram_core::bundle::{BundleScope, MemoryBundle};
use engram_core::compaction::{NewFact, Summary};
use engram_core::facts::{self, Op};
use engram_core::forget::Forget;
use engram_core::{AgentId, NewEvent, UserId};
use engram_postgres::PgStore;
use engram_store::prelude::*;
use engram_store::{Begun, Policy, Search, SearchMode};

use super::{Lengths, Postgres};

/// Turns of two messages each: more traces than one statement of an
/// import writes.
const TURNS: usize = 3_200;

/// What a client reads of the agent, as text. Not a ranked search: over
/// a thousand rows its words' rarity is the planner's estimate (which the
/// next ANALYZE changes), and this test's messages tie on time, words and
/// meaning alike.
async fn reads(store: &PgStore, id: &AgentId) -> Vec<String> {
    let c = store.context(id).await.expect("a context");
    let mut out = vec![format!(
        "{:?} {:?} {:?} {} {} {} {}",
        c.messages, c.tail, c.system, c.turns, c.current_turn_id, c.epoch, c.compactions
    )];
    out.push(format!(
        "{:?}",
        store.bundle(id, 10).await.expect("a bundle")
    ));
    for query in ["harbour 3199", "answer 17", "later"] {
        let search = Search {
            query: query.into(),
            mode: SearchMode::AllWords,
            limit: 20,
            ..Default::default()
        };
        let page = store.search(id, &search).await.expect("a search");
        out.push(format!("{:?}", page.hits));
    }
    out
}

/// How many of the agent's items are embedded, once none waits.
async fn embedded(store: &PgStore, id: &AgentId) -> u64 {
    let search = Search {
        query: "harbour".into(),
        limit: 1,
        wait_for_index: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let page = store.search(id, &search).await.expect("a search");
    assert_eq!(page.index.pending, 0, "{:?}", page.index);
    page.index.embedded
}

/// `after` is `before`; else where they part.
fn same(after: &[String], before: &[String]) {
    assert_eq!(after.len(), before.len());
    for (i, (a, b)) in after.iter().zip(before).enumerate() {
        if a != b {
            let at = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
            let from = at.saturating_sub(300);
            panic!(
                "read {i} differs at byte {at}:\n after: {}\nbefore: {}",
                &a[from..(at + 300).min(a.len())],
                &b[from..(at + 300).min(b.len())]
            );
        }
    }
}

/// The agent row's counters and the traces still waiting for the model.
async fn counters(pg: &Postgres, id: &AgentId) -> (i64, i64, i64) {
    let schema = pg.config.schema.as_deref().expect("a schema");
    let pool = sqlx::PgPool::connect(&pg.config.url)
        .await
        .expect("connects");
    sqlx::query_as(&format!(
        "SELECT next_seq, words_total,
                (SELECT count(*) FROM {schema}.traces WHERE agent_id = $1 AND vector IS NULL)
         FROM {schema}.agents WHERE id = $1"
    ))
    .bind(id.as_str())
    .fetch_one(&pool)
    .await
    .expect("the agent's row")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_agent_is_imported_whole_and_every_replica_reloads_it() {
    let pg = Postgres::new().await;
    let mut config = pg.config.clone();
    config.embedder = Some(Arc::new(Lengths));
    let one = PgStore::open(config.clone()).await.expect("opens");
    let other = PgStore::open(config).await.expect("opens");
    let id = AgentId::parse("portable-large").expect("a valid id");
    for batch in 0..TURNS / 100 {
        let events: Vec<NewEvent> = (0..100)
            .flat_map(|i| {
                let n = batch * 100 + i;
                [
                    NewEvent::user(format!("message {n} about the harbour")),
                    NewEvent::assistant(format!("answer {n}")),
                ]
            })
            .collect();
        one.ingest(&id, &events, None, None, None)
            .await
            .expect("ingest accepted");
    }
    let policy = Policy {
        raw_tail_turns: 10,
        max_episodic: 3,
        max_semantic: 20,
        carry_tokens: 800,
        fact_ttl: None,
    };
    let Begun::Job(job) = one.begin_compaction(&id, policy).await.expect("begins") else {
        panic!("a window to compact");
    };
    let summary = Summary {
        episodic_summary: "Many messages about the harbour.".into(),
        tags: vec!["harbour".into()],
        salience: 0.5,
        semantic_facts: vec![NewFact {
            fact: "Likes the harbour".into(),
            tags: vec![],
            confidence: 0.9,
            salience: 0.8,
        }],
        ..Default::default()
    };
    one.finish_compaction(&id, job, Some(summary), policy)
        .await
        .expect("commits");
    let before = reads(&other, &id).await;
    let vectors = embedded(&other, &id).await;
    let counted = counters(&pg, &id).await;
    assert_eq!(counted.0, 2 * TURNS as i64);
    let exported = one.export_agent(&id).await.expect("exports");
    assert!(!exported.archived.is_empty() && !exported.active.is_empty());
    let bundle = MemoryBundle {
        scope: BundleScope::Agent(id.as_str().into()),
        exported_at: 1.0,
        agents: vec![exported.clone()],
        user: None,
    };

    // Written to after `other` cached it, then replaced through `one`.
    one.ingest(&id, &[NewEvent::user("a later word")], None, None, None)
        .await
        .expect("ingest accepted");
    assert_ne!(reads(&other, &id).await, before);
    let imported = one.import(&bundle, true).await.expect("imports");
    assert_eq!(imported.agents, 1);

    // `other` (whose cache and vectors are of the replaced agent) reads
    // the bundle's agent, every row embedded again.
    same(&reads(&other, &id).await, &before);
    same(&reads(&one, &id).await, &before);
    assert_eq!(embedded(&other, &id).await, vectors);
    let (next, words, unembedded) = counters(&pg, &id).await;
    assert_eq!((next, words, unembedded), counted);
    assert_eq!(other.export_agent(&id).await.expect("exports"), exported);

    // Refused whole: the agent exists.
    assert!(matches!(
        one.import(&bundle, false).await,
        Err(engram_store::StoreError::AlreadyExists(_))
    ));
    same(&reads(&other, &id).await, &before);
}

/// What a client reads of a user's memory and its conversation, as text.
async fn memory(store: &PgStore, id: &AgentId, user: &UserId) -> Vec<String> {
    let mut out = reads(store, id).await;
    for (scope, facts) in [
        (
            Scope::Agent(id.clone()),
            store.facts(&Scope::Agent(id.clone())).await,
        ),
        (
            Scope::User(user.clone()),
            store.facts(&Scope::User(user.clone())).await,
        ),
    ] {
        let facts = facts.expect("facts");
        for f in &facts {
            let history = store.fact_history(&scope, &f.id).await.expect("history");
            out.push(format!("history {}: {history:?}", f.id));
        }
        out.push(format!("facts: {facts:?}"));
    }
    out.push(format!(
        "{:?}",
        store.user_facts(user).await.expect("user facts")
    ));
    // Ranked: the hits in their order. Not their scores: a forget leaves
    // the erased traces counted in BM25's number of rows (the agent row's
    // `next_seq`), which a bundle does not carry; the import counts the
    // rows it has, as the file store's index does.
    for query in ["chess", "tools chess", "mornings"] {
        let search = Search {
            query: query.into(),
            limit: 20,
            ..Default::default()
        };
        let page = store.search(id, &search).await.expect("a search");
        out.push(format!("search: {:?}", hits(&page.hits)));
        let page = store.search_user(user, &search).await.expect("a search");
        out.push(format!("user search: {:?}", hits(&page.hits)));
    }
    out
}

fn hits(hits: &[engram_store::Hit]) -> Vec<(&str, engram_store::MatchedBy, bool)> {
    hits.iter()
        .map(|h| (h.trace.id.as_str(), h.matched_by, h.archived))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn changed_forgotten_and_folded_facts_import_as_they_were() {
    let pg = Postgres::new().await;
    let store = PgStore::open(pg.config.clone()).await.expect("opens");
    let user = UserId::parse("portable-facts-u").expect("a valid id");
    let id = AgentId::parse("portable-facts").expect("a valid id");
    for (say, answer) in [
        ("I play chess on Sundays", "Noted"),
        ("My password is hunter2", "Forgotten soon"),
        ("I use tools at work", "Fine"),
        ("What next?", "More chess"),
    ] {
        let events = [NewEvent::user(say), NewEvent::assistant(answer)];
        store
            .ingest(&id, &events, None, None, Some(&user))
            .await
            .expect("ingest accepted");
    }
    let policy = Policy {
        raw_tail_turns: 1,
        max_episodic: 3,
        max_semantic: 20,
        carry_tokens: 800,
        fact_ttl: None,
    };
    let Begun::Job(job) = store.begin_compaction(&id, policy).await.expect("begins") else {
        panic!("a window to compact");
    };
    let fact = |text: &str| NewFact {
        fact: text.into(),
        tags: vec![],
        confidence: 0.9,
        salience: 0.8,
    };
    let summary = Summary {
        episodic_summary: "Chess, a password, tools.".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![fact("Plays chess on Sundays"), fact("Uses tools at work")],
        ..Default::default()
    };
    store
        .finish_compaction(&id, job, Some(summary), policy)
        .await
        .expect("commits");
    let snapshot = store.bundle(&id, 10).await.expect("a bundle");
    store
        .fold_into_user(&user, &id, &snapshot.semantic, &snapshot.episodic)
        .await
        .expect("folds");
    // A compaction's fact changed by a client, in the agent and the user.
    for scope in [Scope::Agent(id.clone()), Scope::User(user.clone())] {
        let chess = store.facts(&scope).await.expect("facts");
        let chess = chess
            .iter()
            .find(|f| f.fact.contains("chess"))
            .expect("chess");
        let op = Op::Update {
            id: chess.id.clone(),
            change: facts::Change {
                text: Some("Plays chess on Saturdays".into()),
                ..Default::default()
            },
        };
        store.change_facts(&scope, op, None).await.expect("changes");
    }
    let user_scope = Scope::User(user.clone());
    let mornings = facts::NewFact {
        text: "Prefers mornings".into(),
        pinned: true,
        ..Default::default()
    };
    store
        .change_facts(&user_scope, Op::Add(vec![mornings]), None)
        .await
        .expect("adds");
    let forgotten = store
        .forget(&id, &Forget::Turn("turn_0002".into()), policy)
        .await
        .expect("forgets");
    assert_eq!(forgotten.traces_erased, 2);

    let before = memory(&store, &id, &user).await;
    let bundle = MemoryBundle {
        scope: BundleScope::User(user.as_str().into()),
        exported_at: 1.0,
        agents: vec![store.export_agent(&id).await.expect("exports")],
        user: Some(store.export_user(&user).await.expect("exports")),
    };
    bundle.check().expect("a bundle to import");
    store.delete_user(&user).await.expect("deletes");
    store.import(&bundle, false).await.expect("imports");
    same(&memory(&store, &id, &user).await, &before);
    assert_eq!(
        store.export_agent(&id).await.expect("exports"),
        bundle.agents[0]
    );
    assert_eq!(
        Some(store.export_user(&user).await.expect("exports")),
        bundle.user
    );
}
