//! The write path: Ingest and PrepareRequest, under the agent's lock.

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::{AgentId, NewEvent, Outcome, RawTrace, Usage, UserId};
use engram_store::Writes;

use crate::agent::{self, AgentMeta, AgentState};
use crate::gate::Mark;
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
            let settings = state.settings_for(user, None)?;
            if let Some(user) = state.meta.binds(settings.as_ref())
                && let Mark::Wait(gate) = self.mark_user(user, id).await?
            {
                drop(slot);
                gate.passed().await;
                continue;
            }
            let traces = with_settings(state, id, settings, |state| {
                self.append_events(id, state, events, usage, model)
            })?;
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
                // An id that does not exist is not kept, unless somebody
                // else holds it.
                self.unregister_unused(id, &handle);
                return Err(StoreError::NotFound(id.to_string()));
            }
            input.check_model(state.tracker.last_model())?;
            let settings = state.settings_for(input.user, input.system_prompt)?;
            if let Some(user) = state.meta.binds(settings.as_ref())
                && let Mark::Wait(gate) = self.mark_user(user, id).await?
            {
                drop(slot);
                gate.passed().await;
                continue;
            }
            let user_trace = with_settings(state, id, settings, |state| match &input.user_input {
                Some(event) => Ok(self
                    .append_events(id, state, std::slice::from_ref(event), None, None)?
                    .pop()),
                None => Ok(None),
            })?;
            crate::facts::expire_facts(state)?;
            let context = state.context();
            let agent_blocks = Arc::clone(state.blocks.live());
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

    /// Stores the first epoch's snapshot and rebuilds the transcript on it.
    async fn start_first_epoch(
        &self,
        id: &AgentId,
        snapshot: Option<String>,
    ) -> Result<Option<crate::AgentContext>> {
        let handle = self.existing_handle(id)?;
        let mut slot = handle.lock().await;
        let state = self.loaded(id, &mut slot).await?;
        if !state.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let Some(meta) = state.first_epoch_meta(snapshot) else {
            return Ok(None);
        };
        state.save_meta(meta)?;
        engram_store::drop_later(state.rebuild_epoch());
        Ok(Some(state.context()))
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

/// Runs `write` with the agent's new `settings` stored (none: as they
/// are): for an agent that exists, first, and put back when `write` is
/// refused; for a new one, after `write` has created its directory.
fn with_settings<T>(
    state: &mut AgentState,
    id: &AgentId,
    settings: Option<AgentMeta>,
    write: impl FnOnce(&mut AgentState) -> Result<T>,
) -> Result<T> {
    let Some(meta) = settings else {
        return write(state);
    };
    if !state.exists() {
        let out = write(state)?;
        state.save_meta(meta)?;
        return Ok(out);
    }
    let before = state.meta.clone();
    state.save_meta(meta)?;
    write(state).inspect_err(|_| {
        if let Err(e) = state.save_meta(before) {
            tracing::warn!(agent = %id, error = %e, "could not restore the settings of a refused request");
        }
    })
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
