//! Ingest, PrepareRequest's write and the compaction mark: one transaction
//! each, holding the agent row's lock, so writers of one agent on every
//! replica go one at a time. Ingest's common case is a single statement
//! that takes the lock and checks the cache's version itself
//! (`append_checked`); anything else takes the row `FOR UPDATE` first. The
//! cache takes a write in as it is committed, and is dropped (reloaded on
//! the next call) when a commit's outcome is unknown.

use async_trait::async_trait;
use engram_core::{AgentId, CoreError, NewEvent, Outcome, RawTrace, Usage, UserId};
use engram_store::items::{placed_before, trace_order};
use engram_store::{AgentMeta, Ingested, PrepareInput, Prepared, Result, StoreError, Writes};
use sqlx::{PgConnection, Postgres, Transaction};

use crate::cache::{Cached, Lock, Slot, fold, refresh};
use crate::group::{Append, Appended};
use crate::read::context_of;
use crate::rows::{insert_traces, trace_columns, words_of};
use crate::{PgStore, db};

#[async_trait]
impl Writes for PgStore {
    async fn ingest(
        &self,
        id: &AgentId,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
        user: Option<&UserId>,
    ) -> Result<Ingested> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        loop {
            // A write that binds the agent's user takes the locked path.
            let binds = slot
                .as_ref()
                .is_none_or(|c| !matches!(c.derived.settings_for(user, None), Ok(None)));
            let fast = if binds {
                None
            } else {
                self.append_checked(id, &mut slot, events, usage, model)
                    .await?
            };
            let traces = match fast {
                Some(traces) => traces,
                None => {
                    let mut tx = self.begin().await?;
                    refresh(&mut tx, id.as_str(), &mut slot, Lock::Update).await?;
                    let Some(traces) = self
                        .append(&mut tx, id, &mut slot, events, (usage, model), user)
                        .await?
                    else {
                        continue; // another replica created the agent meanwhile
                    };
                    self.commit(tx, &mut slot).await?;
                    traces
                }
            };
            let cached = slot.as_ref().expect("written");
            return Ok(cached.derived.ingested(traces, model));
        }
    }

    /// Marks the agent for compaction unless its epoch moved past `epoch`.
    async fn mark_compaction_required(&self, id: &AgentId, epoch: u32) -> Result<bool> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        let mut tx = self.lock_existing(id, &mut slot).await?;
        let cached = slot.as_mut().expect("current");
        if cached.derived.meta.epoch != epoch {
            return Ok(cached.derived.meta.compaction_required);
        }
        if !cached.derived.meta.compaction_required {
            let meta = AgentMeta {
                compaction_required: true,
                ..cached.derived.meta.clone()
            };
            save_meta(&mut tx, id.as_str(), cached, meta).await?;
            self.commit(tx, &mut slot).await?;
        }
        Ok(true)
    }

    async fn start_first_epoch(
        &self,
        id: &AgentId,
        snapshot: Option<String>,
    ) -> Result<Option<engram_store::AgentContext>> {
        self.first_epoch(id, snapshot).await
    }

    async fn prepare(&self, id: &AgentId, input: PrepareInput<'_>) -> Result<Prepared> {
        let handle = self.handle(id.as_str());
        let mut slot = handle.lock().await;
        loop {
            let mut tx = self.begin().await?;
            let exists = refresh(&mut tx, id.as_str(), &mut slot, Lock::Update).await?;
            if !exists && input.user_input.is_none() {
                return Err(StoreError::NotFound(id.to_string()));
            }
            let last_model = slot
                .as_ref()
                .and_then(|c| c.derived.tracker.last_model().map(str::to_owned));
            input.check_model(last_model.as_deref())?;
            // Another user's agent is refused before anything is written.
            if let Some(cached) = slot.as_ref() {
                cached.derived.settings_for(input.user, None)?;
            }
            // Refused input rolls the whole transaction back, the system
            // prompt with it; the cache is then reloaded.
            let user_trace = match &input.user_input {
                Some(event) => {
                    match self
                        .append(
                            &mut tx,
                            id,
                            &mut slot,
                            std::slice::from_ref(event),
                            (None, None),
                            input.user,
                        )
                        .await
                    {
                        Ok(Some(mut traces)) => traces.pop(),
                        Ok(None) => continue,
                        Err(e) => return Err(e),
                    }
                }
                None => None,
            };
            let cached = slot.as_mut().expect("the agent exists");
            let saved = match cached.derived.settings_for(input.user, input.system_prompt) {
                Ok(Some(meta)) => save_meta(&mut tx, id.as_str(), cached, meta).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e.into()),
            };
            let saved = match saved {
                Ok(()) => crate::facts::expire_facts(&mut tx, id.as_str(), cached).await,
                e => e,
            };
            if let Err(e) = saved {
                // The cache holds the user input, which is not stored.
                *slot = None;
                return Err(e);
            }
            let cached = self.commit(tx, &mut slot).await?;
            let context = context_of(cached);
            drop(slot);
            let blocks = self.seen_blocks(id, context.user_id.as_deref()).await?;
            return Ok(Prepared {
                context,
                user_trace,
                blocks,
            });
        }
    }
}

