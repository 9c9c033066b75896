//! The write path: Ingest and PrepareRequest, under the agent's lock.

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::{AgentId, NewEvent, Outcome, RawTrace, Usage, UserId};
use engram_store::Writes;

use crate::agent::{self, AgentMeta, AgentState};
use crate::{
    FileStore, FsyncPolicy, Ingested, PrepareInput, Prepared, Result, StoreError, unix_now, wal,
};

#[async_trait]
impl Writes for FileStore {
    /// Validates and stores `events`, creating the agent on its first
    /// accepted write. Returns once the traces are durable (per policy);
    /// the indexer picks them up after.
    async fn ingest(
        &self,
        id: &AgentId,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
        user: Option<&UserId>,
    ) -> Result<Ingested> {
        loop {
            let handle = self.handle(id);
            let mut slot = handle.lock().await;
            let state = self.loaded(id, &mut slot).await?;
            if state.deleted {
                continue; // deleted while we waited: start over on a fresh agent
            }
            let claim = state.claim(user)?;
            let existed = state.exists();
            let replaced = match (&claim, existed) {
                (Some(meta), true) => store_meta(state, meta.clone())?,
                _ => None,
            };
            let traces = match self.append_events(id, state, events, usage, model) {
                Ok(traces) => traces,
                Err(e) => {
                    undo(state, id, replaced);
                    return Err(e);
                }
            };
            if let (Some(meta), false) = (claim, existed) {
                // A new agent's directory exists only now.
                store_meta(state, meta)?;
            }
            let out = state.ingested(traces, model);
            // A retry waits too: the first attempt may still be in flight.
            let ticket = state.last_ticket.clone();
            drop(slot);
            if let Some(ticket) = ticket {
                ticket.wait().await.map_err(|e| e.for_agent(id.as_str()))?;
            }
            self.index_later(id);
            return Ok(out);
        }
    }

    /// Marks the agent for compaction unless its epoch moved past `epoch`.
    /// The mark is durable before this returns and stays until a
    /// compaction clears it.
    async fn mark_compaction_required(&self, id: &AgentId, epoch: u32) -> Result<bool> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        if state.meta.epoch != epoch {
            return Ok(state.meta.compaction_required);
        }
        if !state.meta.compaction_required {
            let meta = AgentMeta {
                compaction_required: true,
                ..state.meta.clone()
            };
            state.save_meta(meta)?;
        }
        Ok(true)
    }

    /// PrepareRequest's store part, under one hold of the agent's lock:
    /// the request is vetted before anything is written; then a changed
    /// system prompt is stored, the user input ingested (creating the
    /// agent), and the prompt's parts taken. Answers once they are durable.
    async fn prepare(&self, id: &AgentId, input: PrepareInput<'_>) -> Result<Prepared> {
        loop {
            let handle = self.handle(id);
            let mut slot = handle.lock().await;
            let state = self.loaded(id, &mut slot).await?;
            if state.deleted {
                continue;
            }
            if !state.exists() && input.user_input.is_none() {
                drop(slot);
                // Nobody else holds it: an id that does not exist is not kept.
                if Arc::strong_count(&handle) == 2 {
                    self.unregister(id, &handle);
                }
                return Err(StoreError::NotFound(id.to_string()));
            }
            input.check_model(state.tracker.last_model())?;
            let claim = state.claim(input.user)?;
            let meta = with_system(
                claim.unwrap_or_else(|| state.meta.clone()),
                input.system_prompt,
            );
            let existed = state.exists();
            let replaced = if existed {
                store_meta(state, meta.clone())?
            } else {
                None
            };
            let user_trace = match &input.user_input {
                Some(event) => {
                    match self.append_events(id, state, std::slice::from_ref(event), None, None) {
                        Ok(mut traces) => traces.pop(),
                        Err(e) => {
                            // Refused: the settings go back too.
                            undo(state, id, replaced);
                            return Err(e);
                        }
                    }
                }
                None => None,
            };
            if !existed {
                // A new agent's directory exists only now.
                store_meta(state, meta)?;
            }
            let context = state.context();
            let agent_blocks = Arc::clone(&state.blocks);
            let ticket = state.last_ticket.clone();
            drop(slot);
            if let Some(ticket) = ticket {
                ticket.wait().await.map_err(|e| e.for_agent(id.as_str()))?;
            }
            self.index_later(id);
            let blocks = self
                .seen_blocks(context.user_id.as_deref(), agent_blocks)
                .await?;
            return Ok(Prepared {
                context,
                user_trace,
                blocks,
            });
        }
    }
}

