//! Cases of the write path: Ingest, PrepareRequest, the compaction mark,
//! durability across a restart.

use engram_core::{NewEvent, TraceType, Usage};
use serde_json::json;

use super::{Harness, all_traces, conversation, id, ids, ingest, is_invalid, is_not_found, turn};
use crate::PrepareInput;
use crate::prelude::*;

/// A user message opens the next turn; what follows joins it; the answer
/// names the turn every request ended in.
pub async fn turns_are_numbered_by_user_messages<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("turns");
    let first = ingest(store.as_ref(), &a, &turn(1)).await;
    let turns: Vec<&str> = first.traces.iter().map(|t| t.turn_id.as_str()).collect();
    assert_eq!(turns, ["turn_0001"; 4]);
    assert_eq!(first.current_turn_id, "turn_0001");
    let seqs: Vec<u32> = first.traces.iter().map(|t| t.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let second = ingest(
        store.as_ref(),
        &a,
        &[NewEvent::user("next"), NewEvent::assistant("reply")],
    )
    .await;
    assert_eq!(second.traces[0].turn_id, "turn_0002");
    assert_eq!(second.traces[1].turn_id, "turn_0002");
    assert_eq!(second.current_turn_id, "turn_0002");
    let context = store.context(&a).await.unwrap();
    assert_eq!(context.turns, 2);
    assert_eq!(context.current_turn_id, "turn_0002");
    assert_eq!(context.finished_turns, 1);
    assert_eq!(context.messages.len(), 6, "{:?}", context.messages);
}

/// The same event ids again store nothing new and answer the first traces.
pub async fn event_ids_make_ingest_idempotent<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("idem");
    let first = ingest(store.as_ref(), &a, &turn(1)).await;
    let again = ingest(store.as_ref(), &a, &turn(1)).await;
    assert_eq!(ids(&again.traces), ids(&first.traces));
    let stored = all_traces(store.as_ref(), &a).await;
    assert_eq!(stored.len(), 4, "stored once: {stored:?}");
    // A retry after the conversation moved on answers the same turn.
    ingest(store.as_ref(), &a, &turn(2)).await;
    let late = ingest(store.as_ref(), &a, &turn(1)[..1]).await;
    assert_eq!(late.traces[0].id, first.traces[0].id);
    assert_eq!(late.traces[0].turn_id, "turn_0001");
    assert_eq!(all_traces(store.as_ref(), &a).await.len(), 8);
}

/// A tool result joins its call's turn, even after the next turn began.
pub async fn tool_results_keep_their_calls_turn<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("pairing");
    ingest(
        store.as_ref(),
        &a,
        &[
            NewEvent::user("look it up"),
            NewEvent::tool_call("slow", "search", json!({"q": "x"})),
        ],
    )
    .await;
    ingest(store.as_ref(), &a, &[NewEvent::user("meanwhile")]).await;
    let late = ingest(
        store.as_ref(),
        &a,
        &[NewEvent::tool_result("slow", json!("found"))],
    )
    .await;
    let result = &late.traces[0];
    assert_eq!(result.turn_id, "turn_0001");
    assert_eq!(result.trace_type, TraceType::ToolResult);
    assert_eq!(result.tool_name.as_deref(), Some("search"), "inherited");
    assert_eq!(late.current_turn_id, "turn_0002");
    let twice = store
        .ingest(
            &a,
            &[NewEvent::tool_result("slow", json!("again"))],
            None,
            None,
            None,
        )
        .await;
    assert!(is_invalid(&twice), "a second result: {twice:?}");
}

/// A batch with one bad event is refused whole: nothing of it is stored,
/// and an agent it would have created does not exist.
pub async fn refused_writes_change_nothing<H: Harness>(h: &H) {
    let store = h.open().await;
    let fresh = id("never");
    let refused = store
        .ingest(
            &fresh,
            &[
                NewEvent::user("fine"),
                NewEvent::tool_result("nobody", json!(1)),
            ],
            None,
            None,
            None,
        )
        .await;
    assert!(is_invalid(&refused), "{refused:?}");
    assert!(is_not_found(store.context(&fresh).await));
    let listed = store.list_agents(10, None, &|_, _| true).await.unwrap().0;
    assert!(listed.is_empty(), "{listed:?}");

    let a = id("kept");
    conversation(store.as_ref(), &a, 1).await;
    let before = all_traces(store.as_ref(), &a).await;
    let refused = store
        .ingest(
            &a,
            &[
                NewEvent::user("zebra never stored"),
                NewEvent::tool_call("c9", "dup", json!({})),
                NewEvent::tool_call("c9", "dup", json!({})),
            ],
            None,
            None,
            None,
        )
        .await;
    assert!(
        is_invalid(&refused),
        "the id of a call still waiting: {refused:?}"
    );
    assert_eq!(all_traces(store.as_ref(), &a).await, before);
    let context = store.context(&a).await.unwrap();
    assert_eq!(context.turns, 1, "no turn was opened");
    let next = ingest(store.as_ref(), &a, &[NewEvent::user("after")]).await;
    assert_eq!(next.current_turn_id, "turn_0002");
}

