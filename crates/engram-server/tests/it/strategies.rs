//! Compaction strategies over gRPC (`policy.strategy`, per agent or per
//! request): `trim` archives whole turns with no summary, calls and results
//! kept together, and search and recall still find what it archived;
//! `compact_tool_results` only hides old tool results; `none` never
//! compacts. None of the three asks the summarizer: the configured LLM is a
//! local endpoint that fails every request and counts them. (The snip tier
//! of `summarize`: `snip.rs`.)

use crate::common;

use common::*;
use engram_proto::pb;

/// A server whose summarizer is an endpoint that fails every request (and
/// counts them), with `env` besides.
pub(crate) async fn with_failing_llm(
    env: &[(&str, &str)],
) -> (TestServer, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let (base, seen) = fake_llm(vec![(500, "{}".into())]).await;
    let mut vars = vec![
        ("ENGRAM__LLM__BASE_URL", base.as_str()),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__EMBED__PROVIDER", "none"),
    ];
    vars.extend_from_slice(env);
    (TestServer::start_with(&vars).await, seen)
}

/// A model of an 8,000-token window (1,000 kept for the answer): a few
/// turns reach its trigger.
pub(crate) const SMALL_WINDOW: [(&str, &str); 2] = [
    ("ENGRAM__BUDGET__DEFAULT_CONTEXT_TOKENS", "8000"),
    ("ENGRAM__BUDGET__DEFAULT_MAX_OUTPUT_TOKENS", "1000"),
];

/// [`with_failing_llm`] with [`SMALL_WINDOW`] and `env`.
pub(crate) async fn small_with_failing_llm(
    env: &[(&str, &str)],
) -> (TestServer, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let mut vars = SMALL_WINDOW.to_vec();
    vars.extend_from_slice(env);
    with_failing_llm(&vars).await
}

/// A prompt of `agent` for the small-window model, with `input` as the new
/// turn's message and `strategy` ("": the agent's).
pub(crate) fn tiny(agent: &str, input: Option<&str>, strategy: &str) -> pb::PrepareRequestRequest {
    pb::PrepareRequestRequest {
        agent_id: agent.into(),
        user_input: input.map(user),
        model: "tiny-model".into(),
        strategy: strategy.into(),
        ..Default::default()
    }
}

/// Six turns; the third calls a tool and gets its result, the sixth is the
/// current one.
async fn six_turns(c: &mut Client, agent: &str) {
    let talk = [
        "My bicycle is a green Gazelle from 1998.",
        "The office moved to the harbour district.",
        "Check the weather in Oslo please.",
        "I am learning to play the cello.",
        "Our cat knocked over the plant again.",
        "What should I cook tonight?",
    ];
    for (i, text) in talk.iter().enumerate() {
        let mut events = vec![user(text)];
        if i == 2 {
            events.push(tool_call("w1", "weather"));
            events.push(tool_result("w1", "Oslo: 4 degrees and drizzle"));
        }
        if i < 5 {
            events.push(event(pb::TraceType::Assistant, "Noted."));
        }
        c.ingest(ingest_req(agent, events)).await.unwrap();
    }
}

fn prepare(agent: &str, format: pb::RenderFormat) -> pb::PrepareRequestRequest {
    pb::PrepareRequestRequest {
        agent_id: agent.into(),
        model: "gpt-4o".into(),
        render_format: format.into(),
        ..Default::default()
    }
}

