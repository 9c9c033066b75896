//! ForgetTurn and ForgetEvents through the server: a secret said in one
//! turn (and repeated by the assistant, a tool call, a spilled result, a
//! summary and a fact, in the agent's and the user's memory) is in no
//! search, prompt, Retrieve or byte of the data directory afterwards, also
//! when the real binary dies at any step of the forget; the summary that
//! covered the turn comes back, rewritten by the summarizer.

use crate::common;

use common::*;
use engram_proto::pb;

const SECRET: &str = "quokka-5150";

fn forget_turn(agent: &str, turn: &str) -> pb::ForgetTurnRequest {
    pb::ForgetTurnRequest {
        agent_id: agent.into(),
        turn_id: turn.into(),
    }
}

/// Turn 1 about a dog; turn 2 says the secret everywhere a turn can;
/// turns 3 to 5 about the dog; compacted (turns 1 to 3 summarized).
async fn secret_conversation(c: &mut Client, agent: &str) {
    let say = |events: Vec<pb::TraceEvent>| pb::IngestRequest {
        user_id: "ana".into(),
        ..ingest_req(agent, events)
    };
    c.ingest(say(vec![
        user("We adopted a puppy called Rex."),
        event(pb::TraceType::Assistant, "Congratulations on Rex."),
    ]))
    .await
    .unwrap();
    let big = format!("{SECRET} {}", "locker log line. ".repeat(2_000));
    let answer = pb::TraceEvent {
        event_id: "ev-secret-answer".into(),
        ..event(pb::TraceType::Assistant, &format!("Saved {SECRET}."))
    };
    let turn = c
        .ingest(say(vec![
            user(&format!("My locker code is {SECRET}, keep it.")),
            pb::TraceEvent {
                tool_args: Some(prost_types::Struct {
                    fields: [(
                        "code".to_string(),
                        prost_types::Value {
                            kind: Some(prost_types::value::Kind::StringValue(SECRET.into())),
                        },
                    )]
                    .into(),
                }),
                ..tool_call("c2", "save_code")
            },
            tool_result("c2", &big),
            answer,
        ]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(turn.current_turn_id, "turn_0002");
    for text in [
        "Rex chewed a shoe.",
        "Rex walks twice a day.",
        "Rex sleeps a lot.",
    ] {
        c.ingest(say(vec![
            user(text),
            event(pb::TraceType::Assistant, "Puppies do."),
        ]))
        .await
        .unwrap();
    }
    let report = compact_now(c, agent).await;
    assert!(report.performed, "{report:?}");
}

/// Every place a client could see the secret in, for `agent` of user ana.
async fn seen(c: &mut Client, agent: &str) -> Vec<String> {
    let mut out = vec![];
    for (agent_id, user_id) in [(agent, ""), ("", "ana")] {
        let found = c
            .search_history(pb::SearchHistoryRequest {
                agent_id: agent_id.into(),
                user_id: user_id.into(),
                query: SECRET.into(),
                limit: 50,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        out.push(format!("{:?}", found.matches));
    }
    let prompt = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: agent.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!("{prompt:?}"));
    let retrieved = c
        .retrieve(pb::RetrieveRequest {
            agent_id: agent.into(),
            query: SECRET.into(),
            raw_tail_turns: Some(u32::MAX),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!("{retrieved:?}"));
    let facts = c
        .list_memories(pb::ListMemoriesRequest {
            scope: Some(pb::MemoryScope {
                scope: Some(pb::memory_scope::Scope::UserId("ana".into())),
            }),
            include_superseded: true,
            include_expired: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!("{facts:?}"));
    out.retain(|s| s.contains(SECRET));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_turn_is_nowhere_and_its_summary_comes_back() {
    let compaction = format!(
        r#"{{"episodic_summary": "Got a puppy, Rex; the locker code is {SECRET}.", "semantic_facts": [{{"fact": "Locker code {SECRET}", "confidence": 0.9, "salience": 0.9}}]}}"#
    );
    let rewrite = r#"{"episodic_summary": "Got a puppy, Rex, who chews shoes.", "semantic_facts": [{"fact": "Has a puppy named Rex", "confidence": 0.9, "salience": 0.5}]}"#;
    let (base, _) = fake_llm(vec![
        (200, completion(&compaction)),
        (200, completion(rewrite)),
    ])
    .await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "m"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    secret_conversation(&mut c, "fa").await;
    assert!(!seen(&mut c, "fa").await.is_empty(), "found before");
    assert!(!files_holding(server.data_dir.path(), SECRET.as_bytes()).is_empty());

    let forgotten = c
        .forget_turn(forget_turn("fa", "turn_0002"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            forgotten.traces_erased,
            forgotten.facts_deleted,
            forgotten.summaries_rewritten
        ),
        (4, 1, 1)
    );
    assert_eq!(seen(&mut c, "fa").await, Vec::<String>::new());
    assert_eq!(
        files_holding(server.data_dir.path(), SECRET.as_bytes()),
        Vec::<String>::new()
    );
    // The rest of the conversation stays.
    assert_eq!(all_traces(&mut c, "fa").await.len() % 2, 0);

    // The summary is rewritten in the background from turns 1 and 3.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let summary = loop {
        let episodic = bundle(&mut c, "fa").await.episodic;
        if let Some(e) = episodic.first() {
            break e.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no rewrite");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(summary.summary, "Got a puppy, Rex, who chews shoes.");
    assert_eq!(summary.turn_ids, ["turn_0001", "turn_0003"]);
    assert_eq!(seen(&mut c, "fa").await, Vec::<String>::new());

    // Again: nothing left. Refusals: not a turn id, no agent, no ids.
    let again = c
        .forget_turn(forget_turn("fa", "turn_0002"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.traces_erased, 0);
    let bad = c
        .forget_turn(forget_turn("fa", "second"))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    let none = c
        .forget_turn(forget_turn("nobody", "turn_0001"))
        .await
        .unwrap_err();
    assert_eq!(none.code(), tonic::Code::NotFound, "{none:?}");
    let empty = c
        .forget_events(pb::ForgetEventsRequest {
            agent_id: "fa".into(),
            ids: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);
}

/// ForgetEvents by a client's event id: that message goes, its turn stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_events_leave_the_rest_of_their_turn() {
    let server = TestServer::start_with(&[("ENGRAM__POLICY__RAW_TAIL_TURNS", "1")]).await;
    let mut c = server.client().await;
    secret_conversation(&mut c, "fe").await;
    let before = all_traces(&mut c, "fe").await.len();
    let forgotten = c
        .forget_events(pb::ForgetEventsRequest {
            agent_id: "fe".into(),
            ids: vec!["ev-secret-answer".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(forgotten.traces_erased, 1);
    let after = all_traces(&mut c, "fe").await;
    assert_eq!(after.len(), before - usize::from(after.len() < before));
    let found = c
        .search_history(pb::SearchHistoryRequest {
            agent_id: "fe".into(),
            query: "locker code".into(),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        found
            .matches
            .iter()
            .any(|h| h.trace.as_ref().unwrap().turn_id == "turn_0002"),
        "the user's message of that turn stays: {found:?}"
    );
    assert!(!format!("{found:?}").contains(&format!("Saved {SECRET}")));
}

/// The real binary dies before each step of a forget; the retry after the
/// restart finishes it, and nothing of the turn is left.
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forget_cut_short_by_a_crash_is_finished() {
    for step in engram_files::FORGET_STEPS {
        let data = tempfile::tempdir().unwrap();
        let env = [("ENGRAM__POLICY__RAW_TAIL_TURNS", "1")];
        let mut crashing = env.to_vec();
        crashing.push(("ENGRAM_TEST_CRASH_AT", step));
        let daemon = Daemon::spawn(data.path(), &crashing);
        let mut c = daemon.client().await;
        secret_conversation(&mut c, "fk").await;
        assert!(
            c.forget_turn(forget_turn("fk", "turn_0002")).await.is_err(),
            "{step}: the server died"
        );
        drop(c);
        drop(daemon);
        let daemon = Daemon::spawn(data.path(), &env);
        let mut c = daemon.client().await;
        c.forget_turn(forget_turn("fk", "turn_0002"))
            .await
            .unwrap_or_else(|e| panic!("{step}: {e:?}"));
        assert_eq!(seen(&mut c, "fk").await, Vec::<String>::new(), "{step}");
        assert_eq!(
            files_holding(data.path(), SECRET.as_bytes()),
            Vec::<String>::new(),
            "{step}"
        );
        let rex = c
            .search_history(pb::SearchHistoryRequest {
                agent_id: "fk".into(),
                query: "Rex".into(),
                limit: 50,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let rex = rex
            .matches
            .iter()
            .filter(|m| m.trace.as_ref().unwrap().content.contains("Rex"))
            .count();
        assert_eq!(rex, 5, "{step}: the other turns stay");
    }
}