/// PrepareRequest's write: the system prompt and the user input are stored
/// (the input once, however often it is retried); a request that cannot be
/// served writes nothing.
pub async fn prepare_stores_the_system_prompt_and_the_input<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("prep");
    let missing = store.prepare(&a, PrepareInput::default()).await;
    assert!(is_not_found(missing));
    let refused = store
        .prepare(
            &a,
            PrepareInput {
                system_prompt: Some("be brief"),
                user_input: Some(NewEvent::user("hi")),
                needs_model: true,
                ..PrepareInput::default()
            },
        )
        .await;
    assert!(is_invalid(&refused), "no model known: {refused:?}");
    assert!(is_not_found(store.context(&a).await), "nothing written");

    let input = PrepareInput {
        user: None,
        system_prompt: Some("be brief"),
        user_input: Some(NewEvent::user("zebra hi").with_event_id("u1")),
        model: Some("gpt-4o"),
        needs_model: true,
    };
    let first = store.prepare(&a, input.clone()).await.unwrap();
    assert_eq!(first.context.system.as_deref(), Some("be brief"));
    assert_eq!(first.context.messages.len(), 1);
    assert_eq!(first.context.current_turn_id, "turn_0001");
    let again = store.prepare(&a, input).await.unwrap();
    assert_eq!(again.user_trace.unwrap().id, first.user_trace.unwrap().id);
    assert_eq!(again.context.messages.len(), 1);
    let changed = store
        .prepare(
            &a,
            PrepareInput {
                system_prompt: Some("be thorough"),
                ..PrepareInput::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(changed.context.system.as_deref(), Some("be thorough"));
    assert_eq!(all_traces(store.as_ref(), &a).await.len(), 1);
}

/// The mark a reported prompt size sets survives a restart, is only set
/// for the epoch it was meant for, and stays until a compaction.
pub async fn the_compaction_mark_is_durable_and_per_epoch<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("mark");
    let usage = Some(Usage {
        prompt_tokens: 900,
        completion_tokens: 1,
        total_tokens: 901,
        ..Usage::default()
    });
    let first = store
        .ingest(&a, &[NewEvent::user("x")], usage, Some("gpt-4o"), None)
        .await
        .unwrap();
    assert!(!first.compaction_required);
    assert_eq!(first.model.as_deref(), Some("gpt-4o"));
    let second = store
        .ingest(&a, &[NewEvent::assistant("y")], usage, None, None)
        .await
        .unwrap();
    assert_eq!(second.model.as_deref(), Some("gpt-4o"), "the last known");
    let stale = store.mark_compaction_required(&a, second.epoch + 1).await;
    assert!(!stale.unwrap(), "another epoch's mark is not stored");
    assert!(!store.context(&a).await.unwrap().compaction_required);
    assert!(
        store
            .mark_compaction_required(&a, second.epoch)
            .await
            .unwrap()
    );
    let store = h.reopen(store).await;
    assert!(store.context(&a).await.unwrap().compaction_required);
    let later = ingest(store.as_ref(), &a, &[NewEvent::user("z")]).await;
    assert!(later.compaction_required, "until a compaction clears it");
    assert!(is_not_found(
        store.mark_compaction_required(&id("nobody"), 0).await
    ));
}

/// Everything acknowledged is there after a restart: traces, turns, the
/// system prompt, pending tool calls.
pub async fn acknowledged_writes_survive_a_restart<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("durable");
    conversation(store.as_ref(), &a, 3).await;
    store
        .prepare(
            &a,
            PrepareInput {
                system_prompt: Some("sys"),
                user_input: Some(NewEvent::user("zebra pending")),
                ..PrepareInput::default()
            },
        )
        .await
        .unwrap();
    ingest(
        store.as_ref(),
        &a,
        &[NewEvent::tool_call("open", "zebra_tool", json!({}))],
    )
    .await;
    let before = all_traces(store.as_ref(), &a).await;
    let context = store.context(&a).await.unwrap();
    let store = h.reopen(store).await;
    assert_eq!(all_traces(store.as_ref(), &a).await, before);
    let after = store.context(&a).await.unwrap();
    assert_eq!(after.messages, context.messages);
    assert_eq!(after.tail, context.tail, "the open call's placeholder");
    assert_eq!(after.system.as_deref(), Some("sys"));
    assert_eq!(after.current_turn_id, "turn_0004");
    let result = ingest(
        store.as_ref(),
        &a,
        &[NewEvent::tool_result("open", json!("done"))],
    )
    .await;
    assert_eq!(result.traces[0].turn_id, "turn_0004", "the call survived");
}

/// The provider's usage report counts from an agent's very first write,
/// and after a restart: the prompt's size is measured from it.
pub async fn usage_reports_count_from_the_first_write<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("usage");
    let usage = Usage {
        prompt_tokens: 1000,
        completion_tokens: 20,
        total_tokens: 1020,
        // What Engram added to that prompt is kept with the report.
        engram_added_tokens: 300,
    };
    store
        .ingest(&a, &[NewEvent::user("hello")], Some(usage), Some("m"), None)
        .await
        .expect("ingest");
    let report = store.context(&a).await.expect("context").report;
    assert_eq!(report.map(|(u, _)| u.prompt_tokens), Some(1000));
    let store = h.reopen(store).await;
    let context = store.context(&a).await.expect("context");
    assert_eq!(context.report.map(|(u, _)| u.prompt_tokens), Some(1000));
    assert_eq!(
        context.report.map(|(u, _)| u.carried_prompt_tokens()),
        Some(700)
    );
    assert_eq!(context.last_model.as_deref(), Some("m"));
}
