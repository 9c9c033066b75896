//! What a bundle must hold before a store writes any of it, and the one
//! order versions are listed in, whichever store exported them.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{AgentRecords, BundleScope, MemoryBundle, UserRecords};
use crate::blocks::{Block, check_label};
use crate::compaction::CompactionRecord;
use crate::memory::SemanticItem;
use crate::spill::spill_path;
use crate::turns::turn_number;
use crate::users::UserFact;
use crate::{AgentId, CoreError, UserId};

fn invalid(whose: &str, why: impl std::fmt::Display) -> CoreError {
    CoreError::Invalid(format!("bundle: {whose}: {why}"))
}

/// The first of `ids` with a NUL character: no store keys rows by one
/// (PostgreSQL's text holds none), so no bundle carries one.
fn nul<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<(), &'a str> {
    ids.into_iter()
        .find(|id| id.contains('\0'))
        .map_or(Ok(()), Err)
}

/// Every id of `ids` once, or the first repeated one.
fn unique<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<(), &'a str> {
    let mut seen = HashSet::new();
    for id in ids {
        if !seen.insert(id) {
            return Err(id);
        }
    }
    Ok(())
}

/// Lines grouped by key in the order keys first appear, each group's
/// versions ascending, the last line of each version kept.
fn grouped<'a, T: Clone>(lines: &'a [T], key: impl Fn(&'a T) -> (&'a str, u64)) -> Vec<T> {
    let mut order: Vec<&str> = vec![];
    let mut groups: HashMap<&str, BTreeMap<u64, &T>> = HashMap::new();
    for line in lines {
        let (k, version) = key(line);
        groups
            .entry(k)
            .or_insert_with(|| {
                order.push(k);
                BTreeMap::new()
            })
            .insert(version, line);
    }
    order
        .into_iter()
        .flat_map(|k| groups.remove(k).unwrap_or_default().into_values())
        .cloned()
        .collect()
}

/// The versions of facts as a bundle lists them: each fact's versions
/// together, facts in the order they first appear in `lines`, versions
/// ascending, the last line written of each version (a fact superseded
/// by a compaction is stored again at the same version).
pub fn fact_versions<T: Clone>(lines: &[T], fact: impl Fn(&T) -> &SemanticItem) -> Vec<T> {
    grouped(lines, |l| {
        let f = fact(l);
        (f.id.as_str(), f.version())
    })
}

/// The versions of blocks as a bundle lists them, grouped the same way.
pub fn block_versions(lines: &[Block]) -> Vec<Block> {
    grouped(lines, |b| (b.label.as_str(), b.version))
}

fn check_facts<'a>(
    whose: &str,
    facts: impl Iterator<Item = &'a SemanticItem>,
) -> Result<(), CoreError> {
    let mut seen = HashSet::new();
    for f in facts {
        if f.id.is_empty() {
            return Err(invalid(whose, "a fact without an id"));
        }
        if !seen.insert((f.id.as_str(), f.version())) {
            return Err(invalid(
                whose,
                format!("fact {:?} version {} appears twice", f.id, f.version()),
            ));
        }
    }
    Ok(())
}

fn check_blocks(whose: &str, blocks: &[Block]) -> Result<(), CoreError> {
    let mut seen = HashSet::new();
    for b in blocks {
        check_label(&b.label).map_err(|e| invalid(whose, e))?;
        if !seen.insert((b.label.as_str(), b.version)) {
            return Err(invalid(
                whose,
                format!("block {:?} version {} appears twice", b.label, b.version),
            ));
        }
    }
    Ok(())
}

/// A compaction log as a store keeps it: `seq` rising from 1, times that
/// are times.
fn check_compactions(whose: &str, log: &[CompactionRecord]) -> Result<(), CoreError> {
    let mut last = 0;
    for c in log {
        if c.seq <= last || c.seq > i64::MAX as u64 {
            return Err(invalid(
                whose,
                format!("compaction record {} after {last}: seq must rise", c.seq),
            ));
        }
        if !c.at.is_finite() || !c.duration_secs.is_finite() {
            return Err(invalid(
                whose,
                format!("compaction record {} has no time", c.seq),
            ));
        }
        last = c.seq;
    }
    Ok(())
}

