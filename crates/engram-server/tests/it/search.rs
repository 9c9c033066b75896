//! Ranked SearchHistory over gRPC: who said it, relevance, context,
//! filters, the index on disk, and clear errors for bad requests.

use crate::common;

use common::*;
use engram_proto::pb;
use tonic::Code;

fn said(agent: &str, name: &str, kind: pb::TraceType, text: &str, ts: f64) -> pb::IngestRequest {
    ingest_req(
        agent,
        vec![pb::TraceEvent {
            name: name.into(),
            ts: Some(ts),
            ..event(kind, text)
        }],
    )
}

fn search(agent: &str, query: &str) -> pb::SearchHistoryRequest {
    pb::SearchHistoryRequest {
        agent_id: agent.into(),
        query: query.into(),
        ..Default::default()
    }
}

const MAY_8_2023: f64 = 1_683_554_160.0;
const DAY: f64 = 86_400.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_natural_question_finds_who_said_it_and_when() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    use pb::TraceType::{Assistant, User};
    let lines = [
        (
            "Caroline",
            User,
            "I went to the LGBTQ support group yesterday.",
            0.0,
        ),
        ("Melanie", Assistant, "Wow, how did it feel?", 0.0),
        (
            "Caroline",
            User,
            "Powerful. Everyone shared their stories.",
            0.0,
        ),
        ("Melanie", Assistant, "We went camping with the kids!", 40.0),
        ("Caroline", User, "Camping sounds like fun.", 40.0),
    ];
    for (name, kind, text, day) in lines {
        c.ingest(said("talk", name, kind, text, MAY_8_2023 + day * DAY))
            .await
            .unwrap();
    }
    let page = c
        .search_history(search(
            "talk",
            "When did Caroline go to the support groups?",
        ))
        .await
        .unwrap()
        .into_inner();
    let top = page.matches[0].trace.as_ref().unwrap();
    assert_eq!(top.content, "I went to the LGBTQ support group yesterday.");
    assert_eq!(top.name, "Caroline");
    assert_eq!(page.matches[0].matched_by, pb::MatchedBy::Lexical as i32);
    assert!(page.matches[0].score > 0.0);
    assert_eq!(page.index.unwrap().items, 5);
    assert!(server.agents_dir().join("talk/.index").is_dir());

    // "in June" is the event date: the camping messages were in June.
    let june = c
        .search_history(search("talk", "what happened in June?"))
        .await
        .unwrap()
        .into_inner();
    let contents: Vec<String> = june
        .matches
        .iter()
        .map(|m| m.trace.as_ref().unwrap().content.clone())
        .collect();
    assert_eq!(contents.len(), 2, "{contents:?}");
    assert!(
        contents.iter().all(|t| t.contains("amping")),
        "{contents:?}"
    );

    let with_context = c
        .search_history(pb::SearchHistoryRequest {
            context_messages: 1,
            limit: 2,
            trace_types: vec![pb::TraceType::Assistant.into()],
            ..search("talk", "how did it feel with the kids")
        })
        .await
        .unwrap()
        .into_inner();
    let contents: Vec<&str> = with_context
        .matches
        .iter()
        .map(|m| m.trace.as_ref().unwrap().content.as_str())
        .collect();
    // The message that tells comes before the one that asks (the
    // question prior), though the one that asks is the shorter match.
    assert_eq!(
        contents,
        ["We went camping with the kids!", "Wow, how did it feel?"]
    );
    let m = &with_context.matches[1];
    assert_eq!(
        m.context_before[0].content,
        "I went to the LGBTQ support group yesterday."
    );
    assert_eq!(
        m.context_after[0].content,
        "Powerful. Everyone shared their stories."
    );

    let words = c
        .search_history(pb::SearchHistoryRequest {
            mode: pb::SearchMode::MatchAllWords.into(),
            ..search("talk", "camping kids")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(words.matches.len(), 1);
    assert_eq!(words.matches[0].matched_by, pb::MatchedBy::AllWords as i32);
}

/// A question that names one participant prefers what they said (the
/// speaker prior): Melanie's message matches more of the words, Caroline's
/// comes first when the question names Caroline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_naming_one_participant_prefers_what_they_said() {
    let server = TestServer::start_with(&[("ENGRAM__EMBED__PROVIDER", "none")]).await;
    let mut c = server.client().await;
    use pb::TraceType::{Assistant, User};
    let lines = [
        ("Caroline", User, "I love pottery", 0.0),
        (
            "Melanie",
            Assistant,
            "We take the pottery class, a pottery class we take weekly",
            1.0,
        ),
        ("Melanie", Assistant, "We painted the fence", 2.0),
    ];
    for (name, kind, text, day) in lines {
        c.ingest(said("pair", name, kind, text, MAY_8_2023 + day * DAY))
            .await
            .unwrap();
    }
    let first = |page: pb::SearchHistoryResponse| page.matches[0].trace.clone().unwrap().name;
    let words = c
        .search_history(search("pair", "which pottery class do they take?"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first(words), "Melanie", "by the words alone");
    let named = c
        .search_history(search("pair", "What pottery class did Caroline take?"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first(named), "Caroline");
}

#[tokio::test]
async fn bad_search_requests_are_refused_clearly() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    c.ingest(ingest_req("s", vec![user("hello there")]))
        .await
        .unwrap();
    let cases = [
        pb::SearchHistoryRequest {
            mode: 7,
            ..search("s", "hello")
        },
        pb::SearchHistoryRequest {
            trace_types: vec![9],
            ..search("s", "hello")
        },
        pb::SearchHistoryRequest {
            from_turn_id: "turn_x".into(),
            ..search("s", "hello")
        },
        pb::SearchHistoryRequest {
            from_turn_id: "turn_0005".into(),
            to_turn_id: "turn_0002".into(),
            ..search("s", "hello")
        },
        pb::SearchHistoryRequest {
            from_ts: Some(10.0),
            to_ts: Some(1.0),
            ..search("s", "hello")
        },
        pb::SearchHistoryRequest {
            from_ts: Some(f64::NAN),
            ..search("s", "hello")
        },
        pb::SearchHistoryRequest {
            page_token: "a3".into(),
            ..search("s", "hello")
        },
        pb::SearchHistoryRequest {
            page_token: "k990".into(),
            limit: 50,
            ..search("s", "hello")
        },
        search("s", "  "),
    ];
    for req in cases {
        let status = c.search_history(req.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{req:?}: {status:?}");
    }
    let missing = c
        .search_history(search("nobody", "hello"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrieve_ranks_archived_messages_summaries_and_facts_together() {
    let server = TestServer::start_with(&[("ENGRAM__EMBED__PROVIDER", "none")]).await;
    let mut c = server.client().await;
    use pb::TraceType::{Assistant, User};
    let talk = [
        "I went to the LGBTQ support group yesterday.",
        "How did it feel?",
        "We planned a hike for Saturday.",
        "Bring water.",
        "My sister visits next week.",
        "That will be nice.",
        "I bought a new guitar.",
        "Play me something.",
        "The weather is grey today.",
        "Stay warm.",
        "Work was busy.",
        "Rest tonight.",
        "Any plans for the evening?",
        "Reading a book.",
    ];
    for (i, text) in talk.iter().enumerate() {
        let (name, kind) = if i % 2 == 0 {
            ("Caroline", User)
        } else {
            ("Melanie", Assistant)
        };
        c.ingest(said(
            "talk",
            name,
            kind,
            text,
            MAY_8_2023 + (i / 2) as f64 * DAY,
        ))
        .await
        .unwrap();
    }
    let report = compact_now(&mut c, "talk").await;
    assert!(report.traces_pruned >= 2, "{report:?}");

    let ask = |query: &str| pb::RetrieveRequest {
        agent_id: "talk".into(),
        query: query.into(),
        max_recalled: Some(5),
        context_messages: 1,
        ..Default::default()
    };
    let out = c
        .retrieve(ask("When did Caroline go to the support group?"))
        .await
        .unwrap()
        .into_inner();
    let best = &out.recalled[0];
    let trace = best.trace.as_ref().unwrap();
    assert_eq!(trace.content, talk[0]);
    assert_eq!(
        (best.kind, best.archived),
        (pb::MemoryKind::Trace as i32, true)
    );
    assert_eq!(best.turn_ids, std::slice::from_ref(&trace.turn_id));
    assert_eq!(best.trace_ids, std::slice::from_ref(&trace.id));
    assert_eq!(
        (best.from_ts, best.to_ts),
        (Some(MAY_8_2023), Some(MAY_8_2023))
    );
    assert_eq!(best.context_after[0].content, talk[1]);
    // The summary of those turns ranks too, with the span it covers.
    let summary = out
        .recalled
        .iter()
        .find(|m| m.kind == pb::MemoryKind::Episodic as i32)
        .expect("the summary of the support group turn");
    let episodic = summary.episodic.as_ref().unwrap();
    assert_eq!(summary.turn_ids, episodic.turn_ids);
    assert!(summary.trace_ids.contains(&trace.id));
    assert_eq!(summary.from_ts, Some(MAY_8_2023));
    assert!(summary.to_ts >= summary.from_ts);
    assert_eq!(out.bundle.unwrap().episodic[0].id, episodic.id);
    assert_eq!(
        out.index.unwrap().items,
        talk.len() as u64 + 1 + report.semantic_added as u64
    );

    for (bad, says) in [
        (
            pb::RetrieveRequest {
                max_recalled: Some(101),
                ..ask("x")
            },
            "max_recalled",
        ),
        (
            pb::RetrieveRequest {
                context_messages: 11,
                ..ask("x")
            },
            "context_messages",
        ),
        (
            pb::RetrieveRequest {
                wait_for_index_ms: 60_001,
                ..ask("x")
            },
            "wait_for_index_ms",
        ),
    ] {
        let status = c.retrieve(bad).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains(says), "{status:?}");
    }
    // Without a query, nothing is ranked.
    let plain = c
        .retrieve(pb::RetrieveRequest {
            agent_id: "talk".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plain.recalled.is_empty() && plain.index.is_none());
}
