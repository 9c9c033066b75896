//! Search by meaning with the real local model (all-MiniLM-L6-v2, as
//! `make models` installs it): paraphrases that share no word with what
//! was said find it; vectors are built in the background, survive kill -9
//! and are rebuilt for what they miss.

mod common;

use common::*;
use engram_proto::pb;

fn model_dir() -> String {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
    assert!(
        dir.join("model.safetensors").exists(),
        "{} is missing: `make models` installs the local model",
        dir.display()
    );
    dir.display().to_string()
}

const TALK: [&str; 8] = [
    "I adopted a puppy from the shelter last weekend.",
    "My flight to Lisbon got cancelled because of the storm.",
    "We finally repainted the kitchen a pale yellow.",
    "I started taking piano lessons on Tuesday evenings.",
    "The quarterly report is due next Friday.",
    "My sister is getting married in October.",
    "I've been running five kilometres every morning.",
    "Our basement flooded after the heavy rain.",
];

/// Questions that share no word (after stop words and stemming) with the
/// message that answers them, and that message's index in `TALK`.
const PARAPHRASES: [(&str, usize); 4] = [
    ("Do they own a dog?", 0),
    ("Which colour did the cooking room become?", 2),
    ("Is someone learning a musical instrument?", 3),
    ("Who is having a wedding?", 5),
];

async fn tell(c: &mut Client, agent: &str) {
    for (i, text) in TALK.iter().enumerate() {
        let kind = if i % 2 == 0 {
            pb::TraceType::User
        } else {
            pb::TraceType::Assistant
        };
        c.ingest(ingest_req(agent, vec![event(kind, text)]))
            .await
            .unwrap();
    }
}

fn ask(agent: &str, query: &str, wait_ms: u32) -> pb::SearchHistoryRequest {
    pb::SearchHistoryRequest {
        agent_id: agent.into(),
        query: query.into(),
        wait_for_index_ms: wait_ms,
        ..Default::default()
    }
}

async fn assert_paraphrases_found(c: &mut Client, agent: &str) {
    for (question, want) in PARAPHRASES {
        let page = c
            .search_history(ask(agent, question, 30_000))
            .await
            .unwrap()
            .into_inner();
        let index = page.index.unwrap();
        assert_eq!((index.embedded, index.pending), (8, 0), "{question}");
        assert!(
            index.model.starts_with("all-MiniLM-L6-v2#"),
            "{}",
            index.model
        );
        let top = &page.matches[0];
        assert_eq!(
            top.trace.as_ref().unwrap().content,
            TALK[want],
            "{question}"
        );
        assert_eq!(top.matched_by, pb::MatchedBy::Semantic as i32, "{question}");
    }
}

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
