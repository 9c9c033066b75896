//! Forgetting a turn: its traces, and what was drawn from them, gone from
//! every search, prompt and Retrieve and from every byte of the storage;
//! the summary that covered it rewritten from its other turns.

use engram_core::compaction::{NewFact, Summary};
use engram_core::forget::Forget;
use engram_core::{NewEvent, UserId};
use serde_json::json;

use super::{Harness, id, ranked, words};
use crate::prelude::*;
use crate::{Begun, MemoryQuery, Policy, Store};

const POLICY: Policy = Policy {
    raw_tail_turns: 1,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

/// Said once, repeated by the assistant, a tool call, its (spilled)
/// result, a summary and a fact.
const SECRET: &str = "quokka-5150";

fn fact(text: &str) -> NewFact {
    NewFact {
        fact: text.into(),
        tags: vec![],
        confidence: 0.9,
        salience: 0.9,
    }
}

/// Everything the store shows of agent `a` for the secret: searches,
/// rankings, the prompt, Retrieve. Empty: nothing.
async fn shown<S: Store + ?Sized>(store: &S, a: &engram_core::AgentId) -> Vec<String> {
    let mut out = vec![];
    for search in [words(SECRET, 50, None), ranked(SECRET, 50)] {
        let page = store.search(a, &search).await.unwrap();
        for hit in page.hits {
            let line = String::from_utf8_lossy(&hit.trace.to_line()).into_owned();
            out.extend(line.contains(SECRET).then(|| format!("search: {line}")));
        }
    }
    let query = MemoryQuery {
        query: SECRET.into(),
        limit: 20,
        neighbours: 1,
        wait_for_index: None,
        archived_only: false,
        episodic: 5,
        semantic: 5,
        as_of: None,
    };
    let ranked = store.rank_memories(a, &query).await.unwrap();
    let ranked = format!(
        "{:?}",
        (&ranked.memories, &ranked.episodic, &ranked.semantic)
    );
    out.extend(ranked.contains(SECRET).then(|| format!("ranked: {ranked}")));
    let context = store.context(a).await.unwrap();
    for m in context.messages.iter().chain(&context.tail) {
        let m = format!("{m:?}");
        out.extend(m.contains(SECRET).then(|| format!("prompt: {m}")));
    }
    let bundle = format!("{:?}", store.bundle(a, 10).await.unwrap());
    out.extend(
        bundle
            .contains(SECRET)
            .then(|| format!("retrieve: {bundle}")),
    );
    out
}

pub async fn forgetting_a_turn_erases_every_byte_of_it<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("forget-a");
    let user = UserId::parse("forget-u").unwrap();
    let say = |events: &[NewEvent]| {
        let (store, a, user) = (store.clone(), a.clone(), user.clone());
        let events = events.to_vec();
        async move {
            store
                .ingest(&a, &events, None, None, Some(&user))
                .await
                .expect("ingest accepted")
        }
    };
    say(&[
        NewEvent::user("We adopted a puppy called Rex"),
        NewEvent::assistant("Congratulations on Rex"),
    ])
    .await;
    let big = format!("{SECRET} {}", "locker log line. ".repeat(2_000));
    let secret_turn = say(&[
        NewEvent::user(format!("My locker code is {SECRET}, keep it")).with_event_id("q2"),
        NewEvent::tool_call("c2", "save_code", json!({"code": SECRET})),
        NewEvent::tool_result("c2", json!(big)),
        NewEvent::assistant(format!("Saved {SECRET}")),
    ])
    .await
    .current_turn_id;
    say(&[
        NewEvent::user("Rex chewed a shoe"),
        NewEvent::assistant("Puppies do"),
    ])
    .await;
    say(&[
        NewEvent::user("Walks twice a day"),
        NewEvent::assistant("Good routine"),
    ])
    .await;
    // Turns 1-2 summarized, with a fact of the secret and one of the dog.
    let Begun::Job(job) = store.begin_compaction(&a, POLICY).await.unwrap() else {
        panic!("a window to compact");
    };
    assert_eq!(job.turn_ids, ["turn_0001", "turn_0002"]);
    let summary = Summary {
        episodic_summary: format!("Got a puppy, Rex; the locker code is {SECRET}."),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![
            fact(&format!("Locker code {SECRET}")),
            fact("Has a puppy named Rex"),
        ],
        ..Default::default()
    };
    store
        .finish_compaction(&a, job, Some(summary), POLICY)
        .await
        .unwrap();
    assert!(!shown(store.as_ref(), &a).await.is_empty(), "found before");
    assert!(!h.holding(&store, SECRET).await.is_empty(), "stored before");

    let forgotten = store
        .forget(&a, &Forget::Turn(secret_turn.clone()), POLICY)
        .await
        .unwrap();
    assert_eq!(forgotten.traces_erased, 4, "the turn's four traces");
    assert_eq!(forgotten.facts_deleted, 2, "both facts of the window");
    assert_eq!(forgotten.summaries_rewritten, 1);
    assert_eq!(forgotten.user_id.as_deref(), Some("forget-u"));
    assert_eq!(shown(store.as_ref(), &a).await, Vec::<String>::new());
    assert_eq!(h.holding(&store, SECRET).await, Vec::<String>::new());
    // The other turns stay, in order.
    let left = store.search(&a, &words("Rex", 50, None)).await.unwrap();
    assert_eq!(left.hits.len(), 3, "{:?}", left.hits);
    let context = store.context(&a).await.unwrap();
    assert!(format!("{:?}", context.messages).contains("Walks twice a day"));
    assert!(
        store.bundle(&a, 10).await.unwrap().episodic.is_empty(),
        "hidden"
    );

    // The summary comes back, written from turn 1 alone.
    let jobs = store.rewrite_jobs(&a).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].item.turn_ids, ["turn_0001"]);
    assert_eq!(jobs[0].traces.len(), 2);
    assert!(!format!("{:?}", jobs[0]).contains(SECRET));
    let rewrite = Summary {
        episodic_summary: "Got a puppy, Rex.".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![fact("Has a puppy named Rex")],
        ..Default::default()
    };
    assert!(
        store
            .finish_rewrite(&a, &jobs[0], rewrite.clone(), POLICY)
            .await
            .unwrap()
    );
    assert!(
        !store
            .finish_rewrite(&a, &jobs[0], rewrite, POLICY)
            .await
            .unwrap(),
        "once"
    );
    let bundle = store.bundle(&a, 10).await.unwrap();
    assert_eq!(bundle.episodic.len(), 1);
    assert_eq!(bundle.episodic[0].summary, "Got a puppy, Rex.");
    assert!(
        bundle
            .semantic
            .iter()
            .any(|f| f.is_live() && f.fact.contains("Rex"))
    );
    assert!(
        store.context(&a).await.unwrap().messages[0]
            .content
            .contains("Got a puppy, Rex.")
    );
    assert!(store.rewrite_jobs(&a).await.unwrap().is_empty());

    // Repeated: nothing left. After a restart: still nothing.
    let again = store
        .forget(&a, &Forget::Turn(secret_turn), POLICY)
        .await
        .unwrap();
    assert_eq!((again.traces_erased, again.facts_deleted), (0, 0));
    let store = h.reopen(store).await;
    assert_eq!(shown(store.as_ref(), &a).await, Vec::<String>::new());
    assert_eq!(h.holding(&store, SECRET).await, Vec::<String>::new());
    assert_eq!(
        store
            .search(&a, &words("Rex", 50, None))
            .await
            .unwrap()
            .hits
            .len(),
        3
    );
    // Events: a tool call takes its result along; unknown ids erase nothing.
    let none = store
        .forget(&a, &Forget::Events(vec!["nothing".into()]), POLICY)
        .await
        .unwrap();
    assert_eq!(none.traces_erased, 0);
    assert!(matches!(
        store
            .forget(
                &id("forget-none"),
                &Forget::Turn("turn_0001".into()),
                POLICY
            )
            .await,
        Err(crate::StoreError::NotFound(_))
    ));
}
