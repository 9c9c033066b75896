//! Cases of compaction: the commit, its exclusivity and staleness checks,
//! all-or-nothing at every fault point, microcompact.

use engram_core::RawTrace;
use serde_json::json;
use std::collections::{HashMap, HashSet};

use engram_core::compaction::{NewFact, Summary};
use engram_core::transcript::Role;
use engram_core::{AgentId, NewEvent};

use super::{Harness, MARK, all_traces, conversation, id, ids, ingest, turn};
use crate::prelude::*;
use crate::{Hiding, Policy, Store, StoreError};

const POLICY: Policy = Policy {
    raw_tail_turns: 2,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

fn summary() -> Summary {
    Summary {
        episodic_summary: "Asked about zebras.".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![NewFact {
            fact: "The user studies zebras".into(),
            tags: vec![],
            confidence: 0.8,
            salience: 0.6,
        }],
        ..Default::default()
    }
}

/// The invariants every committed or uncommitted state keeps: each trace
/// stored once (active or archived), no turn in two summaries, no
/// summarized turn still active, archived traces exactly the summarized
/// turns'. Returns how many traces are archived.
async fn assert_consistent(store: &dyn Store, agent: &AgentId, traces: usize) -> usize {
    let all = all_traces(store, agent).await;
    let distinct: HashSet<&str> = all.iter().map(|(t, _)| t.id.as_str()).collect();
    assert_eq!(all.len(), traces, "every trace is somewhere: {all:?}");
    assert_eq!(distinct.len(), traces, "and only once");
    let recall = store.bundle(agent, 0).await.unwrap();
    let mut summarized = HashMap::new();
    for e in &recall.episodic {
        for t in &e.turn_ids {
            let before = summarized.insert(t.clone(), e.id.clone());
            assert!(before.is_none(), "turn {t} summarized twice");
        }
    }
    for (t, archived) in &all {
        assert_eq!(
            *archived,
            summarized.contains_key(&t.turn_id),
            "{} of {} archived: {archived}",
            t.id,
            t.turn_id
        );
    }
    all.iter().filter(|(_, archived)| *archived).count()
}

/// Begin, ingest meanwhile, finish: the summary and facts are stored, the
/// window archived (and still found), the new epoch starts with the
/// snapshot, and all of it survives a restart.
pub async fn compaction_commits_summary_archive_and_epoch<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("compact");
    conversation(store.as_ref(), &a, 6).await;
    let before = store.context(&a).await.unwrap();
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    assert_eq!(job.turn_ids, ["turn_0001", "turn_0002", "turn_0003"]);
    assert_eq!(job.traces.len(), 12);
    assert_eq!(job.epoch, before.epoch);
    // Ingest keeps working while the summarizer runs.
    ingest(
        store.as_ref(),
        &a,
        &[NewEvent::assistant("zebra meanwhile")],
    )
    .await;
    let done = store
        .finish_compaction(&a, job, Some(summary()), POLICY)
        .await
        .unwrap();
    assert_eq!(done.turn_ids, ["turn_0001", "turn_0002", "turn_0003"]);
    assert_eq!(done.traces_pruned, 12);
    assert_eq!((done.semantic_added, done.semantic_updated), (1, 0));
    assert_eq!(done.epoch, before.epoch + 1);
    let context = &done.context;
    assert_eq!(context.epoch, done.epoch);
    assert_eq!(context.compactions, 1);
    assert!(!context.compaction_required);
    assert_eq!(context.messages[0].role, Role::System);
    assert!(
        context.messages[0].content.contains("Asked about zebras."),
        "the snapshot leads: {:?}",
        context.messages[0]
    );
    assert_eq!(
        context.messages.len(),
        1 + 5,
        "snapshot, the current turn, the late answer"
    );
    assert_eq!(assert_consistent(store.as_ref(), &a, 25).await, 12);
    let recall = store.bundle(&a, 1).await.unwrap();
    assert_eq!(recall.episodic.len(), 1);
    assert_eq!(recall.episodic[0].id, done.episodic_id);
    assert_eq!(recall.semantic.len(), 1);
    assert_eq!(recall.semantic[0].fact, "The user studies zebras");
    // Turns keep counting; a retry of an archived event is still known.
    let next = ingest(store.as_ref(), &a, &[NewEvent::user("zebra seven")]).await;
    assert_eq!(next.current_turn_id, "turn_0007");
    let retry = ingest(store.as_ref(), &a, &turn(1)[..1]).await;
    assert_eq!(retry.traces[0].turn_id, "turn_0001");
    let store = h.reopen(store).await;
    let after = store.context(&a).await.unwrap();
    assert_eq!(after.epoch, done.epoch);
    assert_eq!(after.messages.len(), 1 + 5 + 1);
    assert_eq!(assert_consistent(store.as_ref(), &a, 26).await, 12);
}

