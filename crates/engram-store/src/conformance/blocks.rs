//! Memory blocks and the users of agents: the same on every backend.

use engram_core::blocks::{Change, Edit, Put, Scope, WORKING_MEMORY};
use engram_core::{CoreError, NewEvent, UserId};

use super::{Harness, id, ingest};
use crate::prelude::*;
use crate::{PrepareInput, StoreError};

fn put(value: &str) -> Change {
    Change::Put(Put {
        value: value.into(),
        ..Put::default()
    })
}

fn user(u: &str) -> UserId {
    UserId::parse(u).unwrap()
}

/// Versions, history, the expected version, limits and edits, in every
/// scope; the blocks an agent sees come with its prompt, and survive a
/// restart.
pub async fn blocks_keep_versions_and_reach_the_prompt<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("blocks-a");
    let ana = user("ana");
    let global = Scope::Global;
    let mine = Scope::User(ana.clone());
    let agent = Scope::Agent(a.clone());
    store
        .write_block(&global, "rules", put("Be brief."), Some(0), None)
        .await
        .unwrap();
    store
        .write_block(&mine, "human", put("Name: Ana"), None, None)
        .await
        .unwrap();
    // An agent-scope write creates the agent and binds its user.
    let wm = store
        .write_block(
            &agent,
            WORKING_MEMORY,
            Change::Edit(Edit::MergePatch(r#"{"step":1}"#.into())),
            Some(0),
            Some(&ana),
        )
        .await
        .unwrap();
    assert_eq!(wm.version, 1);
    let stale = store
        .write_block(
            &agent,
            WORKING_MEMORY,
            Change::Edit(Edit::MergePatch(r#"{"step":3}"#.into())),
            Some(0),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(stale, StoreError::Core(CoreError::Stale(_))),
        "{stale}"
    );
    store
        .write_block(
            &agent,
            WORKING_MEMORY,
            Change::Edit(Edit::MergePatch(r#"{"step":2}"#.into())),
            Some(1),
            None,
        )
        .await
        .unwrap();
    let twice = store
        .write_block(
            &mine,
            "human",
            Change::Edit(Edit::Replace {
                old: "x".into(),
                new: "y".into(),
            }),
            None,
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(twice, StoreError::Core(CoreError::Precondition(_))),
        "{twice}"
    );
    let over = store
        .write_block(&global, "rules", put(&"x".repeat(6000)), None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(over, StoreError::Core(CoreError::TooLarge { .. })),
        "{over}"
    );

    let prepared = store
        .prepare(
            &a,
            PrepareInput {
                user_input: Some(NewEvent::user("hi")),
                ..PrepareInput::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(prepared.context.user_id.as_deref(), Some("ana"));
    let seen: Vec<(&str, String, String)> = prepared
        .blocks
        .in_order()
        .into_iter()
        .map(|(s, b)| (s, b.label.clone(), b.value.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("global", "rules".into(), "Be brief.".into()),
            ("user", "human".into(), "Name: Ana".into()),
            ("agent", WORKING_MEMORY.into(), r#"{"step":2}"#.into()),
        ]
    );
    let gone = store
        .write_block(&global, "rules", Change::Delete, Some(1), None)
        .await
        .unwrap();
    assert!(gone.deleted && gone.version == 2);
    let store = h.reopen(store).await;
    let history = store.block_history(&agent, WORKING_MEMORY).await.unwrap();
    assert_eq!(
        history.iter().map(|b| b.version).collect::<Vec<_>>(),
        [1, 2]
    );
    let global_history = store.block_history(&global, "rules").await.unwrap();
    assert!(global_history[1].deleted && global_history[1].value.is_empty());
    assert!(store.list_blocks(&global).await.unwrap().is_empty());
    assert_eq!(store.list_blocks(&mine).await.unwrap().len(), 1);
    assert!(
        store
            .list_blocks(&Scope::Agent(id("nobody")))
            .await
            .unwrap()
            .is_empty()
    );
    // A fork takes the agent's blocks, history included, and its user.
    let copy = id("blocks-copy");
    store.fork_agent(&a, &copy).await.unwrap();
    let forked = Scope::Agent(copy.clone());
    let history = store.block_history(&forked, WORKING_MEMORY).await.unwrap();
    assert_eq!(
        history.iter().map(|b| b.version).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(store.list_blocks(&forked).await.unwrap().len(), 1);
    assert_eq!(
        store.context(&copy).await.unwrap().user_id.as_deref(),
        Some("ana")
    );
}

/// An agent's user is fixed by its first write that names one; another
/// user is refused with nothing written.
pub async fn an_agents_user_is_fixed_once<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("users-a");
    ingest(&*store, &a, &[NewEvent::user("first")]).await;
    store
        .ingest(&a, &[NewEvent::user("mine")], None, None, Some(&user("bo")))
        .await
        .unwrap();
    let err = store
        .ingest(
            &a,
            &[NewEvent::user("theirs")],
            None,
            None,
            Some(&user("cy")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Core(CoreError::Precondition(_))),
        "{err}"
    );
    let err = store
        .prepare(
            &a,
            PrepareInput {
                user: Some(&user("cy")),
                user_input: Some(NewEvent::user("theirs too")),
                ..PrepareInput::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Core(CoreError::Precondition(_))),
        "{err}"
    );
    let store = h.reopen(store).await;
    let context = store.context(&a).await.unwrap();
    assert_eq!(context.user_id.as_deref(), Some("bo"));
    assert_eq!(context.messages.len(), 2, "refused writes left nothing");
}
