//! ExportMemory and ImportMemory through the server: a user's memory on
//! files exported, imported into PostgreSQL and back into files. Every
//! read a client makes (facts and their history, blocks, Retrieve, word
//! searches, the prompt) is the same byte for byte, ids and times
//! included, and both backends export the same bundle; on the same
//! backend, ranked searches are the same too.

use crate::common;

use common::*;
use engram_proto::pb;
use engram_proto::pb::memory_scope::Scope as S;

const USER: &str = "porter";
const AGENT: &str = "porter-conv";

/// The file store, as `replicas::replica_env` sets up PostgreSQL.
const FILES: &[(&str, &str)] = &[
    ("ENGRAM__EMBED__PROVIDER", "none"),
    ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
];

fn scope(s: S) -> Option<pb::MemoryScope> {
    Some(pb::MemoryScope { scope: Some(s) })
}

/// The user's memory: a compacted conversation (a summary and a fact), a
/// client's fact corrected and one deleted, a block of the agent and one
/// of the user.
async fn remember(c: &mut Client) {
    compacted_conversation(c, USER, AGENT, "I moved to Lisbon and I cycle to work").await;
    let added = c
        .add_memories(pb::AddMemoriesRequest {
            scope: scope(S::AgentId(AGENT.into())),
            memories: vec![
                pb::NewMemory {
                    text: "Prefers tea in the morning".into(),
                    pinned: true,
                    ..Default::default()
                },
                pb::NewMemory {
                    text: "Owns a red bicycle".into(),
                    ..Default::default()
                },
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    c.update_memory(pb::UpdateMemoryRequest {
        scope: scope(S::AgentId(AGENT.into())),
        id: added[1].id.clone(),
        text: Some("Owns a blue bicycle".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    c.delete_memory(pb::DeleteMemoryRequest {
        scope: scope(S::AgentId(AGENT.into())),
        id: added[0].id.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    for (s, label) in [
        (S::AgentId(AGENT.into()), "persona"),
        (S::UserId(USER.into()), "human"),
    ] {
        c.put_memory_block(pb::PutMemoryBlockRequest {
            scope: scope(s),
            label: label.into(),
            value: format!("{label}: cycles in Lisbon"),
            ..Default::default()
        })
        .await
        .unwrap();
    }
}

async fn export(c: &mut Client) -> Vec<u8> {
    let mut pieces = c
        .export_memory(pb::ExportMemoryRequest {
            scope: scope(S::UserId(USER.into())),
        })
        .await
        .unwrap()
        .into_inner();
    let mut bundle = vec![];
    while let Some(piece) = pieces.message().await.unwrap() {
        bundle.extend(piece.lines);
    }
    bundle
}

async fn import(c: &mut Client, bundle: &[u8]) -> Result<pb::ImportMemoryResponse, tonic::Status> {
    // In pieces cut mid-line, as any client may send them.
    let pieces: Vec<pb::ImportMemoryRequest> = bundle
        .chunks(333)
        .map(|lines| pb::ImportMemoryRequest {
            lines: lines.to_vec(),
            replace: false,
        })
        .collect();
    c.import_memory(tokio_stream::iter(pieces))
        .await
        .map(tonic::Response::into_inner)
}

/// The bundle without its header (which holds the time of the export).
fn body(bundle: &[u8]) -> &[u8] {
    let header = bundle.iter().position(|&b| b == b'\n').unwrap();
    &bundle[header..]
}

/// What a client reads of the user's memory, as text; `ranked` adds the
/// ranked searches (each backend ranks in its own way).
async fn reads(c: &mut Client, ranked: bool) -> Vec<String> {
    let mut out = vec![];
    for s in [S::AgentId(AGENT.into()), S::UserId(USER.into())] {
        let facts = c
            .list_memories(pb::ListMemoriesRequest {
                scope: scope(s.clone()),
                include_superseded: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .memories;
        for f in &facts {
            let history = c
                .get_memory_history(pb::GetMemoryHistoryRequest {
                    scope: scope(s.clone()),
                    id: f.id.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            out.push(format!("history {}: {history:?}", f.id));
        }
        out.push(format!("facts {s:?}: {facts:?}"));
        let blocks = c
            .list_memory_blocks(pb::ListMemoryBlocksRequest {
                scope: scope(s.clone()),
            })
            .await
            .unwrap()
            .into_inner();
        out.push(format!("blocks {s:?}: {blocks:?}"));
    }
    let retrieved = c
        .retrieve(pb::RetrieveRequest {
            agent_id: AGENT.into(),
            include_tool_interactions: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!("retrieve: {retrieved:?}"));
    let mut modes = vec![pb::SearchMode::MatchAllWords];
    if ranked {
        modes.push(pb::SearchMode::Ranked);
    }
    for mode in modes {
        let found = c
            .search_history(pb::SearchHistoryRequest {
                agent_id: AGENT.into(),
                query: "Lisbon".into(),
                mode: mode.into(),
                wait_for_index_ms: 60_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        out.push(format!("search {mode:?}: {:?}", found.matches));
    }
    let prompt = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: AGENT.into(),
            model: "gpt-4o".into(),
            render_format: pb::RenderFormat::OpenaiChat.into(),
            recall: Some(false),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!(
        "prompt: {:?}",
        (prompt.messages, prompt.rendered_payload_json)
    ));
    out
}

#[tokio::test]
async fn a_users_memory_moves_from_files_to_postgresql_and_back_unchanged() {
    let files = TestServer::start_with(FILES).await;
    let mut a = files.client().await;
    remember(&mut a).await;
    let before = reads(&mut a, true).await;
    let from_files = export(&mut a).await;
    assert!(
        String::from_utf8_lossy(&from_files).contains("cycle to work"),
        "the conversation is in the bundle"
    );

    // Into PostgreSQL: the same reads, and the same bundle out again.
    let env = crate::replicas::replica_env(&[]).await;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let pg = TestServer::start_with(&env).await;
    let mut b = pg.client().await;
    let imported = import(&mut b, &from_files).await.unwrap();
    assert_eq!(imported.agents, 1);
    assert_eq!(imported.blocks, 2);
    assert_eq!(reads(&mut b, false).await, reads(&mut a, false).await);
    let from_pg = export(&mut b).await;
    assert_eq!(
        String::from_utf8_lossy(body(&from_pg)),
        String::from_utf8_lossy(body(&from_files))
    );
    // Imported again: it exists.
    let again = import(&mut b, &from_files).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists, "{again:?}");

    // Back into files: everything the same, ranked searches included.
    let back = TestServer::start_with(FILES).await;
    let mut c = back.client().await;
    import(&mut c, &from_pg).await.unwrap();
    assert_eq!(reads(&mut c, true).await, before);

    // A bundle cut short is refused, and nothing of it is written.
    let fresh = TestServer::start_with(FILES).await;
    let mut d = fresh.client().await;
    let cut = import(&mut d, &from_files[..from_files.len() - 10])
        .await
        .unwrap_err();
    assert_eq!(cut.code(), tonic::Code::InvalidArgument, "{cut:?}");
    let listed = d
        .list_agents(pb::ListAgentsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.agent_ids.is_empty(), "{listed:?}");
}
