//! Consolidation of a user's facts across conversations (docs/DESIGN.md
//! §15): on `ConsolidateUser`, and after an idle conversation of the user
//! is summarized. The user's live facts are embedded with the store's
//! model; repeats by words or meaning merge
//! (`engram_core::users::consolidate::candidates`), and the groups on one
//! subject go to the summarizer in one request (an LLM decides which
//! replace which; the embedded summarizer decides nothing, so nothing is
//! replaced by guesswork). The store applies the plan against the facts
//! as they are then and logs the run, so a crash at any point leaves the
//! facts whole and the next run finds what is left to do.
//!
//! One run per user at a time in a process (a second waits for the
//! first, then finds little left); across replicas, the store's check of
//! every step against the facts under the user's lock keeps two runs from
//! undoing each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use engram_core::UserId;
use engram_core::memory::SemanticItem;
use engram_core::users::UserFact;
use engram_core::users::consolidate::{
    Candidates, ConsolidationRecord, Plan, Replace, candidates, considered,
};

use crate::Engine;
use crate::error::Result;
use crate::limits;

/// What starts a run, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Request,
    Idle,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Request => "request",
            Cause::Idle => "idle",
        }
    }
}

/// The users whose consolidation runs in this process, each with the lock
/// a second run waits on.
#[derive(Debug, Default)]
pub(crate) struct Running(Mutex<HashMap<UserId, Arc<tokio::sync::Mutex<()>>>>);

impl Running {
    fn lock_of(&self, user: &UserId) -> Arc<tokio::sync::Mutex<()>> {
        let mut all = engram_store::lock(&self.0);
        // Locks nobody holds or waits on go, so the map stays small.
        all.retain(|_, l| Arc::strong_count(l) > 1);
        Arc::clone(all.entry(user.clone()).or_default())
    }
}

impl Engine {
    /// Consolidates `user_id`'s facts and returns the run's record (as
    /// logged when it changed something or was asked for). Pinned and
    /// client-written facts are never changed.
    pub async fn consolidate_user(
        &self,
        user_id: &str,
        cause: Cause,
    ) -> Result<ConsolidationRecord> {
        let user = limits::user_id("user_id", user_id)?;
        let lock = self.consolidating.lock_of(&user);
        let _one = lock.lock().await;
        let started = Instant::now();
        let facts = self.store.user_facts(&user).await?;
        let mut found = self.candidates(&facts).await;
        if cause == Cause::Idle {
            self.only_new(&user, &facts, &mut found).await?;
        }
        let mut record = ConsolidationRecord {
            trigger: cause.as_str().to_owned(),
            asked: found.groups.len() as u32,
            ..ConsolidationRecord::default()
        };
        let mut plan = Plan {
            merges: found.merges.clone(),
            ..Plan::default()
        };
        if !found.groups.is_empty() {
            self.decide(&facts, &found, &mut plan, &mut record).await;
        }
        record.at = engram_store::unix_now();
        record.duration_secs = started.elapsed().as_secs_f64();
        // A user with no facts has nothing to log; an idle run that found
        // nothing to do neither.
        let worth_logging = !facts.is_empty()
            && (!plan.is_empty() || cause == Cause::Request || record.error.is_some());
        let record = if worth_logging {
            self.store.consolidate_user(&user, &plan, record).await?.1
        } else {
            record.counts.unchanged = facts.iter().filter(|f| f.is_live()).count() as u32;
            record
        };
        count(&record);
        tracing::info!(
            user = %user,
            trigger = record.trigger,
            merged = record.counts.merged,
            replaced = record.counts.replaced,
            invalidated = record.counts.invalidated,
            unchanged = record.counts.unchanged,
            "consolidated a user's facts"
        );
        Ok(record)
    }

    /// The user's runs, newest first.
    pub async fn consolidations(
        &self,
        user_id: &str,
        limit: usize,
    ) -> Result<Vec<ConsolidationRecord>> {
        let user = limits::user_id("user_id", user_id)?;
        Ok(self.store.consolidations(&user, limit).await?)
    }

