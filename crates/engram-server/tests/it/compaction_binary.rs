//! Compaction with the real binary: Ingest during a slow summary, kill -9
//! and crashes at each step, a 30-turn loop against an LLM over HTTP.

use crate::common;

use std::sync::Arc;

use common::*;
use engram_proto::pb;

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
    let report = compact_now(&mut c, "k").await;
    assert!(report.performed, "{report:?}");
    assert_eq!(
        all_traces(&mut c, "k").await.len() + report.traces_pruned as usize,
        10
    );
}

/// The real binary dies (abort, no cleanup) before each step of a
/// compaction; the restarted server finds the agent consistent and the
/// compaction finished. Needs the `fault-injection` build (`make test`).
#[cfg(feature = "fault-injection")]
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

/// DESIGN §4 for 30 turns against an LLM summarizer over HTTP, with the
/// provider's usage reported: compaction happens at the first prompt after
/// the trigger is passed, the prompt then starts with the memory block and
/// the tail, the files are as DESIGN §2 says, and no trace is lost. With
/// no summary written ahead (`precompact_ratio = 0`): every compaction
/// waits for its summary (`ahead.rs` tests the other way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_turns_compact_at_the_right_time_and_lose_nothing() {
    let answer = r#"{"episodic_summary": "Earlier turns: weather lookups.", "semantic_facts": [{"fact": "User checks the weather daily", "confidence": 0.9, "salience": 0.8}]}"#;
    let (base, _) = fake_llm(vec![(200, completion(answer))]).await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "6000"),
        ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "1000"),
        ("ENGRAM__BUDGET__PRECOMPACT_RATIO", "0"),
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
            // The search index recall reads from.
            ".index",
            // The compaction log.
            "compactions.jsonl",
            "episodic.jsonl",
            "raw_traces.jsonl",
            "raw_traces_archive.jsonl",
            "semantic.jsonl",
            "state.json",
            "turns.json"
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
