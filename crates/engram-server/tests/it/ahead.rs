//! Summaries written ahead of the trigger (DESIGN §14), against an LLM
//! over HTTP that answers only when the test says: past
//! `budget.precompact_ratio` the summary is asked for in the background; a
//! prompt past the trigger that still fits does not wait for it; once it
//! is ready the next prompt commits it at once; a prompt that would not
//! fit waits; a failed one counts as a failed compaction.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use engram_proto::pb;
use tokio::sync::Semaphore;

const SUMMARY: &str =
    r#"{"episodic_summary": "Earlier turns: weather lookups.", "semantic_facts": []}"#;

/// A call that waited for the gated summarizer would never answer.
const NO_WAIT: Duration = Duration::from_secs(60);

async fn server(base: &str) -> TestServer {
    TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        // An input budget of 4,700 tokens: the summary starts past 2,820
        // (0.6) and the trigger is at 3,760 (0.8).
        ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "6000"),
        ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "1000"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "2"),
    ])
    .await
}

/// Turn `n`: its prompt (within `NO_WAIT`), then the answer ingested.
async fn turn(c: &mut Client, agent: &str, n: usize) -> pb::PrepareRequestResponse {
    let ask = c.prepare_request(pb::PrepareRequestRequest {
        agent_id: agent.into(),
        system_prompt: "You answer weather questions.".into(),
        user_input: Some(user(&format!(
            "Turn {n}: what is the weather in city {n}? {}",
            "Please be detailed. ".repeat(15)
        ))),
        model: "agent-model".into(),
        render_format: pb::RenderFormat::OpenaiChat.into(),
        ..Default::default()
    });
    let p = tokio::time::timeout(NO_WAIT, ask)
        .await
        .unwrap_or_else(|_| panic!("turn {n}: the prompt waited for the summarizer"))
        .unwrap()
        .into_inner();
    let answer = format!("In city {n} it is sunny. {}", "More detail. ".repeat(15));
    c.ingest(ingest_req(
        agent,
        vec![event(pb::TraceType::Assistant, &answer)],
    ))
    .await
    .unwrap();
    p
}

