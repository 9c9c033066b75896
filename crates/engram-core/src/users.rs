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
use crate::compaction::{UPDATE_OVERLAP, normalize, words};
use crate::facts::{self, Applied, Op};
use crate::memory::{EpisodicItem, SemanticItem};

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
}

/// The user's facts as `known` holds them (last version of each, oldest
/// first) after folding in `items`, the facts of agent `agent` (live and
/// superseded, as its bundle holds them). Each live agent fact not folded
/// before: said already (the same words as a live user fact) adds itself
/// as a source; one that changes a live user fact (most of its words, or
/// the agent's own update of a fact folded before) supersedes it; any
/// other is new. `new_id` names new user facts.
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
        if let Some(&same) = live.by_text.get(&norm) {
            facts[same].sources.push(source);
            home.insert(item.id.clone(), same);
            changed.push(same);
            out.merged += 1;
            continue;
        }
        // The agent's own update of a fact folded before, else the live
        // user fact it mostly repeats; never one a client pinned (a
        // compaction adds beside it, as in an agent's own facts).
        let replaced = items
            .iter()
            .filter(|old| old.superseded_by.as_deref() == Some(item.id.as_str()))
            .find_map(|old| home.get(&old.id).copied())
            .filter(|&i| facts[i].is_live())
            .or_else(|| live.closest(&item.fact))
            .filter(|&i| !facts[i].fact.managed.pinned);
        let mut fact = item.clone();
        fact.id = new_id();
        fact.superseded_by = None;
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
        let set: HashSet<String> = words(text).collect();
        self.sizes.insert(i, set.len());
        for w in set {
            self.by_word.entry(w).or_default().push(i);
        }
    }

    fn remove(&mut self, i: usize, text: &str) {
        self.by_text.remove(&normalize(text));
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
mod tests {
    use super::*;

    fn item(id: &str, fact: &str) -> SemanticItem {
        SemanticItem {
            turn_ids: vec!["turn_0001".into()],
            ..SemanticItem::new(id, fact)
        }
    }

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("u{n}")
        }
    }

    /// Folds `items` of `agent` into `known`, returning the store after.
    fn apply(
        known: &[UserFact],
        agent: &str,
        items: &[SemanticItem],
        next: &mut impl FnMut() -> String,
    ) -> Vec<UserFact> {
        let folded = fold(known, agent, items, next);
        let mut all = known.to_vec();
        for f in folded.changed {
            match all.iter_mut().find(|k| k.fact.id == f.fact.id) {
                Some(k) => *k = f,
                None => all.push(f),
            }
        }
        all
    }

    #[test]
    fn the_same_fact_from_two_conversations_is_one_with_two_sources() {
        let mut next = ids();
        let store = apply(
            &[],
            "chat-1",
            &[item("a1", "The user lives in Lisbon")],
            &mut next,
        );
        let store = apply(
            &store,
            "chat-2",
            &[item("b1", "the user lives in lisbon.")],
            &mut next,
        );
        assert_eq!(store.len(), 1);
        let sources: Vec<_> = store[0]
            .sources
            .iter()
            .map(|s| (s.agent_id.as_str(), s.fact_id.as_str()))
            .collect();
        assert_eq!(sources, [("chat-1", "a1"), ("chat-2", "b1")]);
        assert_eq!(store[0].sources[1].turn_ids, ["turn_0001"]);
    }

    #[test]
    fn a_changed_fact_supersedes_the_other_conversations() {
        let mut next = ids();
        let store = apply(
            &[],
            "chat-1",
            &[item("a1", "The user lives in Lisbon Portugal")],
            &mut next,
        );
        let store = apply(
            &store,
            "chat-2",
            &[item("b1", "The user lives in Porto Portugal")],
            &mut next,
        );
        assert_eq!(store.len(), 2);
        assert_eq!(
            store[0].fact.superseded_by.as_deref(),
            Some(store[1].fact.id.as_str())
        );
        assert!(store[1].is_live() && store[1].fact.fact.contains("Porto"));
    }

    #[test]
    fn an_agents_own_update_supersedes_what_it_folded_before() {
        let mut next = ids();
        let store = apply(
            &[],
            "chat-1",
            &[item("a1", "Budget is 100 euros")],
            &mut next,
        );
        let mut old = item("a1", "Budget is 100 euros");
        old.superseded_by = Some("a2".into());
        let store = apply(
            &store,
            "chat-1",
            &[old, item("a2", "Spending cap raised to 500")],
            &mut next,
        );
        assert_eq!(store.len(), 2);
        assert!(!store[0].is_live() && store[1].is_live());
    }

    #[test]
    fn folding_again_changes_nothing() {
        let mut next = ids();
        let items = [item("a1", "Likes tea"), item("a2", "Has a dog named Rex")];
        let store = apply(&[], "chat-1", &items, &mut next);
        let again = fold(&store, "chat-1", &items, &mut next);
        assert_eq!(again, Folded::default());
        let unrelated = fold(
            &store,
            "chat-2",
            &[item("b1", "Plays the cello")],
            &mut next,
        );
        assert_eq!(
            (unrelated.added, unrelated.merged, unrelated.superseded),
            (1, 0, 0)
        );
        assert_eq!(unrelated.changed.len(), 1);
    }

    #[test]
    fn a_fold_never_supersedes_a_fact_a_client_pinned() {
        let mut next = ids();
        let store = apply(
            &[],
            "chat-1",
            &[item("a1", "The user lives in Lisbon Portugal")],
            &mut next,
        );
        let (_, lines) = change(
            &store,
            Op::Update {
                id: store[0].fact.id.clone(),
                change: facts::Change {
                    pinned: Some(true),
                    ..Default::default()
                },
            },
            5.0,
            &mut next,
        )
        .unwrap();
        let store = vec![lines[0].clone()];
        let folded = fold(
            &store,
            "chat-2",
            &[item("b1", "The user lives in Porto Portugal")],
            &mut next,
        );
        assert_eq!(folded.superseded, 0);
        assert_eq!(folded.added, 1);
        assert!(folded.changed.iter().all(|f| f.is_live()));
    }

    #[test]
    fn a_clients_change_keeps_the_sources_and_a_delete_is_never_folded_again() {
        let mut next = ids();
        let store = apply(
            &[],
            "chat-1",
            &[item("a1", "The user likes tea")],
            &mut next,
        );
        let id = store[0].fact.id.clone();
        let (applied, lines) = change(
            &store,
            Op::Delete {
                id: id.clone(),
                expected_version: 0,
            },
            9.0,
            &mut next,
        )
        .unwrap();
        assert_eq!(applied.erase.as_deref(), Some(id.as_str()));
        assert_eq!(lines[0].fact.fact, "");
        assert_eq!(lines[0].sources, store[0].sources);
        let again = fold(
            &lines,
            "chat-1",
            &[item("a1", "The user likes tea")],
            &mut next,
        );
        assert_eq!(again, Folded::default());
        let (added, lines) = change(
            &lines,
            Op::Add(vec![facts::NewFact {
                text: "Works at a bakery".into(),
                ..Default::default()
            }]),
            10.0,
            &mut next,
        )
        .unwrap();
        assert!(lines[0].sources.is_empty());
        assert_eq!(added.lines[0].managed.origin, crate::memory::Origin::Client);
    }

    #[test]
    fn history_keeps_the_last_line_of_each_version() {
        let mut one = item("u1", "Likes tea");
        one.managed.version = 1;
        let with_source = UserFact {
            fact: one.clone(),
            sources: vec![],
        };
        let mut two = one.clone();
        two.managed.version = 2;
        two.fact = "Likes green tea".into();
        let mut later = with_source.clone();
        later.fact.tags = vec!["drinks".into()];
        let lines = vec![
            with_source,
            later.clone(),
            UserFact {
                fact: two.clone(),
                sources: vec![],
            },
        ];
        assert_eq!(history(lines, "u1"), vec![later.fact, two]);
    }

    proptest::proptest! {
        /// Whatever the facts, every live agent fact is a source of
        /// exactly one user fact, and a second fold changes nothing.
        #[test]
        fn every_fact_is_folded_once(
            said in proptest::collection::vec(("[a-c]", proptest::collection::vec("(tea|dog|lisbon|porto|the|user|likes|lives|in)", 1..6)), 0..20)
        ) {
            let mut next = ids();
            let mut store = vec![];
            for (n, (agent, words)) in said.iter().enumerate() {
                let items = [item(&format!("f{n}"), &words.join(" "))];
                store = apply(&store, agent, &items, &mut next);
            }
            for (n, (agent, _)) in said.iter().enumerate() {
                let id = format!("f{n}");
                let homes = store
                    .iter()
                    .filter(|f| f.sources.iter().any(|s| s.agent_id == *agent && s.fact_id == id))
                    .count();
                proptest::prop_assert_eq!(homes, 1);
                let again = fold(&store, agent, &[item(&id, "anything")], &mut next);
                proptest::prop_assert_eq!(again, Folded::default());
            }
        }
    }
}
