//! Compaction over gRPC: manual Compact with the embedded summarizer and
//! with an LLM over HTTP (a local fake speaking the OpenAI API), automatic
//! compaction at PrepareRequest, failures that prune nothing.

use crate::common;

use common::*;
use engram_proto::pb;

#[tokio::test]
async fn manual_compaction_with_the_embedded_summarizer() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    turns(&mut c, "m", 8).await;
    let report = compact_now(&mut c, "m").await;
    assert!(report.performed, "{report:?}");
    assert_eq!(report.trigger, "manual");
    assert_eq!(
        report.turn_ids,
        ["turn_0001", "turn_0002", "turn_0003"],
        "raw tail of 4 + current kept"
    );
    assert_eq!(report.traces_pruned, 6);
    assert!(report.tokens_after < report.tokens_before, "{report:?}");
    let got = c
        .retrieve(pb::RetrieveRequest {
            agent_id: "m".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let bundle = got.bundle.unwrap();
    assert_eq!(bundle.episodic[0].id, report.episodic_id);
    assert_eq!(bundle.episodic[0].tags, ["extractive"]);
    // A preference that changed within the summarized turns: without an
    // LLM nothing is replaced by guesswork; each stands, dated.
    assert_eq!((report.semantic_added, report.semantic_updated), (3, 0));
    let mut facts: Vec<_> = bundle.semantic.iter().map(|f| f.fact.as_str()).collect();
    facts.sort_unstable();
    assert_eq!(
        facts,
        [
            "I prefer answer number 1",
            "I prefer answer number 2",
            "I prefer answer number 3"
        ]
    );
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "m".into(),
            model: "gpt-4o".into(),
            render_format: pb::RenderFormat::OpenaiChat.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.epoch, 1);
    let snapshot = &p.messages[0].content;
    assert!(
        snapshot.starts_with("[MEMORY:EPISODIC]\n1) Focus: \"numbers\" Turn 1:"),
        "{snapshot}"
    );
    assert!(
        snapshot.contains("[MEMORY:SEMANTIC]\n- (since ")
            && snapshot.contains(") I prefer answer number 1\n[RECENT TURNS]\nTurn 4:"),
        "{snapshot}"
    );
    assert_valid_payloads(&[(
        "after compaction".into(),
        "openai-chat",
        p.rendered_payload_json,
    )]);
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "m".into(),
            model: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((stats.epoch, stats.compactions), (1, 1));
    let names: Vec<_> = stats.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "compactions.jsonl",
            "episodic.jsonl",
            "raw_traces.jsonl",
            "raw_traces_archive.jsonl",
            "semantic.jsonl",
            "state.json",
            "turns.json"
        ]
    );
    // Nothing old enough any more: reported, nothing done.
    let again = compact_now(&mut c, "m").await;
    assert!(
        !again.performed && again.error.contains("nothing to compact"),
        "{again:?}"
    );
}

