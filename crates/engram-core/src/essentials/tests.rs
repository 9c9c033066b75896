use serde_json::json;

use super::*;
use crate::NewEvent;
use crate::turns::assign_all;

fn of(events: Vec<NewEvent>) -> Carrying {
    let traces = assign_all(events);
    let refs: Vec<&RawTrace> = traces.iter().collect();
    extract(&refs, &[])
}

fn texts(c: &Carrying, kind: Kind) -> Vec<&str> {
    c.essentials
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.text.as_str())
        .collect()
}

fn names(c: &Carrying) -> Vec<&str> {
    c.essentials
        .iter()
        .filter(|e| e.kind == Kind::Identifier)
        .map(|e| e.name.as_str())
        .collect()
}

/// A working session's turns give their rules, tasks, decisions, errors,
/// identifiers (those only a tool's output named too) and the latest
/// request, verbatim, each with its turn and who said it.
#[test]
fn a_window_gives_what_a_working_agent_needs() {
    let c = of(vec![
        NewEvent::user(
            "Here is the plan for today:\n1. Add retries to the ledger sync job\n2. Fix the flaky settlement test\n- [ ] Write the release notes\nNever push to main on Fridays.",
        ),
        NewEvent::assistant(
            "Sure. We decided to use NATS JetStream because it keeps messages across restarts.",
        ),
        NewEvent::tool_call(
            "c1",
            "run_shell",
            json!({"cmd": "cat /srv/quartz/conf/ledger.toml"}),
        ),
        NewEvent::tool_result(
            "c1",
            json!(
                "listen = \"0.0.0.0:7421\"\nlast deploy 9f3c2ab1e\nsee ticket QL-2231\nerror E0382: borrow of moved value"
            ),
        ),
        NewEvent::user("What does the config say?"),
    ]);
    assert_eq!(
        texts(&c, Kind::Task),
        [
            "Add retries to the ledger sync job",
            "Fix the flaky settlement test",
            "Write the release notes"
        ]
    );
    assert_eq!(texts(&c, Kind::Rule), ["Never push to main on Fridays."]);
    assert_eq!(
        texts(&c, Kind::Decision),
        ["We decided to use NATS JetStream because it keeps messages across restarts."]
    );
    assert_eq!(
        texts(&c, Kind::Error),
        ["error E0382: borrow of moved value"]
    );
    assert_eq!(texts(&c, Kind::Request), ["What does the config say?"]);
    let ids = names(&c);
    for id in [
        "/srv/quartz/conf/ledger.toml",
        "0.0.0.0:7421",
        "9f3c2ab1e",
        "QL-2231",
        "E0382",
    ] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    let port = c
        .essentials
        .iter()
        .find(|e| e.name == "0.0.0.0:7421")
        .unwrap();
    assert_eq!(
        (port.text.as_str(), port.from.as_str(), port.turn()),
        ("listen = \"0.0.0.0:7421\"", "run_shell result", Some(1))
    );
    let rule = &c.essentials.iter().find(|e| e.kind == Kind::Rule).unwrap();
    assert_eq!((rule.from.as_str(), rule.turn()), ("user", Some(1)));
}

/// A ticked item, or a report that names a task's words, closes it: in
/// the same window it never enters the list, and an earlier window's open
/// task is recorded closed by its tag. A report that denies it does not.
#[test]
fn a_task_reported_done_leaves_the_open_list() {
    let c = of(vec![
        NewEvent::user("Todo:\n- Add retries to the ledger sync job\n- Rotate the staging keys"),
        NewEvent::assistant("I added retries to the ledger sync job."),
        NewEvent::user("The staging keys are not rotated yet."),
    ]);
    assert_eq!(texts(&c, Kind::Task), ["Rotate the staging keys"]);

    let traces = assign_all([
        NewEvent::user("[x] Rotate the staging keys"),
        NewEvent::assistant("Nothing else changed."),
    ]);
    let refs: Vec<&RawTrace> = traces.iter().collect();
    let open: Vec<&Essential> = c.essentials.iter().collect();
    let later = extract(&refs, &open);
    let rotate = c.essentials.iter().find(|e| e.kind == Kind::Task).unwrap();
    assert_eq!(later.closed, [rotate.tag()]);
    assert!(
        !later.closed[0].contains("rotate"),
        "a tag holds no words of the task"
    );
}

/// A list in a message that names no task is not a task list; questions
/// and the assistant's "never" are not rules.
#[test]
fn only_what_reads_as_one_is_a_rule_or_a_task() {
    let c = of(vec![
        NewEvent::user(
            "The cities we visited:\n- Lisbon\n- Porto\nShould we never deploy on Mondays?",
        ),
        NewEvent::assistant("I never deploy on Mondays myself."),
    ]);
    assert!(texts(&c, Kind::Task).is_empty(), "{c:?}");
    assert!(texts(&c, Kind::Rule).is_empty(), "{c:?}");
}

/// A summary holds an identifier it names as written and a sentence whose
/// words it names; a useless summary holds nothing.
#[test]
fn a_summary_holds_what_it_names() {
    let c = of(vec![
        NewEvent::user("Never push to main on Fridays."),
        NewEvent::tool_call("c", "sh", json!({})),
        NewEvent::tool_result("c", json!("wrote /tmp/out/report.csv")),
    ]);
    let mut good = c.essentials.clone();
    hold(
        &mut good,
        "Rules: never pushes to main on a Friday. Output in /tmp/out/report.csv.",
    );
    assert!(
        good.iter()
            .filter(|e| e.kind != Kind::Request)
            .all(|e| e.held),
        "{good:?}"
    );
    let mut useless = c.essentials.clone();
    hold(
        &mut useless,
        "The user and the assistant worked on the project.",
    );
    assert!(useless.iter().all(|e| !e.held));
}

/// What counts as an identifier, and what does not.
#[test]
fn identifiers_are_found_by_their_shape() {
    for yes in [
        "/etc/nginx/nginx.conf",
        "~/src/app",
        "src/engine/compactor.rs",
        "ledger.toml",
        "https://example.com/x?y=1",
        "localhost:5432",
        "10.0.3.7",
        "v1.4.2",
        "deadbeef42",
        "QL-1234",
        "E0382",
        "DATABASE_URL",
        "(ERR-4411),",
    ] {
        assert!(scan::identifier(yes).is_some(), "{yes}");
    }
    for no in [
        "and/or", "1/2", "hello", "Friday", "12:30", "2026", "deadbeef", "OK", "I", "e.g.", "3.14",
    ] {
        assert_eq!(scan::identifier(no), None, "{no}");
    }
}

/// A huge tool output gives a bounded number of essentials, its last
/// identifiers and error lines (a long test output ends with the failure).
#[test]
fn a_huge_output_gives_a_bounded_number_its_last() {
    let mut out = String::new();
    for i in 0..20_000 {
        out.push_str(&format!("test case_{i} ... ok at /tmp/run/{i}.log\n"));
    }
    out.push_str("error: test settle_batch failed at src/settle.rs:88\n");
    let c = of(vec![
        NewEvent::user("run the tests"),
        NewEvent::tool_call("c", "cargo", json!({})),
        NewEvent::tool_result("c", json!(out)),
    ]);
    let ids = names(&c);
    assert!(ids.len() <= PER_TRACE_IDS, "{}", ids.len());
    assert!(ids.contains(&"src/settle.rs:88"), "{ids:?}");
    assert_eq!(
        texts(&c, Kind::Error),
        ["error: test settle_batch failed at src/settle.rs:88"]
    );
    for e in &c.essentials {
        assert!(e.text.chars().count() <= TEXT_CHARS);
    }
}
