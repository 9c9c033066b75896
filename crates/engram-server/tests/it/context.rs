//! The context engine over gRPC: the agent loop in every render format,
//! restarts, budgets and compaction marks, context stats.

use crate::common;

use common::*;
use engram_proto::pb;
use prost_types::value::Kind;
use tonic::Code;

const FORMATS: [(pb::RenderFormat, &str); 4] = [
    (pb::RenderFormat::OpenaiChat, "openai-chat"),
    (pb::RenderFormat::OpenaiResponses, "openai-responses"),
    (pb::RenderFormat::AnthropicMessages, "anthropic-messages"),
    (pb::RenderFormat::Gemini, "gemini"),
];

fn string_value(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn prepare(agent: &str, format: pb::RenderFormat, user: Option<&str>) -> pb::PrepareRequestRequest {
    pb::PrepareRequestRequest {
        agent_id: agent.into(),
        system_prompt: "You are a weather bot.".into(),
        user_input: user.map(|u| pb::TraceEvent {
            content: u.into(),
            ..Default::default()
        }),
        model: "gpt-4o".into(),
        render_format: format.into(),
        ..Default::default()
    }
}

fn call(id: &str, city: &str) -> pb::TraceEvent {
    pb::TraceEvent {
        tool_call_id: id.into(),
        tool_name: "weather".into(),
        tool_args: Some(prost_types::Struct {
            fields: [("city".to_string(), string_value(city))].into(),
        }),
        ..event(pb::TraceType::ToolCall, "")
    }
}

fn result(id: &str, text: &str) -> pb::TraceEvent {
    pb::TraceEvent {
        tool_call_id: id.into(),
        tool_result: Some(string_value(text)),
        ..event(pb::TraceType::ToolResult, "")
    }
}

fn usage(prompt: u32) -> Option<pb::Usage> {
    Some(pb::Usage {
        prompt_tokens: prompt,
        completion_tokens: 20,
        total_tokens: prompt + 20,
    })
}

/// The loop of DESIGN §4, a few turns, in every format; every payload the
/// agent receives must pass the provider's validator.
#[tokio::test]
async fn the_agent_loop_works_in_every_format() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let mut payloads = vec![];
    for (format, tag) in FORMATS {
        let agent = format!("loop-{tag}");
        for turn in 1..=3 {
            let p = c
                .prepare_request(prepare(
                    &agent,
                    format,
                    Some(&format!("Weather in city {turn}?")),
                ))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(p.turn_id, format!("turn_{turn:04}"));
            payloads.push((
                format!("{agent} turn {turn} first"),
                tag,
                p.rendered_payload_json,
            ));
            // The LLM asks for two tools in parallel; one of them fails.
            let out = c
                .ingest(pb::IngestRequest {
                    usage: usage(p.estimated_prompt_tokens),
                    model: "gpt-4o".into(),
                    ..ingest_req(
                        &agent,
                        vec![
                            event(pb::TraceType::Assistant, "Checking."),
                            call(&format!("t{turn}a"), "Oslo"),
                            call(&format!("t{turn}b"), "Rome"),
                        ],
                    )
                })
                .await
                .unwrap()
                .into_inner();
            assert!(!out.compaction_required);
            // A prompt now, before the results: the pending calls are answered
            // by placeholders so the provider still accepts it.
            let pending = c
                .prepare_request(prepare(&agent, format, None))
                .await
                .unwrap()
                .into_inner();
            payloads.push((
                format!("{agent} turn {turn} pending"),
                tag,
                pending.rendered_payload_json,
            ));
            c.ingest(ingest_req(
                &agent,
                vec![
                    result(&format!("t{turn}a"), "3 degrees"),
                    pb::TraceEvent {
                        tool_error: "upstream timeout".into(),
                        ..result(&format!("t{turn}b"), "")
                    },
                ],
            ))
            .await
            .unwrap();
            let next = c
                .prepare_request(prepare(&agent, format, None))
                .await
                .unwrap()
                .into_inner();
            payloads.push((
                format!("{agent} turn {turn} results"),
                tag,
                next.rendered_payload_json,
            ));
            c.ingest(ingest_req(
                &agent,
                vec![event(pb::TraceType::Assistant, "Oslo 3, Rome unknown.")],
            ))
            .await
            .unwrap();
        }
        let last = c
            .prepare_request(prepare(&agent, format, None))
            .await
            .unwrap()
            .into_inner();
        // system + 3 × (user, assistant+calls, 2 tools, assistant)
        assert_eq!(last.messages.len(), 1 + 3 * 5);
        assert_eq!(last.messages[0].role, pb::Role::System as i32);
        assert_eq!(last.messages[2].tool_calls.len(), 2);
        assert!(last.messages[4].is_error);
        assert!(last.warnings.is_empty(), "{:?}", last.warnings);
        assert_eq!(last.compaction.unwrap().trigger, "");
    }
    assert_valid_payloads(&payloads);
}

