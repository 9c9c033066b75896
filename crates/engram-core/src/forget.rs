//! Forgetting a turn or some events (ForgetTurn, ForgetEvents), decided
//! without I/O: which traces go, which summaries lose them (hidden, with
//! no text, until the summarizer rewrites them from their other traces),
//! which facts go with them. A backend writes the [`Erasure`] down first
//! (its intent) and carries it out crash-safely.
//!
//! A summarizer does not say which message a fact came from: a fact's
//! provenance is its compaction's whole window. So every fact drawn from a
//! window that held an erased trace is deleted, and the rewrite of the
//! window's summary draws the facts of its remaining traces again (a fact
//! other turns also said comes back, as a new fact).

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use crate::compaction::{FactMerge, Summary, merge_summary};
use crate::memory::{EpisodicItem, Provenance, SemanticItem};
use crate::{RawTrace, TraceType};

/// What to forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forget {
    /// Every trace of the turn (`turn_0007`).
    Turn(String),
    /// Traces by their `id` or the client's `event_id`; a tool call and
    /// its result go together (a result without its call, or a call
    /// without its result, would be a broken pair in every prompt).
    Events(Vec<String>),
}

/// What a forget erases, by id (an intent holds no text).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Erasure {
    /// The erased traces, active and archived.
    pub trace_ids: BTreeSet<String>,
    /// Those whose results were stored aside (`tool_result_ref`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spilled: Vec<String>,
    /// Summaries that covered an erased trace and keep others: written
    /// again without text, awaiting their rewrite.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<EpisodicItem>,
    /// Summaries of erased traces only: removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// Facts (any version: live, superseded) drawn from a window that held
    /// an erased trace: deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<String>,
}

impl Erasure {
    /// Nothing to erase: the forget was done before (or named nothing).
    pub fn is_empty(&self) -> bool {
        self.trace_ids.is_empty()
            && self.hidden.is_empty()
            && self.dropped.is_empty()
            && self.facts.is_empty()
    }

    /// Facts deleted that were live (what the answer counts).
    pub fn counts(&self, semantic: &[SemanticItem]) -> (u32, u32, u32) {
        let gone: HashSet<&str> = self.facts.iter().map(String::as_str).collect();
        let facts = semantic
            .iter()
            .filter(|f| f.is_live() && gone.contains(f.id.as_str()))
            .count();
        let n = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (
            n(self.trace_ids.len()),
            n(facts),
            n(self.hidden.len() + self.dropped.len()),
        )
    }
}

/// The traces `what` names among `traces` (active and archived, in any
/// order), with their pair partners.
pub fn select<'a>(
    what: &Forget,
    traces: impl Iterator<Item = &'a RawTrace> + Clone,
) -> Vec<&'a RawTrace> {
    let named: Vec<&RawTrace> = match what {
        Forget::Turn(turn) => return traces.filter(|t| t.turn_id == *turn).collect(),
        Forget::Events(ids) => {
            let ids: HashSet<&str> = ids.iter().map(String::as_str).collect();
            traces
                .clone()
                .filter(|t| {
                    ids.contains(t.id.as_str())
                        || t.event_id.as_deref().is_some_and(|e| ids.contains(e))
                })
                .collect()
        }
    };
    // A call's pair: the same call id in the same turn (a result inherits
    // its call's turn).
    let pairs: HashSet<(&str, &str)> = named
        .iter()
        .filter(|t| matches!(t.trace_type, TraceType::ToolCall | TraceType::ToolResult))
        .filter_map(|t| Some((t.turn_id.as_str(), t.tool_call_id.as_deref()?)))
        .collect();
    let ids: HashSet<&str> = named.iter().map(|t| t.id.as_str()).collect();
    traces
        .filter(|t| {
            ids.contains(t.id.as_str())
                || matches!(t.trace_type, TraceType::ToolCall | TraceType::ToolResult)
                    && t.tool_call_id
                        .as_deref()
                        .is_some_and(|c| pairs.contains(&(t.turn_id.as_str(), c)))
        })
        .collect()
}

/// Whether a memory with `source` (and `turn_ids`, for items written
/// before provenance was kept) was drawn from an erased trace.
fn touched(
    source: &Provenance,
    turn_ids: &[String],
    erased: &HashSet<&str>,
    erased_turns: &HashSet<&str>,
) -> bool {
    if source.trace_ids.is_empty() {
        turn_ids.iter().any(|t| erased_turns.contains(t.as_str()))
    } else {
        source.trace_ids.iter().any(|t| erased.contains(t.as_str()))
    }
}

