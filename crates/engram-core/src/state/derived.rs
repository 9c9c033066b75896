//! An agent's state derived from its stored records — turns, the active
//! traces, memories, settings and the epoch's transcript — and the steps
//! that change it, whichever backend stores the records: the file store
//! keeps it per loaded agent, the database backend per cached agent.

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use super::hide::{Shown, Shown1st};
use super::{AgentContext, Intent, Job, Policy};
use crate::compaction::plan::{Before, SnapshotLimits, plan};
use crate::compaction::{Summary, select_window};
use crate::memory::{EpisodicItem, SemanticItem};
use crate::transcript::{Message, Role, Transcript};
use crate::turns::turn_number;
use crate::{CoreError, RawTrace, TurnTracker, Usage, UserId};

/// An epoch's transcript before its first message: the snapshot, if the
/// agent has compacted.
fn epoch_transcript(meta: &AgentMeta) -> Transcript {
    match &meta.snapshot {
        Some(snapshot) => Transcript::with_base(Message::text(Role::System, snapshot.clone())),
        None => Transcript::default(),
    }
}

/// What a step replaced: megabytes for a large agent, whose freeing need
/// not happen while the agent is locked (the store hands it to a blocking
/// thread).
#[must_use = "free it off the async workers (engram_store::drop_later)"]
pub struct Discarded {
    // Held to be dropped, never read.
    _transcript: Transcript,
    _traces: Vec<RawTrace>,
}

/// A compaction's job no longer describes the agent: its commit is refused
/// and writes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the agent changed while it was being compacted; nothing was written")]
pub struct Stale;

/// The agent's settings and counters (`state.json`, rewritten atomically).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentMeta {
    /// The user the agent (a conversation) belongs to: fixed by the first
    /// write that names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Stored by PrepareRequest; the first message of every prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// A reported prompt size passed the trigger: compact before the next
    /// prompt is built. Cleared by a compaction.
    pub compaction_required: bool,
    /// Compaction epoch: the transcript's base changes with each.
    pub epoch: u32,
    pub compactions: u32,
    pub consecutive_failures: u32,
    /// The epoch's snapshot text (memory bundle and raw tail), the first
    /// message after the system prompt; none before the first compaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Active traces the snapshot already shows (its raw tail): they are
    /// not repeated as messages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snapshot_trace_ids: Vec<String>,
    /// A compaction written down but not finished (a crash or an I/O error
    /// interrupted it): finished before the agent is used again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<Intent>,
    /// The last active trace when this epoch began: usage reported before
    /// it measured an older prompt and no longer counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch_start_trace: Option<String>,
    /// Microcompact: results of turns before this one show as placeholders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub microcompact_before: Option<u32>,
    /// Snip: turns before this one show without what carries nothing for
    /// the model (`hide.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snip_before: Option<u32>,
    /// Whether the first epoch of the agent (a user's conversation) was
    /// given its start: the summary of the user's previous conversation as
    /// its snapshot, or nothing. Decided once, before its first prompt.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub first_epoch_started: bool,
    /// How many facts besides the pinned ones the snapshot's facts section
    /// shows (`engram_core::facts::shown`): set when a compaction or a
    /// client's change last rendered it, which keeps it current with the
    /// facts from then on (a change, an expiry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facts_limit: Option<u32>,
    /// A forget written down but not finished: finished before the agent
    /// is used again (ids only: no text of what it erases).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgetting: Option<crate::forget::ForgetIntent>,
    /// Keys a forget erased that the search indexes may still hold: they
    /// are removed (and their segments rewritten) at the next catch-up.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unpurged: Vec<String>,
}

impl AgentMeta {
    /// The user that `after` (a write's new settings) binds the agent to,
    /// if it does: a store marks the binding before it stores them.
    pub fn binds<'a>(&self, after: Option<&'a AgentMeta>) -> Option<&'a str> {
        let user = after?.user_id.as_deref()?;
        (self.user_id.as_deref() != Some(user)).then_some(user)
    }
}

