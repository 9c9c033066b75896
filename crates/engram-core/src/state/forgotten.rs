//! A forget's and a rewrite's steps on an agent's derived state: the
//! intent of a forget (what `engram_core::forget` erases, and the settings
//! it ends with), the settings once it is carried out, and the commit of a
//! hidden summary's rewrite. Both backends call these, so what a forget
//! leaves is the same whichever stores it.

use std::collections::HashSet;

use super::{AgentMeta, Derived, Policy};
use crate::RawTrace;
use crate::compaction::carry::carry;
use crate::compaction::{Summary, render_snapshot, with_facts};
use crate::forget::{self, Forget, ForgetIntent};
use crate::memory::{EpisodicItem, SemanticItem, recent_episodic};

/// The commit of a hidden summary's rewrite.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteCommit {
    /// The summary as rewritten (shown again).
    pub episodic: EpisodicItem,
    /// Every summary of the agent after it, in order.
    pub summaries: Vec<EpisodicItem>,
    /// Fact versions to store: the new facts, and those they supersede
    /// marked so.
    pub lines: Vec<SemanticItem>,
    /// The settings after it: the snapshot rendered again, a new epoch.
    pub meta: AgentMeta,
}

impl Derived {
    /// The intent of forgetting `what` among the `archive`d and active
    /// traces at `now`; `None` when it erases nothing (done before, or it
    /// names nothing).
    pub fn forget_intent(
        &self,
        what: &Forget,
        archive: &[RawTrace],
        policy: Policy,
        now: f64,
    ) -> Option<ForgetIntent> {
        let all = archive.iter().chain(self.traces.iter());
        let selected = forget::select(what, all.clone());
        let erasure = forget::erasure(&selected, all, &self.episodic, &self.semantic);
        if erasure.is_empty() {
            return None;
        }
        let active: Vec<RawTrace> = self
            .traces
            .iter()
            .filter(|t| !erasure.trace_ids.contains(&t.id))
            .cloned()
            .collect();
        let episodic = forget::apply_to_summaries(&self.episodic, &erasure);
        let gone: HashSet<&str> = erasure.facts.iter().map(String::as_str).collect();
        let semantic: Vec<SemanticItem> = self
            .semantic
            .iter()
            .filter(|f| !gone.contains(f.id.as_str()))
            .cloned()
            .collect();
        let after = meta_after(&self.meta, &active, &episodic, &semantic, policy, now);
        Some(ForgetIntent {
            erasure,
            snapshot: after.snapshot,
            snapshot_trace_ids: after.snapshot_trace_ids,
            epoch: after.epoch,
            epoch_start_trace: after.epoch_start_trace,
        })
    }

    /// The commit of rewriting hidden summary `item` from its remaining
    /// `traces` with `summary` at `now` (new facts named by `new_id`);
    /// `None` when the agent no longer holds `item` as it was (rewritten
    /// already, or forgotten further since).
    pub fn rewrite_commit(
        &self,
        item: &EpisodicItem,
        summary: Summary,
        traces: &[RawTrace],
        policy: Policy,
        now: f64,
        new_id: impl FnMut() -> String,
    ) -> Option<RewriteCommit> {
        if !self.episodic.contains(item) {
            return None;
        }
        let rewrite = forget::rewrite(
            item,
            summary,
            traces,
            &self.semantic,
            policy.fact_ttl,
            now,
            new_id,
        );
        let summaries: Vec<EpisodicItem> = self
            .episodic
            .iter()
            .map(|e| {
                if e.id == item.id {
                    &rewrite.episodic
                } else {
                    e
                }
            })
            .cloned()
            .collect();
        // The facts merged as a compaction's: new ones, and the ones they
        // supersede marked so.
        let replaced: Vec<SemanticItem> = rewrite.facts.endings(&self.semantic);
        let mut lines = rewrite.facts.new_items;
        lines.extend(replaced);
        let mut semantic = self.semantic.clone();
        for line in &lines {
            match semantic.iter_mut().find(|f| f.id == line.id) {
                Some(old) => *old = line.clone(),
                None => semantic.push(line.clone()),
            }
        }
        let meta = meta_after(&self.meta, &self.traces, &summaries, &semantic, policy, now);
        Some(RewriteCommit {
            episodic: rewrite.episodic,
            summaries,
            lines,
            meta,
        })
    }
}

impl AgentMeta {
    /// The settings once `intent` is carried out: its epoch started, the
    /// keys it erased left for the indexes to purge.
    pub fn after_forget(&self, intent: &ForgetIntent) -> AgentMeta {
        let e = &intent.erasure;
        let mut unpurged = self.unpurged.clone();
        unpurged.extend(e.trace_ids.iter().cloned());
        unpurged.extend(e.hidden.iter().map(|h| h.id.clone()));
        unpurged.extend(e.dropped.iter().cloned());
        unpurged.extend(e.facts.iter().cloned());
        unpurged.sort();
        unpurged.dedup();
        AgentMeta {
            snapshot: intent.snapshot.clone(),
            snapshot_trace_ids: intent.snapshot_trace_ids.clone(),
            epoch: intent.epoch,
            epoch_start_trace: intent.epoch_start_trace.clone(),
            forgetting: None,
            unpurged,
            ..self.clone()
        }
    }
}

/// The settings once a forget (or a rewrite) changed what the snapshot
/// shows: a new epoch (the prompt's prefix changed; usage reported before
/// measured another prompt) whose snapshot is rendered again from what is
/// left: the `active` traces, `episodic` and `semantic` after the change.
/// A snapshot before any compaction (a client's facts, the summary of the
/// user's previous conversation) holds nothing of this agent's turns: only
/// its facts are rendered again.
fn meta_after(
    meta: &AgentMeta,
    active: &[RawTrace],
    episodic: &[EpisodicItem],
    semantic: &[SemanticItem],
    policy: Policy,
    now: f64,
) -> AgentMeta {
    let limit = meta.facts_limit.map_or(policy.max_semantic, |l| l as usize);
    let facts = crate::facts::shown(semantic, limit, now);
    let tail: Vec<RawTrace> = active
        .iter()
        .filter(|t| meta.snapshot_trace_ids.contains(&t.id))
        .cloned()
        .collect();
    let snapshot = match &meta.snapshot {
        None => None,
        Some(_) if meta.compactions == 0 => with_facts(meta.snapshot.as_deref(), &facts),
        Some(_) => Some(render_snapshot(
            &recent_episodic(episodic, policy.max_episodic),
            &carry(episodic, policy.max_episodic, policy.carry_tokens).section,
            &facts,
            &tail,
        )),
    };
    AgentMeta {
        snapshot,
        snapshot_trace_ids: tail.into_iter().map(|t| t.id).collect(),
        epoch: meta.epoch + 1,
        epoch_start_trace: active.last().map(|t| t.id.clone()),
        ..meta.clone()
    }
}
