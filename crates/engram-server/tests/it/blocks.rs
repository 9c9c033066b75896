//! Memory blocks through the server: where and how they are shown in the
//! prompt, the prefix that stays the same until a block changes, the
//! share they may take, and concurrent edits.

use crate::common;

use common::{Client, TestServer, user};
use engram_proto::pb;
use engram_proto::pb::memory_scope::Scope as S;
use tonic::Code;

fn scope(s: S) -> Option<pb::MemoryScope> {
    Some(pb::MemoryScope { scope: Some(s) })
}

fn agent(id: &str) -> S {
    S::AgentId(id.into())
}

async fn put(c: &mut Client, s: S, label: &str, value: &str, description: &str) -> pb::MemoryBlock {
    // An agent's write binds it to the user; other scopes take none.
    let user_id = if matches!(s, S::AgentId(_)) {
        "ana"
    } else {
        ""
    };
    c.put_memory_block(pb::PutMemoryBlockRequest {
        scope: scope(s),
        label: label.into(),
        value: value.into(),
        description: Some(description.into()).filter(|d: &String| !d.is_empty()),
        user_id: user_id.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .block
    .unwrap()
}

fn edit(
    s: S,
    label: &str,
    edit: pb::block_edit::Edit,
    expected: Option<u64>,
) -> pb::EditMemoryBlockRequest {
    pb::EditMemoryBlockRequest {
        scope: scope(s),
        label: label.into(),
        edit: Some(pb::BlockEdit { edit: Some(edit) }),
        expected_version: expected,
        ..Default::default()
    }
}

async fn prompt(c: &mut Client, agent: &str, text: &str) -> pb::PrepareRequestResponse {
    c.prepare_request(pb::PrepareRequestRequest {
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
    .into_inner()
}

/// The messages of a rendered OpenAI payload.
fn messages(p: &pb::PrepareRequestResponse) -> Vec<serde_json::Value> {
    let payload: serde_json::Value = serde_json::from_str(&p.rendered_payload_json).unwrap();
    payload["messages"].as_array().unwrap().clone()
}

fn shown(p: &pb::PrepareRequestResponse) -> Vec<(String, String, u64, bool)> {
    p.blocks
        .iter()
        .map(|b| (b.scope.clone(), b.label.clone(), b.version, b.cut))
        .collect()
}

#[tokio::test]
async fn blocks_are_shown_in_order_and_the_prefix_holds_until_one_changes() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    put(&mut c, S::Global(true), "rules", "Be brief.", "house rules").await;
    put(&mut c, S::UserId("ana".into()), "human", "Name: Ana", "").await;
    put(&mut c, agent("chat-1"), "notes", "Likes tea.", "").await;
    c.edit_memory_block(edit(
        agent("chat-1"),
        "working_memory",
        pb::block_edit::Edit::JsonMergePatch(r#"{"step": 1}"#.into()),
        Some(0),
    ))
    .await
    .unwrap();

    let first = prompt(&mut c, "chat-1", "Hello").await;
    let system = messages(&first)[0]["content"].as_str().unwrap().to_owned();
    assert_eq!(
        system,
        "You are helpful.\n\n[MEMORY:BLOCKS]\n\
         ## rules (global): house rules\nBe brief.\n\n\
         ## human (user)\nName: Ana\n\n\
         ## notes (agent)\nLikes tea.\n\n\
         ## working_memory (agent)\n{\"step\":1}\n"
    );
    let versions = |v: &[(&str, &str, u64)]| -> Vec<(String, String, u64, bool)> {
        v.iter()
            .map(|(s, l, n)| (s.to_string(), l.to_string(), *n, false))
            .collect()
    };
    assert_eq!(
        shown(&first),
        versions(&[
            ("global", "rules", 1),
            ("user", "human", 1),
            ("agent", "notes", 1),
            ("agent", "working_memory", 1)
        ])
    );

    // No block changed: everything the first prompt sent is sent again,
    // byte for byte, with the new turn after it.
    let second = prompt(&mut c, "chat-1", "And then?").await;
    let (was, now) = (messages(&first), messages(&second));
    assert!(now.len() > was.len());
    assert_eq!(now[..was.len()], was[..], "the prefix is byte-stable");

    // A block changes: the system message says so, and the next prompt
    // lists the new version.
    c.edit_memory_block(edit(
        agent("chat-1"),
        "working_memory",
        pb::block_edit::Edit::JsonMergePatch(r#"{"step": 2}"#.into()),
        Some(1),
    ))
    .await
    .unwrap();
    let third = prompt(&mut c, "chat-1", "Next step").await;
    let system = messages(&third)[0]["content"].as_str().unwrap().to_owned();
    assert!(
        system.ends_with("## working_memory (agent)\n{\"step\":2}\n"),
        "{system}"
    );
    assert_eq!(
        shown(&third)[3],
        ("agent".into(), "working_memory".into(), 2, false)
    );
}

#[tokio::test]
async fn blocks_past_their_share_are_cut_with_a_warning() {
    let server = TestServer::start_with(&[("ENGRAM__BLOCKS__MAX_SHARE", "0.002")]).await;
    let mut c = server.client().await;
    let long = "All work and no play. ".repeat(200);
    put(&mut c, agent("chat-1"), "notes", &long, "").await;
    let p = prompt(&mut c, "chat-1", "Hello").await;
    let system = messages(&p)[0]["content"].as_str().unwrap().to_owned();
    assert!(system.contains("[… cut: "), "{system}");
    assert!(system.len() < long.len() / 2, "{} bytes", system.len());
    assert_eq!(shown(&p), [("agent".into(), "notes".into(), 1, true)]);
    assert!(
        p.warnings.iter().any(|w| w.contains("blocks.max_share")),
        "{:?}",
        p.warnings
    );
}

#[tokio::test]
async fn of_concurrent_edits_from_one_version_exactly_one_wins() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    put(&mut c, agent("chat-1"), "notes", "start", "").await;
    let mut edits = vec![];
    for n in 0..8 {
        let mut c = server.client().await;
        edits.push(tokio::spawn(async move {
            let append = pb::block_edit::Edit::Append(format!("writer {n}"));
            c.edit_memory_block(edit(agent("chat-1"), "notes", append, Some(1)))
                .await
        }));
    }
    let mut won = vec![];
    for e in edits {
        match e.await.unwrap() {
            Ok(r) => won.push(r.into_inner().block.unwrap()),
            Err(status) => assert_eq!(status.code(), Code::Aborted, "{status:?}"),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    let block = c
        .get_memory_block(pb::GetMemoryBlockRequest {
            scope: scope(agent("chat-1")),
            label: "notes".into(),
            include_history: true,
        })
        .await
        .unwrap()
        .into_inner();
    let current = block.block.unwrap();
    assert_eq!((current.version, &current.value), (2, &won[0].value));
    assert_eq!(block.history.len(), 2);
}

/// An agent erased with its user and made again starts its blocks over at
/// version 1: its prompt shows the new blocks, never the erased ones.
#[tokio::test]
async fn an_agent_made_again_never_shows_the_erased_blocks() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    put(&mut c, agent("chat-1"), "notes", "the erased secret", "").await;
    let before = prompt(&mut c, "chat-1", "Hello").await;
    assert!(
        messages(&before)[0]["content"]
            .as_str()
            .unwrap()
            .contains("erased secret")
    );
    c.delete_user(pb::DeleteUserRequest {
        user_id: "ana".into(),
    })
    .await
    .unwrap();
    put(&mut c, agent("chat-1"), "notes", "a new start", "").await;
    let after = prompt(&mut c, "chat-1", "Hello").await;
    let system = messages(&after)[0]["content"].as_str().unwrap().to_owned();
    assert!(
        system.contains("a new start") && !system.contains("secret"),
        "{system}"
    );
}

/// Working memory is not part of the transcript: a compaction leaves it
/// as it is, and the summarizer (a local test LLM) is shown it.
#[tokio::test]
async fn working_memory_survives_compaction_and_reaches_the_summarizer() {
    let answer = r#"{"episodic_summary": "Reviewed files.", "semantic_facts": []}"#;
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(1 << 20));
    let (base, _, bodies, _) =
        common::fake_llm_recording(vec![(200, common::completion(answer))], open).await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    let patch = pb::block_edit::Edit::JsonMergePatch(r#"{"files_reviewed": 3}"#.into());
    c.edit_memory_block(edit(agent("wm"), "working_memory", patch, Some(0)))
        .await
        .unwrap();
    common::turns(&mut c, "wm", 5).await;
    let report = common::compact_now(&mut c, "wm").await;
    assert!(report.performed, "{report:?}");

    let asked = bodies.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "one summary asked for");
    let request: serde_json::Value = serde_json::from_str(&asked[0]).unwrap();
    let said = request["messages"][1]["content"].as_str().unwrap();
    assert!(
        said.starts_with("Working memory of the task at hand")
            && said.contains(r#"{"files_reviewed":3}"#),
        "{said}"
    );

    let kept = c
        .get_memory_block(pb::GetMemoryBlockRequest {
            scope: scope(agent("wm")),
            label: "working_memory".into(),
            include_history: false,
        })
        .await
        .unwrap()
        .into_inner()
        .block
        .unwrap();
    assert_eq!(
        (kept.version, kept.value.as_str()),
        (1, r#"{"files_reviewed":3}"#)
    );
    let p = prompt(&mut c, "wm", "Which file next?").await;
    let system = messages(&p)[0]["content"].as_str().unwrap().to_owned();
    assert!(
        system.contains("## working_memory (agent)\n{\"files_reviewed\":3}"),
        "{system}"
    );
    let all = serde_json::to_string(&messages(&p)).unwrap();
    assert!(all.contains("Reviewed files."), "and the summary: {all}");
}