#[tokio::test]
async fn appends_keep_the_previous_payload_as_a_prefix() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let agent = "prefix";
    let mut previous = String::new();
    for turn in 1..=4 {
        let p = c
            .prepare_request(prepare(
                agent,
                pb::RenderFormat::OpenaiChat,
                Some(&format!("q{turn}")),
            ))
            .await
            .unwrap()
            .into_inner();
        let json = p.rendered_payload_json;
        if !previous.is_empty() {
            let open = previous.strip_suffix("]}").unwrap();
            assert!(json.starts_with(open), "turn {turn}:\n{previous}\n{json}");
        }
        previous = json;
        c.ingest(ingest_req(agent, vec![call(&format!("c{turn}"), "Oslo")]))
            .await
            .unwrap();
        c.ingest(ingest_req(
            agent,
            vec![
                result(&format!("c{turn}"), "3"),
                event(pb::TraceType::Assistant, "3 degrees"),
            ],
        ))
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn a_restart_gives_back_the_same_prompt() {
    let data = tempfile::tempdir().unwrap();
    let daemon = Daemon::spawn(data.path(), &[]);
    let mut c = daemon.client().await;
    let agent = "restart";
    c.prepare_request(prepare(
        agent,
        pb::RenderFormat::AnthropicMessages,
        Some("hello"),
    ))
    .await
    .unwrap();
    c.ingest(ingest_req(agent, vec![call("x1", "Oslo")]))
        .await
        .unwrap();
    c.ingest(ingest_req(agent, vec![result("x1", "3 degrees")]))
        .await
        .unwrap();
    let mut before = vec![];
    for (format, _) in FORMATS {
        let mut req = prepare(agent, format, None);
        req.system_prompt.clear(); // the stored one is used
        before.push(c.prepare_request(req).await.unwrap().into_inner());
    }
    drop(c);
    drop(daemon);
    let daemon = Daemon::spawn(data.path(), &[]);
    let mut c = daemon.client().await;
    for ((format, tag), was) in FORMATS.iter().zip(before) {
        let mut req = prepare(agent, *format, None);
        req.system_prompt.clear();
        let now = c.prepare_request(req).await.unwrap().into_inner();
        assert_eq!(
            now.rendered_payload_json, was.rendered_payload_json,
            "{tag}"
        );
        assert_eq!(now.messages, was.messages, "{tag}");
        assert_eq!(
            now.estimated_prompt_tokens, was.estimated_prompt_tokens,
            "{tag}"
        );
    }
}

#[tokio::test]
async fn reported_usage_over_the_trigger_requires_compaction() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let agent = "pressure";
    let p = c
        .prepare_request(prepare(agent, pb::RenderFormat::OpenaiChat, Some("hi")))
        .await
        .unwrap()
        .into_inner();
    let budget = p.budget.unwrap();
    assert_eq!(
        budget.max_context_tokens, 128_000,
        "gpt-4o from the model table"
    );
    assert_eq!(budget.input_budget, 128_000 - 16_384 - 2_048);
    let ok = c
        .ingest(pb::IngestRequest {
            usage: usage(budget.trigger_tokens),
            model: "gpt-4o".into(),
            ..ingest_req(agent, vec![event(pb::TraceType::Assistant, "a")])
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!ok.compaction_required, "at the trigger is not over it");
    let over = c
        .ingest(pb::IngestRequest {
            usage: usage(budget.trigger_tokens + 1),
            model: "gpt-4o".into(),
            ..ingest_req(agent, vec![event(pb::TraceType::Assistant, "b")])
        })
        .await
        .unwrap()
        .into_inner();
    assert!(over.compaction_required);
    let p = c
        .prepare_request(prepare(agent, pb::RenderFormat::OpenaiChat, None))
        .await
        .unwrap()
        .into_inner();
    let report = p.compaction.unwrap();
    assert_eq!(report.trigger, "token_pressure");
    assert!(!report.performed);
    assert!(
        p.warnings.iter().any(|w| w.contains("not pruned")),
        "{:?}",
        p.warnings
    );
    // The reported size plus what came since drives the estimate.
    assert!(p.estimated_prompt_tokens > budget.trigger_tokens);
    let forced = c
        .prepare_request(pb::PrepareRequestRequest {
            force_compaction: true,
            ..prepare("fresh", pb::RenderFormat::Unspecified, Some("x"))
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(forced.compaction.unwrap().trigger, "reactive");
    assert!(
        forced.rendered_payload_json.is_empty(),
        "no format, no payload"
    );
}

#[tokio::test]
async fn context_stats_answer_the_context_command() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let agent = "stats";
    c.prepare_request(prepare(
        agent,
        pb::RenderFormat::OpenaiChat,
        Some("What is the weather in Oslo?"),
    ))
    .await
    .unwrap();
    c.ingest(pb::IngestRequest {
        usage: usage(1_000),
        model: "gpt-4o".into(),
        ..ingest_req(agent, vec![call("s1", "Oslo")])
    })
    .await
    .unwrap();
    let last = pb::TraceEvent {
        ts: Some(1_800_000_000.5),
        ..result("s1", "3 degrees and clear")
    };
    c.ingest(ingest_req(agent, vec![last])).await.unwrap();
    let stats = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: agent.into(),
            model: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.model, "gpt-4o", "the last reported model");
    assert_eq!(
        stats.messages, 4,
        "system, user, assistant call, tool result"
    );
    assert_eq!(stats.turns, 1);
    assert_eq!(
        stats.last_event_at,
        Some(1_800_000_000.5),
        "the last event's time"
    );
    assert_eq!(stats.last_reported_prompt_tokens, 1_000);
    assert!(stats.estimated_tokens_since_report > 0);
    assert!(stats.estimated_tokens > 0);
    let budget = stats.budget.unwrap();
    assert_eq!(stats.trigger_tokens, budget.trigger_tokens);
    let expected = f64::from(1_000 + stats.estimated_tokens_since_report) * 100.0
        / f64::from(budget.input_budget);
    assert!(
        (stats.percent_used - expected).abs() < 1e-9,
        "{} vs {expected}",
        stats.percent_used
    );
    let names: Vec<_> = stats.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["raw_traces.jsonl", "state.json"]);
    assert!(stats.files.iter().all(|f| f.bytes > 0));
    let other = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: agent.into(),
            model: "claude-3-5-sonnet-20241022".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(other.budget.unwrap().max_context_tokens, 200_000);
}