#[tokio::test]
async fn reported_pressure_compacts_before_the_next_prompt() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    turns(&mut c, "auto", 7).await;
    let out = c
        .ingest(pb::IngestRequest {
            usage: Some(pb::Usage {
                prompt_tokens: 1_000_000,
                completion_tokens: 1,
                total_tokens: 1_000_001,
            }),
            model: "gpt-4o".into(),
            ..ingest_req("auto", vec![event(pb::TraceType::Assistant, "long answer")])
        })
        .await
        .unwrap()
        .into_inner();
    assert!(out.compaction_required);
    // A preview shows the prompt as it stands and runs nothing.
    let before = all_traces(&mut c, "auto").await.len();
    let preview = pb::PrepareRequestRequest {
        agent_id: "auto".into(),
        model: "gpt-4o".into(),
        preview: true,
        ..Default::default()
    };
    let seen = c
        .prepare_request(preview.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(!seen.compaction.unwrap().performed);
    assert_eq!(seen.epoch, 0);
    assert_eq!(seen.messages.last().unwrap().content, "long answer");
    assert!(
        seen.warnings
            .iter()
            .any(|w| w.contains("compaction is due (token_pressure)")),
        "{:?}",
        seen.warnings
    );
    assert_eq!(all_traces(&mut c, "auto").await.len(), before);
    // It stores nothing, so it takes nothing to store.
    let refused = c
        .prepare_request(pb::PrepareRequestRequest {
            user_input: Some(user("sneaked in")),
            ..preview.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert_eq!(all_traces(&mut c, "auto").await.len(), before);
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "auto".into(),
            user_input: Some(user("next question")),
            model: "gpt-4o".into(),
            render_format: pb::RenderFormat::AnthropicMessages.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(report.trigger, "token_pressure");
    assert_eq!(p.epoch, 1);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(
        p.messages.last().unwrap().content,
        "next question",
        "the new turn is a message, not summarized"
    );
    assert_valid_payloads(&[("auto".into(), "anthropic-messages", p.rendered_payload_json)]);
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "auto".into(),
            model: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!stats.compaction_required, "cleared by the compaction");
}

#[tokio::test]
async fn an_llm_over_http_writes_the_summary_and_failures_prune_nothing() {
    let answer = r#"{"episodic_summary": "Squares of 1 to 3 were computed.", "semantic_facts": [{"fact": "User likes squares", "confidence": 0.9, "salience": 0.7}]}"#;
    let (base, seen) = fake_llm(vec![
        (200, completion(answer)),
        (500, "{\"error\":\"down\"}".into()),
    ])
    .await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__LLM__MAX_RETRIES", "0"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    turns(&mut c, "h", 5).await;
    let report = compact_now(&mut c, "h").await;
    assert!(report.performed, "{report:?}");
    assert_eq!(report.semantic_added, 1);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["/v1/chat/completions"],
        "the configured endpoint"
    );
    let bundle = bundle(&mut c, "h").await;
    assert_eq!(
        bundle.episodic[0].summary,
        "Squares of 1 to 3 were computed."
    );
    assert_eq!(bundle.semantic[0].fact, "User likes squares");

    // From now on the endpoint fails: nothing is pruned, failures count up,
    // and after three outages the endpoint's circuit opens, which is not
    // counted as this agent's failure.
    turns(&mut c, "h", 3).await;
    let archive = server.agents_dir().join("h/raw_traces_archive.jsonl");
    let archived = std::fs::read(&archive).unwrap();
    for failure in 1..=3 {
        let r = compact_now(&mut c, "h").await;
        assert!(!r.performed);
        assert!(
            r.error.contains("500")
                && r.error
                    .contains(&format!("consecutive failures: {failure}")),
            "{r:?}"
        );
    }
    let r = compact_now(&mut c, "h").await;
    assert!(r.error.contains("circuit open"), "{r:?}");
    assert_eq!(std::fs::read(&archive).unwrap(), archived, "nothing pruned");
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "h".into(),
            model: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.consecutive_failures, 3);
}

/// The tool-result budget at ingest: a large result is stored whole in a
/// file, the trace and the prompt carry a preview and its name.
#[tokio::test]
async fn large_tool_results_are_stored_aside_with_a_preview() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let page = "lorem ipsum ".repeat(5_000);
    let result = pb::TraceEvent {
        tool_call_id: "big".into(),
        tool_result: Some(prost_types::Value {
            kind: Some(prost_types::value::Kind::StringValue(page.clone())),
        }),
        ..event(pb::TraceType::ToolResult, "")
    };
    let call = pb::TraceEvent {
        tool_call_id: "big".into(),
        tool_name: "fetch".into(),
        ..event(pb::TraceType::ToolCall, "")
    };
    let out = c
        .ingest(ingest_req("t", vec![user("fetch the page"), call, result]))
        .await
        .unwrap()
        .into_inner();
    let stored = &out.traces[2];
    assert_eq!(
        stored.tool_result_ref,
        format!("tool_results/{}.json", stored.id)
    );
    let whole =
        std::fs::read_to_string(server.agents_dir().join("t").join(&stored.tool_result_ref))
            .unwrap();
    assert_eq!(
        serde_json::from_str::<String>(&whole).unwrap(),
        page,
        "nothing lost"
    );
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "t".into(),
            model: "gpt-4o".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let tool = &p.messages[2];
    assert!(tool.content.len() < 5_000, "{}", tool.content.len());
    assert!(
        tool.content.contains("60000 characters") && tool.content.contains(&stored.tool_result_ref)
    );
}

