//! Search by meaning with the real local model (all-MiniLM-L6-v2, as
//! `make models` installs it): paraphrases that share no word with what
//! was said find it; vectors are built in the background, survive kill -9
//! and are rebuilt for what they miss. The same model behind a local
//! OpenAI-compatible `/v1/embeddings` endpoint serves `provider = "http"`.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::meaning::*;
use common::*;
use engram_proto::pb;
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paraphrases_sharing_no_word_find_their_message() {
    let model = model_dir();
    let server = TestServer::start_with(&[("ENGRAM__EMBED__MODEL_DIR", &model)]).await;
    let mut c = server.client().await;
    tell(&mut c, "talk").await;
    assert_paraphrases_found(&mut c, "talk").await;
    assert!(
        server
            .agents_dir()
            .join("talk/.index/vectors.bin")
            .is_file()
    );
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "talk".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let index = stats.index.unwrap();
    assert_eq!((index.items, index.embedded, index.pending), (8, 8, 0));
    assert!(index.model.starts_with("all-MiniLM-L6-v2#"));

    // Words still rank first where they match; meaning adds to them.
    let page = c
        .search_history(ask("talk", "flight cancelled", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.matches[0].trace.as_ref().unwrap().content, TALK[1]);
    assert_eq!(page.matches[0].matched_by, pb::MatchedBy::Both as i32);

    let bad = c
        .search_history(ask("talk", "dog", 60_001))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_are_rebuilt_after_kill_9_and_for_items_indexed_without_a_model() {
    let model = model_dir();
    let dir = tempfile::tempdir().unwrap();
    // Indexed by words only first: no model.
    let mut d = Daemon::spawn(dir.path(), &[("ENGRAM__EMBED__PROVIDER", "none")]);
    let mut c = d.client().await;
    tell(&mut c, "talk").await;
    let page = c
        .search_history(ask("talk", "puppy", 0))
        .await
        .unwrap()
        .into_inner();
    let index = page.index.unwrap();
    assert_eq!(
        (index.items, index.embedded, index.model.as_str()),
        (8, 0, "")
    );
    d.kill9();

    // With the model, every item the words index holds is embedded.
    let mut d = Daemon::spawn(dir.path(), &[("ENGRAM__EMBED__MODEL_DIR", &model)]);
    let mut c = d.client().await;
    assert_paraphrases_found(&mut c, "talk").await;
    // More said, then killed whether or not the indexer got to it.
    c.ingest(ingest_req(
        "talk",
        vec![event(
            pb::TraceType::User,
            "We bought a sailboat for the lake.",
        )],
    ))
    .await
    .unwrap();
    d.kill9();

    let d = Daemon::spawn(dir.path(), &[("ENGRAM__EMBED__MODEL_DIR", &model)]);
    let mut c = d.client().await;
    let page = c
        .search_history(ask("talk", "Did anyone purchase a boat?", 30_000))
        .await
        .unwrap()
        .into_inner();
    let index = page.index.unwrap();
    assert_eq!((index.items, index.embedded, index.pending), (9, 9, 0));
    assert_eq!(
        page.matches[0].trace.as_ref().unwrap().content,
        "We bought a sailboat for the lake."
    );
}

/// A local OpenAI-compatible `POST /v1/embeddings` computing with the real
/// local model; the first `outages` requests get a 503. Counts requests.
async fn embeddings_endpoint(outages: usize) -> (String, Arc<AtomicUsize>) {
    let model =
        Arc::new(engram_embed::LocalModel::load(std::path::Path::new(&model_dir())).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&requests);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let n = count.fetch_add(1, Ordering::SeqCst);
            let model = Arc::clone(&model);
            tokio::spawn(async move {
                let (head, body) = read_request(&mut stream).await.expect("a whole request");
                assert!(head.starts_with("POST /v1/embeddings "), "{head}");
                let (status, answer) = if n < outages {
                    (503, "{}".to_owned())
                } else {
                    let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    assert_eq!(request["model"], "minilm");
                    let inputs: Vec<String> = request["input"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t.as_str().unwrap().to_owned())
                        .collect();
                    // As a separate service would: not as this process's
                    // background work, which holds back while the server
                    // under test has a call in flight (the search waiting
                    // for this very answer).
                    let vectors =
                        tokio::task::spawn_blocking(move || model.embed_blocking(&inputs))
                            .await
                            .unwrap()
                            .unwrap();
                    let data: Vec<serde_json::Value> = vectors
                        .iter()
                        .enumerate()
                        .map(|(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}))
                        .collect();
                    (
                        200,
                        serde_json::json!({"object": "list", "data": data}).to_string(),
                    )
                };
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    (base, requests)
}

fn http_embedder(base_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ENGRAM__EMBED__PROVIDER", "http".into()),
        ("ENGRAM__EMBED__BASE_URL", base_url.into()),
        ("ENGRAM__EMBED__MODEL", "minilm".into()),
        ("ENGRAM__EMBED__DIMENSIONS", "384".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_embedder_finds_paraphrases_and_a_dead_one_leaves_the_words() {
    let (base, requests) = embeddings_endpoint(1).await;
    let env = http_embedder(&base);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = TestServer::start_with(&env).await;
    let mut c = server.client().await;
    tell(&mut c, "talk").await;
    // The first request's 503 is retried.
    assert_paraphrases_found_by(&mut c, "talk", "http:minilm").await;
    assert!(requests.load(Ordering::SeqCst) >= 2);

    // Nothing listens there: words still find what was said.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let env = http_embedder(&dead);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = TestServer::start_with(&env).await;
    let mut c = server.client().await;
    tell(&mut c, "talk").await;
    let page = c
        .search_history(ask("talk", "the puppy", 0))
        .await
        .unwrap()
        .into_inner();
    let index = page.index.unwrap();
    assert_eq!((index.embedded, index.model.as_str()), (0, "http:minilm"));
    assert_eq!(page.matches[0].trace.as_ref().unwrap().content, TALK[0]);
    assert_eq!(page.matches[0].matched_by, pb::MatchedBy::Lexical as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_rebuilds_every_agent_and_waits_for_a_stopped_server() {
    let model = model_dir();
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::spawn(dir.path(), &[("ENGRAM__EMBED__PROVIDER", "none")]);
    let mut c = d.client().await;
    tell(&mut c, "talk").await;
    tell(&mut c, "other").await;
    // An index by words only.
    c.search_history(ask("talk", "puppy", 0)).await.unwrap();
    let reindex = |agent: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_engramd"));
        cmd.arg("reindex")
            .env("ENGRAM__STORE__DATA_DIR", dir.path())
            .env("ENGRAM__EMBED__MODEL_DIR", &model)
            .env("ENGRAM__EMBED__BACKGROUND_PRIORITY", "normal")
            .env("ENGRAM__LOG__LEVEL", "warn");
        if let Some(agent) = agent {
            cmd.args(["--agent", agent]);
        }
        cmd.output().unwrap()
    };
    // Not while a server holds the data.
    let refused = reindex(None);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("in use by another engramd"), "{why}");
    d.kill9();

    // A broken index is rebuilt; every item gets a vector.
    std::fs::write(dir.path().join("agents/talk/.index/meta.json"), "{").unwrap();
    let done = reindex(None);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let out = String::from_utf8_lossy(&done.stdout);
    for agent in ["talk", "other"] {
        assert!(
            out.contains(&format!("{agent}: 8 items, 8 embedded (all-MiniLM-L6-v2#")),
            "{out}"
        );
    }
    let one = reindex(Some("other"));
    assert_eq!(
        String::from_utf8_lossy(&one.stdout).lines().count(),
        1,
        "one agent"
    );

    // The server finds every item embedded, without waiting.
    let d = Daemon::spawn(dir.path(), &[("ENGRAM__EMBED__MODEL_DIR", &model)]);
    let mut c = d.client().await;
    let page = c
        .search_history(ask("talk", "Do they own a dog?", 0))
        .await
        .unwrap()
        .into_inner();
    let index = page.index.unwrap();
    assert_eq!((index.embedded, index.pending), (8, 0));
    assert_eq!(page.matches[0].trace.as_ref().unwrap().content, TALK[0]);
}

/// engramd started from another directory, with the default (relative)
/// model_dir, finds the model in $XDG_DATA_HOME/engram/models; with none
/// there either, it searches by words and its log says where it looked,
/// as absolute paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_is_found_in_the_data_home_from_any_directory() {
    let model = model_dir();
    let (elsewhere, data, home) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    {
        let d = Daemon::spawn(data.path(), &[("ENGRAM__EMBED__PROVIDER", "none")]);
        tell(&mut d.client().await, "talk").await;
    }
    let reindex = |data_home: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_engramd"))
            .arg("reindex")
            .current_dir(elsewhere.path())
            .env("ENGRAM__STORE__DATA_DIR", data.path())
            .env("XDG_DATA_HOME", data_home)
            .env("HOME", home.path())
            .env("ENGRAM__LOG__LEVEL", "info")
            .output()
            .unwrap()
    };
    let words_only = reindex(home.path());
    assert!(words_only.status.success());
    let log = String::from_utf8_lossy(&words_only.stderr);
    let looked = elsewhere.path().canonicalize().unwrap();
    assert!(
        log.contains("search is by words only")
            && log.contains(&format!("{}/models/all-MiniLM-L6-v2", looked.display())),
        "{log}"
    );
    assert!(
        String::from_utf8_lossy(&words_only.stdout).contains("talk: 8 items, 0 embedded"),
        "{}",
        String::from_utf8_lossy(&words_only.stdout)
    );

    let models = home.path().join("share/engram/models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(&model, models.join("all-MiniLM-L6-v2")).unwrap();
    let found = reindex(&home.path().join("share"));
    let out = String::from_utf8_lossy(&found.stdout);
    assert!(
        out.contains("talk: 8 items, 8 embedded (all-MiniLM-L6-v2#"),
        "{out}\n{}",
        String::from_utf8_lossy(&found.stderr)
    );
}