/// A trim (no summary): the window's traces archived with nothing written
/// for them, the kept turns still messages as they were (no snapshot, with
/// no memories to show), the next epoch started; all of it survives a
/// restart.
pub async fn a_trim_archives_the_window_with_no_summary<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("trim");
    conversation(store.as_ref(), &a, 6).await;
    let before = store.context(&a).await.unwrap();
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    assert_eq!(job.turn_ids, ["turn_0001", "turn_0002", "turn_0003"]);
    let done = store
        .finish_compaction(&a, job, None, POLICY)
        .await
        .unwrap();
    assert_eq!(done.turn_ids, ["turn_0001", "turn_0002", "turn_0003"]);
    assert_eq!(done.traces_pruned, 12);
    assert_eq!(done.episodic_id, "");
    assert_eq!((done.semantic_added, done.semantic_updated), (0, 0));
    assert_eq!(done.epoch, before.epoch + 1);
    let kept = &done.context.messages;
    assert_ne!(kept[0].role, Role::System, "no snapshot");
    assert_eq!(
        kept[..],
        before.messages[before.messages.len() - kept.len()..],
        "the kept turns as they were"
    );
    assert_eq!(kept.len(), before.messages.len() - 12);
    let all = all_traces(store.as_ref(), &a).await;
    assert_eq!(all.len(), 24, "every trace is somewhere");
    let archived: Vec<&str> = all
        .iter()
        .filter(|(_, archived)| *archived)
        .map(|(t, _)| t.turn_id.as_str())
        .collect();
    assert_eq!(archived.len(), 12);
    assert!(archived.iter().all(|t| *t <= "turn_0003"), "{archived:?}");
    assert!(store.bundle(&a, 0).await.unwrap().episodic.is_empty());
    let store = h.reopen(store).await;
    let after = store.context(&a).await.unwrap();
    assert_eq!((after.epoch, after.compactions), (done.epoch, 1));
    assert_eq!(after.messages[..], kept[..]);
    let all = all_traces(store.as_ref(), &a).await;
    assert_eq!(all.iter().filter(|(_, archived)| *archived).count(), 12);
}

/// A second compaction of a busy agent is told it is busy; a failed one
/// counts, writes nothing else and frees the agent.
pub async fn one_compaction_of_an_agent_at_a_time<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("busy");
    conversation(store.as_ref(), &a, 5).await;
    store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    let second = store.begin_compaction(&a, POLICY).await.unwrap();
    assert!(matches!(second, crate::Begun::Busy), "{second:?}");
    assert!(
        store
            .hide_old(&a, Hiding::Microcompact, 1, None)
            .await
            .unwrap()
            .is_none(),
        "no new epoch under a running summary"
    );
    assert_eq!(store.abort_compaction(&a, true).await.unwrap(), 1);
    let context = store.context(&a).await.unwrap();
    assert_eq!(context.consecutive_failures, 1);
    assert_eq!(context.epoch, 0);
    assert_eq!(assert_consistent(store.as_ref(), &a, 20).await, 0);
    // Not this agent's failure (an open circuit): not counted.
    store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    assert_eq!(store.abort_compaction(&a, false).await.unwrap(), 1);
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    let done = store
        .finish_compaction(&a, job, Some(summary()), POLICY)
        .await
        .unwrap();
    assert_eq!(done.context.consecutive_failures, 0, "a success resets it");
    // Too few turns left for another window.
    let left = store.begin_compaction(&a, POLICY).await.unwrap();
    assert!(matches!(left, crate::Begun::Nothing), "{left:?}");
    let fresh = id("short");
    conversation(store.as_ref(), &fresh, 2).await;
    assert!(
        store
            .begin_compaction(&fresh, POLICY)
            .await
            .unwrap()
            .job()
            .is_none()
    );
}

/// A job whose agent moved to another epoch meanwhile commits nothing.
pub async fn a_stale_job_commits_nothing<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("stale");
    conversation(store.as_ref(), &a, 6).await;
    let stale = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    store.abort_compaction(&a, false).await.unwrap();
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    store
        .finish_compaction(&a, job, Some(summary()), POLICY)
        .await
        .unwrap();
    let refused = store
        .finish_compaction(&a, stale, Some(summary()), POLICY)
        .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert_eq!(store.bundle(&a, 0).await.unwrap().episodic.len(), 1);
    assert_eq!(store.context(&a).await.unwrap().epoch, 1);
    assert_eq!(assert_consistent(store.as_ref(), &a, 24).await, 12);
}