impl FileStore {
    /// The write path of Ingest and PrepareRequest, under the agent's lock:
    /// validate, append to the agent's file and the log, fold into the
    /// derived state. Returns one trace per event.
    fn append_events(
        &self,
        id: &AgentId,
        state: &mut AgentState,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
    ) -> Result<Vec<RawTrace>> {
        // Validating and serializing a request near the size limit is
        // milliseconds of CPU: not on the async workers.
        let bytes = events.iter().map(NewEvent::approx_bytes).sum::<usize>();
        crate::offload_over(bytes as u64, || {
            self.append_now(id, state, events, usage, model)
        })
    }

    fn append_now(
        &self,
        id: &AgentId,
        state: &mut AgentState,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
    ) -> Result<Vec<RawTrace>> {
        if let Some(reason) = state.raw.as_ref().and_then(|r| r.failure()) {
            return Err(StoreError::ReadOnly {
                agent: Some(id.to_string()),
                reason,
            });
        }
        let plan = state.tracker.plan(
            events,
            usage,
            model,
            self.inner.config.limits,
            unix_now(),
            || uuid::Uuid::now_v7().to_string(),
        )?;
        let raw = match &state.raw {
            Some(raw) => Arc::clone(raw),
            None => state.create(&self.inner.health)?,
        };
        if !plan.spills.is_empty() {
            let dir = state.dir.clone();
            let spills = plan.spills.clone();
            // Whole results are durable before the traces that point at them
            // (rare and bounded by the request size: written in place).
            write_spills(&dir, &spills)?;
        }
        if !plan.new_traces.is_empty() {
            let start = raw.len();
            raw.append(&plan.bytes)
                .map_err(|e| e.for_agent(id.as_str()))?;
            if self.inner.config.fsync == FsyncPolicy::Always {
                let record = wal::Record::Append {
                    agent: id.as_str(),
                    file: agent::RAW_TRACES,
                    offset: start,
                    bytes: &plan.bytes,
                };
                match self.inner.wal.append(&record) {
                    Ok(ticket) => state.last_ticket = Some(ticket),
                    Err(e) => {
                        // Unlogged bytes must not stay: a later record
                        // would claim their offset.
                        raw.roll_back(start);
                        return Err(e.for_agent(id.as_str()));
                    }
                }
            }
        }
        for trace in &plan.new_traces {
            state.note(trace);
        }
        let mut traces = Vec::with_capacity(plan.outcomes.len());
        for outcome in &plan.outcomes {
            traces.push(match outcome {
                Outcome::New(i) => plan.new_traces[*i].clone(),
                Outcome::Existing(trace_id) => {
                    state
                        .find_trace(trace_id)?
                        .ok_or_else(|| StoreError::Unavailable {
                            detail: format!(
                                "the trace {trace_id} of a retried event is missing from {}",
                                state.dir.display()
                            ),
                            retry: false,
                        })?
                }
            });
        }
        state.traces.extend(plan.new_traces);
        Ok(traces)
    }
}

/// The agent's settings with `system` as its system prompt, when given.
fn with_system(meta: AgentMeta, system: Option<&str>) -> AgentMeta {
    match system {
        Some(system) if meta.system_prompt.as_deref() != Some(system) => AgentMeta {
            system_prompt: Some(system.to_owned()),
            ..meta
        },
        _ => meta,
    }
}

/// Stores `meta` when it differs from the agent's settings; returns the
/// settings it replaced, to undo it with.
fn store_meta(state: &mut AgentState, meta: AgentMeta) -> Result<Option<AgentMeta>> {
    if state.meta == meta {
        return Ok(None);
    }
    let before = state.meta.clone();
    state.save_meta(meta)?;
    Ok(Some(before))
}

/// Puts back the settings a refused request replaced.
fn undo(state: &mut AgentState, id: &AgentId, replaced: Option<AgentMeta>) {
    if let Some(before) = replaced
        && let Err(e) = state.save_meta(before)
    {
        tracing::warn!(agent = %id, error = %e, "could not restore the settings of a refused request");
    }
}

/// Stores large tool results whole (durably) in `tool_results/`, off the
/// async workers (a write and fsyncs per result).
fn write_spills(dir: &std::path::Path, spills: &[engram_core::spill::Spill]) -> Result<()> {
    if spills.is_empty() {
        return Ok(());
    }
    crate::offload(|| write_spills_now(dir, spills))
}

fn write_spills_now(dir: &std::path::Path, spills: &[engram_core::spill::Spill]) -> Result<()> {
    for spill in spills {
        let path = dir.join(&spill.path);
        let parent = path.parent().unwrap_or(dir);
        if !parent.is_dir() {
            std::fs::create_dir_all(parent).map_err(StoreError::io("creating", parent))?;
            crate::jsonl::sync_dir(dir)?;
        }
        crate::jsonl::atomic_write(&path, spill.json.as_bytes())?;
    }
    Ok(())
}
