//! Token accounting: the usage a client reports for a prompt counts that
//! turn's recall block, which the next prompt does not carry. Engram takes
//! it off before the report drives the compaction trigger, so a client
//! that echoes Engram's own estimate as usage compacts no more often than
//! one that reports nothing.

use crate::common;

use common::*;
use engram_proto::pb;

/// A 3,000-token window: the recall block is a large share of it.
const SMALL: &[(&str, &str)] = &[
    ("ENGRAM__EMBED__PROVIDER", "none"),
    ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "3000"),
    ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "500"),
    ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
];

const TALK: [&str; 8] = [
    "My dog Biscuit loves the beach at Carcavelos and chases the waves.",
    "Biscuit the dog once swam after a gull at the beach.",
    "The beach near us is where Biscuit plays every morning.",
    "I started a pottery class on Mondays at the community hall.",
    "My sister moved to Lisbon last spring for a new job.",
    "We repainted the hallway green over the long weekend.",
    "I fixed the leaking kitchen tap with a new washer.",
    "We are planning a trip to the mountains in autumn.",
];

/// Drives `agent` through `turns` turns that each recall the dog, with the
/// usage `echo` says (Engram's estimate, or none); how many compactions
/// ran, and how many prompts carried a recall block.
async fn drive(c: &mut Client, agent: &str, turns: usize, echo: bool) -> (usize, usize) {
    for text in TALK {
        c.ingest(ingest_req(
            agent,
            vec![user(text), event(pb::TraceType::Assistant, "Lovely.")],
        ))
        .await
        .unwrap();
    }
    assert!(compact_now(c, agent).await.performed);
    let (mut compactions, mut with_block) = (0, 0);
    for t in 0..turns {
        let p = c
            .prepare_request(pb::PrepareRequestRequest {
                agent_id: agent.into(),
                user_input: Some(user(&format!(
                    "Turn {t}: what does my dog Biscuit do at the beach? Also, today I \
                     walked past the old bakery, bought bread and read the paper."
                ))),
                model: "small".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        compactions += usize::from(p.compaction.is_some_and(|r| r.performed));
        with_block += usize::from(!p.recalled.is_empty());
        let usage = echo.then(|| pb::Usage {
            prompt_tokens: p.estimated_prompt_tokens,
            completion_tokens: 20,
            total_tokens: p.estimated_prompt_tokens + 20,
        });
        c.ingest(pb::IngestRequest {
            usage,
            model: "small".into(),
            ..ingest_req(
                agent,
                vec![event(
                    pb::TraceType::Assistant,
                    "Biscuit chases the waves at the beach, as you told me.",
                )],
            )
        })
        .await
        .unwrap();
    }
    (compactions, with_block)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoing_the_estimate_as_usage_compacts_no_more_than_reporting_nothing() {
    let server = TestServer::start_with(SMALL).await;
    let mut c = server.client().await;
    let turns = 40;
    let (silent, _) = drive(&mut c, "silent", turns, false).await;
    let (echoed, with_block) = drive(&mut c, "echo", turns, true).await;
    // The case holds only if recall added to the prompts and the window
    // filled up.
    assert!(with_block > turns / 2, "{with_block} prompts with a block");
    assert!(silent > 0, "no compaction at all");
    assert!(
        echoed <= silent,
        "echoing the estimate: {echoed} compactions, reporting nothing: {silent}"
    );
}