/// What an agent is, derived from its records.
#[derive(Debug)]
pub struct Derived {
    pub tracker: TurnTracker,
    /// Active traces in storage order.
    pub traces: Vec<RawTrace>,
    pub episodic: Vec<EpisodicItem>,
    pub semantic: Vec<SemanticItem>,
    pub meta: AgentMeta,
    /// The active transcript of the epoch, kept current with every append.
    pub transcript: Transcript,
    /// The provider's last usage report in this epoch, and the number of
    /// transcript messages before it (what that prompt covered, roughly).
    pub report: Option<(Usage, usize)>,
    /// Turn numbers among the active traces (derived, kept current with
    /// every trace folded in; a prompt need not walk the traces for it).
    active_turns: BTreeSet<u32>,
    /// A compaction's summarizer call is under way (this process only).
    pub compacting: bool,
    /// Replay has passed `meta.epoch_start_trace`.
    in_epoch: bool,
    /// When the next fact the snapshot may show expires (see
    /// [`Self::facts_changed`]).
    next_expiry: Option<f64>,
    /// The tool results the epoch's transcript shows whole (what snip's
    /// references point to).
    shown: Shown1st,
}

impl Derived {
    /// An agent with `meta` whose archived traces (if any) made `tracker`;
    /// its active traces are folded in next with [`note`](Self::note).
    pub fn new(meta: AgentMeta, tracker: TurnTracker) -> Self {
        let transcript = epoch_transcript(&meta);
        Self {
            tracker,
            traces: Vec::new(),
            episodic: Vec::new(),
            semantic: Vec::new(),
            in_epoch: meta.epoch_start_trace.is_none(),
            meta,
            transcript,
            report: None,
            active_turns: BTreeSet::new(),
            compacting: false,
            next_expiry: None,
            shown: Shown1st::default(),
        }
    }

