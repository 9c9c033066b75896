//! Cases of whole agents and reading: fork, delete, listing, search.

use engram_core::NewEvent;

use super::{
    Harness, MARK, all_traces, conversation, id, ingest, is_invalid, is_not_found, ranked, words,
};
use crate::prelude::*;
use crate::{Policy, PrepareInput, StoreError};

const POLICY: Policy = Policy {
    raw_tail_turns: 1,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

pub(super) fn summary() -> engram_core::compaction::Summary {
    engram_core::compaction::Summary {
        episodic_summary: "zebra talk".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![],
        ..Default::default()
    }
}

/// A fork holds everything its source held (traces, archive, memories,
/// system prompt, turn state) and from then on lives on its own.
pub async fn fork_copies_everything_and_then_diverges<H: Harness>(h: &H) {
    let store = h.open().await;
    let (src, dst) = (id("source"), id("copy"));
    conversation(store.as_ref(), &src, 4).await;
    let job = store
        .begin_compaction(&src, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    store
        .finish_compaction(&src, job, Some(summary()), POLICY)
        .await
        .unwrap();
    store
        .prepare(
            &src,
            PrepareInput {
                system_prompt: Some("sys"),
                ..PrepareInput::default()
            },
        )
        .await
        .unwrap();
    store.fork_agent(&src, &dst).await.unwrap();
    let (a, b) = (
        store.context(&src).await.unwrap(),
        store.context(&dst).await.unwrap(),
    );
    assert_eq!(a.messages, b.messages);
    assert_eq!(b.system.as_deref(), Some("sys"));
    assert_eq!((a.epoch, a.turns), (b.epoch, b.turns));
    assert_eq!(
        all_traces(store.as_ref(), &src).await,
        all_traces(store.as_ref(), &dst).await,
        "active and archived alike"
    );
    assert_eq!(store.bundle(&dst, 1).await.unwrap().episodic.len(), 1);
    let next = ingest(store.as_ref(), &dst, &[NewEvent::user("zebra only here")]).await;
    assert_eq!(
        next.current_turn_id, "turn_0005",
        "the turn state came along"
    );
    assert_eq!(all_traces(store.as_ref(), &src).await.len(), 16);
    assert_eq!(all_traces(store.as_ref(), &dst).await.len(), 17);

    let exists = store.fork_agent(&src, &dst).await;
    assert!(
        matches!(exists, Err(StoreError::AlreadyExists(_))),
        "{exists:?}"
    );
    assert!(is_not_found(
        store.fork_agent(&id("nobody"), &id("x")).await
    ));
    assert!(
        is_not_found(store.context(&id("x")).await),
        "no target made"
    );
    assert!(is_invalid(&store.fork_agent(&src, &src).await));
    let store = h.reopen(store).await;
    assert_eq!(all_traces(store.as_ref(), &dst).await.len(), 17);
}

/// After a delete nothing of the agent is found; the id starts over.
pub async fn delete_removes_the_agent_and_everything_it_holds<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("doomed");
    let other = id("bystander");
    conversation(store.as_ref(), &a, 3).await;
    conversation(store.as_ref(), &other, 1).await;
    store.delete_agent(&a).await.unwrap();
    assert!(is_not_found(store.context(&a).await));
    assert!(is_not_found(store.bundle(&a, 1).await));
    assert!(is_not_found(store.search(&a, &words(MARK, 10, None)).await));
    assert!(is_not_found(store.search(&a, &ranked(MARK, 10)).await));
    assert!(is_not_found(store.delete_agent(&a).await));
    assert!(is_not_found(store.begin_compaction(&a, POLICY).await));
    let listed = store.list_agents(10, None, &|_, _| true).await.unwrap().0;
    assert_eq!(listed, ["bystander"]);
    let again = ingest(store.as_ref(), &a, &[NewEvent::user("zebra anew")]).await;
    assert_eq!(again.current_turn_id, "turn_0001", "a new agent");
    assert_eq!(all_traces(store.as_ref(), &a).await.len(), 1);
    let store = h.reopen(store).await;
    assert_eq!(all_traces(store.as_ref(), &a).await.len(), 1);
    assert_eq!(all_traces(store.as_ref(), &other).await.len(), 4);
}

/// Ids come sorted, a page at a time; the filter keeps pages full.
pub async fn list_agents_pages_in_order_and_filters<H: Harness>(h: &H) {
    let store = h.open().await;
    for name in ["team-b.x", "team-a.y", "team-a.x", "solo", "team-a.z"] {
        ingest(store.as_ref(), &id(name), &[NewEvent::user("hi")]).await;
    }
    let (page, next) = store.list_agents(2, None, &|_, _| true).await.unwrap();
    assert_eq!(page, ["solo", "team-a.x"]);
    let (page, next) = store
        .list_agents(2, next.as_deref(), &|_, _| true)
        .await
        .unwrap();
    assert_eq!(page, ["team-a.y", "team-a.z"]);
    let (page, next) = store
        .list_agents(2, next.as_deref(), &|_, _| true)
        .await
        .unwrap();
    assert_eq!((page, next), (vec!["team-b.x".to_owned()], None));
    let team_a = |id: &str, _: Option<&str>| id.starts_with("team-a.");
    let (page, next) = store.list_agents(2, None, &team_a).await.unwrap();
    assert_eq!(page, ["team-a.x", "team-a.y"]);
    let (page, next) = store
        .list_agents(2, next.as_deref(), &team_a)
        .await
        .unwrap();
    assert_eq!((page, next), (vec!["team-a.z".to_owned()], None));
}

/// The users listed: those with an agent bound, or blocks, sorted, paged
/// and filtered as agents are; a deleted user is gone.
pub async fn list_users_pages_the_users_with_memory<H: Harness>(h: &H) {
    use engram_core::UserId;
    use engram_core::blocks::{Change, Put, Scope};
    let store = h.open().await;
    let all = |_: &str| true;
    assert_eq!(
        store.list_users(10, None, &all).await.unwrap(),
        (vec![], None)
    );
    for (agent, user) in [
        ("a-1", "lu-bo"),
        ("a-2", "lu-ana"),
        ("a-3", "lu-ana"),
        ("a-4", "lu-dee"),
    ] {
        let user = UserId::parse(user).unwrap();
        store
            .ingest(&id(agent), &[NewEvent::user("hi")], None, None, Some(&user))
            .await
            .unwrap();
    }
    ingest(store.as_ref(), &id("a-5"), &[NewEvent::user("no user")]).await;
    let cy = UserId::parse("lu-cy").unwrap();
    let put = Change::Put(Put {
        value: "Cy".into(),
        ..Put::default()
    });
    store
        .write_block(&Scope::User(cy), "human", put, None, None)
        .await
        .unwrap();
    let (page, next) = store.list_users(2, None, &all).await.unwrap();
    assert_eq!(page, ["lu-ana", "lu-bo"]);
    let (page, next) = store.list_users(2, next.as_deref(), &all).await.unwrap();
    assert_eq!(page, ["lu-cy", "lu-dee"]);
    assert_eq!(next, None);
    // A listing of agents is shown each one's user (auth hides the agents
    // of users a token does not cover), and pages stay full past them.
    let seen = std::sync::Mutex::new(vec![]);
    let no_ana = |id: &str, user: Option<&str>| {
        seen.lock()
            .unwrap()
            .push((id.to_owned(), user.map(str::to_owned)));
        user != Some("lu-ana")
    };
    let (page, next) = store.list_agents(2, None, &no_ana).await.unwrap();
    assert_eq!(
        (page, next.as_deref()),
        (vec!["a-1".into(), "a-4".into()], Some("a-4"))
    );
    let (page, next) = store
        .list_agents(2, next.as_deref(), &no_ana)
        .await
        .unwrap();
    assert_eq!((page, next), (vec!["a-5".to_owned()], None));
    let seen = seen.into_inner().unwrap();
    let owner = |a: &str| seen.iter().find(|(id, _)| id == a).unwrap().1.clone();
    assert_eq!(owner("a-1").as_deref(), Some("lu-bo"));
    assert_eq!(owner("a-3").as_deref(), Some("lu-ana"));
    assert_eq!(owner("a-5"), None);
    let not_bo = |u: &str| u != "lu-bo";
    let (page, next) = store.list_users(2, None, &not_bo).await.unwrap();
    assert_eq!(page, ["lu-ana", "lu-cy"]);
    let (page, next) = store.list_users(2, next.as_deref(), &not_bo).await.unwrap();
    assert_eq!((page, next), (vec!["lu-dee".to_owned()], None));
    store
        .delete_user(&UserId::parse("lu-ana").unwrap())
        .await
        .unwrap();
    let (page, _) = store.list_users(10, None, &all).await.unwrap();
    assert_eq!(page, ["lu-bo", "lu-cy", "lu-dee"]);
}

/// Search covers active and archived traces, marks which is which, pages
/// without gaps or repeats, and refuses tokens it did not issue.
pub async fn search_finds_active_and_archived_traces_in_pages<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("searched");
    conversation(store.as_ref(), &a, 4).await;
    ingest(store.as_ref(), &a, &[NewEvent::user("the quagga question")]).await;
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    let archived_ids: Vec<String> = job.traces.iter().map(|t| t.id.clone()).collect();
    store
        .finish_compaction(&a, job, Some(summary()), POLICY)
        .await
        .unwrap();
    let page = store.search(&a, &words("QUAGGA", 10, None)).await.unwrap();
    assert_eq!(page.hits.len(), 1, "case-insensitive, one hit");
    assert!(!page.hits[0].archived);
    let page = store
        .search(&a, &words("result 2", 10, None))
        .await
        .unwrap();
    assert_eq!(page.hits.len(), 1, "{:?}", page.hits);
    assert!(page.hits[0].archived, "turn 2 was compacted");
    assert!(archived_ids.contains(&page.hits[0].trace.id));

    let all = all_traces(store.as_ref(), &a).await;
    assert_eq!(all.len(), 16, "pages of 50 cover everything");
    let mut paged = vec![];
    let mut token: Option<String> = None;
    loop {
        let page = store
            .search(&a, &words(MARK, 3, token.clone()))
            .await
            .unwrap();
        assert!(page.hits.len() <= 3);
        paged.extend(page.hits.into_iter().map(|h| (h.trace, h.archived)));
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, all, "small pages: the same hits in the same order");
    assert_eq!(
        paged.iter().filter(|(_, archived)| *archived).count(),
        archived_ids.len()
    );
    assert!(is_invalid(
        &store
            .search(&a, &words(MARK, 3, Some("bogus".into())))
            .await
    ));
}
