//! A compaction as the store plans it, measured in the prompt's tokens:
//! the window the default policy picks (a raw tail of 4 turns, 3 summaries
//! and 20 facts in the snapshot), summarized by [`summarize`], committed by
//! core's `plan`, and the prompt before and after counted as the context
//! engine counts it (cl100k, per-message framing, reply priming).

use std::collections::HashSet;

use engram_core::RawTrace;
use engram_core::compaction::plan::{Before, SnapshotLimits, plan};
use engram_core::compaction::select_window;
use engram_core::tokens::{Encoding, REPLY_PRIMING, count_message, count_text};
use engram_core::transcript::{Message, Role, Transcript};
use engram_core::turns::turn_number;

use super::summarize;
use crate::{Summary, SummaryRequest};

/// The server's default `policy.raw_tail_turns`.
const RAW_TAIL_TURNS: usize = 4;

#[derive(Debug)]
pub struct Compaction {
    pub window_turns: usize,
    /// The prompt before and after, in tokens.
    pub prompt_before: u32,
    pub prompt_after: u32,
    /// The summarized turns' messages, in tokens (part of `prompt_before`).
    pub window_tokens: u32,
    pub summary: Summary,
    pub summary_tokens: u32,
    pub snapshot: String,
}

fn prompt_tokens<'a>(messages: impl IntoIterator<Item = &'a Message>) -> u32 {
    REPLY_PRIMING
        + messages
            .into_iter()
            .map(|m| count_message(Encoding::Cl100k, m))
            .sum::<u32>()
}

pub fn compact(traces: &[RawTrace]) -> Compaction {
    let window = select_window(traces, RAW_TAIL_TURNS);
    let summarized: Vec<RawTrace> = window
        .trace_indices
        .iter()
        .map(|&i| traces[i].clone())
        .collect();
    let summary = summarize(SummaryRequest {
        traces: &summarized,
        known_facts: &[],
        focus: None,
        working_memory: None,
    });
    let ids: HashSet<&str> = summarized.iter().map(|t| t.id.as_str()).collect();
    let current = traces
        .iter()
        .filter_map(|t| turn_number(&t.turn_id))
        .max()
        .unwrap_or(0);
    let mut n = 0;
    let planned = plan(
        Before {
            active: traces,
            episodic: &[],
            semantic: &[],
            current_turn: current,
        },
        &window.turn_ids,
        &ids,
        Some(summary.clone()),
        SnapshotLimits {
            max_episodic: 3,
            max_semantic: 20,
            carry_tokens: 800,
            fact_ttl: None,
        },
        0.0,
        || {
            n += 1;
            format!("m{n}")
        },
    );
    let after = Transcript::from_traces(
        traces
            .iter()
            .filter(|t| turn_number(&t.turn_id).is_some_and(|n| n >= current)),
    );
    let snapshot = Message::text(Role::System, planned.snapshot.clone());
    Compaction {
        window_turns: window.turn_ids.len(),
        prompt_before: prompt_tokens(Transcript::from_traces(traces).messages()),
        prompt_after: prompt_tokens(std::iter::once(&snapshot).chain(after.messages())),
        window_tokens: prompt_tokens(Transcript::from_traces(&summarized).messages())
            - REPLY_PRIMING,
        summary_tokens: count_text(Encoding::Cl100k, &summary.episodic_summary),
        summary,
        snapshot: planned.snapshot,
    }
}
