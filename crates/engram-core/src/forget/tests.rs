use serde_json::json;

use super::*;
use crate::NewEvent;
use crate::memory::Provenance;
use crate::turns::assign_all;

fn talk() -> Vec<RawTrace> {
    let mut events = vec![
        NewEvent::user("first"),
        NewEvent::tool_call("c1", "look", json!({"q": "x"})),
        NewEvent::tool_result("c1", json!("found")),
        NewEvent::assistant("done"),
        NewEvent::user("second"),
        NewEvent::assistant("ok"),
    ];
    events[3].event_id = Some("ev-answer".into());
    assign_all(events)
}

fn summary(id: &str, turns: &[&str], traces: &[&RawTrace]) -> EpisodicItem {
    EpisodicItem {
        id: id.into(),
        ts: 1.0,
        turn_ids: turns.iter().map(|t| (*t).to_owned()).collect(),
        summary: "text".into(),
        tags: vec!["t".into()],
        salience: 0.5,
        source: Provenance::of(traces),
        rewriting: false,
        carrying: Default::default(),
    }
}

/// A turn goes whole; the summary of it and another turn is hidden with
/// the other's traces left; one of it alone is dropped; facts of either
/// window go, a client's fact stays.
#[test]
fn a_turn_takes_its_summaries_and_facts_with_it() {
    let t = talk();
    let all: Vec<&RawTrace> = t.iter().collect();
    let both = summary("e1", &["turn_0001", "turn_0002"], &all);
    let only = summary("e2", &["turn_0001"], &all[..4]);
    let mut drawn = SemanticItem::new("f1", "fact");
    drawn.source = both.source.clone();
    let client = SemanticItem::new("f2", "client fact");
    let selected = select(&Forget::Turn("turn_0001".into()), t.iter());
    assert_eq!(selected.len(), 4);
    let e = erasure(&selected, t.iter(), &[both, only], &[drawn, client]);
    assert_eq!(e.trace_ids.len(), 4);
    assert_eq!(e.dropped, ["e2"]);
    assert_eq!(e.hidden.len(), 1);
    let hidden = &e.hidden[0];
    assert!(hidden.rewriting && hidden.summary.is_empty() && hidden.tags.is_empty());
    assert_eq!(hidden.turn_ids, ["turn_0002"]);
    assert_eq!(hidden.source.trace_ids, [t[4].id.clone(), t[5].id.clone()]);
    assert_eq!(e.facts, ["f1"]);
    let rest = remaining(hidden, t.iter());
    assert_eq!(rest.len(), 2);
}

/// An event goes with its pair partner; by trace id or event id; a turn
/// that keeps traces is not erased for memories that know turns only.
#[test]
fn events_take_their_pair_partner() {
    let t = talk();
    let selected = select(
        &Forget::Events(vec![t[2].id.clone(), "ev-answer".into()]),
        t.iter(),
    );
    let ids: Vec<&str> = selected.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [t[1].id.as_str(), t[2].id.as_str(), t[3].id.as_str()]);
    let legacy = EpisodicItem {
        source: Provenance::default(),
        ..summary("e1", &["turn_0001"], &[])
    };
    let e = erasure(&selected, t.iter(), &[legacy], &[]);
    assert!(
        e.hidden.is_empty() && e.dropped.is_empty(),
        "turn_0001 keeps its user message"
    );
    assert!(select(&Forget::Events(vec!["nothing".into()]), t.iter()).is_empty());
}

#[test]
fn applied_summaries_keep_order_and_drop_the_dropped() {
    let t = talk();
    let all: Vec<&RawTrace> = t.iter().collect();
    let items = [
        summary("e1", &["turn_0001"], &all[..4]),
        summary("e2", &["turn_0001", "turn_0002"], &all),
        summary("e3", &["turn_0002"], &all[4..]),
    ];
    let selected = select(&Forget::Turn("turn_0001".into()), t.iter());
    let e = erasure(&selected, t.iter(), &items, &[]);
    let after = apply_to_summaries(&items, &e);
    let ids: Vec<(&str, bool)> = after.iter().map(|i| (i.id.as_str(), i.rewriting)).collect();
    assert_eq!(ids, [("e2", true), ("e3", false)]);
    assert_eq!(
        crate::memory::recent_episodic(&after, 3).len(),
        1,
        "hidden is not shown"
    );
}
