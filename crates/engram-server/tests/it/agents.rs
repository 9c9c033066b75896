//! Managing agents over gRPC: listing, deleting, forking, searching their
//! history.

use crate::common;

use common::*;
use engram_proto::pb;
use tonic::Code;

#[tokio::test]
async fn list_pages_and_delete_removes_every_file() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for name in ["b", "a", "c"] {
        client
            .ingest(ingest_req(name, vec![user("hi")]))
            .await
            .unwrap();
    }
    let page = client
        .list_agents(pb::ListAgentsRequest {
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.agent_ids, ["a", "b"]);
    let rest = client
        .list_agents(pb::ListAgentsRequest {
            page_size: 2,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.agent_ids, ["c"]);
    assert!(rest.next_page_token.is_empty());
    // Found by a part of the id, paged the same way; a filter longer than
    // any id is refused.
    let part = |text: &str| pb::ListAgentsRequest {
        id_contains: text.into(),
        ..Default::default()
    };
    let found = client.list_agents(part("b")).await.unwrap().into_inner();
    assert_eq!(found.agent_ids, ["b"]);
    let none = client.list_agents(part("zz")).await.unwrap().into_inner();
    assert!(none.agent_ids.is_empty());
    let long = client
        .list_agents(part(&"x".repeat(129)))
        .await
        .unwrap_err();
    assert_eq!(long.code(), tonic::Code::InvalidArgument, "{long:?}");

    client
        .delete_agent(pb::DeleteAgentRequest {
            agent_id: "b".into(),
        })
        .await
        .unwrap();
    assert!(!server.agents_dir().join("b").exists());
    let status = client
        .retrieve(pb::RetrieveRequest {
            agent_id: "b".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let all = client
        .list_agents(pb::ListAgentsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.agent_ids, ["a", "c"]);
}

#[tokio::test]
async fn fork_copies_an_agent_under_a_new_id() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    c.ingest(ingest_req("orig", vec![user("remember me")]))
        .await
        .unwrap();
    let out = c
        .fork_agent(pb::ForkAgentRequest {
            source_agent_id: "orig".into(),
            target_agent_id: "copy".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.agent_id, "copy");
    assert_eq!(all_traces(&mut c, "copy").await[0].content, "remember me");
    let again = c
        .fork_agent(pb::ForkAgentRequest {
            source_agent_id: "orig".into(),
            target_agent_id: "copy".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::AlreadyExists);
    let bad = c
        .fork_agent(pb::ForkAgentRequest {
            source_agent_id: "orig".into(),
            target_agent_id: "../x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("target_agent_id"));
    let missing = c
        .fork_agent(pb::ForkAgentRequest {
            source_agent_id: "nobody".into(),
            target_agent_id: "y".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

#[tokio::test]
async fn search_history_finds_active_and_archived_traces_newest_first() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    for i in 0..5 {
        c.ingest(ingest_req(
            "s",
            vec![
                user(&format!("Trip to Oslo, day {i}")),
                event(pb::TraceType::Assistant, "noted"),
            ],
        ))
        .await
        .unwrap();
    }
    // An archive as compaction writes it: older traces, one JSON line each.
    let archived = "{\"id\":\"old-1\",\"ts\":1.0,\"turn_id\":\"turn_0001\",\"seq\":0,\"trace_type\":\"user\",\"content\":\"first trip to oslo\"}\n";
    std::fs::write(
        server.agents_dir().join("s/raw_traces_archive.jsonl"),
        archived,
    )
    .unwrap();
    let mut found = vec![];
    let mut token = String::new();
    loop {
        let page = c
            .search_history(pb::SearchHistoryRequest {
                agent_id: "s".into(),
                query: "OSLO trip".into(),
                limit: 2,
                page_token: token,
                mode: pb::SearchMode::MatchAllWords.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.matches.len() <= 2);
        found.extend(
            page.matches
                .into_iter()
                .map(|m| (m.trace.unwrap().content, m.archived)),
        );
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let expected: Vec<(String, bool)> = (0..5)
        .rev()
        .map(|i| (format!("Trip to Oslo, day {i}"), false))
        .chain([("first trip to oslo".to_string(), true)])
        .collect();
    assert_eq!(found, expected);
    let empty = c
        .search_history(pb::SearchHistoryRequest {
            agent_id: "s".into(),
            query: " ".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    let bad_token = c
        .search_history(pb::SearchHistoryRequest {
            agent_id: "s".into(),
            query: "oslo".into(),
            page_token: "bogus".into(),
            mode: pb::SearchMode::MatchAllWords.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_token.code(), Code::InvalidArgument);
}