#[tokio::test]
async fn too_many_active_turns_trigger_a_compaction() {
    let server = TestServer::start_with(&[
        ("ENGRAM__POLICY__MAX_ACTIVE_TURNS", "6"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "2"),
    ])
    .await;
    let mut c = server.client().await;
    turns(&mut c, "many", 7).await;
    let prepare = |text: &str| pb::PrepareRequestRequest {
        agent_id: "many".into(),
        user_input: Some(user(text)),
        model: "gpt-4o".into(),
        ..Default::default()
    };
    // Seven finished turns and the new one: one finished turn too many.
    let p = c
        .prepare_request(prepare("eighth"))
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert_eq!(report.trigger, "turn_count");
    assert!(report.performed, "{report:?}");
    assert_eq!(report.steps, ["summarize"]);
    assert_eq!(
        report.turn_ids,
        [
            "turn_0001",
            "turn_0002",
            "turn_0003",
            "turn_0004",
            "turn_0005"
        ]
    );
}

/// Distinct turns in the agent's active file.
fn active_turns(server: &TestServer, agent: &str) -> std::collections::BTreeSet<String> {
    let text =
        std::fs::read_to_string(server.agents_dir().join(agent).join("raw_traces.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["turn_id"].to_string())
        .collect()
}

/// The README's agent loop (a tool call every turn, a PrepareRequest before
/// each model call) with a turn limit: every trigger summarizes, the active
/// turns stay within the limit, and each compaction is one epoch.
#[tokio::test]
async fn the_turn_limit_holds_in_the_agent_loop_one_epoch_per_compaction() {
    let server = TestServer::start_with(&[("ENGRAM__POLICY__MAX_ACTIVE_TURNS", "4")]).await;
    let mut c = server.client().await;
    let prepare = |user_input: Option<pb::TraceEvent>| pb::PrepareRequestRequest {
        agent_id: "loop".into(),
        system_prompt: "You are a helpful assistant.".into(),
        user_input,
        model: "gpt-4o".into(),
        render_format: pb::RenderFormat::OpenaiChat.into(),
        ..Default::default()
    };
    let mut compactions = 0;
    for t in 1..=12 {
        let question = user(&format!("What is the weather in city {t}?"));
        for step in 0..2 {
            let p = c
                .prepare_request(prepare((step == 0).then(|| question.clone())))
                .await
                .unwrap()
                .into_inner();
            let report = p.compaction.unwrap();
            if report.performed {
                compactions += 1;
                assert_eq!(report.trigger, "turn_count", "{report:?}");
                assert_eq!(report.steps, ["summarize"], "{report:?}");
            }
            assert_eq!(p.epoch, compactions, "turn {t}: one epoch per compaction");
            let active = active_turns(&server, "loop");
            assert!(active.len() <= 5, "turn {t}: {active:?}");
            if step == 0 {
                let call = tool_call(&format!("c{t}"), "weather");
                let result = tool_result(&format!("c{t}"), &format!("rain, {t} degrees"));
                c.ingest(pb::IngestRequest {
                    usage: Some(pb::Usage {
                        prompt_tokens: 300,
                        completion_tokens: 20,
                        total_tokens: 320,
                    }),
                    ..ingest_req("loop", vec![call])
                })
                .await
                .unwrap();
                c.ingest(ingest_req("loop", vec![result])).await.unwrap();
            } else {
                c.ingest(ingest_req(
                    "loop",
                    vec![event(
                        pb::TraceType::Assistant,
                        &format!("It rains, {t} degrees."),
                    )],
                ))
                .await
                .unwrap();
            }
        }
    }
    // Turns 6 to 12 each found five finished turns: seven summaries.
    assert_eq!(compactions, 7);
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "loop".into(),
            model: "gpt-4o".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((stats.epoch, stats.compactions), (7, 7));
}

/// An 8,000-token window and a raw tail of one turn.
const SMALL_WINDOW: &[(&str, &str)] = &[
    ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "8000"),
    ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "1000"),
    ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
];

