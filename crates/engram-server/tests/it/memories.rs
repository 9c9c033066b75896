//! Managing a user's facts over gRPC: a correction or a deletion in the
//! user's scope reaches the conversations the fact came from; a pinned
//! fact is in every conversation's prompt; nothing of a deleted fact is
//! left on disk.

use crate::common;

use common::{TestServer, user};
use engram_proto::pb;
use engram_proto::pb::memory_scope::Scope as S;

fn scope(s: S) -> Option<pb::MemoryScope> {
    Some(pb::MemoryScope { scope: Some(s) })
}

fn ana() -> Option<pb::MemoryScope> {
    scope(S::UserId("ana".into()))
}

async fn facts_of(c: &mut common::Client, scope: Option<pb::MemoryScope>) -> Vec<pb::SemanticItem> {
    c.list_memories(pb::ListMemoriesRequest {
        scope,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .memories
}

async fn prompt(c: &mut common::Client, agent: &str, text: &str) -> pb::PrepareRequestResponse {
    c.prepare_request(pb::PrepareRequestRequest {
        agent_id: agent.into(),
        user_id: "ana".into(),
        user_input: Some(user(text)),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

fn all_text(p: &pb::PrepareRequestResponse) -> String {
    p.messages
        .iter()
        .map(|m| m.content.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn a_users_fact_corrected_pinned_or_deleted_reaches_every_conversation() {
    let answer = common::summary_with_fact;
    let (base, _) = common::fake_llm(vec![
        (200, answer("The user lives in Lisbon")),
        (200, answer("The user collects stamps")),
    ])
    .await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    common::compacted_conversation(&mut c, "ana", "talk-1", "hello").await;
    let folded = facts_of(&mut c, ana()).await;
    assert_eq!(folded.len(), 1, "{folded:?}");
    assert_eq!(folded[0].origin(), pb::MemoryOrigin::Compaction);
    let id = folded[0].id.clone();

    // Corrected in the user's scope: the conversation it came from says so
    // at its next prompt.
    let updated = c
        .update_memory(pb::UpdateMemoryRequest {
            scope: ana(),
            id: id.clone(),
            text: Some("The user lives in Berlin".into()),
            expected_version: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .memory
        .unwrap();
    assert_eq!(
        (updated.version, updated.origin()),
        (2, pb::MemoryOrigin::Client)
    );
    let shown = all_text(&prompt(&mut c, "talk-1", "where do I live?").await);
    assert!(
        shown.contains(") The user lives in Berlin") && !shown.contains("Lisbon"),
        "{shown}"
    );

    // Pinned and written by a client: in a new conversation's system
    // message, found by the user's recall.
    c.add_memories(pb::AddMemoriesRequest {
        scope: ana(),
        memories: vec![
            pb::NewMemory {
                text: "Allergic to peanuts".into(),
                pinned: true,
                ..Default::default()
            },
            pb::NewMemory {
                text: "Code word okapi-4417".into(),
                ..Default::default()
            },
        ],
    })
    .await
    .unwrap();
    let p = prompt(&mut c, "talk-2", "hi again").await;
    let system = &p.messages[0];
    assert_eq!(system.role(), pb::Role::System);
    assert!(
        system.content.contains("## pinned facts (user)")
            && system.content.contains("- (since ")
            && system.content.contains(") Allergic to peanuts"),
        "{}",
        system.content
    );
    assert!(p.blocks.is_empty(), "no block of its own: {:?}", p.blocks);
    let found = c
        .retrieve(pb::RetrieveRequest {
            user_id: "ana".into(),
            query: "okapi-4417".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let semantic = found.bundle.unwrap().semantic;
    assert!(
        semantic.iter().any(|f| f.fact == "Code word okapi-4417"),
        "{semantic:?}"
    );

    // Deleted in the user's scope: gone from the conversation it came
    // from, from the user's recall, and from every file.
    c.delete_memory(pb::DeleteMemoryRequest {
        scope: ana(),
        id: id.clone(),
        expected_version: 2,
    })
    .await
    .unwrap();
    let talk1 = facts_of(&mut c, scope(S::AgentId("talk-1".into()))).await;
    assert!(talk1.is_empty(), "{talk1:?}");
    let shown = all_text(&prompt(&mut c, "talk-1", "and now?").await);
    assert!(!shown.contains("Berlin"), "{shown}");
    let history = c
        .get_memory_history(pb::GetMemoryHistoryRequest {
            scope: ana(),
            id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .versions;
    assert_eq!(history.len(), 3);
    assert!(history.iter().all(|v| v.fact.is_empty()));
    for word in ["Berlin", "Lisbon"] {
        let left = common::files_holding(server.data_dir.path(), word.as_bytes());
        assert!(left.is_empty(), "{word} is still in {left:?}");
    }

    // Deleting a conversation's own copy of a fact only it said deletes
    // the user's fact too.
    common::compacted_conversation(&mut c, "ana", "talk-3", "hello").await;
    let of_user = |facts: Vec<pb::SemanticItem>| -> Vec<String> {
        facts.into_iter().map(|f| f.fact).collect()
    };
    assert!(
        of_user(facts_of(&mut c, ana()).await).contains(&"The user collects stamps".to_owned())
    );
    let own = facts_of(&mut c, scope(S::AgentId("talk-3".into()))).await;
    c.delete_memory(pb::DeleteMemoryRequest {
        scope: scope(S::AgentId("talk-3".into())),
        id: own[0].id.clone(),
        expected_version: 0,
    })
    .await
    .unwrap();
    let left = of_user(facts_of(&mut c, ana()).await);
    assert!(!left.iter().any(|f| f.contains("stamps")), "{left:?}");
    assert!(common::files_holding(server.data_dir.path(), b"stamps").is_empty());
}
