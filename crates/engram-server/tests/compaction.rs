//! Compaction over gRPC: manual Compact with the embedded summarizer and
//! with an LLM over HTTP (a local fake speaking the OpenAI API), automatic
//! compaction at PrepareRequest, failures that prune nothing.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use engram_proto::pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn turns(c: &mut Client, agent: &str, n: usize) {
    for t in 1..=n {
        c.ingest(ingest_req(
            agent,
            vec![
                user(&format!("I prefer answer number {t}. What is {t} squared?")),
                event(
                    pb::TraceType::Assistant,
                    &format!(
                        "{} it is. {}",
                        t * t,
                        "Squaring multiplies a number by itself. ".repeat(20)
                    ),
                ),
            ],
        ))
        .await
        .unwrap();
    }
}

fn compact(agent: &str) -> pb::CompactRequest {
    pb::CompactRequest {
        agent_id: agent.into(),
        focus: "numbers".into(),
    }
}

#[tokio::test]
async fn manual_compaction_with_the_embedded_summarizer() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    turns(&mut c, "m", 8).await;
    let report = c
        .compact(compact("m"))
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
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
    // A preference that changed within the summarized turns: the last wins.
    assert_eq!((report.semantic_added, report.semantic_updated), (1, 0));
    let facts: Vec<_> = bundle.semantic.iter().map(|f| f.fact.as_str()).collect();
    assert_eq!(facts, ["I prefer answer number 3"]);
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
        snapshot.contains("[MEMORY:SEMANTIC]\n- I prefer answer number 3\n[RECENT TURNS]\nTurn 4:"),
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
            "episodic.jsonl",
            "raw_traces.jsonl",
            "raw_traces_archive.jsonl",
            "semantic.jsonl",
            "state.json"
        ]
    );
    // Nothing old enough any more: reported, nothing done.
    let again = c
        .compact(compact("m"))
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
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

/// A local OpenAI-compatible endpoint answering each request with the next
/// scripted (status, body); records request paths.
async fn fake_llm(script: Vec<(u16, String)>) -> (String, Arc<Mutex<Vec<String>>>) {
    let open = Arc::new(tokio::sync::Semaphore::new(usize::MAX >> 4));
    let (base, seen, _) = fake_llm_gated(script, open).await;
    (base, seen)
}