/// The erasure of `selected` (from [`select`]): the traces, the summaries
/// and facts drawn from them. `all` is every trace of the agent: a turn
/// counts as erased when none of its traces is left (for memories that
/// know their turns only).
pub fn erasure<'a>(
    selected: &[&RawTrace],
    all: impl Iterator<Item = &'a RawTrace>,
    episodic: &[EpisodicItem],
    semantic: &[SemanticItem],
) -> Erasure {
    let erased: HashSet<&str> = selected.iter().map(|t| t.id.as_str()).collect();
    let touched_turns: HashSet<&str> = selected.iter().map(|t| t.turn_id.as_str()).collect();
    // Turns with a trace left are not erased as a whole.
    let kept_turns: HashSet<&str> = all
        .filter(|t| touched_turns.contains(t.turn_id.as_str()) && !erased.contains(t.id.as_str()))
        .map(|t| t.turn_id.as_str())
        .collect();
    let erased_turns: HashSet<&str> = touched_turns.difference(&kept_turns).copied().collect();
    let mut out = Erasure {
        trace_ids: erased.iter().map(|s| (*s).to_owned()).collect(),
        spilled: selected
            .iter()
            .filter(|t| t.tool_result_ref.is_some())
            .map(|t| t.id.clone())
            .collect(),
        ..Erasure::default()
    };
    for item in episodic {
        if !touched(&item.source, &item.turn_ids, &erased, &erased_turns) {
            continue;
        }
        let left: Vec<String> = item
            .source
            .trace_ids
            .iter()
            .filter(|t| !erased.contains(t.as_str()))
            .cloned()
            .collect();
        let turns: Vec<String> = item
            .turn_ids
            .iter()
            .filter(|t| !erased_turns.contains(t.as_str()))
            .cloned()
            .collect();
        let keeps = if item.source.trace_ids.is_empty() {
            !turns.is_empty()
        } else {
            !left.is_empty()
        };
        if keeps {
            out.hidden.push(hidden(item, turns, left));
        } else {
            out.dropped.push(item.id.clone());
        }
    }
    out.facts = semantic
        .iter()
        .filter(|f| f.managed.deleted_at.is_none())
        .filter(|f| touched(&f.source, &f.turn_ids, &erased, &erased_turns))
        .map(|f| f.id.clone())
        .collect();
    out
}

/// `item` without its text, awaiting the rewrite from `trace_ids` (of
/// `turn_ids`). Its times stay: they are the remaining traces' span or
/// wider, and the rewrite sets them again.
fn hidden(item: &EpisodicItem, turn_ids: Vec<String>, trace_ids: Vec<String>) -> EpisodicItem {
    EpisodicItem {
        turn_ids,
        summary: String::new(),
        tags: vec![],
        rewriting: true,
        // What it held goes with its text; the rewrite finds it again.
        carrying: Default::default(),
        source: Provenance {
            trace_ids,
            ..item.source.clone()
        },
        ..item.clone()
    }
}

/// Applies `erasure` to an agent's summaries: hidden ones replaced,
/// dropped ones gone.
pub fn apply_to_summaries(episodic: &[EpisodicItem], erasure: &Erasure) -> Vec<EpisodicItem> {
    let dropped: HashSet<&str> = erasure.dropped.iter().map(String::as_str).collect();
    episodic
        .iter()
        .filter(|e| !dropped.contains(e.id.as_str()))
        .map(|e| {
            erasure
                .hidden
                .iter()
                .find(|h| h.id == e.id)
                .unwrap_or(e)
                .clone()
        })
        .collect()
}

/// The traces a hidden summary is rewritten from, among `traces`.
pub fn remaining<'a>(
    item: &EpisodicItem,
    traces: impl Iterator<Item = &'a RawTrace>,
) -> Vec<RawTrace> {
    if item.source.trace_ids.is_empty() {
        let turns: HashSet<&str> = item.turn_ids.iter().map(String::as_str).collect();
        return traces
            .filter(|t| turns.contains(t.turn_id.as_str()))
            .cloned()
            .collect();
    }
    let ids: HashSet<&str> = item.source.trace_ids.iter().map(String::as_str).collect();
    traces
        .filter(|t| ids.contains(t.id.as_str()))
        .cloned()
        .collect()
}

/// A forget written down before any file changes: the erasure and the
/// settings it ends with (computed first, so that finishing it after a
/// crash needs nothing else; `Derived::forget_intent` makes it,
/// `AgentMeta::after_forget` applies it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ForgetIntent {
    pub erasure: Erasure,
    /// The snapshot rendered again without what is erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshot_trace_ids: Vec<String>,
    pub epoch: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_start_trace: Option<String>,
}

/// What the rewrite of a hidden summary commits: the summary shown again,
/// and the facts its remaining traces hold (merged into the known ones as
/// a compaction's are).
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    pub episodic: EpisodicItem,
    pub facts: FactMerge,
}

/// The rewrite of hidden `item` from its remaining `traces` with
/// `summary`, against the agent's facts `semantic`; new facts expire
/// `fact_ttl` after `now` and are named by `new_id`.
pub fn rewrite(
    item: &EpisodicItem,
    summary: Summary,
    traces: &[RawTrace],
    semantic: &[SemanticItem],
    fact_ttl: Option<f64>,
    now: f64,
    new_id: impl FnMut() -> String,
) -> Rewrite {
    let refs: Vec<&RawTrace> = traces.iter().collect();
    let source = Provenance::of(&refs);
    let mut facts = merge_summary(semantic, &summary, now, new_id);
    let statements = crate::compaction::when::Statements::of(&refs);
    facts.date(semantic, &statements, source.to_ts);
    for fact in &mut facts.new_items {
        fact.turn_ids = item.turn_ids.clone();
        fact.source = source.clone();
        fact.managed.expires_at = fact_ttl.map(|ttl| now + ttl);
    }
    // What its remaining traces give a working agent, as a compaction
    // finds it (tasks are not closed again: that was decided before).
    let mut carrying = crate::essentials::extract(&refs, &[]);
    crate::essentials::hold(&mut carrying.essentials, &summary.episodic_summary);
    let episodic = EpisodicItem {
        summary: summary.episodic_summary,
        tags: summary.tags,
        salience: summary.salience.clamp(0.0, 1.0),
        rewriting: false,
        source,
        carrying,
        ..item.clone()
    };
    Rewrite { episodic, facts }
}

#[cfg(test)]
#[path = "forget/tests.rs"]
mod tests;