    /// Repeats and subjects among `facts`, by the store's model when it
    /// has one (else by words alone: repeats only).
    async fn candidates(&self, facts: &[UserFact]) -> Candidates {
        let live = considered(facts);
        let vectors = match self.store.embedder() {
            Some(model) if live.len() > 1 => {
                let texts: Vec<String> = live.iter().map(|&i| facts[i].fact.fact.clone()).collect();
                match model.embed(&texts).await {
                    Ok(v) if v.len() == live.len() => Some(v),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "the user's facts were not embedded: repeats are merged by words only");
                        None
                    }
                }
            }
            _ => None,
        };
        let slot: HashMap<usize, usize> = live.iter().enumerate().map(|(n, &i)| (i, n)).collect();
        let facts = facts.to_vec();
        let bytes: u64 = facts.iter().map(|f| f.fact.fact.len() as u64).sum();
        // The pairwise comparison is CPU work: off the async workers.
        engram_store::offload_over(bytes, move || {
            candidates(&facts, |a, b| {
                let v = vectors.as_ref()?;
                let (a, b) = (&v[*slot.get(&a)?], &v[*slot.get(&b)?]);
                Some(a.iter().zip(b).map(|(x, y)| x * y).sum())
            })
        })
    }

    /// Keeps the groups holding a fact written since the user's last run:
    /// an idle run asks the summarizer only about what it has not seen
    /// (a request asks about all).
    async fn only_new(
        &self,
        user: &UserId,
        facts: &[UserFact],
        found: &mut Candidates,
    ) -> Result<()> {
        let Some(last) = self.store.consolidations(user, 1).await?.pop() else {
            return Ok(());
        };
        let written: HashMap<&str, f64> = facts
            .iter()
            .map(|f| (f.fact.id.as_str(), f.fact.ts))
            .collect();
        found.groups.retain(|g| {
            g.iter()
                .any(|id| written.get(id.as_str()).is_some_and(|&ts| ts > last.at))
        });
        Ok(())
    }

    /// Asks the summarizer about `found`'s groups and adds what it decided
    /// to `plan`; a failure is recorded, the merges stand.
    async fn decide(
        &self,
        facts: &[UserFact],
        found: &Candidates,
        plan: &mut Plan,
        record: &mut ConsolidationRecord,
    ) {
        let by_id: HashMap<&str, &SemanticItem> = facts
            .iter()
            .map(|f| (f.fact.id.as_str(), &f.fact))
            .collect();
        let groups: Vec<Vec<SemanticItem>> = found
            .groups
            .iter()
            .map(|g| {
                g.iter()
                    .filter_map(|id| by_id.get(id.as_str()).map(|f| (*f).clone()))
                    .collect()
            })
            .collect();
        let summarizer = self.compactor.summarizer();
        let Some(asking) = summarizer.reconcile(&groups) else {
            record.asked = 0;
            return;
        };
        record.summarizer = summarizer.name();
        match asking.await {
            Ok(decided) => {
                record.unknown_handles = decided.unknown_handles;
                plan.replaces.extend(
                    decided
                        .replaces
                        .into_iter()
                        .map(|(old, new)| Replace { old, new }),
                );
                for id in decided.invalidates {
                    let Some(group) = groups.iter().find(|g| g.iter().any(|f| f.id == id)) else {
                        continue;
                    };
                    // Ended when the newest of the others began, or now
                    // when none is newer than it.
                    let own = by_id.get(id.as_str()).map_or(f64::MAX, |f| f.valid_since());
                    let at = group
                        .iter()
                        .filter(|f| f.id != id)
                        .map(SemanticItem::valid_since)
                        .fold(f64::MIN, f64::max);
                    let at = if at > own {
                        at
                    } else {
                        engram_store::unix_now()
                    };
                    plan.invalidates.push((id, at));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the summarizer did not decide about the user's facts; repeats are merged anyway");
                record.error = Some(e.to_string());
            }
        }
    }
}

/// The run in metrics: runs by trigger, facts by what became of them.
fn count(record: &ConsolidationRecord) {
    metrics::counter!("engram_consolidations_total", "trigger" => record.trigger.clone())
        .increment(1);
    let c = record.counts;
    for (outcome, n) in [
        ("merged", c.merged),
        ("replaced", c.replaced),
        ("invalidated", c.invalidated),
        ("unchanged", c.unchanged),
    ] {
        metrics::counter!("engram_consolidated_facts_total", "outcome" => outcome)
            .increment(u64::from(n));
    }
    if record.unknown_handles > 0 {
        metrics::counter!("engram_fact_decisions_total", "kind" => "unknown_handle")
            .increment(u64::from(record.unknown_handles));
    }
    if record.error.is_some() {
        metrics::counter!("engram_consolidation_failures_total").increment(1);
    }
}

#[cfg(test)]
mod tests;
