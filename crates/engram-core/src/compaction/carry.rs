//! The carry-forward section of a snapshot (`[MEMORY:CARRIED]`): what a
//! working agent needs that the summaries it sees do not hold. Each
//! summary keeps the essentials of its window ([`crate::essentials`]) and
//! which of them it holds; the section lists, verbatim with the turn each
//! came from, those a summary in view lost, and everything the summaries
//! no longer in view held — so neither a lazy summarizer nor the
//! snapshot's limit on summaries takes an agent's rules, tasks or
//! identifiers away. A task reported done leaves; the latest request is
//! the latest summary's only.
//!
//! Bounded by a token budget: rules first, then open tasks, the latest
//! request, decisions, errors and identifiers, the newest of a kind first;
//! what does not fit is dropped (and still searchable in the archive).
//! Deterministic: the same summaries give the same section, so the
//! prompt's prefix stays as it was until the next compaction.

use std::collections::HashSet;

use crate::essentials::{Essential, Kind};
use crate::memory::EpisodicItem;
use crate::text::fold_whitespace;
use crate::tokens::{Encoding, count_text};

pub const HEADER: &str = "[MEMORY:CARRIED]";

/// The section and what it took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Carried {
    /// The section's text (its header and lines), empty when it carries
    /// nothing.
    pub section: String,
    pub carried: u32,
    /// Essentials that did not fit the budget.
    pub dropped: u32,
}

/// The section for an agent's summaries `episodic` (oldest first) of which
/// the last `in_view` shown ones are in the snapshot, in at most `budget`
/// tokens.
pub fn carry(episodic: &[EpisodicItem], in_view: usize, budget: u32) -> Carried {
    let shown: Vec<&EpisodicItem> = episodic.iter().filter(|e| e.is_shown()).collect();
    let first_in_view = shown.len().saturating_sub(in_view);
    let mut closed: HashSet<&str> = HashSet::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut candidates: Vec<&Essential> = vec![];
    // Newest first: a later statement of the same thing counts, and a
    // task is closed only by a report after it.
    for (i, item) in shown.iter().enumerate().rev() {
        let newest = i + 1 == shown.len();
        for e in item.carrying.essentials.iter().rev() {
            if !seen.insert(e.key()) {
                continue;
            }
            let done = e.kind == Kind::Task && closed.contains(e.tag().as_str());
            let stale_request = e.kind == Kind::Request && !newest;
            let in_sight = i >= first_in_view && e.held;
            if !(done || stale_request || in_sight) {
                candidates.push(e);
            }
        }
        closed.extend(item.carrying.closed.iter().map(String::as_str));
    }
    // By kind, the newest of a kind first (a stable sort keeps the order
    // they were found in).
    candidates.sort_by_key(|e| e.kind);
    let mut left = budget.saturating_sub(count_text(Encoding::Cl100k, HEADER) + 1);
    let mut taken: Vec<(&Essential, String)> = vec![];
    let mut dropped = 0u32;
    for e in candidates {
        let line = line(e);
        let cost = count_text(Encoding::Cl100k, &line);
        if cost <= left {
            left -= cost;
            taken.push((e, line));
        } else {
            dropped += 1;
        }
    }
    if taken.is_empty() {
        return Carried {
            dropped,
            ..Carried::default()
        };
    }
    // Shown by kind, each kind in conversation order.
    taken.sort_by_key(|(e, _)| (e.kind, e.turn(), e.trace_id.clone()));
    let mut section = format!("{HEADER}\n");
    for (_, line) in &taken {
        section.push_str(line);
    }
    Carried {
        section,
        carried: u32::try_from(taken.len()).unwrap_or(u32::MAX),
        dropped,
    }
}

/// `- Rule (turn 3, user): Never push to main on Fridays.`
fn line(e: &Essential) -> String {
    let at = match e.turn() {
        Some(n) => format!("turn {n}, {}", e.from),
        None => e.from.clone(),
    };
    format!(
        "- {} ({at}): {}\n",
        e.kind.label(),
        fold_whitespace(&e.text)
    )
}

/// The tasks still open after `episodic` (oldest first): the latest
/// statement of each, not reported done since.
pub fn open_tasks(episodic: &[EpisodicItem]) -> Vec<&Essential> {
    let mut closed: HashSet<&str> = HashSet::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut open = vec![];
    for item in episodic.iter().filter(|e| e.is_shown()).rev() {
        for e in item.carrying.essentials.iter().rev() {
            if e.kind == Kind::Task && seen.insert(e.key()) && !closed.contains(e.tag().as_str()) {
                open.push(e);
            }
        }
        closed.extend(item.carrying.closed.iter().map(String::as_str));
    }
    open
}

#[cfg(test)]
mod tests;