    /// The settings a write stores before anything else: the agent bound
    /// to `user` (when the write names one and the agent has none yet) and
    /// `system` as its system prompt (when given and not the stored one).
    /// `None` when nothing changes (no copy made: this runs on every
    /// prompt); refused, with nothing written, for another user's agent.
    pub fn settings_for(
        &self,
        user: Option<&UserId>,
        system: Option<&str>,
    ) -> Result<Option<AgentMeta>, CoreError> {
        let bind = match (self.meta.user_id.as_deref(), user) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(own), Some(user)) if own == user.as_str() => false,
            (Some(_), Some(user)) => {
                // Whose it is stays unsaid: the caller may not cover that user.
                return Err(CoreError::Precondition(format!(
                    "this agent belongs to a user other than {:?}; an agent's user is fixed by its first write that names one (use a new agent_id for this user's conversation)",
                    user.as_str()
                )));
            }
        };
        let system = system.filter(|s| self.meta.system_prompt.as_deref() != Some(*s));
        if !bind && system.is_none() {
            return Ok(None);
        }
        let mut meta = self.meta.clone();
        if bind {
            meta.user_id = user.map(|u| u.as_str().to_owned());
        }
        if let Some(system) = system {
            meta.system_prompt = Some(system.to_owned());
        }
        Ok(Some(meta))
    }

    /// The prompt as it stands, owned (the messages shared, not copied);
    /// `bytes` is about how much text the agent holds.
    pub fn context(&self, bytes: u64) -> AgentContext {
        AgentContext {
            transcript: self.transcript.id(),
            messages: self.transcript.shared(),
            tail: self.transcript.pending_tail(),
            system: self.meta.system_prompt.clone(),
            user_id: self.meta.user_id.clone(),
            report: self.report,
            last_model: self.tracker.last_model().map(str::to_owned),
            compaction_required: self.meta.compaction_required,
            finished_turns: self.active_turns.len()
                - usize::from(self.active_turns.contains(&self.tracker.turn_count())),
            turns: self.tracker.turn_count(),
            current_turn_id: self.tracker.current_turn_id().unwrap_or_default(),
            epoch: self.meta.epoch,
            compactions: self.meta.compactions,
            consecutive_failures: self.meta.consecutive_failures,
            awaits_first_epoch: self.awaits_first_epoch(),
            bytes,
            last_event_at: self
                .traces
                .last()
                .map(|t| t.ts)
                .or_else(|| self.episodic.last().and_then(|e| e.source.to_ts)),
        }
    }

    /// A user's conversation that has not been given the start of its
    /// first epoch yet (nothing compacted, no snapshot).
    fn awaits_first_epoch(&self) -> bool {
        // A snapshot before any compaction holds a client's facts only.
        self.meta.user_id.is_some()
            && !self.meta.first_epoch_started
            && self.meta.epoch == 0
            && self.meta.compactions == 0
    }

    /// The settings that start the first epoch with `snapshot` (the
    /// summary of the user's previous conversation, or none); `None` once
    /// it has started (another request came first).
    pub fn first_epoch_meta(&self, snapshot: Option<String>) -> Option<AgentMeta> {
        // The facts a client gave before it stay after the summary.
        let snapshot = match (snapshot, &self.meta.snapshot) {
            (Some(previous), Some(facts)) => Some(format!("{previous}{facts}")),
            (previous, facts) => previous.or_else(|| facts.clone()),
        };
        self.awaits_first_epoch().then(|| AgentMeta {
            first_epoch_started: true,
            snapshot,
            ..self.meta.clone()
        })
    }

    /// The settings whose snapshot shows the facts as they stand at `now`
    /// (`limit` of them besides the pinned ones; `None`: as many as last
    /// time), or `None` when it shows them already or never showed any.
    pub fn facts_meta(&self, limit: Option<u32>, now: f64) -> Option<AgentMeta> {
        let limit = limit.or(self.meta.facts_limit)?;
        let shown = crate::facts::shown(&self.semantic, limit as usize, now);
        let snapshot = crate::compaction::with_facts(self.meta.snapshot.as_deref(), &shown);
        (snapshot != self.meta.snapshot || self.meta.facts_limit != Some(limit)).then(|| {
            AgentMeta {
                snapshot,
                facts_limit: Some(limit),
                ..self.meta.clone()
            }
        })
    }

    /// Notes that the facts changed (or were loaded) at `now`: when the
    /// next of them expires.
    pub fn facts_changed(&mut self, now: f64) {
        self.next_expiry = crate::facts::next_expiry(&self.semantic, now);
    }

    /// Whether a fact expired since the facts section was last rendered
    /// (then [`Self::facts_meta`] renders it again).
    pub fn facts_due(&self, now: f64) -> bool {
        self.next_expiry.is_some_and(|at| at <= now)
    }

    /// Rebuilds the transcript from the active traces for
    /// the epoch `meta` describes (after a compaction). The turn state is
    /// kept: it already holds every trace, archived ones included.
    /// Returns the old transcript, for the caller to free off its async
    /// workers.
    pub fn rebuild_epoch(&mut self) -> Discarded {
        let transcript = epoch_transcript(&self.meta);
        let old = std::mem::replace(&mut self.transcript, transcript);
        self.report = None;
        self.in_epoch = self.meta.epoch_start_trace.is_none();
        self.active_turns.clear();
        self.shown.clear();
        let traces = std::mem::take(&mut self.traces);
        for trace in &traces {
            self.note_epoch(trace);
        }
        self.traces = traces;
        Discarded {
            _transcript: old,
            _traces: vec![],
        }
    }

    /// Folds a stored trace into the derived state (turns, transcript).
    pub fn note(&mut self, trace: &RawTrace) {
        self.tracker.apply(trace);
        self.note_epoch(trace);
    }

    /// The part of [`note`](Self::note) that starts over with each epoch:
    /// the active turns and the transcript.
    fn note_epoch(&mut self, trace: &RawTrace) {
        if let Some(n) = turn_number(&trace.turn_id) {
            self.active_turns.insert(n);
        }
        let in_epoch = self.in_epoch;
        if self.meta.epoch_start_trace.as_deref() == Some(trace.id.as_str()) {
            self.in_epoch = true;
        }
        if self.meta.snapshot_trace_ids.contains(&trace.id) {
            return; // shown in the snapshot text
        }
        if let Some(usage) = trace.usage.filter(|_| in_epoch) {
            self.report = Some((usage, self.transcript.messages().len()));
        }
        match self.shown.show(&self.meta, trace) {
            Shown::Whole => {
                self.transcript.push(trace);
            }
            Shown::As(shown) => {
                self.transcript.push(&shown);
            }
            Shown::Nothing => {}
        }
    }

    /// The turns a compaction would summarize now, as a job (`None`:
    /// nothing to compact). Marks nothing.
    pub fn job(&self, policy: Policy) -> Option<Job> {
        let window = select_window(&self.traces, policy.raw_tail_turns);
        if window.is_empty() {
            return None;
        }
        Some(Job {
            epoch: self.meta.epoch,
            next_epoch: self.meta.epoch + 1,
            turn_ids: window.turn_ids,
            traces: window
                .trace_indices
                .iter()
                .map(|&i| self.traces[i].clone())
                .collect(),
            known_facts: self
                .semantic
                .iter()
                .filter(|f| f.is_live())
                .cloned()
                .collect(),
            current_turn: self.tracker.turn_count(),
            user_id: self.meta.user_id.clone(),
        })
    }

    /// The answer of an Ingest that stored `traces`, reporting `model`.
    pub fn ingested(&self, traces: Vec<RawTrace>, model: Option<&str>) -> super::Ingested {
        super::Ingested {
            traces,
            current_turn_id: self.tracker.current_turn_id().unwrap_or_default(),
            compaction_required: self.meta.compaction_required,
            model: model
                .or_else(|| self.tracker.last_model())
                .map(str::to_owned),
            epoch: self.meta.epoch,
        }
    }

    /// Every memory and the raw traces of the last `raw_tail_turns` turns,
    /// copied out.
    pub fn bundle(&self, raw_tail_turns: usize) -> super::Bundle {
        super::Bundle {
            // A summary a forget hid has no text until it is rewritten.
            episodic: self
                .episodic
                .iter()
                .filter(|e| e.is_shown())
                .cloned()
                .collect(),
            semantic: self.semantic.clone(),
            raw_tail: crate::retrieve::raw_tail(&self.traces, raw_tail_turns)
                .into_iter()
                .cloned()
                .collect(),
        }
    }

    /// `job` no longer describes the agent: a compaction started a new
    /// epoch, or its window left the active traces.
    pub fn is_stale(&self, job: &Job) -> bool {
        let active: HashSet<&str> = self.traces.iter().map(|t| t.id.as_str()).collect();
        self.meta.epoch != job.epoch || job.traces.iter().any(|t| !active.contains(t.id.as_str()))
    }

    /// The refusal of a commit whose job [`is_stale`](Self::is_stale), the
    /// same from every backend.
    pub fn check_current(&self, job: &Job) -> Result<(), Stale> {
        if self.is_stale(job) {
            return Err(Stale);
        }
        Ok(())
    }

    /// Plans the commit of `job` with `summary` (core's [`plan`]; no
    /// summary: a trim). Returns
    /// it with the numbers of facts added and updated; `archive_len` is
    /// the file store's (0 elsewhere). New items are stamped `now` (epoch
    /// seconds) and named by `new_id`.
    pub fn commit_plan(
        &self,
        job: &Job,
        summary: Option<Summary>,
        policy: Policy,
        archive_len: u64,
        now: f64,
        new_id: impl FnMut() -> String,
    ) -> (Intent, u32, u32) {
        let window: HashSet<&str> = job.traces.iter().map(|t| t.id.as_str()).collect();
        let before = Before {
            active: &self.traces,
            episodic: &self.episodic,
            semantic: &self.semantic,
            current_turn: job.current_turn,
        };
        let limits = SnapshotLimits {
            max_episodic: policy.max_episodic,
            max_semantic: policy.max_semantic,
            carry_tokens: policy.carry_tokens,
            fact_ttl: policy.fact_ttl,
        };
        let planned = plan(before, &job.turn_ids, &window, summary, limits, now, new_id);
        let (added, updated) = planned.fact_counts();
        let intent = Intent {
            epoch: job.epoch,
            next_epoch: Some(job.next_epoch),
            turn_ids: job.turn_ids.clone(),
            trace_ids: job.traces.iter().map(|t| t.id.clone()).collect(),
            archive_len,
            episodic: planned.episodic,
            semantic: planned.facts.new_items,
            superseded: planned.facts.superseded,
            invalidated: planned.facts.invalidated,
            snapshot: planned.snapshot,
            snapshot_trace_ids: planned.snapshot_trace_ids,
            facts_limit: u32::try_from(policy.max_semantic).ok(),
            carried: planned.carried.carried,
            carry_dropped: planned.carried.dropped,
        };
        (intent, added, updated)
    }

    /// The settings of the epoch `intent` starts.
    pub fn committed_meta(&self, intent: &Intent) -> AgentMeta {
        let window: HashSet<&str> = intent.trace_ids.iter().map(String::as_str).collect();
        let epoch_start_trace = self
            .traces
            .iter()
            .rev()
            .find(|t| !window.contains(t.id.as_str()))
            .map(|t| t.id.clone());
        AgentMeta {
            pending: None,
            epoch_start_trace,
            epoch: intent.next_epoch.unwrap_or(intent.epoch + 1),
            // A later pass of the same compaction (a trim keeping fewer
            // turns, in the epoch it opened) is not another compaction.
            compactions: self.meta.compactions
                + u32::from(intent.episodic.is_some() || intent.next_epoch != Some(intent.epoch)),
            compaction_required: false,
            consecutive_failures: 0,
            // A trim with no memories to show starts with no snapshot.
            snapshot: (!intent.snapshot.is_empty()).then(|| intent.snapshot.clone()),
            snapshot_trace_ids: intent.snapshot_trace_ids.clone(),
            facts_limit: intent.facts_limit.or(self.meta.facts_limit),
            ..self.meta.clone()
        }
    }

    /// Adopts a committed `intent` whose settings (`meta`,
    /// [`committed_meta`](Self::committed_meta)) are stored: its memories
    /// added, its window's traces gone from the active ones, the new
    /// epoch's transcript built.
    /// Returns what it replaced, for the caller to free off its async
    /// workers.
    pub fn adopt_commit(&mut self, intent: &Intent, meta: AgentMeta) -> Discarded {
        self.meta = meta;
        if let Some(item) = &intent.episodic
            && !self.episodic.iter().any(|e| e.id == item.id)
        {
            self.episodic.push(item.clone());
        }
        for item in &intent.semantic {
            if !self.semantic.iter().any(|s| s.id == item.id) {
                self.semantic.push(item.clone());
            }
        }
        for line in intent.endings(&self.semantic) {
            if let Some(item) = self.semantic.iter_mut().find(|s| s.id == line.id) {
                *item = line;
            }
        }
        let window: HashSet<&str> = intent.trace_ids.iter().map(String::as_str).collect();
        let (kept, moved): (Vec<_>, Vec<_>) = std::mem::take(&mut self.traces)
            .into_iter()
            .partition(|t| !window.contains(t.id.as_str()));
        self.traces = kept;
        let mut discarded = self.rebuild_epoch();
        discarded._traces = moved;
        discarded
    }
}

impl Default for Derived {
    /// An agent with nothing stored yet.
    fn default() -> Self {
        Self::new(AgentMeta::default(), TurnTracker::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_change_only_when_a_write_changes_them() {
        let ana = UserId::parse("ana").unwrap();
        let bo = UserId::parse("bo").unwrap();
        let mut agent = Derived::default();
        assert_eq!(agent.settings_for(None, None), Ok(None));
        let bound = agent
            .settings_for(Some(&ana), Some("Be kind."))
            .unwrap()
            .unwrap();
        assert_eq!(bound.user_id.as_deref(), Some("ana"));
        assert_eq!(bound.system_prompt.as_deref(), Some("Be kind."));
        agent.meta = bound;
        assert_eq!(agent.settings_for(Some(&ana), Some("Be kind.")), Ok(None));
        let changed = agent
            .settings_for(None, Some("Be brief."))
            .unwrap()
            .unwrap();
        assert_eq!(changed.user_id.as_deref(), Some("ana"), "the user stays");
        // Refused without naming whose it is.
        assert!(matches!(
            agent.settings_for(Some(&bo), None),
            Err(CoreError::Precondition(m)) if m.contains("\"bo\"") && !m.contains("ana")
        ));
    }
}
