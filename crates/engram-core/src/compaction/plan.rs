//! What a compaction commits, decided without I/O: the episodic item of
//! the summary, the facts it adds or supersedes, and the snapshot the new
//! epoch starts from. The store writes the plan down (its intent) and
//! carries it out crash-safely.

use std::collections::HashSet;

use super::carry::{Carried, carry, open_tasks};
use super::{FactMerge, Summary, merge_summary, render_snapshot};
use crate::essentials;
use crate::memory::{EpisodicItem, Provenance, SemanticItem, recent_episodic};
use crate::turns::turn_number;
use crate::{RawTrace, TraceType};

/// How much memory the snapshot shows.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotLimits {
    pub max_episodic: usize,
    pub max_semantic: usize,
    /// Most tokens of the carry-forward section.
    pub carry_tokens: u32,
    /// The new facts expire this long (seconds) after the compaction.
    pub fact_ttl: Option<f64>,
}

/// The agent as the compaction found it.
#[derive(Debug, Clone, Copy)]
pub struct Before<'a> {
    pub active: &'a [RawTrace],
    pub episodic: &'a [EpisodicItem],
    pub semantic: &'a [SemanticItem],
    /// The latest turn when the window was chosen: it and later turns stay
    /// messages of the new epoch, not part of its snapshot.
    pub current_turn: u32,
}

/// The commit of one compaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The summary's item; `None` for a trim (archived with no summary).
    pub episodic: Option<EpisodicItem>,
    pub facts: FactMerge,
    pub snapshot: String,
    /// The active traces the snapshot shows (its raw tail).
    pub snapshot_trace_ids: Vec<String>,
    /// What its carry-forward section took and dropped.
    pub carried: Carried,
}

impl Plan {
    /// Facts added (updates not counted) and facts updated.
    pub fn fact_counts(&self) -> (u32, u32) {
        let updates = self.facts.superseded.len();
        // A record that a user's fact ended is an update of it.
        let markers = self.facts.new_items.iter().filter(|f| !f.is_live()).count();
        let updated = updates + markers + self.facts.invalidated.len();
        let added = self.facts.new_items.len().saturating_sub(updates + markers);
        (
            u32::try_from(added).unwrap_or(u32::MAX),
            u32::try_from(updated).unwrap_or(u32::MAX),
        )
    }
}

/// Plans the commit of `summary` for the window of `turn_ids` (its traces:
/// `window`); with no summary, a trim: the window is archived and nothing
/// written for it. `new_id` names the new items.
pub fn plan(
    before: Before<'_>,
    turn_ids: &[String],
    window: &HashSet<&str>,
    summary: Option<Summary>,
    limits: SnapshotLimits,
    now: f64,
    new_id: impl FnMut() -> String,
) -> Plan {
    match summary {
        Some(summary) => summarized(before, turn_ids, window, summary, limits, now, new_id),
        None => trimmed(before, limits, now),
    }
}

/// A trim's commit: no item, no fact; the snapshot shows the memories
/// there are (earlier summaries, facts) and no raw tail, so that the kept
/// turns stay messages, their calls and results paired as they were.
/// Empty when there are no memories: the epoch starts with no snapshot.
fn trimmed(before: Before<'_>, limits: SnapshotLimits, now: f64) -> Plan {
    let episodic = recent_episodic(before.episodic, limits.max_episodic);
    let carried = carry(before.episodic, limits.max_episodic, limits.carry_tokens);
    let facts = crate::facts::shown(before.semantic, limits.max_semantic, now);
    let snapshot = if episodic.is_empty() && facts.iter().all(|f| !f.is_live()) {
        String::new()
    } else {
        let mut text = render_snapshot(&episodic, &carried.section, &facts, &[]);
        // No raw tail: the section's header alone would say nothing.
        if let Some(cut) = text.rfind("[RECENT TURNS]\n") {
            text.truncate(cut);
        }
        text
    };
    Plan {
        episodic: None,
        facts: FactMerge::default(),
        snapshot,
        snapshot_trace_ids: vec![],
        carried,
    }
}

