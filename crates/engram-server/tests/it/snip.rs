//! The snip tier of `summarize` over gRPC: old messages that carry
//! nothing for the model leave the prompt, never the storage.

use crate::common;
use crate::strategies::{small_with_failing_llm, tiny};

use common::*;
use engram_proto::pb;

/// The snip tier of `summarize`: a blank assistant message and a tool
/// result repeating an earlier one word for word leave the prompt (the
/// repeat becomes a reference to the first call); the raw traces keep
/// both, and the cheaper tier answered the trigger, so nothing was
/// summarized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snip_drops_what_carries_nothing_from_the_prompt_not_from_storage() {
    let (server, llm) = small_with_failing_llm(&[("ENGRAM__POLICY__RAW_TAIL_TURNS", "1")]).await;
    let mut c = server.client().await;
    let status = "service healthy; queue depth nominal; all replicas answering ".repeat(160);
    for t in 1..=4 {
        c.ingest(ingest_req(
            "snip",
            vec![
                user(&format!("status check {t}")),
                tool_call(&format!("s{t}"), "status"),
                tool_result(&format!("s{t}"), &status),
                // A model's blank answer, asked again.
                event(pb::TraceType::Assistant, "\n"),
                event(pb::TraceType::Assistant, "All good."),
            ],
        ))
        .await
        .unwrap();
    }
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            render_format: pb::RenderFormat::OpenaiChat.into(),
            ..tiny("snip", Some("and now?"), "")
        })
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.clone().unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(
        (report.steps.as_slice(), report.strategy.as_str()),
        (&["snip".to_owned()][..], "summarize")
    );
    assert_eq!(p.epoch, 1);
    let results: Vec<&str> = p
        .messages
        .iter()
        .filter(|m| m.role == pb::Role::Tool as i32)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(results.len(), 4, "every call keeps its result");
    assert_eq!(results[0], status, "the first shown whole");
    for r in &results[1..3] {
        assert!(r.starts_with("[same result as call s1 above"), "{r}");
    }
    assert_eq!(results[3], status, "the kept turn is not snipped");
    let empty = p
        .messages
        .iter()
        .filter(|m| {
            m.role == pb::Role::Assistant as i32
                && m.content.trim().is_empty()
                && m.tool_calls.is_empty()
        })
        .count();
    assert_eq!(empty, 1, "the kept turn's only");
    assert_valid_payloads(&[("snipped".into(), "openai-chat", p.rendered_payload_json)]);
    // The traces are as they were stored.
    let traces = all_traces(&mut c, "snip").await;
    assert_eq!(
        traces
            .iter()
            .filter(|t| t.content == "\n" && t.trace_type == pb::TraceType::Assistant as i32)
            .count(),
        4
    );
    assert!(llm.lock().unwrap().is_empty(), "nothing was summarized");
    assert!(!server.agents_dir().join("snip/episodic.jsonl").exists());
}
