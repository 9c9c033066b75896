//! Hostile input against the real server: one message must not wedge its
//! agent or stall the others.

use crate::common;

use common::*;
use engram_proto::{METHODS, pb};

fn noise(len: usize) -> String {
    engram_chaos::hostile::base64_noise(0x9e37_79b9_7f4a_7c15, len)
}

fn prepare(agent: &str, system: &str, force: bool) -> pb::PrepareRequestRequest {
    pb::PrepareRequestRequest {
        agent_id: agent.into(),
        system_prompt: system.into(),
        model: "gpt-4o".into(),
        render_format: pb::RenderFormat::OpenaiChat.into(),
        force_compaction: force,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_characters_without_whitespace_leave_the_agent_usable() {
    // Room for a prompt of 3 MB, twice (messages and payload).
    let server = TestServer::start_with(&[("ENGRAM__SERVER__MAX_MESSAGE_BYTES", "16777216")]).await;
    let limit = 16 * 1024 * 1024;
    let mut c = server
        .client()
        .await
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    // A base64 blob of zeros and a minified file: no whitespace at all.
    c.ingest(ingest_req("blob", vec![user(&"A".repeat(1_000_000))]))
        .await
        .unwrap();
    c.ingest(ingest_req(
        "blob",
        vec![event(pb::TraceType::Assistant, &noise(1_000_000))],
    ))
    .await
    .unwrap();
    // The system prompt is stored before it is counted: a long one too.
    let system = noise(1_000_000);
    for force in [false, true] {
        let prompt = c
            .prepare_request(prepare("blob", &system, force))
            .await
            .unwrap()
            .into_inner();
        assert!(
            prompt.estimated_prompt_tokens > 300_000,
            "{}",
            prompt.estimated_prompt_tokens
        );
        assert!(prompt.rendered_payload_json.len() > 3_000_000);
    }
    compact_now(&mut c, "blob").await;
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "blob".into(),
            model: "gpt-4o".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        stats.estimated_tokens > 300_000,
        "{}",
        stats.estimated_tokens
    );
    // And the agent takes ordinary turns after it.
    let out = c
        .ingest(ingest_req("blob", vec![user("and now a normal question")]))
        .await
        .unwrap()
        .into_inner();
    assert!(!out.current_turn_id.is_empty());
}

/// Bytes that are not the method's message are the caller's mistake:
/// INVALID_ARGUMENT on every method, and the server carries on.
#[tokio::test]
async fn undecodable_requests_are_invalid_arguments() {
    let server = TestServer::start().await;
    // Field 99 as a group nested past prost's recursion limit (100).
    let nested: Vec<u8> = std::iter::repeat_n([0x9b, 0x06], 200).flatten().collect();
    // Tag 0 is never valid; noise after it.
    let random: Vec<u8> = std::iter::once(0)
        .chain(noise(512).bytes().map(|b| b.wrapping_mul(31)))
        .collect();
    let bodies: [(&str, Vec<u8>); 4] = [
        ("random bytes", random),
        ("a truncated varint", vec![0x08, 0xff]),
        ("invalid UTF-8 in agent_id", vec![0x0a, 0x02, 0xff, 0xfe]),
        ("groups nested 200 deep", nested),
    ];
    for method in METHODS {
        for (what, body) in &bodies {
            let err = call_raw(server.channel().await, method, body.clone())
                .await
                .expect_err(what);
            assert_eq!(
                err.code(),
                tonic::Code::InvalidArgument,
                "{method}, {what}: {err:?}"
            );
            // ImportMemory's only field is bytes: any bytes decode, and
            // are refused as no bundle.
            let bytes_only = method == "ImportMemory" && what.starts_with("invalid UTF-8");
            let refusal = if bytes_only {
                "bundle"
            } else {
                "not valid protobuf"
            };
            assert!(err.message().contains(refusal), "{err:?}");
        }
    }
    let mut c = server.client().await;
    c.ingest(ingest_req("after", vec![user("still here")]))
        .await
        .unwrap();
}
