//! Users as a whole: the agents of a user, and erasing a user.

use engram_core::blocks::{Change, Put, Scope};
use engram_core::compaction::{NewFact, Summary};
use engram_core::memory::{EpisodicItem, Provenance, SemanticItem};
use engram_core::transcript::Role;
use engram_core::{NewEvent, UserId};

use super::{Harness, conversation, id, ingest, is_not_found};
use crate::prelude::*;
use crate::{Memory, MemoryQuery, Policy, Store};

/// Text only the erased user's data holds.
const SECRET: &str = "quokkasecret";

fn user(u: &str) -> UserId {
    UserId::parse(u).unwrap()
}

fn put(value: &str) -> Change {
    Change::Put(Put {
        value: value.into(),
        ..Put::default()
    })
}

/// Compacts `agent` (all but its last turn) into a summary of `summary`
/// and the fact `fact`, and folds them into `user`'s memory, as the engine
/// does after a compaction. Returns the fold.
pub(crate) async fn compact_and_fold(
    store: &dyn Store,
    agent: &engram_core::AgentId,
    user: &UserId,
    summary: &str,
    fact: &str,
) -> engram_core::users::Folded {
    let policy = Policy {
        raw_tail_turns: 1,
        max_episodic: 3,
        max_semantic: 20,
        carry_tokens: 800,
        fact_ttl: None,
    };
    let job = store
        .begin_compaction(agent, policy)
        .await
        .unwrap()
        .job()
        .unwrap();
    let summary = Summary {
        episodic_summary: summary.into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![NewFact {
            fact: fact.into(),
            tags: vec![],
            confidence: 0.9,
            salience: 0.5,
        }],
        ..Default::default()
    };
    store
        .finish_compaction(agent, job, Some(summary), policy)
        .await
        .unwrap();
    let bundle = store.bundle(agent, 0).await.unwrap();
    store
        .fold_into_user(user, agent, &bundle.semantic, &bundle.episodic)
        .await
        .unwrap()
}

/// An agent of `user` holding the secret in every kind of record: traces
/// (active and archived), a summary and a fact, a block.
async fn secret_agent(store: &dyn Store, agent: &str, user: &UserId) {
    let a = id(agent);
    store
        .ingest(
            &a,
            &[NewEvent::user(format!("my {SECRET} is safe"))],
            None,
            None,
            Some(user),
        )
        .await
        .unwrap();
    conversation(store, &a, 4).await;
    let folded = compact_and_fold(
        store,
        &a,
        user,
        &format!("Talked about the {SECRET}."),
        &format!("The user keeps a {SECRET}"),
    )
    .await;
    assert_eq!(folded.added + folded.merged, 1);
    ingest(store, &a, &[NewEvent::user(format!("{SECRET} again"))]).await;
    store
        .write_block(&Scope::Agent(a), "notes", put(SECRET), None, None)
        .await
        .unwrap();
}

