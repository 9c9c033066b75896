//! The real client against the local fake ([`crate::fake`]) speaking the
//! OpenAI embeddings API, answering well and failing on purpose.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::Circuit;
use crate::fake::{FakeLlm, Reply};

/// An answer holding `vectors`, listed in the order given (each with its
/// input's `index`).
fn answer(vectors: &[(usize, Vec<f32>)]) -> Reply {
    let data: Vec<Value> = vectors
        .iter()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
        .collect();
    let body = json!({"object": "list", "data": data, "model": "m", "usage": {"prompt_tokens": 3, "total_tokens": 3}});
    Reply::Http(200, vec![], body.to_string())
}

fn error(status: u16) -> Reply {
    Reply::Http(status, vec![], r#"{"error":{"message":"no"}}"#.into())
}

fn config(base_url: &str) -> EmbedConfig {
    EmbedConfig {
        reach: Reach {
            api_key: Some("sk-embed".into()),
            timeout: Duration::from_millis(300),
            max_retries: 2,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
        },
        batch: 2,
        query_timeout: Duration::from_millis(200),
        circuit_failures: 2,
        circuit_cooldown: Duration::from_secs(60),
        ..EmbedConfig::new(base_url, "embedder-model", 3)
    }
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text {i}")).collect()
}

#[tokio::test]
async fn batches_go_to_the_embeddings_endpoint_and_come_back_in_input_order() {
    // Out of order within an answer; not unit length.
    let fake = FakeLlm::start(vec![
        answer(&[(1, vec![0.0, 2.0, 0.0]), (0, vec![3.0, 0.0, 4.0])]),
        answer(&[(0, vec![0.0, 0.0, -5.0])]),
    ])
    .await;
    let embedder = HttpEmbedder::new(config(&fake.base_url)).unwrap();
    assert_eq!(embedder.model(), "http:embedder-model");
    assert_eq!(embedder.dim(), 3);
    let vectors = embedder.embed(&texts(3)).await.unwrap();
    assert_eq!(
        vectors,
        vec![
            vec![0.6, 0.0, 0.8],
            vec![0.0, 1.0, 0.0],
            vec![0.0, 0.0, -1.0]
        ]
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 2, "three texts in batches of two");
    assert_eq!(seen[0].path, "/v1/embeddings");
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-embed"));
    assert_eq!(seen[0].body["model"], "embedder-model");
    assert_eq!(seen[0].body["encoding_format"], "float");
    assert_eq!(seen[0].body["input"], json!(["text 0", "text 1"]));
    assert_eq!(seen[1].body["input"], json!(["text 2"]));
}

#[tokio::test]
async fn server_errors_and_rate_limits_are_retried() {
    let fake = FakeLlm::start(vec![
        error(500),
        Reply::Http(429, vec![("retry-after", "0.04".into())], "{}".into()),
        answer(&[(0, vec![1.0, 0.0, 0.0])]),
    ])
    .await;
    let embedder = HttpEmbedder::new(config(&fake.base_url)).unwrap();
    let vectors = embedder.embed(&texts(1)).await.unwrap();
    assert_eq!(vectors, vec![vec![1.0, 0.0, 0.0]]);
    let seen = fake.seen();
    assert_eq!(seen.len(), 3);
    assert!(
        seen[2].at - seen[1].at >= Duration::from_millis(40),
        "Retry-After is honoured"
    );
}

#[tokio::test]
async fn malformed_answers_and_refusals_are_bad_answers_not_retried() {
    let malformed = [
        Reply::Http(200, vec![], "not json".into()),
        Reply::Http(200, vec![], r#"{"data": "x"}"#.into()),
        // Two vectors for one text, a short vector, a string, an index
        // out of range, a base64 string instead of numbers.
        answer(&[(0, vec![1.0, 0.0, 0.0]), (1, vec![1.0, 0.0, 0.0])]),
        answer(&[(0, vec![1.0, 0.0])]),
        Reply::Http(
            200,
            vec![],
            json!({"data": [{"index": 0, "embedding": [1.0, "x", 0.0]}]}).to_string(),
        ),
        answer(&[(7, vec![1.0, 0.0, 0.0])]),
        Reply::Http(
            200,
            vec![],
            json!({"data": [{"index": 0, "embedding": "AAAA"}]}).to_string(),
        ),
        error(400),
    ];
    for reply in malformed {
        let fake = FakeLlm::start(vec![reply.clone()]).await;
        let embedder = HttpEmbedder::new(config(&fake.base_url)).unwrap();
        let err = embedder.embed(&texts(1)).await.unwrap_err();
        assert!(matches!(err, EmbedError::BadAnswer(_)), "{reply:?}: {err}");
        assert_eq!(fake.seen().len(), 1, "{reply:?}: not retried");
        assert_eq!(
            embedder.circuit(),
            Circuit::Closed {
                consecutive_failures: 0
            },
            "an answer, however bad, is not an outage"
        );
    }
    // Two items claiming the same index.
    let fake = FakeLlm::start(vec![answer(&[
        (0, vec![1.0, 0.0, 0.0]),
        (0, vec![0.0, 1.0, 0.0]),
    ])])
    .await;
    let embedder = HttpEmbedder::new(config(&fake.base_url)).unwrap();
    let err = embedder.embed(&texts(2)).await.unwrap_err();
    assert!(err.to_string().contains("index 0 twice"), "{err}");
}

#[tokio::test]
async fn outages_exhaust_the_retries_then_open_the_circuit() {
    for outage in [Reply::Stall, Reply::SlowBody, Reply::Hangup, error(503)] {
        let fake = FakeLlm::start(vec![outage.clone()]).await;
        let embedder = HttpEmbedder::new(config(&fake.base_url)).unwrap();
        for round in 1..=2 {
            let err = embedder.embed(&texts(1)).await.unwrap_err();
            assert!(
                matches!(err, EmbedError::Unavailable(_)),
                "{outage:?}: {err}"
            );
            assert_eq!(fake.seen().len(), 3 * round, "{outage:?}: two retries");
        }
        assert!(
            matches!(embedder.circuit(), Circuit::Open { .. }),
            "{outage:?}"
        );
        let err = embedder.embed(&texts(1)).await.unwrap_err();
        assert!(err.to_string().contains("circuit open"), "{err}");
        let err = embedder.embed_query("q").await.unwrap_err();
        assert!(err.to_string().contains("circuit open"), "{err}");
        assert_eq!(fake.seen().len(), 6, "{outage:?}: not called while open");
    }
}

#[tokio::test]
async fn a_query_gets_one_short_attempt() {
    let fake = FakeLlm::start(vec![Reply::Stall, answer(&[(0, vec![0.0, 0.0, 2.0])])]).await;
    let embedder = HttpEmbedder::new(config(&fake.base_url)).unwrap();
    let started = Instant::now();
    let err = embedder.embed_query("where is my dog").await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
    assert!(
        waited < Duration::from_millis(300),
        "the query timeout (200 ms), not the batch timeout (300 ms) and its retries: {waited:?}"
    );
    assert_eq!(fake.seen().len(), 1, "no retry");
    let vector = embedder.embed_query("where is my dog").await.unwrap();
    assert_eq!(vector, vec![vec![0.0, 0.0, 1.0]]);
    assert_eq!(fake.seen()[1].body["input"], json!(["where is my dog"]));
}

#[test]
fn configuration_mistakes_are_refused() {
    for (base_url, model, dim) in [
        ("ftp://h/v1", "m", 3),
        ("not a url", "m", 3),
        ("http://h/v1", " ", 3),
        ("http://h/v1", "m", 0),
    ] {
        assert!(
            HttpEmbedder::new(EmbedConfig::new(base_url, model, dim)).is_err(),
            "{base_url} {model} {dim}"
        );
    }
}
