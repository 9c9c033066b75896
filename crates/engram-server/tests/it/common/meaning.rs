//! A small conversation and questions that share no word with the
//! message that answers them: what the tests of search by meaning ask,
//! with the real local model, on either backend.

use engram_proto::pb;

use super::{Client, event, ingest_req};

/// The local model as `make models` installs it.
pub fn model_dir() -> String {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
    assert!(
        dir.join("model.safetensors").exists(),
        "{} is missing: `make models` installs the local model",
        dir.display()
    );
    dir.display().to_string()
}

pub const TALK: [&str; 8] = [
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
pub const PARAPHRASES: [(&str, usize); 4] = [
    ("Do they own a dog?", 0),
    ("Which colour did the cooking room become?", 2),
    ("Is someone learning a musical instrument?", 3),
    ("Who is having a wedding?", 5),
];

pub async fn tell(c: &mut Client, agent: &str) {
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

pub fn ask(agent: &str, query: &str, wait_ms: u32) -> pb::SearchHistoryRequest {
    pb::SearchHistoryRequest {
        agent_id: agent.into(),
        query: query.into(),
        wait_for_index_ms: wait_ms,
        ..Default::default()
    }
}

pub async fn assert_paraphrases_found(c: &mut Client, agent: &str) {
    assert_paraphrases_found_by(c, agent, "all-MiniLM-L6-v2#").await;
}

pub async fn assert_paraphrases_found_by(c: &mut Client, agent: &str, model: &str) {
    for (question, want) in PARAPHRASES {
        let page = c
            .search_history(ask(agent, question, 30_000))
            .await
            .unwrap()
            .into_inner();
        let index = page.index.unwrap();
        assert_eq!((index.embedded, index.pending), (8, 0), "{question}");
        assert!(index.model.starts_with(model), "{}", index.model);
        let top = &page.matches[0];
        assert_eq!(
            top.trace.as_ref().unwrap().content,
            TALK[want],
            "{question}"
        );
        assert_eq!(top.matched_by, pb::MatchedBy::Semantic as i32, "{question}");
    }
}
