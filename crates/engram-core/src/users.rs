//! A user's long-term memory: one fact store per user, fed by the
//! compactions of all of the user's conversations. Pure: the stores keep
//! the facts and call [`fold`] under the user's lock.
//!
//! An agent's compaction writes facts into the agent first (its snapshot
//! shows them); they are then folded into the user's store, where the same
//! fact said in two conversations is one fact with two sources, and a fact
//! that changes one of another conversation supersedes it there. Folding
//! is idempotent (each source is an agent's fact id, folded once), so a
//! fold lost to a crash is made good by the agent's next one.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::CoreError;
use crate::compaction::{UPDATE_OVERLAP, normalize, repeat_key, words};
use crate::facts::{self, Applied, Op};
use crate::memory::{EXTRACTIVE_TAG, EpisodicItem, SemanticItem};

pub mod consolidate;

/// Summaries of a conversation the user's store keeps as its last one (a
/// new conversation starts with them): the latest few.
pub const LAST_SUMMARIES: usize = 3;

/// The user's most recently summarized conversation: its agent and its
/// latest summaries, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastConversation {
    pub agent_id: String,
    pub summaries: Vec<EpisodicItem>,
}

impl LastConversation {
    /// The conversation of `agent` as its `summaries` (any order) end;
    /// `None` without any.
    pub fn of(agent: &str, summaries: &[EpisodicItem]) -> Option<Self> {
        let mut latest: Vec<EpisodicItem> = summaries.to_vec();
        latest.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let keep = latest.len().saturating_sub(LAST_SUMMARIES);
        latest.drain(..keep);
        (!latest.is_empty()).then(|| Self {
            agent_id: agent.to_owned(),
            summaries: latest,
        })
    }
}

/// Where a user's fact came from: an agent's fact, and its turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactSource {
    pub agent_id: String,
    pub fact_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turn_ids: Vec<String>,
}

/// A fact of a user's store: the fact as first said (its id the user's
/// own), and every agent fact that said it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserFact {
    #[serde(flatten)]
    pub fact: SemanticItem,
    #[serde(default)]
    pub sources: Vec<FactSource>,
}

impl UserFact {
    pub fn is_live(&self) -> bool {
        self.fact.is_live()
    }
}

/// What a fold changed: the facts to store (new ones, and known ones with
/// a new source or superseded), and counts for the log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Folded {
    pub changed: Vec<UserFact>,
    pub added: u32,
    pub merged: u32,
    pub superseded: u32,
    /// User facts ended with nothing in their place (the summarizer said
    /// so, by handle, in one of the agent's compactions).
    pub invalidated: u32,
}