/// Like [`fake_llm`], answering each request only once `gate` hands out a
/// permit (so a test decides when "the LLM" is done); `arrived` is notified
/// as each request comes in.
async fn fake_llm_gated(
    script: Vec<(u16, String)>,
    gate: Arc<tokio::sync::Semaphore>,
) -> (String, Arc<Mutex<Vec<String>>>, Arc<tokio::sync::Notify>) {
    let arrived = Arc::new(tokio::sync::Notify::new());
    let notify = Arc::clone(&arrived);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let (status, body) = script[n.min(script.len() - 1)].clone();
            n += 1;
            let mut buf = vec![];
            let mut chunk = [0u8; 8192];
            loop {
                let k = stream.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..k]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        log.lock()
                            .unwrap()
                            .push(text.split_whitespace().nth(1).unwrap().to_owned());
                        notify.notify_one();
                        break;
                    }
                }
            }
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let gate = Arc::clone(&gate);
            tokio::spawn(async move {
                gate.acquire().await.unwrap().forget();
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    (base, seen, arrived)
}

fn completion(content: &str) -> String {
    serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
        .to_string()
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
    let report = c
        .compact(compact("h"))
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(report.semantic_added, 1);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["/v1/chat/completions"],
        "the configured endpoint"
    );
    let bundle = c
        .retrieve(pb::RetrieveRequest {
            agent_id: "h".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .bundle
        .unwrap();
    assert_eq!(
        bundle.episodic[0].summary,
        "Squares of 1 to 3 were computed."
    );
    assert_eq!(bundle.semantic[0].fact, "User likes squares");

    // From now on the endpoint fails: nothing is pruned, failures count up,
    // and after three the circuit opens.
    turns(&mut c, "h", 3).await;
    let archive = server.agents_dir().join("h/raw_traces_archive.jsonl");
    let archived = std::fs::read(&archive).unwrap();
    for failure in 1..=3 {
        let r = c
            .compact(compact("h"))
            .await
            .unwrap()
            .into_inner()
            .report
            .unwrap();
        assert!(!r.performed);
        assert!(
            r.error.contains("500")
                && r.error
                    .contains(&format!("consecutive failures: {failure}")),
            "{r:?}"
        );
    }
    let r = c
        .compact(compact("h"))
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
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
    assert_eq!(stats.consecutive_failures, 4);
}

const SUMMARY: &str = r#"{"episodic_summary": "Early squares.", "semantic_facts": []}"#;

/// The real binary: Ingest keeps working while the summarizer is slow, and
/// what arrives meanwhile is neither lost nor summarized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_keeps_working_while_the_summary_is_written() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (base, _, arrived) =
        fake_llm_gated(vec![(200, completion(SUMMARY))], Arc::clone(&gate)).await;
    let data = tempfile::tempdir().unwrap();
    let daemon = Daemon::spawn(
        data.path(),
        &[
            ("ENGRAM__LLM__BASE_URL", &base),
            ("ENGRAM__LLM__MODEL", "m"),
            ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
        ],
    );
    let mut c = daemon.client().await;
    turns(&mut c, "busy", 5).await;
    let mut compacting = daemon.client().await;
    let pending = tokio::spawn(async move {
        compacting
            .compact(compact("busy"))
            .await
            .unwrap()
            .into_inner()
            .report
            .unwrap()
    });
    // The summarizer has the request and has not answered: meanwhile…
    arrived.notified().await;
    let during = c
        .ingest(ingest_req(
            "busy",
            vec![
                user("asked during the summary"),
                event(pb::TraceType::Assistant, "ok"),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(during.current_turn_id, "turn_0006");
    gate.add_permits(1);
    let report = pending.await.unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(report.turn_ids, ["turn_0001", "turn_0002", "turn_0003"]);
    let active = all_traces(&mut c, "busy").await;
    assert!(
        active
            .iter()
            .any(|t| t.content == "asked during the summary"),
        "not lost, not archived"
    );
    let archive =
        std::fs::read_to_string(data.path().join("agents/busy/raw_traces_archive.jsonl")).unwrap();
    assert!(!archive.contains("asked during the summary"));
    assert_eq!(
        archive.lines().count() + active.len(),
        12,
        "every trace exactly once"
    );
}

/// The real binary killed while the summarizer is answering: nothing was
/// written yet, and the restarted server compacts normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_the_summary_changes_nothing() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (base, _, arrived) =
        fake_llm_gated(vec![(200, completion(SUMMARY))], Arc::clone(&gate)).await;
    let data = tempfile::tempdir().unwrap();
    let env = [
        ("ENGRAM__LLM__BASE_URL", base.as_str()),
        ("ENGRAM__LLM__MODEL", "m"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ];
    let mut daemon = Daemon::spawn(data.path(), &env);
    let mut c = daemon.client().await;
    turns(&mut c, "k", 5).await;
    let before = std::fs::read(data.path().join("agents/k/raw_traces.jsonl")).unwrap();
    let mut compacting = daemon.client().await;
    let pending = tokio::spawn(async move { compacting.compact(compact("k")).await });
    arrived.notified().await;
    daemon.kill9();
    assert!(pending.await.unwrap().is_err());
    assert_eq!(
        std::fs::read(data.path().join("agents/k/raw_traces.jsonl")).unwrap(),
        before
    );
    assert!(
        !data
            .path()
            .join("agents/k/raw_traces_archive.jsonl")
            .exists()
    );
    gate.add_permits(10);
    let daemon = Daemon::spawn(data.path(), &env);
    let mut c = daemon.client().await;
    let report = c
        .compact(compact("k"))
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(
        all_traces(&mut c, "k").await.len() + report.traces_pruned as usize,
        10
    );
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
    turns(&mut c, "many", 6).await;
    let prepare = |text: &str| pb::PrepareRequestRequest {
        agent_id: "many".into(),
        user_input: Some(user(text)),
        model: "gpt-4o".into(),
        ..Default::default()
    };
    let p = c
        .prepare_request(prepare("seventh"))
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert_eq!(report.trigger, "turn_count");
    assert!(report.performed, "{report:?}");
    assert_eq!(
        report.turn_ids,
        ["turn_0001", "turn_0002", "turn_0003", "turn_0004"]
    );
}

/// The real binary dies (abort, no cleanup) before each step of a
/// compaction; the restarted server finds the agent consistent and the
/// compaction finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_step_leaves_the_agent_consistent() {
    for step in ["episodic", "semantic", "archive", "rewrite", "finalize"] {
        let data = tempfile::tempdir().unwrap();
        let env = [("ENGRAM__POLICY__RAW_TAIL_TURNS", "1")];
        let mut crashing = env.to_vec();
        crashing.push(("ENGRAM_TEST_CRASH_AT", step));
        let daemon = Daemon::spawn(data.path(), &crashing);
        let mut c = daemon.client().await;
        turns(&mut c, "x", 5).await;
        assert!(
            c.compact(compact("x")).await.is_err(),
            "{step}: the server died"
        );
        drop(c);
        drop(daemon);
        let daemon = Daemon::spawn(data.path(), &env);
        let mut c = daemon.client().await;
        let stats = c
            .get_context_stats(pb::GetContextStatsRequest {
                agent_id: "x".into(),
                model: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (stats.epoch, stats.compactions),
            (1, 1),
            "{step}: finished at restart"
        );
        let dir = data.path().join("agents/x");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        let active = read("raw_traces.jsonl");
        let archive = read("raw_traces_archive.jsonl");
        let mut ids: Vec<String> = active
            .lines()
            .chain(archive.lines())
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        let total = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(
            (ids.len(), total),
            (10, 10),
            "{step}: every trace exactly once"
        );
        assert_eq!(
            read("episodic.jsonl").lines().count(),
            1,
            "{step}: one summary"
        );
        for line in active.lines() {
            let turn: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(
                !read("episodic.jsonl").contains(turn["turn_id"].as_str().unwrap()),
                "{step}: summarized turn still active"
            );
        }
    }
}

/// The cheapest tier first: hiding old tool results is enough, so nothing
/// is summarized or archived.
#[tokio::test]
async fn microcompact_alone_can_bring_the_prompt_under_the_trigger() {
    let server = TestServer::start_with(&[
        ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "8000"),
        ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "1000"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    let page = "a fairly long tool output line with many words in it ".repeat(250);
    for t in 1..=4 {
        let call = pb::TraceEvent {
            tool_call_id: format!("c{t}"),
            tool_name: "fetch".into(),
            ..event(pb::TraceType::ToolCall, "")
        };
        let result = pb::TraceEvent {
            tool_call_id: format!("c{t}"),
            tool_result: Some(prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(page.clone())),
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
}

/// DESIGN §4 for 30 turns against an LLM summarizer over HTTP, with the
/// provider's usage reported: compaction happens at the first prompt after
/// the trigger is passed, the prompt then starts with the memory block and
/// the tail, the files are as DESIGN §2 says, and no trace is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_turns_compact_at_the_right_time_and_lose_nothing() {
    let answer = r#"{"episodic_summary": "Earlier turns: weather lookups.", "semantic_facts": [{"fact": "User checks the weather daily", "confidence": 0.9, "salience": 0.8}]}"#;
    let (base, _) = fake_llm(vec![(200, completion(answer))]).await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "6000"),
        ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "1000"),
    ])
    .await;
    let mut c = server.client().await;
    let agent = "thirty";
    let mut events = 0;
    let mut compacted_at = vec![];
    let mut over_trigger = false;
    for turn in 1..=30 {
        let p = c
            .prepare_request(pb::PrepareRequestRequest {
                agent_id: agent.into(),
                system_prompt: "You answer weather questions.".into(),
                user_input: Some(user(&format!(
                    "Turn {turn}: what is the weather in city {turn}? {}",
                    "Please be detailed. ".repeat(15)
                ))),
                model: "agent-model".into(),
                render_format: pb::RenderFormat::OpenaiChat.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        events += 1;
        let report = p.compaction.clone().unwrap();
        let budget = p.budget.unwrap();
        // It runs exactly when the last reported prompt, or this prompt's
        // own estimate, passed the trigger.
        let due = over_trigger || report.tokens_before > budget.trigger_tokens;
        assert_eq!(report.performed, due, "turn {turn}: {report:?}");
        if report.performed {
            assert_eq!(
                report.trigger,
                if over_trigger {
                    "token_pressure"
                } else {
                    "estimate"
                }
            );
            assert!(
                report.tokens_after < report.tokens_before,
                "turn {turn}: {report:?}"
            );
            if report.steps.contains(&"summarize".to_owned()) {
                compacted_at.push(turn);
                assert!(
                    p.messages[1]
                        .content
                        .starts_with("[MEMORY:EPISODIC]\n1) Earlier turns"),
                    "turn {turn}"
                );
                assert!(p.messages[1].content.contains("[RECENT TURNS]"));
            }
        }
        let usage = |n: u32| {
            Some(pb::Usage {
                prompt_tokens: n,
                completion_tokens: 50,
                total_tokens: n + 50,
            })
        };
        let call = pb::TraceEvent {
            tool_call_id: format!("w{turn}"),
            tool_name: "weather".into(),
            ..event(pb::TraceType::ToolCall, "")
        };
        let marked = c
            .ingest(pb::IngestRequest {
                usage: usage(p.estimated_prompt_tokens),
                model: "agent-model".into(),
                ..ingest_req(agent, vec![call])
            })
            .await
            .unwrap()
            .into_inner()
            .compaction_required;
        let result = pb::TraceEvent {
            tool_call_id: format!("w{turn}"),
            content: format!(
                "Sunny, {turn} degrees. {}",
                "Light wind from the west. ".repeat(10)
            ),
            ..event(pb::TraceType::ToolResult, "")
        };
        c.ingest(ingest_req(agent, vec![result])).await.unwrap();
        let cont = c
            .prepare_request(pb::PrepareRequestRequest {
                agent_id: agent.into(),
                model: "agent-model".into(),
                render_format: pb::RenderFormat::OpenaiChat.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let report = cont.compaction.clone().unwrap();
        let due = marked || report.tokens_before > budget.trigger_tokens;
        assert_eq!(
            report.performed, due,
            "continuation of turn {turn}: {report:?}"
        );
        if report.steps.contains(&"summarize".to_owned()) {
            compacted_at.push(turn);
        }
        let out = c
            .ingest(pb::IngestRequest {
                usage: usage(cont.estimated_prompt_tokens),
                model: "agent-model".into(),
                ..ingest_req(
                    agent,
                    vec![event(
                        pb::TraceType::Assistant,
                        &format!("It is sunny in city {turn}."),
                    )],
                )
            })
            .await
            .unwrap()
            .into_inner();
        events += 3;
        over_trigger = cont.estimated_prompt_tokens > budget.trigger_tokens;
        assert_eq!(out.compaction_required, over_trigger, "turn {turn}");
    }
    assert!(
        !compacted_at.is_empty(),
        "30 turns of this size must compact"
    );
    let dir = server.agents_dir().join(agent);
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "episodic.jsonl",
            "raw_traces.jsonl",
            "raw_traces_archive.jsonl",
            "semantic.jsonl",
            "state.json"
        ]
    );
    let mut ids = vec![];
    for file in ["raw_traces.jsonl", "raw_traces_archive.jsonl"] {
        for line in std::fs::read_to_string(dir.join(file)).unwrap().lines() {
            ids.push(
                serde_json::from_str::<serde_json::Value>(line).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    let total = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(
        (ids.len(), total),
        (events, events),
        "every trace once, in active or archive"
    );
}
