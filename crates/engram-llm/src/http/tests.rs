//! The real client against a local HTTP server speaking the OpenAI chat
//! completions API ([`crate::fake`]), scripted to succeed and to fail on
//! purpose.

use std::time::Duration;

use engram_core::NewEvent;
use engram_core::turns::assign_all;
use serde_json::json;
use tokio::net::TcpListener;

use super::*;
use crate::fake::{FakeLlm, Reply};

fn completion(content: &str) -> Reply {
    let body = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    });
    Reply::Http(200, vec![], body.to_string())
}

fn config(base_url: &str) -> HttpConfig {
    HttpConfig {
        api_key: Some("sk-test".into()),
        timeout: Duration::from_millis(300),
        max_retries: 2,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        ..HttpConfig::new(base_url, "summarizer-model")
    }
}

fn request_traces() -> Vec<engram_core::RawTrace> {
    assign_all([
        NewEvent::user("I prefer tea."),
        NewEvent::assistant("Noted."),
    ])
}

async fn summarize(fake: &FakeLlm, cfg: HttpConfig) -> Result<Summary, SummarizeError> {
    let traces = request_traces();
    let s = HttpSummarizer::new(cfg).unwrap();
    s.summarize(SummaryRequest {
        traces: &traces,
        known_facts: &[],
        focus: Some("preferences"),
        working_memory: None,
    })
    .await
    .inspect(|_| assert!(!fake.seen().is_empty(), "the answer came from the fake"))
}

const GOOD: &str =
    r#"{"episodic_summary": "User said they prefer tea.", "semantic_facts": ["User prefers tea"]}"#;

#[tokio::test]
async fn calls_exactly_the_configured_base_url() {
    let fake = FakeLlm::start(vec![completion(GOOD)]).await;
    let s = summarize(&fake, config(&fake.base_url)).await.unwrap();
    assert_eq!(s.episodic_summary, "User said they prefer tea.");
    assert_eq!(s.semantic_facts[0].fact, "User prefers tea");
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(seen[0].body["model"], "summarizer-model");
    assert_eq!(seen[0].body["response_format"]["type"], "json_object");
    let system = seen[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("JSON") && system.contains("preferences"),
        "{system}"
    );
    // A trailing slash or a deeper path is kept as given.
    assert_eq!(
        endpoint("http://h:1/v1/").unwrap().as_str(),
        "http://h:1/v1/chat/completions"
    );
    assert_eq!(
        endpoint("https://h/openai/deployments/x").unwrap().path(),
        "/openai/deployments/x/chat/completions"
    );
    assert!(endpoint("ftp://h/v1").is_err());
    assert!(endpoint("not a url").is_err());
}

#[tokio::test]
async fn fenced_json_and_prose_answers_are_read() {
    let fake = FakeLlm::start(vec![completion(&format!(
        "Here you go:\n```json\n{GOOD}\n```"
    ))])
    .await;
    let s = summarize(&fake, config(&fake.base_url)).await.unwrap();
    assert_eq!(s.semantic_facts.len(), 1);
    let fake = FakeLlm::start(vec![completion("The user said they like tea.")]).await;
    let s = summarize(&fake, config(&fake.base_url)).await.unwrap();
    assert_eq!(s.tags, [answer::UNSTRUCTURED_TAG]);
}

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let fake = FakeLlm::start(vec![
        Reply::Http(500, vec![], "{\"error\":\"boom\"}".into()),
        Reply::Http(503, vec![], "busy".into()),
        completion(GOOD),
    ])
    .await;
    summarize(&fake, config(&fake.base_url)).await.unwrap();
    assert_eq!(fake.seen().len(), 3);
}

#[tokio::test]
async fn persistent_server_errors_give_up_as_unavailable() {
    let fake = FakeLlm::start(vec![Reply::Http(
        500,
        vec![],
        "{\"error\":\"boom\"}".into(),
    )])
    .await;
    let err = summarize(&fake, config(&fake.base_url)).await.unwrap_err();
    assert!(
        matches!(&err, SummarizeError::Unavailable(m) if m.contains("500") && m.contains("3 attempts")),
        "{err}"
    );
    assert_eq!(fake.seen().len(), 3, "max_retries = 2 means three attempts");
}

#[tokio::test]
async fn too_many_requests_waits_for_retry_after() {
    let fake = FakeLlm::start(vec![
        Reply::Http(
            429,
            vec![("retry-after", "1".into())],
            "{\"error\":\"slow down\"}".into(),
        ),
        completion(GOOD),
    ])
    .await;
    let cfg = HttpConfig {
        backoff_max: Duration::from_secs(5),
        ..config(&fake.base_url)
    };
    summarize(&fake, cfg).await.unwrap();
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    let waited = seen[1].at - seen[0].at;
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After: 1 honoured, waited {waited:?}"
    );
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let fake = FakeLlm::start(vec![Reply::Http(
        401,
        vec![],
        "{\"error\":\"bad key\"}".into(),
    )])
    .await;
    let err = summarize(&fake, config(&fake.base_url)).await.unwrap_err();
    assert!(
        matches!(&err, SummarizeError::Rejected(m) if m.contains("401")),
        "{err}"
    );
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn an_endpoint_without_json_mode_is_asked_again_without_it() {
    let fake = FakeLlm::start(vec![
        Reply::Http(
            400,
            vec![],
            "{\"error\":\"unknown field response_format\"}".into(),
        ),
        completion(GOOD),
    ])
    .await;
    summarize(&fake, config(&fake.base_url)).await.unwrap();
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].body.get("response_format").is_none());
}

#[tokio::test]
async fn timeouts_slow_bodies_hangups_and_refusals_are_unavailable() {
    for script in [
        vec![Reply::Stall],
        vec![Reply::SlowBody],
        vec![Reply::Hangup],
    ] {
        let fake = FakeLlm::start(script.clone()).await;
        let err = summarize(&fake, config(&fake.base_url)).await.unwrap_err();
        assert!(
            matches!(err, SummarizeError::Unavailable(_)),
            "{script:?}: {err}"
        );
        assert_eq!(fake.seen().len(), 3, "{script:?} retried");
    }
    // Nothing listens there: the error names the configured endpoint.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let traces = request_traces();
    let s = HttpSummarizer::new(config(&url)).unwrap();
    let err = s
        .summarize(SummaryRequest {
            traces: &traces,
            known_facts: &[],
            focus: None,
            working_memory: None,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SummarizeError::Unavailable(m) if m.contains(&url)),
        "{err}"
    );
}

#[tokio::test]
async fn malformed_completions_are_bad_answers() {
    for body in [
        "not json",
        "{\"choices\": []}",
        "{\"choices\": [{\"message\": {\"content\": \"\"}}]}",
    ] {
        let fake = FakeLlm::start(vec![Reply::Http(200, vec![], body.into())]).await;
        let err = summarize(&fake, config(&fake.base_url)).await.unwrap_err();
        assert!(matches!(err, SummarizeError::BadAnswer(_)), "{body}: {err}");
    }
}