#[tokio::test]
async fn bad_prepare_requests_are_refused() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let status = c
        .prepare_request(prepare("ghost", pb::RenderFormat::OpenaiChat, None))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = c
        .prepare_request(pb::PrepareRequestRequest {
            render_format: 42,
            ..prepare("a", pb::RenderFormat::OpenaiChat, Some("x"))
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = c
        .prepare_request(pb::PrepareRequestRequest {
            user_input: Some(event(pb::TraceType::Assistant, "not a user")),
            ..prepare("a", pb::RenderFormat::OpenaiChat, None)
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("user event"));
    let status = c
        .prepare_request(pb::PrepareRequestRequest {
            model: String::new(),
            ..prepare("a", pb::RenderFormat::OpenaiChat, Some("x"))
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("model"));
    assert_eq!(
        std::fs::read_dir(server.agents_dir()).unwrap().count(),
        0,
        "refusals leave no files"
    );
    let status = c
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "ghost".into(),
            model: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

/// Agents that number calls per response send `call_1` every turn, and
/// Gemini's calls carry no id: both are stored, paired and rendered so
/// that every provider accepts the prompt.
#[tokio::test]
async fn reused_and_missing_call_ids_pair_and_render_for_every_provider() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    for (turn, city) in [(1, "Oslo"), (2, "Rome")] {
        c.ingest(ingest_req(
            "reuse",
            vec![
                user(&format!("Weather in {city}?")),
                tool_call("call_1", "weather"),
                tool_result("call_1", &format!("{turn}0 °C")),
            ],
        ))
        .await
        .unwrap_or_else(|e| panic!("turn {turn}: {e}"));
    }
    let waiting = c
        .ingest(ingest_req("reuse", vec![tool_call("call_1", "weather")]))
        .await
        .unwrap();
    assert_eq!(waiting.get_ref().traces[0].turn_id, "turn_0002");
    let again = c
        .ingest(ingest_req("reuse", vec![tool_call("call_1", "weather")]))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::InvalidArgument);
    assert!(
        again.message().contains("still waiting"),
        "{}",
        again.message()
    );
    c.ingest(ingest_req("reuse", vec![tool_result("call_1", "rain")]))
        .await
        .unwrap();
    // Gemini: neither the call nor its result names an id.
    let gemini = c
        .ingest(ingest_req(
            "reuse",
            vec![
                user("And Lisbon?"),
                pb::TraceEvent {
                    tool_call_id: String::new(),
                    ..tool_call("", "weather")
                },
                pb::TraceEvent {
                    tool_name: "weather".into(),
                    ..tool_result("", "22 °C")
                },
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    let assigned = &gemini.traces[1].tool_call_id;
    assert!(assigned.starts_with("call_"), "{assigned}");
    assert_eq!(
        &gemini.traces[2].tool_call_id, assigned,
        "paired by tool_name"
    );
    let mut payloads = vec![];
    for (format, name) in FORMATS {
        let mut req = prepare("reuse", format, None);
        req.model = "gpt-4o".into();
        let p = c.prepare_request(req).await.unwrap().into_inner();
        payloads.push((format!("reuse/{name}"), name, p.rendered_payload_json));
    }
    assert_valid_payloads(&payloads);
}

/// Two huge user messages: the prompt cannot fit gpt-4o's window and
/// nothing can be compacted. The answer says so first, by how much, and
/// why compaction could not help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_window_says_so_and_by_how_much() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let big = "lorem ipsum dolor sit amet ".repeat(24_000);
    c.ingest(ingest_req("huge", vec![user(&big)]))
        .await
        .unwrap();
    let mut req = prepare("huge", pb::RenderFormat::Unspecified, Some(&big));
    req.model = "gpt-4o".into();
    let p = c.prepare_request(req).await.unwrap().into_inner();
    let budget = p.budget.unwrap().input_budget;
    assert!(
        p.estimated_prompt_tokens > budget,
        "{}",
        p.estimated_prompt_tokens
    );
    let over = &p.warnings.last().unwrap();
    assert!(
        over.starts_with(&format!(
            "PROMPT OVER THE MODEL'S WINDOW: ~{} tokens, {} over the input budget of gpt-4o",
            p.estimated_prompt_tokens,
            p.estimated_prompt_tokens - budget
        )),
        "{over}"
    );
    let report = p.compaction.unwrap();
    assert!(
        report
            .error
            .contains("every finished turn is within the last 4 turns, which are kept as they are"),
        "{}",
        report.error
    );
    assert!(p.warnings[0].contains("did not run"), "{:?}", p.warnings);
}
