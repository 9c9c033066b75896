//! The compaction log: records numbered per agent, read newest first in
//! pages, durable, and gone with their agent; a fork takes a copy.

use engram_core::NewEvent;
use engram_core::compaction::CompactionRecord;

use super::{Harness, id, ingest, is_not_found};
use crate::prelude::*;

/// A record as the engine writes one (the store numbers it).
pub(crate) fn record(trigger: &str, tokens_before: u32) -> CompactionRecord {
    CompactionRecord {
        seq: 0,
        at: 1_700_000_000.25,
        duration_secs: 0.75,
        outcome: "summarized".into(),
        trigger: trigger.into(),
        strategy: "summarize".into(),
        steps: vec!["summarize".into()],
        turn_ids: vec!["turn_0001".into(), "turn_0002".into()],
        episodic_id: "ep-1".into(),
        semantic_added: 2,
        semantic_updated: 1,
        traces_pruned: 6,
        carried: 3,
        carry_dropped: 1,
        tokens_before,
        tokens_after: tokens_before / 3,
        error: String::new(),
        prepared_in_background: true,
        summarizer: "embedded".into(),
    }
}

pub async fn the_compaction_log_keeps_each_agents_records<H: Harness>(h: &H) {
    let store = h.open().await;
    let (a, other) = (id("logged"), id("logged-other"));
    let none = store.record_compaction(&a, record("manual", 10)).await;
    assert!(is_not_found(none), "no agent, no record");
    assert!(store.compaction_log(&a, 10, None).await.unwrap().is_empty());

    ingest(store.as_ref(), &a, &[NewEvent::user("hi")]).await;
    ingest(store.as_ref(), &other, &[NewEvent::user("hi")]).await;
    for n in 1..=5u32 {
        let seq = store
            .record_compaction(&a, record("estimate", n * 100))
            .await
            .unwrap();
        assert_eq!(seq, u64::from(n), "numbered from 1 per agent");
    }
    let mut failed = record("manual", 7);
    failed.outcome = "failed".into();
    failed.error = "the summarizer timed out; nothing was pruned".into();
    assert_eq!(
        store
            .record_compaction(&other, failed.clone())
            .await
            .unwrap(),
        1
    );

    let log = store.compaction_log(&a, 3, None).await.unwrap();
    let seqs: Vec<u64> = log.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [5, 4, 3], "newest first");
    let mut expected = record("estimate", 500);
    expected.seq = 5;
    assert_eq!(log[0], expected, "every field kept");
    let rest = store.compaction_log(&a, 3, Some(3)).await.unwrap();
    let seqs: Vec<u64> = rest.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [2, 1], "the page before seq 3");
    failed.seq = 1;
    assert_eq!(
        store.compaction_log(&other, 10, None).await.unwrap(),
        [failed.clone()]
    );

    // Durable; a fork copies it and then writes its own.
    let store = h.reopen(store).await;
    assert_eq!(store.compaction_log(&a, 10, None).await.unwrap().len(), 5);
    let fork = id("logged-fork");
    store.fork_agent(&a, &fork).await.unwrap();
    assert_eq!(
        store
            .record_compaction(&fork, record("manual", 1))
            .await
            .unwrap(),
        6
    );
    assert_eq!(store.compaction_log(&a, 10, None).await.unwrap().len(), 5);
    assert_eq!(
        store.compaction_log(&fork, 10, None).await.unwrap().len(),
        6
    );
    assert_eq!(
        store
            .record_compaction(&a, record("manual", 1))
            .await
            .unwrap(),
        6,
        "after a restart the numbers go on"
    );

    // Gone with its agent; an agent of the same id starts a new log.
    store.delete_agent(&a).await.unwrap();
    assert!(store.compaction_log(&a, 10, None).await.unwrap().is_empty());
    assert!(is_not_found(
        store.record_compaction(&a, record("manual", 1)).await
    ));
    ingest(store.as_ref(), &a, &[NewEvent::user("again")]).await;
    assert_eq!(
        store
            .record_compaction(&a, record("manual", 1))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store.compaction_log(&other, 10, None).await.unwrap(),
        [failed]
    );
}