const FORMATS: [(pb::RenderFormat, &str); 4] = [
    (pb::RenderFormat::OpenaiChat, "openai-chat"),
    (pb::RenderFormat::OpenaiResponses, "openai-responses"),
    (pb::RenderFormat::AnthropicMessages, "anthropic-messages"),
    (pb::RenderFormat::Gemini, "gemini"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_archives_whole_turns_with_no_summary_and_recall_still_finds_them() {
    let (server, llm) = with_failing_llm(&[
        ("ENGRAM__POLICY__STRATEGY", "trim"),
        ("ENGRAM__POLICY__KEEP_LAST_TURNS", "2"),
    ])
    .await;
    let mut c = server.client().await;
    six_turns(&mut c, "t").await;
    let before = all_traces(&mut c, "t").await;
    let report = compact_now(&mut c, "t").await;
    assert!(report.performed, "{report:?}");
    assert_eq!(report.steps, ["trim"]);
    assert_eq!(report.strategy, "trim");
    assert_eq!(report.error, "");
    // Turns 4 and 5 kept before the current one; the tool turn goes whole.
    assert_eq!(report.turn_ids, ["turn_0001", "turn_0002", "turn_0003"]);
    assert_eq!(report.traces_pruned, 8);
    assert_eq!(report.episodic_id, "", "no summary");
    assert!(report.tokens_after < report.tokens_before, "{report:?}");
    assert!(
        llm.lock().unwrap().is_empty(),
        "the summarizer was not asked"
    );
    assert!(bundle(&mut c, "t").await.episodic.is_empty());

    // The kept turns are messages as they were, from turn 4 on; no
    // snapshot, since there are no memories to show.
    let mut payloads = vec![];
    for (format, name) in FORMATS {
        let p = c
            .prepare_request(prepare("t", format))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(p.epoch, 1);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let texts: Vec<&str> = p.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            texts,
            [
                "I am learning to play the cello.",
                "Noted.",
                "Our cat knocked over the plant again.",
                "Noted.",
                "What should I cook tonight?"
            ],
            "{name}"
        );
        payloads.push((format!("trimmed {name}"), name, p.rendered_payload_json));
    }
    assert_valid_payloads(&payloads);

    // Nothing lost: every trace is still there, the trimmed ones archived.
    let after = all_traces(&mut c, "t").await;
    assert_eq!(after.len(), before.len() - 8, "active traces");
    let found = c
        .search_history(pb::SearchHistoryRequest {
            agent_id: "t".into(),
            query: "Gazelle bicycle".into(),
            wait_for_index_ms: 5_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let hit = &found.matches[0];
    assert!(hit.archived, "{hit:?}");
    assert_eq!(hit.turn_id, "turn_0001");
    // And recall brings it back into the prompt when it is asked about.
    let asked = c
        .prepare_request(pb::PrepareRequestRequest {
            user_input: Some(user("Which bicycle did I say I have?")),
            recall: Some(true),
            ..prepare("t", pb::RenderFormat::Unspecified)
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        asked.recalled.iter().any(|r| r
            .trace
            .as_ref()
            .is_some_and(|t| t.content.contains("Gazelle"))),
        "{:?}",
        asked.recalled
    );

    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "t".into(),
            model: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (stats.strategy.as_str(), stats.keep_last_turns),
        ("trim", 2)
    );
    assert_eq!(stats.precompact_tokens, 0, "no summary is written ahead");
    let logged = c
        .list_compactions(pb::ListCompactionsRequest {
            agent_id: "t".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .compactions;
    assert_eq!(logged[0].outcome, "trimmed");
    assert_eq!(logged[0].summarizer, "");
    assert_eq!(logged[0].report.as_ref().unwrap().strategy, "trim");
    assert!(
        llm.lock().unwrap().is_empty(),
        "the summarizer was never asked"
    );
}

/// A size trigger with `trim` (asked for by the request): the prompt that
/// `keep_last_turns` would leave is still over the window, so fewer turns
/// are kept until it fits, whole, in one new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_keeps_fewer_turns_when_the_kept_ones_would_not_fit() {
    let (server, llm) = small_with_failing_llm(&[("ENGRAM__POLICY__KEEP_LAST_TURNS", "8")]).await;
    let mut c = server.client().await;
    let long = "a long answer with many words that fill the window quickly ".repeat(90);
    for t in 1..=10 {
        c.ingest(ingest_req(
            "big",
            vec![
                user(&format!("question {t}")),
                tool_call(&format!("c{t}"), "lookup"),
                tool_result(&format!("c{t}"), "found"),
                event(pb::TraceType::Assistant, &long),
            ],
        ))
        .await
        .unwrap();
    }
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            render_format: pb::RenderFormat::AnthropicMessages.into(),
            ..tiny("big", Some("and now?"), "trim")
        })
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.clone().unwrap();
    assert!(report.performed, "{report:?}");
    assert_eq!(
        (report.steps.as_slice(), report.strategy.as_str()),
        (&["trim".to_owned()][..], "trim")
    );
    let budget = p.budget.unwrap();
    // Under the trigger, not only the window: the next prompt does not
    // trim again at once.
    assert!(
        p.estimated_prompt_tokens <= budget.trigger_tokens,
        "{} > {}",
        p.estimated_prompt_tokens,
        budget.trigger_tokens
    );
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(p.epoch, 1, "one compaction, one epoch");
    c.ingest(ingest_req(
        "big",
        vec![event(pb::TraceType::Assistant, "a short answer")],
    ))
    .await
    .unwrap();
    let next = c
        .prepare_request(tiny("big", Some("and next?"), "trim"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        !next.compaction.unwrap().performed,
        "no trim at the next prompt"
    );
    assert_eq!(next.epoch, 1);
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "big".into(),
            model: "tiny-model".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.compactions, 1, "its passes are one compaction");
    // Fewer than 8 turns kept, each whole: every call has its result.
    let users = p
        .messages
        .iter()
        .filter(|m| m.role == pb::Role::User as i32)
        .count();
    assert!((2..=8).contains(&users), "{users} user messages");
    let calls: Vec<&str> = p
        .messages
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
        .collect();
    let results: Vec<&str> = p
        .messages
        .iter()
        .filter(|m| m.role == pb::Role::Tool as i32)
        .map(|m| m.tool_call_id.as_str())
        .collect();
    assert_eq!(calls, results);
    assert_valid_payloads(&[(
        "trimmed to fit".into(),
        "anthropic-messages",
        p.rendered_payload_json,
    )]);
    assert!(llm.lock().unwrap().is_empty());

    // Fewer turns than keep_last_turns, each too large: the window is
    // empty, but the prompt is over the window, so fewer are kept still.
    let huge = "one very long message that alone takes a good part of the window ".repeat(160);
    for t in 1..=4 {
        c.ingest(ingest_req(
            "few",
            vec![
                user(&format!("{t}: {huge}")),
                event(pb::TraceType::Assistant, "ok"),
            ],
        ))
        .await
        .unwrap();
    }
    let p = c
        .prepare_request(tiny("few", Some("still there?"), "trim"))
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert!(report.performed && report.steps == ["trim"], "{report:?}");
    assert!(p.estimated_prompt_tokens <= p.budget.unwrap().input_budget);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert!(llm.lock().unwrap().is_empty());
}

/// `compact_tool_results`: old tool results become placeholders and
/// nothing more; a prompt still over the trigger is served with a warning
/// saying so, nothing archived, no model asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_tool_results_only_hides_results_and_says_when_that_is_not_enough() {
    let (server, llm) = small_with_failing_llm(&[
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
        ("ENGRAM__POLICY__STRATEGY", "compact_tool_results"),
    ])
    .await;
    let mut c = server.client().await;
    let chatter =
        "the user writes a long message that no tier but a summary can shrink ".repeat(100);
    for t in 1..=5 {
        c.ingest(ingest_req(
            "tools",
            vec![
                user(&chatter),
                tool_call(&format!("c{t}"), "fetch"),
                tool_result(&format!("c{t}"), &"a page of fetched text ".repeat(40)),
                event(pb::TraceType::Assistant, "done"),
            ],
        ))
        .await
        .unwrap();
    }
    let p = c
        .prepare_request(tiny("tools", None, ""))
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert_eq!(report.strategy, "compact_tool_results");
    assert_eq!(report.steps, ["microcompact"], "{report:?}");
    assert!(
        report
            .error
            .contains("the strategy compact_tool_results has nothing more to do"),
        "{report:?}"
    );
    assert!(
        p.warnings.iter().any(|w| w.starts_with("compaction (estimate) stopped after microcompact: the prompt is still over the compaction trigger")),
        "{:?}",
        p.warnings
    );
    let hidden = p
        .messages
        .iter()
        .filter(|m| m.content.starts_with("[tool result of"))
        .count();
    assert_eq!(
        hidden, 3,
        "every result but the kept turn's and the current one's"
    );
    assert_eq!(
        p.messages
            .iter()
            .filter(|m| m.role == pb::Role::User as i32)
            .count(),
        5,
        "every turn kept"
    );
    assert!(
        !server
            .agents_dir()
            .join("tools/raw_traces_archive.jsonl")
            .exists()
    );
    // A Compact of an agent with no old tool result says so.
    c.ingest(ingest_req(
        "plain",
        vec![user("hello"), event(pb::TraceType::Assistant, "hi")],
    ))
    .await
    .unwrap();
    let nothing = compact_now(&mut c, "plain").await;
    assert!(!nothing.performed);
    assert!(
        nothing
            .error
            .starts_with("nothing to compact: no tool result older than the raw tail"),
        "{nothing:?}"
    );
    // The next prompt has nothing more to hide: the same warning, no new epoch.
    let again = c
        .prepare_request(tiny("tools", None, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.epoch, p.epoch);
    assert!(
        again
            .compaction
            .unwrap()
            .error
            .contains("compact_tool_results")
    );
    assert!(llm.lock().unwrap().is_empty(), "no summarizer request");
}

/// `none`: nothing is compacted, however large the prompt; the prompt over
/// the window says so; a forced compaction says why nothing ran; a
/// request may still name another strategy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_never_compacts_and_says_so() {
    let (server, llm) = small_with_failing_llm(&[
        ("ENGRAM__POLICY__STRATEGY", "none"),
        ("ENGRAM__POLICY__KEEP_LAST_TURNS", "2"),
    ])
    .await;
    let mut c = server.client().await;
    let long = "every word of this stays in the prompt whatever its size ".repeat(100);
    for t in 1..=8 {
        c.ingest(ingest_req(
            "raw",
            vec![
                user(&format!("{t}: {long}")),
                event(pb::TraceType::Assistant, "ok"),
            ],
        ))
        .await
        .unwrap();
    }
    let ask = || pb::PrepareRequestRequest {
        agent_id: "raw".into(),
        model: "tiny-model".into(),
        ..Default::default()
    };
    let p = c.prepare_request(ask()).await.unwrap().into_inner();
    assert_eq!(p.epoch, 0);
    assert!(!p.compaction.unwrap().performed);
    assert!(p.estimated_prompt_tokens > p.budget.unwrap().input_budget);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.starts_with("PROMPT OVER THE MODEL'S WINDOW")),
        "{:?}",
        p.warnings
    );
    let forced = c
        .prepare_request(pb::PrepareRequestRequest {
            force_compaction: true,
            ..ask()
        })
        .await
        .unwrap()
        .into_inner();
    let report = forced.compaction.unwrap();
    assert!(!report.performed);
    assert_eq!(
        (report.trigger.as_str(), report.strategy.as_str()),
        ("reactive", "none")
    );
    assert!(
        report
            .error
            .contains("compaction is off: the strategy is none"),
        "{report:?}"
    );
    let manual = compact_now(&mut c, "raw").await;
    assert!(
        !manual.performed
            && manual
                .error
                .contains("compaction is off: the strategy is none"),
        "{manual:?}"
    );
    assert_eq!(
        all_traces(&mut c, "raw").await.len(),
        16,
        "nothing archived"
    );
    // The request's strategy wins over the agent's.
    let trimmed = c
        .compact(pb::CompactRequest {
            strategy: "trim".into(),
            ..compact("raw")
        })
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert!(
        trimmed.performed && trimmed.steps == ["trim"],
        "{trimmed:?}"
    );
    assert!(llm.lock().unwrap().is_empty());
    // A name that is no strategy is refused, naming the ones there are.
    for refused in [
        c.compact(pb::CompactRequest {
            strategy: "forget".into(),
            ..compact("raw")
        })
        .await
        .unwrap_err(),
        c.prepare_request(pb::PrepareRequestRequest {
            strategy: "Trim".into(),
            ..ask()
        })
        .await
        .unwrap_err(),
    ] {
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(
            refused
                .message()
                .contains("summarize, trim, compact_tool_results, none"),
            "{}",
            refused.message()
        );
    }
}
