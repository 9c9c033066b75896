//! Users over gRPC: ListAgents by user, DeleteUser leaving nothing of the
//! user on disk.

use crate::common;

use common::{TestServer, ingest_req, user};
use engram_proto::pb;
use engram_proto::pb::memory_scope::Scope as S;
use tonic::Code;

/// Text only the erased user's data holds.
const SECRET: &str = "walrussecret";

fn scope(s: S) -> Option<pb::MemoryScope> {
    Some(pb::MemoryScope { scope: Some(s) })
}

fn list(user_id: &str, page_size: u32, page_token: &str) -> pb::ListAgentsRequest {
    pb::ListAgentsRequest {
        user_id: user_id.into(),
        page_size,
        page_token: page_token.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_users_agents_are_listed_and_erased_whole() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    for agent in ["ana-b", "ana-a"] {
        c.ingest(pb::IngestRequest {
            user_id: "ana".into(),
            ..ingest_req(agent, vec![user(&format!("my {SECRET} here"))])
        })
        .await
        .unwrap();
    }
    // Bound by a prompt, and by a block write.
    c.prepare_request(pb::PrepareRequestRequest {
        agent_id: "ana-c".into(),
        user_id: "ana".into(),
        user_input: Some(user(SECRET)),
        ..Default::default()
    })
    .await
    .unwrap();
    c.put_memory_block(pb::PutMemoryBlockRequest {
        scope: scope(S::AgentId("ana-d".into())),
        label: "notes".into(),
        value: SECRET.into(),
        user_id: "ana".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    c.put_memory_block(pb::PutMemoryBlockRequest {
        scope: scope(S::UserId("ana".into())),
        label: "human".into(),
        value: format!("Ana, keeper of the {SECRET}"),
        ..Default::default()
    })
    .await
    .unwrap();
    c.ingest(pb::IngestRequest {
        user_id: "bo".into(),
        ..ingest_req("bo-a", vec![user("bo's own")])
    })
    .await
    .unwrap();

    // Pages of a user's agents, sorted.
    let first = c
        .list_agents(list("ana", 3, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.agent_ids, ["ana-a", "ana-b", "ana-c"]);
    let rest = c
        .list_agents(list("ana", 3, &first.next_page_token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (rest.agent_ids, rest.next_page_token),
        (vec!["ana-d".to_string()], String::new())
    );
    let err = c.list_agents(list("no/such", 0, "")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(!common::files_holding(server.data_dir.path(), SECRET.as_bytes()).is_empty());

    let erase = |user_id: &str| pb::DeleteUserRequest {
        user_id: user_id.into(),
    };
    let erased = c.delete_user(erase("ana")).await.unwrap().into_inner();
    assert_eq!(erased.agents_deleted, 4);
    let left = common::files_holding(server.data_dir.path(), SECRET.as_bytes());
    assert!(left.is_empty(), "the user's text is still in {left:?}");
    assert!(
        c.list_agents(list("ana", 0, ""))
            .await
            .unwrap()
            .into_inner()
            .agent_ids
            .is_empty()
    );
    let err = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "ana-a".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let blocks = c
        .list_memory_blocks(pb::ListMemoryBlocksRequest {
            scope: scope(S::UserId("ana".into())),
        })
        .await
        .unwrap();
    assert!(blocks.into_inner().blocks.is_empty());
    // Idempotent; a bad id is refused; the other user is untouched.
    assert_eq!(
        c.delete_user(erase("ana"))
            .await
            .unwrap()
            .into_inner()
            .agents_deleted,
        0
    );
    let err = c.delete_user(erase("")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let all = c.list_agents(list("", 0, "")).await.unwrap().into_inner();
    assert_eq!(all.agent_ids, ["bo-a"]);
}

/// A fact one conversation's compaction wrote is known to the next
/// conversation's summarizer (the test LLM sees it), and the user's store
/// holds each fact once, with the agents it came from.
#[tokio::test]
async fn a_users_facts_follow_it_into_the_next_conversation() {
    let answer = common::summary_with_fact;
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(1 << 20));
    let (base, _, bodies, _) = common::fake_llm_recording(
        vec![
            (200, answer("The user owns a red bicycle")),
            (200, answer("The user owns a red bicycle")),
        ],
        open,
    )
    .await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    for agent in ["talk-1", "talk-2"] {
        common::compacted_conversation(&mut c, "ana", agent, "hello").await;
    }
    let asked = bodies.lock().unwrap().clone();
    let second: serde_json::Value = serde_json::from_str(&asked[1]).unwrap();
    let said = second["messages"][1]["content"].as_str().unwrap();
    assert!(
        said.starts_with("Known facts:\n- [f1] (since ")
            && said.contains(") The user owns a red bicycle\n"),
        "{said}"
    );
    let facts =
        std::fs::read_to_string(server.data_dir.path().join("users/ana/facts.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(facts.lines().last().unwrap()).unwrap();
    let sources: Vec<&str> = last["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["agent_id"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["talk-1", "talk-2"], "{facts}");
}

async fn first_prompt(c: &mut common::Client, agent: &str, text: &str) -> Vec<serde_json::Value> {
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: agent.into(),
            user_id: "ana".into(),
            system_prompt: "You are helpful.".into(),
            user_input: Some(user(text)),
            model: "gpt-4o".into(),
            render_format: pb::RenderFormat::OpenaiChat.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let payload: serde_json::Value = serde_json::from_str(&p.rendered_payload_json).unwrap();
    payload["messages"].as_array().unwrap().clone()
}

/// A user's new conversation starts with the summary of the previous one
/// (the embedded summarizer's), and keeps that start byte for byte; with
/// `users.inject_last_summary` off it starts plain.
#[tokio::test]
async fn a_new_conversation_starts_with_the_previous_ones_summary() {
    for inject in [true, false] {
        let server = TestServer::start_with(&[
            ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
            (
                "ENGRAM__USERS__INJECT_LAST_SUMMARY",
                if inject { "true" } else { "false" },
            ),
        ])
        .await;
        let mut c = server.client().await;
        let said = "We booked the ferry to Naxos for May.";
        common::compacted_conversation(&mut c, "ana", "old", said).await;

        let first = first_prompt(&mut c, "new", "Where were we?").await;
        let start = first[1]["content"].as_str().unwrap_or_default();
        if !inject {
            assert_eq!(first[1]["content"], "Where were we?", "{first:?}");
            continue;
        }
        assert_eq!(first[0]["content"], "You are helpful.");
        assert!(
            start.starts_with(
                "[MEMORY:PREVIOUS CONVERSATION]\nThe user's previous conversation (old, "
            ),
            "{start}"
        );
        assert!(start.contains("Naxos"), "{start}");
        let next = first_prompt(&mut c, "new", "And the hotel?").await;
        assert_eq!(next[..first.len()], first[..], "the start stays");
    }
}

/// A brand-new conversation of a user recalls from the user's earlier one
/// at its first prompt: a message compacted away (archived) and one still
/// in that conversation's transcript, each saying which conversation.
#[tokio::test]
async fn a_new_conversation_recalls_the_users_earlier_one() {
    let server = TestServer::start_with(&[("ENGRAM__POLICY__RAW_TAIL_TURNS", "1")]).await;
    let mut c = server.client().await;
    c.ingest(pb::IngestRequest {
        user_id: "ana".into(),
        ..ingest_req(
            "trip",
            vec![user("I booked a kayak tour in Lofoten for June.")],
        )
    })
    .await
    .unwrap();
    common::turns(&mut c, "trip", 4).await;
    assert!(common::compact_now(&mut c, "trip").await.performed);
    c.ingest(ingest_req(
        "trip",
        vec![user("The kayak ferry leaves Bodø at nine.")],
    ))
    .await
    .unwrap();

    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "next".into(),
            user_id: "ana".into(),
            user_input: Some(user(
                "When does my kayak ferry leave, and where is my kayak tour?",
            )),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let last = p.messages.last().unwrap().content.clone();
    let (_, block) = last
        .split_once("[MEMORY:RECALLED]")
        .expect("a recall block");
    for said in ["kayak tour in Lofoten", "ferry leaves Bodø at nine"] {
        assert!(block.contains(said), "{said}: {block}");
    }
    assert!(block.contains("- (conversation trip, "), "{block}");
    assert!(
        p.recalled
            .iter()
            .all(|r| r.agent_id == "trip" || r.agent_id.is_empty()),
        "{:?}",
        p.recalled
    );
    assert!(p.recalled.iter().any(|r| r.agent_id == "trip"));

    // SearchHistory and Retrieve across the user's conversations.
    let found = c
        .search_history(pb::SearchHistoryRequest {
            user_id: "ana".into(),
            query: "kayak ferry".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let hits: Vec<(&str, &str)> = found
        .matches
        .iter()
        .map(|m| {
            (
                m.agent_id.as_str(),
                m.trace.as_ref().unwrap().content.as_str(),
            )
        })
        .collect();
    assert!(
        hits.contains(&("trip", "The kayak ferry leaves Bodø at nine.")),
        "{hits:?}"
    );
    assert!(
        hits.iter()
            .any(|(a, t)| *a == "next" && t.contains("When does my kayak ferry")),
        "{hits:?}"
    );
    let retrieved = c
        .retrieve(pb::RetrieveRequest {
            user_id: "ana".into(),
            query: "kayak tour".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        retrieved.recalled.iter().any(|r| r.agent_id == "trip"),
        "{:?}",
        retrieved.recalled
    );
    assert!(
        !retrieved.bundle.unwrap().episodic.is_empty(),
        "the last conversation's summary"
    );
    for bad in [
        pb::SearchHistoryRequest {
            user_id: "ana".into(),
            query: "kayak".into(),
            mode: pb::SearchMode::MatchAllWords.into(),
            ..Default::default()
        },
        pb::SearchHistoryRequest {
            user_id: "ana".into(),
            agent_id: "trip".into(),
            query: "kayak".into(),
            ..Default::default()
        },
    ] {
        let err = c.search_history(bad).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    }
}