/// A fault at any step of the commit leaves the agent whole: the
/// compaction is either done or not done at all, as the same store sees
/// it at once and as it loads after a restart; the next one works.
pub async fn the_commit_is_all_or_nothing_at_every_step<H: Harness>(h: &H) {
    let mut store = h.open().await;
    for (n, step) in h.commit_steps().into_iter().enumerate() {
        let a = id(&format!("fault{n}"));
        conversation(store.as_ref(), &a, 5).await;
        let job = store
            .begin_compaction(&a, POLICY)
            .await
            .unwrap()
            .job()
            .unwrap();
        let window = job.traces.len();
        h.fail_commit_at(&store, Some(step));
        let failed = store
            .finish_compaction(&a, job, Some(summary()), POLICY)
            .await;
        h.fail_commit_at(&store, None);
        assert!(failed.is_err(), "{step}: {failed:?}");
        let archived = assert_consistent(store.as_ref(), &a, 20).await;
        let epoch = store.context(&a).await.unwrap().epoch;
        assert!(
            (archived, epoch) == (0, 0) || (archived, epoch) == (window, 1),
            "{step}: all or nothing, not {archived} archived in epoch {epoch}"
        );
        store = h.reopen(store).await;
        assert_eq!(
            assert_consistent(store.as_ref(), &a, 20).await,
            archived,
            "{step}: the restart sees the same"
        );
        ingest(store.as_ref(), &a, &turn(6)).await;
        ingest(store.as_ref(), &a, &turn(7)).await;
        let job = store
            .begin_compaction(&a, POLICY)
            .await
            .unwrap()
            .job()
            .unwrap();
        let next = job.traces.len();
        store
            .finish_compaction(&a, job, Some(summary()), POLICY)
            .await
            .unwrap_or_else(|e| panic!("{step}: the next compaction: {e}"));
        assert_eq!(
            assert_consistent(store.as_ref(), &a, 28).await,
            archived + next
        );
    }
}

/// Snip hides, in turns older than the kept ones, a result that repeats an
/// earlier one word for word (a reference to it shows) in a new epoch;
/// microcompact after it, in the same compaction, changes that epoch in
/// place, but starts its own if the agent moved on; the traces keep every
/// byte, and a restart shows the same prompt.
pub async fn snip_and_microcompact_hide_old_messages_in_one_epoch<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("snip");
    let page = format!("{MARK} {}", "the same status page of a service ".repeat(8));
    for n in 1..=4 {
        ingest(
            store.as_ref(),
            &a,
            &[
                NewEvent::user(format!("{MARK} status {n}")),
                NewEvent::tool_call(format!("s{n}"), "status", json!({})),
                NewEvent::tool_result(format!("s{n}"), json!(page)),
                NewEvent::assistant(format!("{MARK} fine {n}")),
            ],
        )
        .await;
    }
    let before = all_traces(store.as_ref(), &a).await;
    let snipped = store
        .hide_old(&a, Hiding::Snip, 1, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snipped.hidden, 1, "s2 repeats s1; s3 is kept, s4 current");
    let epoch = snipped.context.epoch;
    assert_eq!(epoch, 1);
    let reference = |context: &crate::AgentContext, call: &str| {
        context
            .messages
            .iter()
            .find(|m| m.tool_call_id.as_deref() == Some(call))
            .map(|m| m.content.clone())
            .unwrap()
    };
    assert!(reference(&snipped.context, "s2").starts_with("[same result as call s1 above"));
    assert!(
        store
            .hide_old(&a, Hiding::Snip, 1, None)
            .await
            .unwrap()
            .is_none(),
        "nothing new to snip"
    );
    let hidden = store
        .hide_old(&a, Hiding::Microcompact, 1, Some(epoch))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (hidden.hidden, hidden.context.epoch),
        (2, epoch),
        "same epoch"
    );
    assert!(reference(&hidden.context, "s1").starts_with("[tool result of"));
    // A new turn: microcompact again, asked for an epoch the agent has
    // left, starts its own.
    ingest(store.as_ref(), &a, &turn(9)).await;
    let again = store
        .hide_old(&a, Hiding::Microcompact, 1, Some(epoch - 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.context.epoch, epoch + 1);
    let after: Vec<RawTrace> = all_traces(store.as_ref(), &a)
        .await
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    for (t, _) in &before {
        assert!(after.contains(t), "{} kept whole", t.id);
    }
    let store = h.reopen(store).await;
    let reopened = store.context(&a).await.unwrap();
    assert_eq!(reopened.epoch, epoch + 1);
    assert_eq!(reopened.messages, again.context.messages);
}

/// Microcompact shows old tool results as placeholders in a new epoch;
/// the traces keep every byte.
pub async fn microcompact_hides_old_results_and_loses_nothing<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("micro");
    conversation(store.as_ref(), &a, 5).await;
    let before = all_traces(store.as_ref(), &a).await;
    let done = store
        .hide_old(&a, Hiding::Microcompact, 1, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        done.hidden, 3,
        "turns 1-3: before the one kept and the current one"
    );
    assert_eq!(done.context.epoch, 1);
    let shown: Vec<&str> = done
        .context
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(shown.len(), 5);
    assert!(
        shown[..3].iter().all(|c| c.contains("omitted")),
        "{shown:?}"
    );
    assert!(shown[3].contains("zebra result 4"), "{shown:?}");
    assert!(shown[4].contains("zebra result 5"), "{shown:?}");
    assert!(
        store
            .hide_old(&a, Hiding::Microcompact, 1, None)
            .await
            .unwrap()
            .is_none(),
        "nothing more to hide"
    );
    assert_eq!(all_traces(store.as_ref(), &a).await, before);
    let store = h.reopen(store).await;
    let after = store.context(&a).await.unwrap();
    assert_eq!(after.messages, done.context.messages);
    assert_eq!(ids(before.iter().map(|(t, _)| t)).len(), 20);
}