async fn stats(c: &mut Client, agent: &str) -> pb::GetContextStatsResponse {
    c.get_context_stats(pb::GetContextStatsRequest {
        agent_id: agent.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// Polls the agent's stats until `done` holds (the summary is written
/// by a background task: no call returns when it is).
async fn until(
    c: &mut Client,
    agent: &str,
    done: impl Fn(&pb::GetContextStatsResponse) -> bool,
) -> pb::GetContextStatsResponse {
    let deadline = tokio::time::Instant::now() + NO_WAIT;
    loop {
        let s = stats(c, agent).await;
        if done(&s) {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {s:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Talks until a prompt passes `budget.precompact_ratio`; returns the
/// last turn's number once the summarizer has been asked.
async fn talk_past_precompact(c: &mut Client, agent: &str, arrived: &tokio::sync::Notify) -> usize {
    let mut precompact = 0;
    let mut n = 0;
    loop {
        n += 1;
        let p = turn(c, agent, n).await;
        if n == 1 {
            precompact = stats(c, agent).await.precompact_tokens;
            assert_eq!(precompact, 2_820);
        }
        assert!(!p.compaction.unwrap_or_default().performed, "turn {n}");
        if p.estimated_prompt_tokens > precompact {
            break;
        }
    }
    tokio::time::timeout(NO_WAIT, arrived.notified())
        .await
        .expect("the summary is asked for");
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_written_ahead_is_committed_at_once_and_no_prompt_waits_for_it() {
    let gate = Arc::new(Semaphore::new(0));
    let (base, seen, bodies, arrived) =
        fake_llm_recording(vec![(200, completion(SUMMARY))], Arc::clone(&gate)).await;
    let server = server(&base).await;
    let mut c = server.client().await;
    let agent = "ahead";
    let started = talk_past_precompact(&mut c, agent, &arrived).await;
    // The window is the one a compaction would have taken then: whole
    // turns but the current one and the raw tail of two.
    let last = started - 3;
    let asked = bodies.lock().unwrap()[0].clone();
    assert!(asked.contains("Turn 1:"), "{asked}");
    assert!(asked.contains(&format!("Turn {last}:")), "{asked}");
    assert!(!asked.contains(&format!("Turn {}:", last + 1)), "{asked}");
    assert_eq!(stats(&mut c, agent).await.summary_ahead, "writing");

    // Past the trigger the prompt still fits: it goes out uncompacted, at
    // once, while the summary is being written.
    let mut n = started;
    let mut past_trigger = 0;
    while past_trigger < 2 {
        n += 1;
        let p = turn(&mut c, agent, n).await;
        let budget = p.budget.unwrap();
        assert!(!p.compaction.unwrap_or_default().performed, "turn {n}");
        assert!(p.estimated_prompt_tokens <= budget.input_budget, "turn {n}");
        if p.estimated_prompt_tokens > budget.trigger_tokens {
            past_trigger += 1;
        }
    }

    gate.add_permits(1);
    until(&mut c, agent, |s| s.summary_ahead == "ready").await;
    n += 1;
    let p = turn(&mut c, agent, n).await;
    let report = p.compaction.unwrap();
    assert!(report.performed, "{report:?}");
    assert!(report.prepared_in_background, "{report:?}");
    assert!(report.prepared_secs_ago >= 0.0, "{report:?}");
    assert_eq!(report.steps, ["summarize"]);
    let window: Vec<String> = (1..=last).map(|t| format!("turn_{t:04}")).collect();
    assert_eq!(report.turn_ids, window, "the turns summarized ahead");
    // The turns that arrived meanwhile stayed, whole.
    let prompt: String = p.messages.iter().map(|m| m.content.as_str()).collect();
    for t in last + 1..=n {
        assert!(prompt.contains(&format!("Turn {t}:")), "turn {t} kept");
    }
    assert!(prompt.contains("Earlier turns: weather lookups."));
    assert_eq!(seen.lock().unwrap().len(), 1, "one summary, no turn twice");
    let s = stats(&mut c, agent).await;
    assert_eq!((s.compactions, s.summary_ahead.as_str()), (1, ""));
    // Each trace once: the window's archived, the rest active.
    assert_eq!(report.traces_pruned as usize, 2 * last);
    let active = all_traces(&mut c, agent).await;
    let mut ids: Vec<&str> = active.iter().map(|t| t.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!((ids.len(), active.len()), (2 * (n - last), 2 * (n - last)));
}

/// A prompt that would not fit its window waits for the summary being
/// written, and commits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_would_not_fit_waits_for_the_summary_written_ahead() {
    let gate = Arc::new(Semaphore::new(0));
    let (base, seen, _, arrived) =
        fake_llm_recording(vec![(200, completion(SUMMARY))], Arc::clone(&gate)).await;
    let server = server(&base).await;
    let mut c = server.client().await;
    let agent = "full";
    let started = talk_past_precompact(&mut c, agent, &arrived).await;
    // ~3,200 more tokens: past the input budget of 4,700.
    let big = format!("A long report: {}", "tokens and more tokens ".repeat(800));
    c.ingest(ingest_req(agent, vec![user(&big)])).await.unwrap();
    let mut waiting = server.client().await;
    let ask = tokio::spawn(async move {
        waiting
            .prepare_request(pb::PrepareRequestRequest {
                agent_id: agent.into(),
                model: "agent-model".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    });
    gate.add_permits(1);
    let p = ask.await.unwrap();
    let report = p.compaction.unwrap();
    assert!(report.tokens_before > p.budget.unwrap().input_budget);
    assert!(report.performed, "{report:?}");
    assert!(report.prepared_in_background, "{report:?}");
    let window: Vec<String> = (1..=started - 3).map(|t| format!("turn_{t:04}")).collect();
    assert_eq!(report.turn_ids, window);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// A summary that fails in the background counts as a failed compaction
/// and prunes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_summary_ahead_counts_as_a_failed_compaction() {
    let open = Arc::new(Semaphore::new(1 << 20));
    let (base, _, _, arrived) =
        fake_llm_recording(vec![(400, r#"{"error": "no"}"#.into())], open).await;
    let server = server(&base).await;
    let mut c = server.client().await;
    let agent = "failing";
    talk_past_precompact(&mut c, agent, &arrived).await;
    let s = until(&mut c, agent, |s| {
        s.consecutive_failures == 1 && s.summary_ahead.is_empty()
    })
    .await;
    assert_eq!((s.compactions, s.epoch), (0, 0), "nothing pruned");
}