/// The cheapest tier first: hiding old tool results is enough, so nothing
/// is summarized or archived.
#[tokio::test]
async fn microcompact_alone_can_bring_the_prompt_under_the_trigger() {
    let server = TestServer::start_with(SMALL_WINDOW).await;
    let mut c = server.client().await;
    let page = "a fairly long tool output line with many words in it ".repeat(250);
    for t in 1..=4 {
        let call = tool_call(&format!("c{t}"), "fetch");
        let result = pb::TraceEvent {
            tool_call_id: format!("c{t}"),
            tool_result: Some(prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(format!(
                    "{t}: {page}"
                ))),
            }),
            ..event(pb::TraceType::ToolResult, "")
        };
        c.ingest(ingest_req(
            "micro",
            vec![
                user(&format!("fetch {t}")),
                call,
                result,
                event(pb::TraceType::Assistant, "done"),
            ],
        ))
        .await
        .unwrap();
    }
    let out = c
        .ingest(pb::IngestRequest {
            usage: Some(pb::Usage {
                prompt_tokens: 9_000,
                completion_tokens: 1,
                total_tokens: 9_001,
            }),
            model: "tiny-model".into(),
            ..ingest_req(
                "micro",
                vec![event(pb::TraceType::Assistant, "that was a lot")],
            )
        })
        .await
        .unwrap()
        .into_inner();
    assert!(out.compaction_required);
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "micro".into(),
            user_input: Some(user("summary please")),
            model: "tiny-model".into(),
            render_format: pb::RenderFormat::Gemini.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(report.steps, ["microcompact"]);
    assert_eq!(p.epoch, 1);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert!(p.estimated_prompt_tokens < p.budget.unwrap().trigger_tokens);
    let hidden = p
        .messages
        .iter()
        .filter(|m| m.content.starts_with("[tool result of"))
        .count();
    assert_eq!(
        hidden, 3,
        "results older than the kept tail (turn 4) hidden, tool name and call id kept"
    );
    assert!(
        !server
            .agents_dir()
            .join("micro/raw_traces_archive.jsonl")
            .exists(),
        "nothing archived"
    );
    assert!(
        !server.agents_dir().join("micro/episodic.jsonl").exists(),
        "nothing summarized"
    );
    assert_valid_payloads(&[("microcompacted".into(), "gemini", p.rendered_payload_json)]);
    let logged = c
        .list_compactions(pb::ListCompactionsRequest {
            agent_id: "micro".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .compactions;
    let [record] = logged.as_slice() else {
        panic!("one record: {logged:?}")
    };
    assert_eq!(record.outcome, "microcompacted");
    assert_eq!(record.summarizer, "", "no summary was asked for");
    let logged = record.report.as_ref().unwrap();
    assert_eq!(
        (logged.trigger.as_str(), logged.steps.as_slice()),
        (report.trigger.as_str(), &["microcompact".to_owned()][..])
    );
    assert_eq!(logged.tokens_before, report.tokens_before);
    assert!(logged.tokens_after < logged.tokens_before);
}

/// Hiding old tool results is not enough here, so the same compaction goes
/// on to summarize: two tiers, one compaction, one new epoch.
#[tokio::test]
async fn two_tiers_of_one_compaction_start_one_epoch() {
    let server = TestServer::start_with(SMALL_WINDOW).await;
    let mut c = server.client().await;
    let words = "a fairly long line with many different words in it ";
    for t in 1..=5 {
        let call = tool_call(&format!("c{t}"), "fetch");
        let result = tool_result(&format!("c{t}"), &format!("{t}: {}", words.repeat(80)));
        c.ingest(ingest_req(
            "tiers",
            vec![user(&words.repeat(100)), call, result],
        ))
        .await
        .unwrap();
    }
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "tiers".into(),
            user_input: Some(user("and now?")),
            model: "tiny-model".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(report.trigger, "estimate");
    assert_eq!(report.steps, ["microcompact", "summarize"]);
    assert_eq!(p.epoch, 1);
    assert!(p.estimated_prompt_tokens < p.budget.unwrap().trigger_tokens);
}
