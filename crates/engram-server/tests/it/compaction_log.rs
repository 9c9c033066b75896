//! ListCompactions: an agent's compaction log over gRPC and JSON, with a
//! summarizer over HTTP (a local fake) that first answers and then fails.

use crate::common;

use common::*;
use engram_proto::pb;
use tonic::Code;

async fn log(
    c: &mut Client,
    agent: &str,
    page_size: u32,
    token: &str,
) -> pb::ListCompactionsResponse {
    c.list_compactions(pb::ListCompactionsRequest {
        agent_id: agent.into(),
        page_size,
        page_token: token.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_says_when_why_and_what_each_compaction_did() {
    let answer = r#"{"episodic_summary": "Squares of 1 to 3 were computed.", "semantic_facts": [{"fact": "User likes squares", "confidence": 0.9, "salience": 0.7}]}"#;
    let (base, _) = fake_llm(vec![
        (200, completion(answer)),
        (500, "{\"error\":\"down\"}".into()),
    ])
    .await;
    let server = crate::json_api::http_server(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__LLM__MAX_RETRIES", "0"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    turns(&mut c, "logged", 5).await;
    assert!(log(&mut c, "logged", 0, "").await.compactions.is_empty());
    let before = now();
    let done = compact_now(&mut c, "logged").await;
    assert!(done.performed, "{done:?}");

    let page = log(&mut c, "logged", 0, "").await;
    let [record] = page.compactions.as_slice() else {
        panic!("one record: {page:?}");
    };
    assert_eq!((record.seq, record.outcome.as_str()), (1, "summarized"));
    assert!(record.at >= before && record.at <= now(), "{record:?}");
    assert!(record.duration_secs > 0.0);
    assert!(record.summarizer.contains("summarizer"), "{record:?}");
    let report = record.report.as_ref().unwrap();
    assert_eq!(report.trigger, "manual");
    assert_eq!(report.episodic_id, done.episodic_id);
    assert_eq!(report.turn_ids, done.turn_ids);
    assert_eq!(report.semantic_added, 1);
    assert_eq!(
        (report.tokens_before, report.tokens_after),
        (done.tokens_before, done.tokens_after)
    );
    assert!(report.tokens_after < report.tokens_before);
    assert!(page.next_page_token.is_empty());

    // Failures are kept with their reason; a prompt the endpoint's open
    // circuit turned away at once is not (it would fill the log).
    turns(&mut c, "logged", 3).await;
    for _ in 0..3 {
        assert!(!compact_now(&mut c, "logged").await.performed);
    }
    let open = compact_now(&mut c, "logged").await;
    assert!(open.error.contains("circuit open"), "{open:?}");
    let all = log(&mut c, "logged", 0, "").await.compactions;
    let seqs: Vec<u64> = all.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [4, 3, 2, 1], "newest first");
    assert_eq!(all[0].outcome, "failed");
    let failed = all[0].report.as_ref().unwrap();
    assert!(
        !failed.performed && failed.error.contains("500"),
        "{failed:?}"
    );
    assert_eq!(failed.tokens_before, failed.tokens_after, "nothing pruned");

    // Paged.
    let first = log(&mut c, "logged", 3, "").await;
    assert_eq!(first.compactions.len(), 3);
    assert_eq!(first.next_page_token, "2");
    let rest = log(&mut c, "logged", 3, &first.next_page_token).await;
    assert_eq!(
        rest.compactions.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1]
    );
    assert!(rest.next_page_token.is_empty());

    // The same over JSON.
    let http = reqwest::Client::new();
    let url = format!("http://{}/v1/ListCompactions", server.http.unwrap());
    let json: serde_json::Value = http
        .post(&url)
        .json(&serde_json::json!({"agent_id": "logged", "page_size": 1}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(json["compactions"][0]["seq"], "4", "{json}");
    assert_eq!(json["compactions"][0]["report"]["trigger"], "manual");
    assert_eq!(json["nextPageToken"], "4", "{json}");

    // Refusals.
    let refused = |agent: &str, token: &str| pb::ListCompactionsRequest {
        agent_id: agent.into(),
        page_token: token.into(),
        ..Default::default()
    };
    let err = c.list_compactions(refused("nobody", "")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = c
        .list_compactions(refused("bad id!", ""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    for token in ["x", "0", "-1", "99999999999999999999999"] {
        let err = c
            .list_compactions(refused("logged", token))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{token}: {err:?}");
    }
    c.delete_agent(pb::DeleteAgentRequest {
        agent_id: "logged".into(),
    })
    .await
    .unwrap();
    let err = c.list_compactions(refused("logged", "")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "gone with its agent");
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}