/// The user's facts as `known` holds them (last version of each, oldest
/// first) after folding in `items`, the facts of agent `agent` (live and
/// superseded, as its bundle holds them). Each live agent fact not folded
/// before: said already (a repeat of a live user fact: the same value
/// words) adds itself as a source; one that changes a live user fact
/// supersedes it — the user's fact its summarizer named (`replaces`), the
/// agent's own update of a fact folded before, or else, for a fact drawn
/// by an LLM, the live user fact with most of its words; any other is new.
/// An agent's record that a user fact ended (`replaces` on a fact no
/// longer valid) ends it. A pinned user fact is never replaced or ended.
/// `new_id` names new user facts.
pub fn fold(
    known: &[UserFact],
    agent: &str,
    items: &[SemanticItem],
    mut new_id: impl FnMut() -> String,
) -> Folded {
    let mut facts: Vec<UserFact> = known.to_vec();
    let folded: HashSet<(&str, &str)> = known
        .iter()
        .flat_map(|f| &f.sources)
        .map(|s| (s.agent_id.as_str(), s.fact_id.as_str()))
        .collect();
    // The user fact each of the agent's facts went into.
    let mut home: HashMap<String, usize> = HashMap::new();
    for (i, f) in facts.iter().enumerate() {
        for s in f.sources.iter().filter(|s| s.agent_id == agent) {
            home.insert(s.fact_id.clone(), i);
        }
    }
    let mut live = Live::of(&facts);
    let mut changed: Vec<usize> = vec![];
    let mut out = Folded::default();
    // The summarizer said a user's fact stopped being true: ended once
    // (ending an ended fact changes nothing, so folding again is a no-op).
    for marker in items.iter().filter(|i| is_end_of_users(i)) {
        let target = marker.replaces.as_deref().unwrap_or_default();
        let Some(i) = facts
            .iter()
            .position(|f| f.fact.id == target && f.is_live() && !f.fact.managed.pinned)
        else {
            continue;
        };
        let at = marker.invalid_at.unwrap_or(marker.ts);
        facts[i].fact = facts[i].fact.invalidated(at);
        live.remove(i, &facts[i].fact.fact);
        changed.push(i);
        out.invalidated += 1;
    }
    for item in items.iter().filter(|i| i.is_live()) {
        if folded.contains(&(agent, item.id.as_str())) {
            continue;
        }
        let source = FactSource {
            agent_id: agent.to_owned(),
            fact_id: item.id.clone(),
            turn_ids: item.turn_ids.clone(),
        };
        let norm = normalize(&item.fact);
        if norm.is_empty() {
            continue;
        }
        if let Some(&same) = live.same(&item.fact) {
            facts[same].sources.push(source);
            home.insert(item.id.clone(), same);
            changed.push(same);
            out.merged += 1;
            continue;
        }
        // The agent's own update of a fact folded before, else the live
        // user fact it mostly repeats; never one a client pinned (a
        // compaction adds beside it, as in an agent's own facts).
        let named = item
            .replaces
            .as_deref()
            .and_then(|id| facts.iter().position(|f| f.fact.id == id));
        let guessed = || match item.tags.iter().any(|t| t == EXTRACTIVE_TAG) {
            // Drawn without an LLM: nothing is replaced by guesswork.
            true => None,
            false => live.closest(&item.fact),
        };
        let replaced = named
            .or_else(|| {
                items
                    .iter()
                    .filter(|old| old.superseded_by.as_deref() == Some(item.id.as_str()))
                    .find_map(|old| home.get(&old.id).copied())
            })
            .filter(|&i| facts[i].is_live())
            .or_else(guessed)
            .filter(|&i| !facts[i].fact.managed.pinned);
        let mut fact = item.clone();
        fact.id = new_id();
        fact.superseded_by = None;
        fact.replaces = None;
        // A fact of the user's own, at its first version; pinned in one
        // conversation is not pinned in all of them.
        fact.managed.version = 1;
        fact.managed.pinned = false;
        let at = facts.len();
        if let Some(old) = replaced {
            facts[old].fact = facts[old].fact.replaced_by(&fact);
            live.remove(old, &facts[old].fact.fact);
            changed.push(old);
            out.superseded += 1;
        }
        facts.push(UserFact {
            fact,
            sources: vec![source],
        });
        live.add(at, &facts[at].fact.fact);
        home.insert(item.id.clone(), at);
        changed.push(at);
        out.added += 1;
    }
    changed.sort_unstable();
    changed.dedup();
    out.changed = changed.into_iter().map(|i| facts[i].clone()).collect();
    out
}

/// An agent's record that a fact of its user's store ended.
fn is_end_of_users(item: &SemanticItem) -> bool {
    item.replaces.is_some()
        && item.invalid_at.is_some()
        && item.superseded_by.is_none()
        && item.managed.deleted_at.is_none()
}

