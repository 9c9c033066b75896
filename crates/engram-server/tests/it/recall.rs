//! Auto-recall over gRPC: after a compaction archived what was said, a new
//! question gets the relevant memories attached to it as a
//! `[MEMORY:RECALLED]` block; every message before it keeps its bytes, the
//! turn's later prompts send the same block, and every format stays valid.

use crate::common;

use common::*;
use engram_proto::pb;

const FORMATS: [(pb::RenderFormat, &str); 4] = [
    (pb::RenderFormat::OpenaiChat, "openai-chat"),
    (pb::RenderFormat::OpenaiResponses, "openai-responses"),
    (pb::RenderFormat::AnthropicMessages, "anthropic-messages"),
    (pb::RenderFormat::Gemini, "gemini"),
];

const MAY_8_2023: f64 = 1_683_554_160.0;

fn ask(question: Option<&str>, recall: Option<bool>) -> pb::PrepareRequestRequest {
    pb::PrepareRequestRequest {
        agent_id: "pal".into(),
        system_prompt: "You are a helpful friend.".into(),
        user_input: question.map(|q| pb::TraceEvent {
            name: "Caroline".into(),
            ..user(q)
        }),
        model: "gpt-4o".into(),
        recall,
        ..Default::default()
    }
}

/// Twelve turns, the first about a dog, then compacted: the dog's turn is
/// in the archive only.
async fn remembered(c: &mut Client) {
    let talk = [
        "My dog is called Biscuit and he loves the beach.",
        "The train to work was late again.",
        "I started a pottery class on Mondays.",
        "My sister moved to Lisbon.",
        "We repainted the hallway green.",
        "I finished reading a long novel.",
        "Work is busy with the quarterly report.",
        "I tried a new curry recipe.",
        "The weather has been grey all week.",
        "I fixed the leaking kitchen tap.",
        "We are planning a trip in spring.",
        "I bought new running shoes.",
    ];
    for (i, text) in talk.iter().enumerate() {
        let at = MAY_8_2023 + i as f64 * 86_400.0;
        let said = |kind, name: &str, text: &str| pb::TraceEvent {
            name: name.into(),
            ts: Some(at),
            ..event(kind, text)
        };
        c.ingest(ingest_req(
            "pal",
            vec![
                said(pb::TraceType::User, "Caroline", text),
                said(pb::TraceType::Assistant, "Mel", "Tell me more!"),
            ],
        ))
        .await
        .unwrap();
    }
    let report = compact_now(c, "pal").await;
    assert!(report.performed, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_recalls_what_was_archived_and_the_prefix_stays_the_same() {
    let server = TestServer::start_with(&[("ENGRAM__EMBED__PROVIDER", "none")]).await;
    let mut c = server.client().await;
    let question = "What was the name of my dog again?";
    // Nothing compacted yet: nothing to recall, the prompt as it was.
    let young = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "young".into(),
            ..ask(Some(question), None)
        })
        .await
        .unwrap()
        .into_inner();
    assert!(young.recalled.is_empty());
    assert_eq!(young.messages.last().unwrap().content, question);
    remembered(&mut c).await;
    let with = c
        .prepare_request(ask(Some(question), None))
        .await
        .unwrap()
        .into_inner();
    let last = with.messages.last().unwrap();
    assert_eq!(last.role, pb::Role::User as i32);
    let (said, block) = last.content.split_once("\n\n").unwrap();
    assert_eq!(said, question);
    assert!(
        block.starts_with("[MEMORY:RECALLED]\n- (2023-05-08 13:56, turn_0001)\n"),
        "{block}"
    );
    assert!(
        block.contains("Caroline: My dog is called Biscuit and he loves the beach."),
        "{block}"
    );
    // What recall ranked is accounted for: shown, or left out and why;
    // nothing shown scores under the floor (a share of the best score).
    let report = with.recall.unwrap();
    let shown = with.recalled.len() as u32;
    let left = report.below_floor + report.already_shown + report.over_budget;
    assert_eq!(report.ranked, shown + left, "{report:?}");
    assert!(report.floor > 0.0, "{report:?}");
    assert!((report.floor - 0.2 * report.best_score).abs() < 1e-4);
    assert!(with.recalled.iter().all(|r| r.score >= report.floor));
    assert!(report.below_floor > 0, "the near-misses: {report:?}");
    let first = &with.recalled[0];
    assert_eq!(first.kind, pb::MemoryKind::Trace as i32);
    assert!(first.archived);
    assert_eq!(first.turn_ids, ["turn_0001"]);
    assert!(first.trace.as_ref().unwrap().content.contains("Biscuit"));

    // The same prompt without recall: every message but the question is
    // byte for byte the same, and the block's tokens are counted.
    let without = c
        .prepare_request(ask(None, Some(false)))
        .await
        .unwrap()
        .into_inner();
    assert!(without.recalled.is_empty());
    let n = with.messages.len();
    assert_eq!(without.messages.len(), n);
    assert_eq!(with.messages[..n - 1], without.messages[..n - 1]);
    assert_eq!(without.messages[n - 1].content, question);
    assert!(with.estimated_prompt_tokens > without.estimated_prompt_tokens + 10);

    // The turn goes on (a tool call and its result): its next prompt sends
    // the same block, though new traces were written meanwhile.
    c.ingest(ingest_req("pal", vec![tool_call("c1", "lookup")]))
        .await
        .unwrap();
    c.ingest(ingest_req(
        "pal",
        vec![tool_result("c1", "Biscuit is a beagle")],
    ))
    .await
    .unwrap();
    let next = c
        .prepare_request(ask(None, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.messages[n - 1], with.messages[n - 1]);
    assert_eq!(next.messages[..n - 1], with.messages[..n - 1]);
    assert_eq!(next.recalled, with.recalled);

    // Every provider's payload stays valid with the block in it.
    let mut payloads = vec![];
    for (format, name) in FORMATS {
        let p = c
            .prepare_request(pb::PrepareRequestRequest {
                render_format: format.into(),
                ..ask(None, None)
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            p.rendered_payload_json.contains("[MEMORY:RECALLED]"),
            "{name}"
        );
        payloads.push((format!("recalled {name}"), name, p.rendered_payload_json));
    }
    assert_valid_payloads(&payloads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_stays_within_its_tokens_and_can_be_turned_off() {
    let server = TestServer::start_with(&[
        ("ENGRAM__EMBED__PROVIDER", "none"),
        ("ENGRAM__RECALL__ENABLED", "false"),
        // Every memory ranked may go in: the budget alone decides.
        ("ENGRAM__RECALL__RELATIVE_FLOOR", "0"),
    ])
    .await;
    let mut c = server.client().await;
    remembered(&mut c).await;
    let question = "Tell me about my dog Biscuit";
    let off = c
        .prepare_request(ask(Some(question), None))
        .await
        .unwrap()
        .into_inner();
    assert!(off.recalled.is_empty(), "off in the config");
    assert_eq!(off.recall, None, "recall did not run");
    assert_eq!(off.messages.last().unwrap().content, question);

    let small = c
        .prepare_request(pb::PrepareRequestRequest {
            recall_max_tokens: Some(80),
            ..ask(None, Some(true))
        })
        .await
        .unwrap()
        .into_inner();
    let content = &small.messages.last().unwrap().content;
    let block = content.strip_prefix(question).unwrap();
    assert!(
        !small.recalled.is_empty() && block.contains("Biscuit"),
        "{block}"
    );
    let all = c
        .prepare_request(pb::PrepareRequestRequest {
            recall_max_tokens: Some(1500),
            ..ask(None, Some(true))
        })
        .await
        .unwrap()
        .into_inner();
    assert!(all.recalled.len() > small.recalled.len());
    let (small_left, all_left) = (small.recall.unwrap(), all.recall.unwrap());
    assert_eq!(small_left.below_floor, 0, "no floor: {small_left:?}");
    assert_eq!(
        small_left.over_budget - all_left.over_budget,
        (all.recalled.len() - small.recalled.len()) as u32,
        "what did not fit is counted"
    );
    assert!(
        small.estimated_prompt_tokens <= off.estimated_prompt_tokens + 80,
        "{} vs {}",
        small.estimated_prompt_tokens,
        off.estimated_prompt_tokens
    );
    let none = c
        .prepare_request(pb::PrepareRequestRequest {
            recall_max_tokens: Some(5),
            ..ask(None, Some(true))
        })
        .await
        .unwrap()
        .into_inner();
    assert!(none.recalled.is_empty(), "nothing fits in 5 tokens");
    let left = none.recall.unwrap();
    assert!(left.over_budget > 0, "{left:?}");
    assert_eq!(none.messages.last().unwrap().content, question);
}
