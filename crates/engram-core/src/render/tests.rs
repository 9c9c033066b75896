use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{Value, json};

use super::*;
use crate::transcript::{Message, Role, Transcript};
use crate::turns::assign_all;
use crate::{Media, NewEvent, RawTrace};

const FORMATS: [(Format, &str); 4] = [
    (Format::OpenAiChat, "openai-chat"),
    (Format::OpenAiResponses, "openai-responses"),
    (Format::AnthropicMessages, "anthropic-messages"),
    (Format::Gemini, "gemini"),
];

fn messages(traces: &[RawTrace]) -> Vec<Message> {
    let t = Transcript::from_traces(traces);
    t.messages()
        .iter()
        .cloned()
        .chain(t.pending_tail())
        .collect()
}

fn prompt<'a>(messages: &'a [Message]) -> Prompt<'a> {
    Prompt {
        model: "test-model",
        system: Some("You are terse."),
        messages,
        tail: &[],
        max_output_tokens: 1024,
    }
}

/// Runs the providers' schemas and cross-message rules (validate.py, strict)
/// over every payload, in one Python process.
fn assert_valid(items: &[(String, Format, Value)]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var("ENGRAM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let venv = root.join(".venv/bin/python");
            if venv.exists() {
                venv
            } else {
                PathBuf::from("python3")
            }
        });
    let mut child = Command::new(&python)
        .arg(root.join("scripts/validate_payloads.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    {
        let mut stdin = child.stdin.take().unwrap();
        for (name, format, payload) in items {
            let tag = FORMATS.iter().find(|(f, _)| f == format).unwrap().1;
            let line = json!({"name": name, "format": tag, "payload": payload});
            writeln!(stdin, "{line}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "payloads rejected by validate.py:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn err_result(id: &str, error: &str) -> NewEvent {
    NewEvent {
        tool_error: Some(error.into()),
        ..NewEvent::tool_result(id, Value::Null)
    }
}

/// The edge cases the issue names, one conversation each.
fn fixtures() -> Vec<(&'static str, Vec<RawTrace>)> {
    let image = Media {
        images: vec!["https://example.com/cat.png".into()],
        audio: vec!["https://example.com/meow.mp3".into()],
        video: vec![],
    };
    vec![
        (
            "full loop",
            assign_all([
                NewEvent {
                    media: Some(image),
                    ..NewEvent::user("What is in this picture, and the weather in Oslo and Rome?")
                },
                NewEvent::assistant("A cat. Checking the weather."),
                NewEvent::tool_call("call_a", "weather", json!({"city": "Oslo"})),
                NewEvent::tool_call("call_b", "weather", json!({"city": "Rome"})),
                NewEvent::tool_result("call_a", json!({"temp_c": 3})),
                err_result("call_b", "upstream timeout"),
                NewEvent::assistant("Oslo is 3 °C; Rome did not answer."),
                NewEvent::user("Try Rome again."),
                NewEvent::tool_call("call_c", "weather", json!({"city": "Rome"})),
                NewEvent::tool_result("call_c", json!("20 °C")),
                NewEvent::assistant("Rome is 20 °C."),
            ]),
        ),
        (
            "pending call",
            assign_all([
                NewEvent::user("Search the web."),
                NewEvent::tool_call("call_1", "search", json!({"q": "rust"})),
                NewEvent::tool_call("call_2", "search", json!({"q": "tonic"})),
                NewEvent::tool_result("call_1", json!(["a", "b"])),
            ]),
        ),
        (
            "late result",
            assign_all([
                NewEvent::user("Start the job."),
                NewEvent::tool_call("job", "run", json!({})),
                NewEvent::user("Any news?"),
                NewEvent::tool_result("job", json!({"status": "done"})),
                NewEvent::assistant("The job is done."),
                NewEvent::user("Thanks."),
            ]),
        ),
        (
            "assistant first, odd ids",
            assign_all([
                NewEvent::assistant("Hello! How can I help?"),
                NewEvent::assistant("I can look things up."),
                NewEvent::tool_call("call.1:x", "lookup", json!({"k": 1})),
                NewEvent::tool_result("call.1:x", json!(null)),
                NewEvent::user("ok"),
            ]),
        ),
        ("named speakers", named()),
        (
            "reused and missing call ids",
            assign_all([
                NewEvent::user("Weather in Oslo?"),
                NewEvent::tool_call("call_1", "weather", json!({"city": "Oslo"})),
                NewEvent::tool_result("call_1", json!("3 °C")),
                NewEvent::user("And Rome? And what is call_1_2?"),
                NewEvent::tool_call("call_1", "weather", json!({"city": "Rome"})),
                NewEvent::tool_result("call_1", json!("20 °C")),
                NewEvent::tool_call("call_1_2", "lookup", json!({"k": "call_1_2"})),
                NewEvent::tool_result("call_1_2", json!("an id")),
                NewEvent::user("And Lisbon, as Gemini asks?"),
                NewEvent {
                    tool_call_id: None,
                    ..NewEvent::tool_call("", "weather", json!({"city": "Lisbon"}))
                },
                NewEvent {
                    tool_call_id: None,
                    tool_name: Some("weather".into()),
                    ..NewEvent::tool_result("", json!("22 °C"))
                },
                NewEvent::assistant("3, 20 and 22 °C."),
            ]),
        ),
    ]
}

/// Two people and an assistant, named as clients name them.
fn named() -> Vec<RawTrace> {
    let mut t = assign_all([
        NewEvent::user("I went to the support group."),
        NewEvent::assistant("How was it?"),
        NewEvent::user("Can I come next time?"),
        NewEvent::assistant("Of course."),
    ]);
    t[0].name = Some("Caroline".into());
    t[1].name = Some("Mel Ö".into());
    t[2].name = Some("Anna-Lee 2".into());
    t[3].name = Some("ÖÖ".into());
    t
}

#[test]
fn names_go_where_the_format_has_them() {
    let msgs = messages(&named());
    let chat = render(Format::OpenAiChat, &prompt(&msgs));
    let names: Vec<&Value> = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["name"])
        .collect();
    // The system prompt has none; others as Chat Completions takes them.
    assert_eq!(
        names,
        [
            &Value::Null,
            &json!("Caroline"),
            &json!("Mel__"),
            &json!("Anna-Lee_2"),
            &Value::Null
        ]
    );
    for format in [
        Format::OpenAiResponses,
        Format::AnthropicMessages,
        Format::Gemini,
    ] {
        let body = render(format, &prompt(&msgs)).to_string();
        assert!(!body.contains("Caroline"), "{format:?}: {body}");
    }
}

#[test]
fn every_fixture_is_valid_in_every_format() {
    let mut items = vec![];
    for (name, traces) in fixtures() {
        let msgs = messages(&traces);
        for (format, tag) in FORMATS {
            items.push((
                format!("{name}/{tag}"),
                format,
                render(format, &prompt(&msgs)),
            ));
        }
    }
    assert_valid(&items);
}

#[test]
fn openai_chat_shape() {
    let msgs = messages(&fixtures()[0].1);
    let body = render(Format::OpenAiChat, &prompt(&msgs));
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_completion_tokens"], 1024);
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m[0], json!({"role": "system", "content": "You are terse."}));
    assert_eq!(
        m[1]["content"][1]["image_url"]["url"],
        "https://example.com/cat.png"
    );
    assert!(
        m[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("[audio: https://example.com/meow.mp3]")
    );
    assert_eq!(
        m[2]["tool_calls"][1]["function"]["arguments"],
        "{\"city\":\"Rome\"}"
    );
    assert_eq!(m[4]["content"], "error: upstream timeout");
    // A tool-only assistant step has null content.
    assert_eq!(m[7]["content"], Value::Null);
    let keys: Vec<_> = body.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["model", "max_completion_tokens", "messages"],
        "growing array last"
    );
}

#[test]
fn openai_responses_shape() {
    let msgs = messages(&fixtures()[0].1);
    let body = render(Format::OpenAiResponses, &prompt(&msgs));
    assert_eq!(body["instructions"], "You are terse.");
    let input = body["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| {
            i.get("type")
                .and_then(Value::as_str)
                .unwrap_or_else(|| i["role"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "user",
            "assistant",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
            "assistant",
            "user",
            "function_call",
            "function_call_output",
            "assistant",
        ]
    );
    assert_eq!(input[0]["content"][1]["type"], "input_image");
}

#[test]
fn anthropic_shape_alternates_and_merges() {
    let msgs = messages(&fixtures()[2].1);
    let body = render(Format::AnthropicMessages, &prompt(&msgs));
    assert_eq!(body["system"], "You are terse.");
    assert_eq!(body["max_tokens"], 1024);
    let m = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    // The pending placeholder and the next user text share one user turn,
    // tool results first.
    assert_eq!(m[2]["content"][0]["type"], "tool_result");
    assert_eq!(m[2]["content"][1]["text"], "Any news?");
    let errors = messages(&fixtures()[0].1);
    let body = render(Format::AnthropicMessages, &prompt(&errors));
    let results = &body["messages"][2]["content"];
    assert_eq!(results[1]["is_error"], true);
    assert!(results[0].get("is_error").is_none());
    let odd = messages(&fixtures()[3].1);
    let body = render(Format::AnthropicMessages, &prompt(&odd));
    assert_eq!(body["messages"][0]["role"], "user", "opens with the user");
    assert_eq!(body["messages"][1]["content"][2]["id"], "call_1_x");
    assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "call_1_x");
}

#[test]
fn gemini_shape() {
    let msgs = messages(&fixtures()[0].1);
    let body = render(Format::Gemini, &prompt(&msgs));
    assert!(body.get("model").is_none(), "the model goes in the URL");
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 1024);
    assert_eq!(
        body["systemInstruction"]["parts"][0]["text"],
        "You are terse."
    );
    let c = body["contents"].as_array().unwrap();
    assert_eq!(c[0]["parts"][1]["fileData"]["mimeType"], "image/png");
    assert_eq!(c[1]["role"], "model");
    assert_eq!(c[1]["parts"][1]["functionCall"]["args"]["city"], "Oslo");
    assert_eq!(
        c[2]["parts"].as_array().unwrap().len(),
        2,
        "both responses in one turn"
    );
    assert_eq!(
        c[2]["parts"][1]["functionResponse"]["response"]["error"],
        "error: upstream timeout"
    );
}

#[test]
fn output_is_deterministic() {
    let msgs = messages(&fixtures()[0].1);
    for (format, _) in FORMATS {
        assert_eq!(
            render_json(format, &prompt(&msgs)),
            render_json(format, &prompt(&msgs))
        );
    }
}

/// The body without the brackets that close its growing array and itself.
fn open_prefix(json: &str) -> &str {
    json.strip_suffix("]}").expect("the growing array is last")
}

#[test]
fn appends_keep_the_previous_payload_as_a_byte_prefix() {
    let traces = &fixtures()[0].1;
    for (format, tag) in FORMATS {
        let mut previous: Option<(String, Vec<Value>)> = None;
        for n in 1..=traces.len() {
            // The loop's cut points: after the user message, after the
            // results of a step, after an assistant answer.
            let at = &traces[..n];
            let next_is_same_step = traces.get(n).is_some_and(|t| {
                matches!(
                    t.trace_type,
                    crate::TraceType::ToolCall | crate::TraceType::ToolResult
                )
            });
            if next_is_same_step {
                continue;
            }
            let msgs = messages(at);
            let json = render_json(format, &prompt(&msgs));
            let body: Value = serde_json::from_str(&json).unwrap();
            let items = ["messages", "input", "contents"]
                .iter()
                .find_map(|k| body.get(*k))
                .and_then(Value::as_array)
                .cloned()
                .unwrap();
            if let Some((prev_json, prev_items)) = &previous {
                if format == Format::AnthropicMessages {
                    // Merging same-role turns can grow the last message;
                    // every earlier one stays identical.
                    let stable = prev_items.len() - 1;
                    assert_eq!(&items[..stable], &prev_items[..stable], "{tag} at {n}");
                } else {
                    assert!(
                        json.starts_with(open_prefix(prev_json)),
                        "{tag} at {n}: previous payload is not a prefix\n{prev_json}\n{json}"
                    );
                }
            }
            previous = Some((json, items));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_conversations_pair_tools_and_alternate(traces in crate::transcript::tests::conversations()) {
        let msgs = messages(&traces);
        let p = prompt(&msgs);
        // OpenAI chat: every tool message answers the assistant step right
        // before its run, and every call of a step is answered.
        let chat = render(Format::OpenAiChat, &p);
        let mut open: Vec<String> = vec![];
        for m in chat["messages"].as_array().unwrap() {
            match m["role"].as_str().unwrap() {
                "tool" => {
                    let id = m["tool_call_id"].as_str().unwrap().to_owned();
                    prop_assert!(open.contains(&id), "orphan tool message {}", id);
                    open.retain(|c| *c != id);
                }
                role => {
                    prop_assert!(open.is_empty(), "calls {:?} unanswered before {}", open, role);
                    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                        open = calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()).collect();
                    }
                }
            }
        }
        prop_assert!(open.is_empty(), "calls {:?} unanswered at the end", open);
        // Anthropic: strictly alternating, opening with the user.
        let anthropic = render(Format::AnthropicMessages, &p);
        let roles: Vec<&str> = anthropic["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        prop_assert_eq!(roles.first().copied(), Some("user"));
        for pair in roles.windows(2) {
            prop_assert_ne!(pair[0], pair[1], "roles do not alternate: {:?}", roles);
        }
        // Gemini: as many responses as calls in each step.
        let gemini = render(Format::Gemini, &p);
        let contents = gemini["contents"].as_array().unwrap();
        for (i, c) in contents.iter().enumerate() {
            let calls = c["parts"].as_array().unwrap().iter().filter(|p| p.get("functionCall").is_some()).count();
            if calls > 0 {
                let next = contents.get(i + 1).map(|n| n["parts"].as_array().unwrap().iter().filter(|p| p.get("functionResponse").is_some()).count());
                prop_assert_eq!(next, Some(calls));
            }
        }
    }
}

#[test]
fn random_conversations_pass_the_provider_validators() {
    // One batch through validate.py: its schemas and rules are the judge.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = crate::transcript::tests::conversations();
    let mut items = vec![];
    for case in 0..40 {
        let traces = strategy.new_tree(&mut runner).unwrap().current();
        let msgs = messages(&traces);
        for (format, tag) in FORMATS {
            items.push((
                format!("random {case}/{tag}"),
                format,
                render(format, &prompt(&msgs)),
            ));
        }
    }
    assert_valid(&items);
}

#[test]
fn system_messages_in_the_transcript_join_the_system_prompt() {
    let msgs = vec![
        Message::text(Role::System, "memory"),
        Message::text(Role::User, "hi"),
    ];
    let body = render(Format::AnthropicMessages, &prompt(&msgs));
    assert_eq!(body["system"], "You are terse.\n\nmemory");
    let body = render(Format::Gemini, &prompt(&msgs));
    assert_eq!(
        body["systemInstruction"]["parts"][0]["text"],
        "You are terse.\n\nmemory"
    );
}