/// A client's change of the user's facts (`known`: the last version of
/// each): [`facts::apply`] over them, each version it makes carrying its
/// fact's sources (a new fact has none; a deleted one keeps them, ids and
/// turns only, so that a later fold never brings it back).
pub fn change(
    known: &[UserFact],
    op: Op,
    now: f64,
    new_id: impl FnMut() -> String,
) -> Result<(Applied, Vec<UserFact>), CoreError> {
    let current: Vec<SemanticItem> = known.iter().map(|f| f.fact.clone()).collect();
    let applied = facts::apply(&current, op, now, new_id)?;
    let sources: HashMap<&str, &Vec<FactSource>> = known
        .iter()
        .map(|f| (f.fact.id.as_str(), &f.sources))
        .collect();
    let lines = applied
        .lines
        .iter()
        .map(|line| UserFact {
            fact: line.clone(),
            sources: sources
                .get(line.id.as_str())
                .map(|s| (*s).clone())
                .unwrap_or_default(),
        })
        .collect();
    Ok((applied, lines))
}

/// Every version of a user's fact as its store's lines hold them (a fold
/// writes a version again when it adds a source): the last line of each
/// version, oldest version first.
pub fn history(lines: impl IntoIterator<Item = UserFact>, id: &str) -> Vec<SemanticItem> {
    let mut by_version: std::collections::BTreeMap<u64, SemanticItem> = Default::default();
    for line in lines.into_iter().filter(|l| l.fact.id == id) {
        by_version.insert(line.fact.version(), line.fact);
    }
    by_version.into_values().collect()
}

/// The live user facts by their normalized text and by word (for the
/// facts sharing words with a new one: an overlap needs shared words).
#[derive(Default)]
struct Live {
    by_text: HashMap<String, usize>,
    by_key: HashMap<String, usize>,
    by_word: HashMap<String, Vec<usize>>,
    sizes: HashMap<usize, usize>,
}

impl Live {
    fn of(facts: &[UserFact]) -> Self {
        let mut live = Self::default();
        for (i, f) in facts.iter().enumerate().filter(|(_, f)| f.is_live()) {
            live.add(i, &f.fact.fact);
        }
        live
    }

    fn add(&mut self, i: usize, text: &str) {
        self.by_text.insert(normalize(text), i);
        if let Some(key) = repeat_key(text) {
            self.by_key.insert(key, i);
        }
        let set: HashSet<String> = words(text).collect();
        self.sizes.insert(i, set.len());
        for w in set {
            self.by_word.entry(w).or_default().push(i);
        }
    }

    /// The live fact `text` repeats: the same words, or the same value
    /// words and negations.
    fn same(&self, text: &str) -> Option<&usize> {
        self.by_text
            .get(&normalize(text))
            .or_else(|| self.by_key.get(&repeat_key(text)?))
    }

    fn remove(&mut self, i: usize, text: &str) {
        // Another live fact with the same key keeps it.
        let norm = normalize(text);
        if self.by_text.get(&norm) == Some(&i) {
            self.by_text.remove(&norm);
        }
        if let Some(key) = repeat_key(text)
            && self.by_key.get(&key) == Some(&i)
        {
            self.by_key.remove(&key);
        }
        self.sizes.remove(&i);
        for w in words(text) {
            if let Some(list) = self.by_word.get_mut(&w) {
                list.retain(|&j| j != i);
            }
        }
    }

    /// The live fact sharing the most of its words with `text` (Jaccard),
    /// if that is enough to call `text` its update.
    fn closest(&self, text: &str) -> Option<usize> {
        let set: HashSet<String> = words(text).collect();
        let mut shared: HashMap<usize, usize> = HashMap::new();
        for w in &set {
            for &i in self.by_word.get(w).map_or(&[][..], Vec::as_slice) {
                *shared.entry(i).or_default() += 1;
            }
        }
        shared
            .into_iter()
            .map(|(i, n)| {
                let union = set.len() + self.sizes.get(&i).copied().unwrap_or(0) - n;
                (i, n as f64 / union.max(1) as f64)
            })
            .filter(|(_, o)| *o >= UPDATE_OVERLAP)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests;
