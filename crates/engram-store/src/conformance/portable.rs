//! Export and import: a user's memory exported, erased, imported again,
//! and everything a client reads of it the same, byte for byte.

use engram_core::blocks::{Change, Put, Scope};
use engram_core::bundle::{self, BundleScope, MemoryBundle};
use engram_core::compaction::{NewFact, Summary};
use engram_core::facts::{self, Op};
use engram_core::{AgentId, NewEvent, UserId};
use serde_json::json;

use super::{Harness, id, ranked, words};
use crate::prelude::*;
use crate::{Begun, MemoryQuery, Policy, Store, StoreError};

const POLICY: Policy = Policy {
    raw_tail_turns: 1,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

fn fact(text: &str) -> NewFact {
    NewFact {
        fact: text.into(),
        tags: vec!["t".into()],
        confidence: 0.9,
        salience: 0.8,
    }
}

/// A conversation of `user` with turns, a spilled result, a compaction
/// (a summary and facts, folded into the user), client facts changed and
/// deleted, and blocks.
async fn converse<S: Store + ?Sized>(store: &S, a: &AgentId, user: &UserId, topic: &str) {
    let say = |events: Vec<NewEvent>| async move {
        store
            .ingest(a, &events, None, Some("gpt-4o"), Some(user))
            .await
            .expect("ingest accepted")
    };
    say(vec![
        NewEvent::user(format!("We talked about {topic} first")).with_event_id("q1"),
        NewEvent::assistant(format!("Noted, {topic}")),
    ])
    .await;
    let big = format!("{topic} {}", "result line. ".repeat(2_000));
    say(vec![
        NewEvent::user(format!("Look {topic} up")),
        NewEvent::tool_call("c1", "lookup", json!({"q": topic})),
        NewEvent::tool_result("c1", json!(big)),
        NewEvent::assistant(format!("Found {topic}")),
    ])
    .await;
    say(vec![
        NewEvent::user("And then?"),
        NewEvent::assistant("Then more"),
    ])
    .await;
    let Begun::Job(job) = store.begin_compaction(a, POLICY).await.unwrap() else {
        panic!("a window to compact");
    };
    let summary = Summary {
        episodic_summary: format!("They discussed {topic} and looked it up."),
        tags: vec!["s".into()],
        salience: 0.5,
        semantic_facts: vec![fact(&format!("Likes {topic}")), fact("Uses tools")],
        ..Default::default()
    };
    store
        .finish_compaction(a, job, Some(summary), POLICY)
        .await
        .unwrap();
    for trigger in ["estimate", "manual"] {
        let record = super::compaction_log::record(trigger, 900);
        store.record_compaction(a, record).await.unwrap();
    }
    let snapshot = store.bundle(a, 10).await.unwrap();
    store
        .fold_into_user(user, a, &snapshot.semantic, &snapshot.episodic)
        .await
        .unwrap();
    say(vec![
        NewEvent::user(format!("One more thing about {topic}")),
        NewEvent::assistant("Sure"),
    ])
    .await;
    let scope = Scope::Agent(a.clone());
    let added = store
        .change_facts(
            &scope,
            Op::Add(vec![
                facts::NewFact {
                    text: format!("{topic} matters on Mondays"),
                    tags: vec!["client".into()],
                    pinned: true,
                    ..Default::default()
                },
                facts::NewFact {
                    text: format!("{topic} was a mistake"),
                    ..Default::default()
                },
            ]),
            Some(5),
        )
        .await
        .unwrap();
    let ids: Vec<String> = added.outcomes_ids();
    let update = facts::Change {
        text: Some(format!("{topic} matters on Tuesdays")),
        ..Default::default()
    };
    let op = Op::Update {
        id: ids[0].clone(),
        change: update,
    };
    store.change_facts(&scope, op, None).await.unwrap();
    let op = Op::Delete {
        id: ids[1].clone(),
        expected_version: 0,
    };
    store.change_facts(&scope, op, None).await.unwrap();
    for value in ["first", "second"] {
        let put = Change::Put(Put {
            value: format!("{topic} persona {value}"),
            ..Default::default()
        });
        store
            .write_block(&scope, "persona", put, None, Some(user))
            .await
            .unwrap();
    }
}

trait OutcomeIds {
    fn outcomes_ids(&self) -> Vec<String>;
}

impl OutcomeIds for engram_core::facts::Applied {
    fn outcomes_ids(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter_map(|o| match o {
                engram_core::facts::Outcome::Added(f, _) => Some(f.id.clone()),
                _ => None,
            })
            .collect()
    }
}

/// The user's bundle as the store exports it.
async fn export<S: Store + ?Sized>(store: &S, user: &UserId) -> MemoryBundle {
    let mut agents = vec![];
    for a in store.user_agents(user).await.unwrap() {
        agents.push(store.export_agent(&a).await.unwrap());
    }
    MemoryBundle {
        scope: BundleScope::User(user.as_str().into()),
        exported_at: 1_700_000_000.5,
        agents,
        user: Some(store.export_user(user).await.unwrap()),
    }
}

/// What [`reads`] finds once the indexes are caught up (two reads in a
/// row agree: the background indexers work while a read waits for them).
async fn settled<S: Store + ?Sized>(store: &S, user: &UserId) -> Vec<String> {
    let mut last = reads(store, user).await;
    for _ in 0..50 {
        let next = reads(store, user).await;
        if next == last {
            return next;
        }
        last = next;
    }
    last
}

/// Everything a client reads of the user's memory, as text.
async fn reads<S: Store + ?Sized>(store: &S, user: &UserId) -> Vec<String> {
    let mut out = vec![];
    let user_scope = Scope::User(user.clone());
    for a in store.user_agents(user).await.unwrap() {
        let c = store.context(&a).await.unwrap();
        out.push(format!(
            "context {a}: {:?} {:?} {:?} {} {} {} {}",
            c.messages, c.tail, c.system, c.turns, c.current_turn_id, c.epoch, c.compactions
        ));
        out.push(format!(
            "retrieve {a}: {:?}",
            store.bundle(&a, 10).await.unwrap()
        ));
        let scope = Scope::Agent(a.clone());
        let facts = store.facts(&scope).await.unwrap();
        for f in &facts {
            let history = store.fact_history(&scope, &f.id).await.unwrap();
            out.push(format!("history {a} {}: {history:?}", f.id));
        }
        out.push(format!("facts {a}: {facts:?}"));
        out.push(format!(
            "blocks {a}: {:?}",
            store.list_blocks(&scope).await.unwrap()
        ));
        out.push(format!(
            "compactions {a}: {:?}",
            store.compaction_log(&a, 10, None).await.unwrap()
        ));
        out.push(format!(
            "block history {a}: {:?}",
            store.block_history(&scope, "persona").await.unwrap()
        ));
        for search in [
            words("lookup", 50, None),
            words("chess", 50, None),
            crate::Search {
                wait_for_index: Some(std::time::Duration::from_secs(60)),
                ..ranked("chess lookup", 10)
            },
        ] {
            let page = store.search(&a, &search).await.unwrap();
            out.push(format!("search {a}: {:?}", page.hits));
        }
        let query = MemoryQuery {
            query: "what about chess".into(),
            limit: 10,
            neighbours: 1,
            wait_for_index: Some(std::time::Duration::from_secs(60)),
            archived_only: false,
            episodic: 5,
            semantic: 5,
            as_of: None,
        };
        let r = store.rank_memories(&a, &query).await.unwrap();
        out.push(format!(
            "ranked {a}: {:?}",
            (r.memories, r.episodic, r.semantic)
        ));
    }
    let search = crate::Search {
        wait_for_index: Some(std::time::Duration::from_secs(60)),
        ..ranked("chess", 20)
    };
    let page = store.search_user(user, &search).await.unwrap();
    out.push(format!("user search: {:?}", page.hits));
    out.push(format!(
        "user facts: {:?}",
        store.user_facts(user).await.unwrap()
    ));
    out.push(format!(
        "user blocks: {:?}",
        store.list_blocks(&user_scope).await.unwrap()
    ));
    out.push(format!(
        "last: {:?}",
        store.last_conversation(user).await.unwrap()
    ));
    out
}

pub async fn export_then_import_gives_the_same_memory<H: Harness>(h: &H) {
    let store = h.open().await;
    let user = UserId::parse("portable-u").unwrap();
    let (a1, a2) = (id("portable-a1"), id("portable-a2"));
    converse(store.as_ref(), &a1, &user, "chess").await;
    converse(store.as_ref(), &a2, &user, "tennis").await;
    let put = Change::Put(Put {
        value: "The user is a chess coach".into(),
        ..Default::default()
    });
    let user_scope = Scope::User(user.clone());
    store
        .write_block(&user_scope, "human", put, None, None)
        .await
        .unwrap();
    let user_fact = facts::NewFact {
        text: "Prefers mornings".into(),
        ..Default::default()
    };
    store
        .change_facts(&user_scope, Op::Add(vec![user_fact]), None)
        .await
        .unwrap();
    let before = settled(store.as_ref(), &user).await;
    let exported = export(store.as_ref(), &user).await;
    assert_eq!(exported.agents.len(), 2);
    assert!(!exported.agents[0].archived.is_empty() && !exported.agents[0].active.is_empty());
    assert_eq!(exported.agents[0].results.len(), 1, "the spilled result");
    assert!(exported.agents[0].meta.snapshot.is_some());
    assert_eq!(
        exported.agents[0].compactions.len(),
        2,
        "the compaction log"
    );
    let bytes = bundle::encode(&exported);
    // Through the bytes, as a client carries it.
    let mut decoder = bundle::Decoder::default();
    decoder.push(&bytes).unwrap();
    let bundle = decoder.finish().unwrap();
    assert_eq!(bundle, exported);

    // Into a store that has them: refused, nothing written.
    let refused = store.import(&bundle, false).await;
    assert!(
        matches!(refused, Err(StoreError::AlreadyExists(_))),
        "{refused:?}"
    );
    assert_eq!(settled(store.as_ref(), &user).await, before);

    // Erased, then imported: the same.
    store.delete_user(&user).await.unwrap();
    assert!(store.user_agents(&user).await.unwrap().is_empty());
    let imported = store.import(&bundle, false).await.unwrap();
    assert_eq!(imported.agents, 2);
    assert_eq!(imported.blocks, 3, "two agents' personas and the user's");
    assert_eq!(settled(store.as_ref(), &user).await, before);
    assert_eq!(bundle::encode(&export(store.as_ref(), &user).await), bytes);

    // Replaced over what is there (after a change): the bundle's again.
    store
        .ingest(
            &a1,
            &[NewEvent::user("a later word")],
            None,
            None,
            Some(&user),
        )
        .await
        .unwrap();
    store.import(&bundle, true).await.unwrap();
    assert_eq!(settled(store.as_ref(), &user).await, before);

    // And after a restart.
    let store = h.reopen(store).await;
    assert_eq!(settled(store.as_ref(), &user).await, before);
    assert_eq!(bundle::encode(&export(store.as_ref(), &user).await), bytes);

    // One agent's bundle, into a store where the agent is gone.
    let agent = MemoryBundle {
        scope: BundleScope::Agent(a2.as_str().into()),
        exported_at: 1.0,
        agents: vec![store.export_agent(&a2).await.unwrap()],
        user: None,
    };
    store.delete_agent(&a2).await.unwrap();
    assert_eq!(store.import(&agent, false).await.unwrap().agents, 1);
    assert_eq!(settled(store.as_ref(), &user).await, before);
    assert!(matches!(
        store.export_agent(&id("portable-none")).await,
        Err(StoreError::NotFound(_))
    ));
}
