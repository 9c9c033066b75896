//! What loaded agents hold in memory, and giving it back: every backend
//! accounts its loaded agents and unloads them to a target, and an agent
//! unloaded loads again whole at its next call.

use super::{Harness, MARK, all_traces, conversation, id};
use crate::prelude::*;

pub async fn loaded_agents_are_accounted_and_unloaded_to_a_target<H: Harness>(h: &H) {
    let store = h.open().await;
    let (a, b) = (id("held-a"), id("held-b"));
    conversation(store.as_ref(), &a, 3).await;
    conversation(store.as_ref(), &b, 3).await;
    store.context(&a).await.unwrap();
    let held = store.memory_bytes();
    assert!(held > 0, "two loaded agents hold memory");
    assert!(
        store.shrink_to(u64::MAX).await.is_empty(),
        "under the target: nothing goes"
    );
    let mut unloaded = store.shrink_to(0).await;
    unloaded.sort();
    assert_eq!(unloaded, [a.clone(), b.clone()]);
    assert_eq!(store.memory_bytes(), 0);
    assert_eq!(store.loaded_agents(), 0);
    // Loaded again at their next call, whole.
    assert_eq!(all_traces(store.as_ref(), &a).await.len(), 12);
    let context = store.context(&b).await.unwrap();
    assert!(context.messages.iter().any(|m| m.content.contains(MARK)));
    assert!(store.memory_bytes() > 0);
}