impl AgentRecords {
    /// Whether a store can take the agent as it is: nothing half done,
    /// ids unique where stores key by them, stored results where the
    /// traces say (and nowhere else: their names become file names).
    pub fn check(&self) -> Result<(), CoreError> {
        let whose = format!("agent {:?}", self.id.as_str());
        let m = &self.meta;
        if m.pending.is_some() || m.forgetting.is_some() || !m.unpurged.is_empty() {
            return Err(invalid(
                &whose,
                "settings with an unfinished compaction or forget",
            ));
        }
        if let Some(user) = &m.user_id {
            UserId::parse(user).map_err(|e| invalid(&whose, e))?;
        }
        let traces = || self.archived.iter().chain(&self.active);
        for t in traces() {
            if t.id.is_empty() || turn_number(&t.turn_id).is_none() {
                return Err(invalid(
                    &whose,
                    format!("trace {:?} has no id or no turn {:?}", t.id, t.turn_id),
                ));
            }
        }
        let ids = traces()
            .flat_map(|t| [Some(t.id.as_str()), t.event_id.as_deref()])
            .flatten()
            .chain(self.summaries.iter().map(|s| s.id.as_str()))
            .chain(self.facts.iter().map(|f| f.id.as_str()));
        nul(ids).map_err(|id| invalid(&whose, format!("id {id:?} holds a NUL character")))?;
        unique(traces().map(|t| t.id.as_str()))
            .map_err(|id| invalid(&whose, format!("trace {id:?} appears twice")))?;
        unique(traces().filter_map(|t| t.event_id.as_deref()))
            .map_err(|id| invalid(&whose, format!("event_id {id:?} appears twice")))?;
        let mut expected = HashSet::new();
        for t in traces() {
            if let Some(path) = &t.tool_result_ref {
                // The trace's id names a file: nothing that leaves its folder.
                let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
                if *path != spill_path(&t.id) || t.id.starts_with('.') || !t.id.chars().all(plain) {
                    return Err(invalid(
                        &whose,
                        format!("trace {:?} names a stored result {path:?}", t.id),
                    ));
                }
                expected.insert(path.as_str());
            }
        }
        unique(self.results.iter().map(|r| r.path.as_str()))
            .map_err(|p| invalid(&whose, format!("stored result {p:?} appears twice")))?;
        if let Some(r) = self
            .results
            .iter()
            .find(|r| !expected.contains(r.path.as_str()))
        {
            return Err(invalid(
                &whose,
                format!("stored result {:?} belongs to no trace", r.path),
            ));
        }
        unique(self.summaries.iter().map(|s| s.id.as_str()))
            .map_err(|id| invalid(&whose, format!("summary {id:?} appears twice")))?;
        check_facts(&whose, self.facts.iter())?;
        check_blocks(&whose, &self.blocks)?;
        check_compactions(&whose, &self.compactions)
    }
}

impl UserRecords {
    pub fn check(&self) -> Result<(), CoreError> {
        let whose = format!("user {:?}", self.id.as_str());
        nul(self.facts.iter().map(|f| f.fact.id.as_str()))
            .map_err(|id| invalid(&whose, format!("id {id:?} holds a NUL character")))?;
        check_facts(&whose, self.facts.iter().map(|f: &UserFact| &f.fact))?;
        check_blocks(&whose, &self.blocks)?;
        if let Some(last) = &self.last {
            AgentId::parse(&last.agent_id).map_err(|e| invalid(&whose, e))?;
        }
        Ok(())
    }
}

impl MemoryBundle {
    /// The whole bundle's checks (a [`super::Decoder`] runs them).
    pub fn check(&self) -> Result<(), CoreError> {
        match &self.scope {
            BundleScope::Agent(id) => {
                AgentId::parse(id).map_err(|e| invalid("scope", e))?;
                if self.agents.len() != 1 || self.user.is_some() {
                    return Err(invalid("scope", "an agent's bundle holds that agent only"));
                }
            }
            BundleScope::User(id) => {
                let user = self.user.as_ref().filter(|u| u.id.as_str() == id);
                let user =
                    user.ok_or_else(|| invalid("scope", "a user's bundle without its user"))?;
                user.check()?;
                if let Some(a) = self
                    .agents
                    .iter()
                    .find(|a| a.meta.user_id.as_deref() != Some(id))
                {
                    return Err(invalid(
                        &format!("agent {:?}", a.id.as_str()),
                        format!("in user {id:?}'s bundle but not the user's"),
                    ));
                }
            }
        }
        unique(self.agents.iter().map(|a| a.id.as_str()))
            .map_err(|id| invalid(&format!("agent {id:?}"), "appears twice"))?;
        if !self.exported_at.is_finite() {
            return Err(invalid("header", "exported_at is not a time"));
        }
        self.agents.iter().try_for_each(AgentRecords::check)
    }
}
