use serde_json::json;

use super::*;
use crate::essentials::{extract, hold};
use crate::memory::Provenance;
use crate::turns::assign_all;
use crate::{NewEvent, RawTrace};

/// Summaries of consecutive windows, each written by `summarize` from its
/// window's text, as compactions would keep them.
fn summaries(windows: Vec<Vec<NewEvent>>, summarize: impl Fn(&str) -> String) -> Vec<EpisodicItem> {
    let all: Vec<NewEvent> = windows.iter().flatten().cloned().collect();
    let traces = assign_all(all);
    let mut out: Vec<EpisodicItem> = vec![];
    let mut at = 0;
    for (n, w) in windows.iter().enumerate() {
        let window: Vec<&RawTrace> = traces[at..at + w.len()].iter().collect();
        at += w.len();
        let text: String = window
            .iter()
            .map(|t| format!("{} ", crate::transcript::result_text(t)))
            .collect();
        let summary = summarize(&text);
        let open = open_tasks(&out);
        let mut carrying = extract(&window, &open);
        hold(&mut carrying.essentials, &summary);
        out.push(EpisodicItem {
            id: format!("e{n}"),
            ts: n as f64,
            turn_ids: vec![],
            summary,
            tags: vec![],
            salience: 0.5,
            source: Provenance::default(),
            rewriting: false,
            carrying,
        });
    }
    out
}

fn session() -> Vec<Vec<NewEvent>> {
    vec![
        vec![NewEvent::user(
            "Tasks for today:\n1. Add retries to the ledger sync job\n2. Rotate the staging keys\nNever push to main on Fridays.",
        )],
        vec![
            NewEvent::user("check the config"),
            NewEvent::tool_call("c", "run_shell", json!({})),
            NewEvent::tool_result("c", json!("listen = 0.0.0.0:7421")),
        ],
        vec![NewEvent::assistant(
            "I added retries to the ledger sync job.",
        )],
        vec![NewEvent::user("thanks")],
    ]
}

const USELESS: &str = "The user and the assistant worked on the project.";

/// A summary that holds nothing leaves the agent its rule, its open task
/// and its identifier verbatim, each with its turn; the task reported
/// done is gone.
#[test]
fn a_useless_summary_still_leaves_the_rules_tasks_and_identifiers() {
    let items = summaries(session(), |_| USELESS.into());
    let c = carry(&items, 3, 800);
    assert_eq!(
        c.section,
        "[MEMORY:CARRIED]\n\
         - Rule (turn 1, user): Never push to main on Fridays.\n\
         - Open task (turn 1, user): Rotate the staging keys\n\
         - Latest request (turn 3, user): thanks\n\
         - Identifier (turn 2, run_shell result): listen = 0.0.0.0:7421\n"
    );
    assert_eq!((c.carried, c.dropped), (4, 0));
    assert_eq!(
        carry(&items, 3, 800),
        c,
        "the same summaries, the same bytes"
    );
}

/// What a summary in view holds is not repeated; once it leaves the view,
/// what it held is carried forward.
#[test]
fn what_a_summary_held_is_carried_once_it_leaves_the_view() {
    let items = summaries(session(), |text| text.to_owned());
    assert_eq!(carry(&items, 4, 800).section, "", "all held, all in view");
    let c = carry(&items, 2, 800);
    assert!(
        c.section.contains("Never push to main on Fridays."),
        "{}",
        c.section
    );
    assert!(c.section.contains("0.0.0.0:7421"), "{}", c.section);
    assert!(c.section.contains("Rotate the staging keys"));
    assert!(!c.section.contains("Add retries"), "done");
}

/// The section stays within its budget: rules before identifiers, the
/// newest of a kind first; what does not fit is counted dropped.
#[test]
fn the_section_is_bounded_and_rules_go_first() {
    let mut windows = vec![vec![NewEvent::user(
        "Always run the linter before a commit.",
    )]];
    for i in 0..200 {
        windows.push(vec![
            NewEvent::user("next"),
            NewEvent::tool_call("c", "sh", json!({})),
            NewEvent::tool_result("c", json!(format!("wrote /var/data/part-{i}.csv"))),
        ]);
    }
    let items = summaries(windows, |_| USELESS.into());
    let c = carry(&items, 3, 300);
    let tokens = count_text(Encoding::Cl100k, &c.section);
    assert!(tokens <= 300, "{tokens}");
    assert!(c.section.contains("Always run the linter"));
    assert!(c.section.contains("/var/data/part-199.csv"), "the newest");
    assert!(
        !c.section.contains("/var/data/part-0.csv"),
        "the oldest gave way"
    );
    assert_eq!(c.carried + c.dropped, 202, "rule, request, 200 identifiers");
    assert!(c.dropped > 0);
}

/// A hidden summary (a forget took one of its traces) gives nothing.
#[test]
fn a_hidden_summary_carries_nothing() {
    let mut items = summaries(session(), |_| USELESS.into());
    for item in &mut items[..2] {
        item.rewriting = true;
    }
    let c = carry(&items, 3, 800);
    assert!(
        !c.section.contains("Fridays") && !c.section.contains("7421"),
        "{}",
        c.section
    );
}