/// ListAgents by user and DeleteUser: the user's agents (forks included)
/// listed and erased with its blocks, no byte of its text left in
/// storage, other users and agents untouched, idempotent, across a
/// restart.
pub async fn delete_user_erases_everything_it_owns<H: Harness>(h: &H) {
    let store = h.open().await;
    let (ana, bo) = (user("erase-ana"), user("erase-bo"));
    secret_agent(&*store, "ana-1", &ana).await;
    secret_agent(&*store, "ana-2", &ana).await;
    store.fork_agent(&id("ana-1"), &id("ana-3")).await.unwrap();
    store
        .write_block(&Scope::User(ana.clone()), "human", put(SECRET), None, None)
        .await
        .unwrap();
    store
        .ingest(
            &id("bo-1"),
            &[NewEvent::user("bo stays")],
            None,
            None,
            Some(&bo),
        )
        .await
        .unwrap();
    ingest(&*store, &id("nobody"), &[NewEvent::user("no user")]).await;
    store
        .write_block(&Scope::User(bo.clone()), "human", put("Bo"), None, None)
        .await
        .unwrap();
    store
        .write_block(&Scope::Global, "rules", put("Be kind."), None, None)
        .await
        .unwrap();

    // Said in both conversations: one fact of the user, two sources.
    let facts = store.user_facts(&ana).await.unwrap();
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0].sources.len(), 2);
    let listed = store.user_agents(&ana).await.unwrap();
    assert_eq!(listed, [id("ana-1"), id("ana-2"), id("ana-3")]);
    assert_eq!(store.user_agents(&bo).await.unwrap(), [id("bo-1")]);
    assert!(
        store
            .user_agents(&user("nobody-at-all"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !h.holding(&store, SECRET).await.is_empty(),
        "the check below can see the secret"
    );

    assert_eq!(store.delete_user(&ana).await.unwrap(), 3);
    let left = h.holding(&store, SECRET).await;
    assert!(left.is_empty(), "the user's text is still in {left:?}");
    assert!(store.user_agents(&ana).await.unwrap().is_empty());
    for a in ["ana-1", "ana-2", "ana-3"] {
        assert!(is_not_found(store.context(&id(a)).await), "{a}");
    }
    assert!(
        store
            .list_blocks(&Scope::User(ana.clone()))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .block_history(&Scope::User(ana.clone()), "human")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.user_facts(&ana).await.unwrap().is_empty());
    assert_eq!(store.delete_user(&ana).await.unwrap(), 0, "idempotent");

    let store = h.reopen(store).await;
    assert!(store.user_agents(&ana).await.unwrap().is_empty());
    assert!(is_not_found(store.context(&id("ana-1")).await));
    assert_eq!(store.user_agents(&bo).await.unwrap(), [id("bo-1")]);
    assert_eq!(store.context(&id("bo-1")).await.unwrap().messages.len(), 1);
    assert_eq!(
        store.context(&id("nobody")).await.unwrap().messages.len(),
        1
    );
    assert_eq!(
        store.list_blocks(&Scope::User(bo)).await.unwrap()[0].value,
        "Bo"
    );
    assert_eq!(store.list_blocks(&Scope::Global).await.unwrap().len(), 1);
    // The ids are free again, for anyone.
    store
        .ingest(
            &id("ana-1"),
            &[NewEvent::user("new")],
            None,
            None,
            Some(&user("cy")),
        )
        .await
        .unwrap();
    assert!(store.user_agents(&ana).await.unwrap().is_empty());
    assert_eq!(store.user_agents(&user("cy")).await.unwrap(), [id("ana-1")]);
}

fn fact(id: &str, text: &str) -> SemanticItem {
    SemanticItem {
        turn_ids: vec!["turn_0001".into()],
        ..SemanticItem::new(id, text)
    }
}

/// The facts of a user's conversations, folded into one store: the same
/// fact twice is one with both sources, a changed one supersedes the
/// other conversation's, folding again changes nothing, and only an
/// agent of the user folds; across a restart.
pub async fn a_users_facts_are_folded_across_conversations<H: Harness>(h: &H) {
    let store = h.open().await;
    let ana = user("facts-ana");
    for agent in ["f-1", "f-2"] {
        store
            .ingest(&id(agent), &[NewEvent::user("hi")], None, None, Some(&ana))
            .await
            .unwrap();
    }
    ingest(&*store, &id("f-none"), &[NewEvent::user("no user")]).await;
    let first = [
        fact("a1", "The user lives in Lisbon Portugal"),
        fact("a2", "The user likes green tea"),
    ];
    let folded = store
        .fold_into_user(&ana, &id("f-1"), &first, &[])
        .await
        .unwrap();
    assert_eq!((folded.added, folded.merged, folded.superseded), (2, 0, 0));
    let second = [
        fact("b1", "the user likes green tea."),
        fact("b2", "The user lives in Porto Portugal"),
    ];
    let folded = store
        .fold_into_user(&ana, &id("f-2"), &second, &[])
        .await
        .unwrap();
    assert_eq!((folded.added, folded.merged, folded.superseded), (1, 1, 1));
    let again = store
        .fold_into_user(&ana, &id("f-2"), &second, &[])
        .await
        .unwrap();
    assert!(again.changed.is_empty(), "idempotent: {again:?}");
    for (agent, owner) in [
        ("f-none", &ana),
        ("f-1", &user("facts-bo")),
        ("f-gone", &ana),
    ] {
        let refused = store.fold_into_user(owner, &id(agent), &first, &[]).await;
        assert!(is_not_found(refused), "{agent}");
    }

    let store = h.reopen(store).await;
    let facts = store.user_facts(&ana).await.unwrap();
    let shown: Vec<(&str, bool, usize)> = facts
        .iter()
        .map(|f| (f.fact.fact.as_str(), f.is_live(), f.sources.len()))
        .collect();
    assert_eq!(
        shown,
        [
            ("The user lives in Lisbon Portugal", false, 1),
            ("The user likes green tea", true, 2),
            ("The user lives in Porto Portugal", true, 1),
        ]
    );
    assert_eq!(
        facts[0].fact.superseded_by.as_deref(),
        Some(facts[2].fact.id.as_str())
    );
    let tea: Vec<(&str, &str)> = facts[1]
        .sources
        .iter()
        .map(|s| (s.agent_id.as_str(), s.fact_id.as_str()))
        .collect();
    assert_eq!(tea, [("f-1", "a2"), ("f-2", "b1")]);
    assert!(store.user_facts(&user("nobody")).await.unwrap().is_empty());
}

fn summary(id: &str, ts: f64, text: &str) -> EpisodicItem {
    EpisodicItem {
        id: id.into(),
        ts,
        turn_ids: vec!["turn_0001".into()],
        summary: text.into(),
        tags: vec![],
        salience: 0.5,
        source: Provenance::default(),
        rewriting: false,
        carrying: Default::default(),
    }
}

/// The user's last summarized conversation is kept by the fold that
/// brings its summaries (the latest few); a user's new conversation is
/// started once, before its first prompt, with a snapshot that its
/// transcript then begins with; across a restart.
pub async fn a_users_new_conversation_starts_once<H: Harness>(h: &H) {
    let store = h.open().await;
    let ana = user("start-ana");
    for agent in ["old", "new"] {
        store
            .ingest(&id(agent), &[NewEvent::user("hi")], None, None, Some(&ana))
            .await
            .unwrap();
    }
    ingest(&*store, &id("plain"), &[NewEvent::user("no user")]).await;
    assert!(store.last_conversation(&ana).await.unwrap().is_none());
    let summaries: Vec<EpisodicItem> = (1..=5)
        .map(|n| summary(&format!("e{n}"), f64::from(n), &format!("part {n}")))
        .collect();
    store
        .fold_into_user(&ana, &id("old"), &[], &summaries)
        .await
        .unwrap();
    store
        .fold_into_user(&ana, &id("new"), &[], &[])
        .await
        .unwrap();
    let last = store.last_conversation(&ana).await.unwrap().expect("kept");
    assert_eq!(last.agent_id, "old", "a fold without summaries keeps it");
    let kept: Vec<&str> = last.summaries.iter().map(|s| s.summary.as_str()).collect();
    assert_eq!(kept, ["part 3", "part 4", "part 5"]);

    assert!(
        !store
            .context(&id("plain"))
            .await
            .unwrap()
            .awaits_first_epoch
    );
    assert!(
        store
            .start_first_epoch(&id("plain"), Some("x".into()))
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.context(&id("new")).await.unwrap().awaits_first_epoch);
    let text = "[MEMORY:PREVIOUS CONVERSATION]\nparts 3 to 5";
    let started = store
        .start_first_epoch(&id("new"), Some(text.into()))
        .await
        .unwrap()
        .expect("started");
    assert!(!started.awaits_first_epoch);
    let shown: Vec<(Role, &str)> = started
        .messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(shown, [(Role::System, text), (Role::User, "hi")]);
    let again = store
        .start_first_epoch(&id("new"), Some("other".into()))
        .await;
    assert!(again.unwrap().is_none(), "once");
    assert!(is_not_found(
        store.start_first_epoch(&id("nobody"), None).await
    ));

    let store = h.reopen(store).await;
    let context = store.context(&id("new")).await.unwrap();
    assert!(!context.awaits_first_epoch);
    assert_eq!(context.messages[0].content, text);
    assert_eq!(context.epoch, 0, "still the first epoch");
    assert_eq!(store.last_conversation(&ana).await.unwrap(), Some(last));
}

/// Recall across a user's conversations: one ranking over every
/// conversation of the user (archived and active traces, summaries, the
/// user's facts), each memory naming its conversation; the current
/// conversation's active transcript left out; nothing of another user or
/// of an agent with none; across a restart, and forgetting a deleted
/// conversation.
pub async fn recall_spans_a_users_conversations<H: Harness>(h: &H) {
    let store = h.open().await;
    let ana = user("recall-ana");
    let said = |agent: &str, text: &str, user: Option<&UserId>| {
        let store = &store;
        let (agent, text, user) = (id(agent), text.to_owned(), user.cloned());
        async move {
            store
                .ingest(&agent, &[NewEvent::user(text)], None, None, user.as_ref())
                .await
                .unwrap();
        }
    };
    said(
        "trip",
        "We should plan the kayak trip to Lofoten",
        Some(&ana),
    )
    .await;
    for n in 1..=3 {
        said("trip", &format!("filler message number {n}"), None).await;
    }
    let a = id("trip");
    compact_and_fold(
        &*store,
        &a,
        &ana,
        "Planned the kayak trip to Lofoten.",
        "The user owns a red kayak",
    )
    .await;
    said("trip", "The kayak ferry to Lofoten leaves at nine", None).await;
    said("now", "Which kayak did I say I own?", Some(&ana)).await;
    said(
        "bo-chat",
        "I rent a kayak in Lofoten too",
        Some(&user("recall-bo")),
    )
    .await;
    said("plain", "kayak Lofoten kayak", None).await;

    let query = MemoryQuery {
        query: "kayak Lofoten ferry".into(),
        limit: 20,
        neighbours: 1,
        wait_for_index: None,
        archived_only: true,
        episodic: 3,
        semantic: 3,
        as_of: None,
    };
    let check = |ranked: &crate::RankedMemories, now_too: bool| {
        let mut texts = vec![];
        for m in &ranked.memories {
            let text = match &m.memory {
                Memory::Trace { trace, .. } => trace.content.clone(),
                Memory::Episodic(e) => e.summary.clone(),
                Memory::Semantic(f) => f.fact.clone(),
            };
            if !matches!(m.memory, Memory::Semantic(_)) {
                let from = if text.contains("Which kayak") {
                    "now"
                } else {
                    "trip"
                };
                assert_eq!(m.agent_id.as_deref(), Some(from), "{text}");
            }
            for n in m.before.iter().chain(&m.after) {
                assert!(
                    !n.content.contains("Which kayak"),
                    "a neighbour from another conversation"
                );
            }
            texts.push(text);
        }
        for want in [
            "We should plan the kayak trip to Lofoten",
            "The kayak ferry to Lofoten leaves at nine",
            "Planned the kayak trip to Lofoten.",
            "The user owns a red kayak",
        ] {
            assert!(texts.iter().any(|t| t == want), "{want} not in {texts:?}");
        }
        assert!(
            !texts
                .iter()
                .any(|t| t.contains("rent") || t.contains("kayak Lofoten kayak")),
            "{texts:?}"
        );
        assert_eq!(
            texts.iter().any(|t| t.contains("Which kayak")),
            now_too,
            "{texts:?}"
        );
        assert!(
            ranked
                .episodic
                .iter()
                .any(|e| e.summary.contains("Lofoten"))
        );
        assert!(ranked.semantic.iter().any(|f| f.fact.contains("red kayak")));
    };
    let now = id("now");
    let ranked = store
        .rank_user_memories(&ana, &query, Some(&now))
        .await
        .unwrap();
    check(&ranked, false);
    let everything = MemoryQuery {
        archived_only: false,
        ..query.clone()
    };
    check(
        &store
            .rank_user_memories(&ana, &everything, None)
            .await
            .unwrap(),
        true,
    );

    // SearchHistory across the user's conversations: traces, named.
    let search = crate::Search {
        query: "kayak ferry".into(),
        limit: 10,
        ..crate::Search::default()
    };
    let page = store.search_user(&ana, &search).await.unwrap();
    let hits: Vec<(Option<&str>, &str)> = page
        .hits
        .iter()
        .map(|h| (h.agent_id.as_deref(), h.trace.content.as_str()))
        .collect();
    assert!(
        hits.contains(&(Some("trip"), "The kayak ferry to Lofoten leaves at nine")),
        "{hits:?}"
    );
    assert!(
        hits.iter().all(|(a, _)| matches!(a, Some("trip" | "now"))),
        "{hits:?}"
    );
    let all_words = crate::Search {
        mode: crate::SearchMode::AllWords,
        ..search.clone()
    };
    assert!(super::is_invalid(
        &store.search_user(&ana, &all_words).await
    ));

    let store = h.reopen(store).await;
    check(
        &store
            .rank_user_memories(&ana, &query, Some(&now))
            .await
            .unwrap(),
        false,
    );
    store.delete_agent(&a).await.unwrap();
    let after = store
        .rank_user_memories(&ana, &everything, None)
        .await
        .unwrap();
    assert!(
        after
            .memories
            .iter()
            .all(|m| m.agent_id.as_deref() != Some("trip")),
        "a deleted conversation is not recalled"
    );
    assert!(
        store
            .rank_user_memories(&user("recall-nobody"), &query, None)
            .await
            .unwrap()
            .memories
            .is_empty()
    );
}