fn summarized(
    before: Before<'_>,
    turn_ids: &[String],
    window: &HashSet<&str>,
    summary: Summary,
    limits: SnapshotLimits,
    now: f64,
    mut new_id: impl FnMut() -> String,
) -> Plan {
    let summarized: Vec<&RawTrace> = before
        .active
        .iter()
        .filter(|t| window.contains(t.id.as_str()))
        .collect();
    let source = Provenance::of(&summarized);
    let episodic_id = new_id();
    let mut facts = merge_summary(before.semantic, &summary, now, new_id);
    let episodic = EpisodicItem {
        id: episodic_id,
        ts: now,
        turn_ids: turn_ids.to_vec(),
        summary: summary.episodic_summary,
        tags: summary.tags,
        salience: summary.salience.clamp(0.0, 1.0),
        source: source.clone(),
        rewriting: false,
        carrying: Default::default(),
    };
    // A summarizer does not say which message a fact came from: its
    // provenance is the window's, and it became true (or an old one
    // stopped) when the window's statement most like it was said (else at
    // the window's end).
    // The guard: what the window gave a working agent, and which of it
    // the summary holds (the rest is carried forward).
    let mut carrying = essentials::extract(&summarized, &open_tasks(before.episodic));
    essentials::hold(&mut carrying.essentials, &episodic.summary);
    // The window's last request matters only while no newer one is in
    // view: a compaction inside one long turn archives the request the
    // agent is still working on.
    let asked_since = before.active.iter().any(|t| {
        !window.contains(t.id.as_str())
            && t.trace_type == TraceType::User
            && t.content.chars().any(char::is_alphabetic)
    });
    if asked_since {
        carrying
            .essentials
            .retain(|e| e.kind != essentials::Kind::Request);
    }
    let episodic = EpisodicItem {
        carrying,
        ..episodic
    };
    let statements = super::when::Statements::of(&summarized);
    facts.date(before.semantic, &statements, source.to_ts);
    for fact in &mut facts.new_items {
        fact.turn_ids = turn_ids.to_vec();
        fact.source = source.clone();
        fact.managed.expires_at = limits.fact_ttl.map(|ttl| now + ttl);
    }
    let mut all_episodic = before.episodic.to_vec();
    all_episodic.push(episodic.clone());
    let ended: HashSet<&str> = facts
        .superseded
        .iter()
        .map(|(old, _)| old.as_str())
        .chain(facts.invalidated.iter().map(|(id, _)| id.as_str()))
        .collect();
    let live: Vec<SemanticItem> = before
        .semantic
        .iter()
        .filter(|f| !ended.contains(f.id.as_str()))
        .chain(facts.new_items.iter().filter(|f| f.is_live()))
        .cloned()
        .collect();
    let tail: Vec<RawTrace> = before
        .active
        .iter()
        .filter(|t| !window.contains(t.id.as_str()))
        .filter(|t| turn_number(&t.turn_id).is_some_and(|n| n < before.current_turn))
        .cloned()
        .collect();
    let carried = carry(&all_episodic, limits.max_episodic, limits.carry_tokens);
    let snapshot = render_snapshot(
        &recent_episodic(&all_episodic, limits.max_episodic),
        &carried.section,
        &crate::facts::shown(&live, limits.max_semantic, now),
        &tail,
    );
    Plan {
        episodic: Some(episodic),
        facts,
        snapshot,
        snapshot_trace_ids: tail.iter().map(|t| t.id.clone()).collect(),
        carried,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::NewEvent;
    use crate::compaction::NewFact;
    use crate::turns::assign_all;

    fn fact(text: &str) -> NewFact {
        NewFact {
            fact: text.into(),
            tags: vec![],
            confidence: 0.9,
            salience: 0.5,
        }
    }

    /// The window's turn becomes the episodic item; the turns between it
    /// and the current one are the snapshot's raw tail; a changed fact
    /// supersedes its old version, and the snapshot shows the new one.
    #[test]
    fn a_plan_summarizes_the_window_and_snapshots_the_rest() {
        let mut active = assign_all([
            NewEvent::user("first question"),
            NewEvent::tool_call("c", "f", json!({})),
            NewEvent::tool_result("c", json!("done")),
            NewEvent::user("second question"),
            NewEvent::user("third question"),
        ]);
        for (i, t) in active.iter_mut().enumerate() {
            t.ts = 1_683_500_000.0 + 60.0 * i as f64;
        }
        let known = crate::compaction::merge_facts(&[], &[fact("User lives in Oslo")], 1.0, || {
            "old".into()
        });
        let window: HashSet<&str> = active[..3].iter().map(|t| t.id.as_str()).collect();
        let mut ids = (0..).map(|n| format!("new{n}"));
        let planned = plan(
            Before {
                active: &active,
                episodic: &[],
                semantic: &known.new_items,
                current_turn: 3,
            },
            &["turn_0001".to_owned()],
            &window,
            Some(Summary {
                episodic_summary: "Asked a first question.".into(),
                tags: vec![],
                salience: 7.0,
                semantic_facts: vec![fact("User lives in Bergen"), fact("User likes tea")],
                ..Default::default()
            }),
            SnapshotLimits {
                max_episodic: 3,
                max_semantic: 20,
                carry_tokens: 800,
                fact_ttl: Some(60.0),
            },
            2.0,
            || ids.next().unwrap(),
        );
        let episodic = planned.episodic.as_ref().unwrap();
        assert_eq!(episodic.id, "new0");
        assert_eq!(episodic.turn_ids, ["turn_0001"]);
        assert_eq!(episodic.salience, 1.0, "clamped");
        // Provenance: the window's traces and their event times, not the
        // clock at the compaction.
        let source = &episodic.source;
        assert_eq!(source.trace_ids, ["t1", "t2", "t3"]);
        assert_eq!(
            (source.from_ts, source.to_ts),
            (Some(1_683_500_000.0), Some(1_683_500_120.0))
        );
        for f in &planned.facts.new_items {
            assert_eq!((&f.turn_ids, &f.source), (&episodic.turn_ids, source));
            // memory.default_ttl_secs: expires that long after the compaction.
            assert_eq!(f.managed.expires_at, Some(62.0));
        }
        assert_eq!(
            planned.snapshot_trace_ids,
            [active[3].id.clone()],
            "turn 2 only"
        );
        assert!(planned.snapshot.contains("Asked a first question."));
        assert!(planned.snapshot.contains("second question"));
        assert!(
            !planned.snapshot.contains("third question"),
            "the current turn"
        );
        assert!(planned.snapshot.contains("Bergen") && !planned.snapshot.contains("Oslo"));
        assert_eq!(planned.fact_counts(), (1, 1));
    }

    /// A trim writes nothing for its window and keeps no raw tail in the
    /// snapshot (the kept turns stay messages); the snapshot shows the
    /// memories there are, and is empty with none.
    #[test]
    fn a_trim_archives_with_no_summary_and_keeps_the_tail_as_messages() {
        let active = assign_all([
            NewEvent::user("first question"),
            NewEvent::user("second question"),
            NewEvent::user("third question"),
        ]);
        let window: HashSet<&str> = active[..1].iter().map(|t| t.id.as_str()).collect();
        let limits = SnapshotLimits {
            max_episodic: 3,
            max_semantic: 20,
            carry_tokens: 800,
            fact_ttl: None,
        };
        let before = |semantic| Before {
            active: &active,
            episodic: &[],
            semantic,
            current_turn: 3,
        };
        let turns = ["turn_0001".to_owned()];
        let bare = plan(before(&[]), &turns, &window, None, limits, 2.0, || {
            unreachable!("a trim names nothing new")
        });
        assert_eq!(bare.episodic, None);
        assert_eq!(bare.facts, FactMerge::default());
        assert!(bare.snapshot.is_empty(), "{:?}", bare.snapshot);
        assert!(bare.snapshot_trace_ids.is_empty());

        let known = crate::compaction::merge_facts(&[], &[fact("User lives in Oslo")], 1.0, || {
            "old".into()
        });
        let with_facts = plan(
            before(&known.new_items),
            &turns,
            &window,
            None,
            limits,
            2.0,
            || unreachable!(),
        );
        assert!(
            with_facts
                .snapshot
                .contains("- (since 1970-01-01) User lives in Oslo")
        );
        assert!(!with_facts.snapshot.contains("RECENT TURNS"));
        assert!(!with_facts.snapshot.contains("second question"));
    }
}