impl PgStore {
    pub(crate) async fn conn(&self) -> Result<sqlx::pool::PoolConnection<Postgres>> {
        self.inner.pool.acquire().await.map_err(db("connecting"))
    }

    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        self.inner
            .pool
            .begin()
            .await
            .map_err(db("starting a transaction"))
    }

    /// A transaction holding the agent row's lock, with `slot` current;
    /// NOT_FOUND for an agent that does not exist.
    pub(crate) async fn lock_existing(
        &self,
        id: &AgentId,
        slot: &mut Slot<'_>,
    ) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self.begin().await?;
        if !refresh(&mut tx, id.as_str(), slot, Lock::Update).await? {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(tx)
    }

    /// Commits `tx`, whose writes `slot` already shows (as pending): on
    /// failure the cache is dropped, since the database may or may not
    /// hold them.
    pub(crate) async fn commit<'s>(
        &self,
        tx: Transaction<'static, Postgres>,
        slot: &'s mut Slot<'_>,
    ) -> Result<&'s Cached> {
        if let Err(e) = tx.commit().await {
            **slot = None;
            return Err(db("committing")(e));
        }
        Ok(slot.as_ref().expect("a committed agent is cached"))
    }

    /// Validates `events` against the cached agent (current, under the row
    /// lock) and writes their traces in `tx`; folds them into the cache
    /// (which the caller drops if the commit fails). `None` when the agent
    /// was created by another replica since it was found absent: the
    /// caller starts over.
    async fn append(
        &self,
        tx: &mut PgConnection,
        id: &AgentId,
        slot: &mut Slot<'_>,
        events: &[NewEvent],
        (usage, model): (Option<Usage>, Option<&str>),
        user: Option<&UserId>,
    ) -> Result<Option<Vec<RawTrace>>> {
        let empty = engram_core::TurnTracker::default();
        let tracker = slot.as_ref().map_or(&empty, |c| &c.derived.tracker);
        let plan = self.plan(tracker, events, usage, model)?;
        // Placed before traces embedded without them (`placed_before`).
        let late: Vec<(i64, f64)> = placed_before(tracker.turn_count(), &plan.new_traces)
            .into_iter()
            .map(|t| (trace_order(t) as i64, t.ts))
            .collect();
        let mut claim = None;
        match slot.as_ref() {
            None => {
                let meta = AgentMeta {
                    user_id: user.map(|u| u.as_str().to_owned()),
                    ..AgentMeta::default()
                };
                match self.create(tx, id, meta).await? {
                    Some(created) => **slot = Some(created),
                    None => return Ok(None),
                }
            }
            Some(cached) => {
                // Stored in `tx`, adopted by the cache with the traces.
                claim = cached.derived.settings_for(user, None)?;
                if let Some(meta) = &claim {
                    sqlx::query("UPDATE agents SET meta = $2, user_id = $3 WHERE id = $1")
                        .bind(id.as_str())
                        .bind(crate::meta_json(meta))
                        .bind(meta.user_id.as_deref())
                        .execute(&mut *tx)
                        .await
                        .map_err(db("storing an agent's user"))?;
                }
            }
        }
        let cached = slot.as_mut().expect("created or current");
        for spill in &plan.spills {
            sqlx::query("INSERT INTO spills (agent_id, path, body) VALUES ($1, $2, $3) ON CONFLICT (agent_id, path) DO UPDATE SET body = excluded.body")
                .bind(id.as_str())
                .bind(&spill.path)
                .bind(words_of(&spill.json))
                .execute(&mut *tx)
                .await
                .map_err(db("storing a tool result"))?;
        }
        let first = cached.next_seq;
        insert_traces(tx, id.as_str(), first, &plan.new_traces).await?;
        // The trace after a late one was embedded after another text, or
        // alone, whatever their times: it is embedded again.
        crate::erase::embed_again_after(tx, id.as_str(), late, f64::MAX).await?;
        let next = first + plan.new_traces.len() as i64;
        let version: i64 = sqlx::query_scalar(
            "UPDATE agents SET version = version + 1, next_seq = $2 WHERE id = $1 RETURNING version",
        )
        .bind(id.as_str())
        .bind(next)
        .fetch_one(&mut *tx)
        .await
        .map_err(db("updating an agent"))?;
        let mut out = Vec::with_capacity(plan.outcomes.len());
        for outcome in &plan.outcomes {
            out.push(match outcome {
                Outcome::New(i) => plan.new_traces[*i].clone(),
                Outcome::Existing(trace_id) => {
                    find_trace(tx, id.as_str(), cached, trace_id).await?
                }
            });
        }
        if let Some(meta) = claim {
            cached.derived.meta = meta;
        }
        fold(cached, plan.new_traces, version, next);
        Ok(Some(out))
    }

    /// Ingest's common case in one statement: `events` planned against the
    /// cache, written only if the agent row is still the version the cache
    /// is of (checked under the row's lock, in the same statement, shared
    /// with other agents' appends: `group.rs`). `None` when it is not —
    /// another replica wrote meanwhile — or the write needs more than one
    /// statement (results stored whole, retried events): the caller then
    /// takes the locked path.
    async fn append_checked(
        &self,
        id: &AgentId,
        slot: &mut Slot<'_>,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
    ) -> Result<Option<Vec<RawTrace>>> {
        let Some(cached) = slot.as_mut() else {
            return Ok(None);
        };
        let plan = self.plan(&cached.derived.tracker, events, usage, model);
        // A refusal by a cache that may be behind (the tool call it misses
        // may be another replica's write) is decided again, current.
        let Ok(plan) = plan else {
            return Ok(None);
        };
        let all_new = plan.outcomes.iter().all(|o| matches!(o, Outcome::New(_)));
        if !plan.spills.is_empty() || !all_new || plan.new_traces.is_empty() {
            return Ok(None);
        }
        // A late tool result also drops the vector of the trace after it:
        // a statement of its own, on the locked path.
        let latest = cached.derived.tracker.turn_count();
        if !placed_before(latest, &plan.new_traces).is_empty() {
            return Ok(None);
        }
        let first = cached.next_seq;
        let next = first + plan.new_traces.len() as i64;
        let append = Append {
            agent: id.as_str().to_owned(),
            incarnation: cached.incarnation,
            version: cached.version,
            generation: cached.generation,
            next,
            cols: trace_columns(first, &plan.new_traces),
        };
        // Written with the other agents' appends queued meanwhile.
        let version = match self.inner.group.append(append).await? {
            Appended::Written(version) => version,
            // Another replica wrote the agent, or stored the same event
            // (this cache did not know yet): the locked path finds out.
            Appended::Stale => return Ok(None),
        };
        let out = plan.new_traces.clone();
        fold(cached, plan.new_traces, version, next);
        Ok(Some(out))
    }

    /// `events` validated and placed against `tracker` (the core's turn
    /// rules); nothing is written. Large requests off the async workers.
    fn plan(
        &self,
        tracker: &engram_core::TurnTracker,
        events: &[NewEvent],
        usage: Option<Usage>,
        model: Option<&str>,
    ) -> std::result::Result<engram_core::turns::IngestPlan, CoreError> {
        let bytes = events.iter().map(NewEvent::approx_bytes).sum::<usize>() as u64;
        engram_store::offload_over(bytes, || {
            tracker.plan(
                events,
                usage,
                model,
                self.inner.config.limits,
                engram_store::unix_now(),
                || uuid::Uuid::now_v7().to_string(),
            )
        })
    }

    /// Creates the agent row (version 0) and returns its cache, unless
    /// another replica just did: then `None`, and the caller starts over.
    pub(crate) async fn create(
        &self,
        tx: &mut PgConnection,
        id: &AgentId,
        meta: AgentMeta,
    ) -> Result<Option<Cached>> {
        let incarnation = uuid::Uuid::now_v7();
        let created = sqlx::query(
            "INSERT INTO agents (id, incarnation, meta, user_id) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id.as_str())
        .bind(incarnation)
        .bind(crate::meta_json(&meta))
        .bind(meta.user_id.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(db("creating an agent"))?
        .rows_affected()
            == 1;
        Ok(created.then(|| Cached {
            incarnation,
            version: 0,
            generation: 0,
            next_seq: 0,
            derived: engram_store::derived::Derived::new(meta, Default::default()),
        }))
    }
}

/// Stores `meta` as the agent's settings in `tx` (a new version) and adopts
/// it in the cache.
pub(crate) async fn save_meta(
    tx: &mut PgConnection,
    id: &str,
    cached: &mut Cached,
    meta: AgentMeta,
) -> Result<()> {
    let version: i64 = sqlx::query_scalar(
        "UPDATE agents SET meta = $2, user_id = $3, version = version + 1 WHERE id = $1 RETURNING version",
    )
    .bind(id)
    .bind(crate::meta_json(&meta))
    .bind(meta.user_id.as_deref())
    .fetch_one(&mut *tx)
    .await
    .map_err(db("storing an agent's settings"))?;
    cached.derived.meta = meta;
    cached.version = version;
    Ok(())
}

/// The stored trace with `trace_id`: active first, then the archive (a
/// retry of an event a compaction archived since).
async fn find_trace(
    tx: &mut PgConnection,
    id: &str,
    cached: &Cached,
    trace_id: &str,
) -> Result<RawTrace> {
    if let Some(t) = cached
        .derived
        .traces
        .iter()
        .rev()
        .find(|t| t.id == trace_id)
    {
        return Ok(t.clone());
    }
    let body: Option<String> =
        sqlx::query_scalar("SELECT body FROM traces WHERE agent_id = $1 AND trace_id = $2")
            .bind(id)
            .bind(trace_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db("finding a trace"))?;
    match body {
        Some(body) => crate::parse_trace(id, &body),
        None => Err(crate::broken(format!(
            "trace {trace_id} of a retried event is missing"
        ))),
    }
}
