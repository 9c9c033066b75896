//! Consolidation of a user's facts across conversations (docs/DESIGN.md
//! §15, "sleep-time"): each fold only sees one conversation's facts, so
//! the same fact said in other words in two conversations stays twice,
//! and a change a conversation's summarizer could not see stays beside
//! what it changed. A run reconciles the user's store as a whole.
//!
//! Pure: the engine finds the [`candidates`] (with the similarity of the
//! facts' vectors, from the local model) and asks the summarizer about
//! the groups on one subject; the store applies the [`Plan`] under the
//! user's lock with [`apply`], which checks every step against the facts
//! as they are then (a fold or a client may have changed them since they
//! were read), so a plan made from an older read never undoes anything.
//! Pinned and client-written facts are never changed.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::UserFact;
use crate::compaction::merge::negations;
use crate::compaction::repeat_key;

/// How close two facts' vectors must be (cosine) to be the same fact said
/// again, when nothing that tells facts apart (a negation, a name, a
/// number) differs between them. Measured with the local model
/// (all-MiniLM-L6-v2) on the change and negation pairs of
/// `compaction::merge::pairs`: of the changes the rules let through, the
/// closest reads 0.84 ("Is on the night shift" / "… day shift"); repeats
/// in other words read 0.62–0.94, and those above this merge. A false
/// merge loses a fact; a missed one only shows it twice.
pub const SAME_FACT: f32 = 0.86;

/// How close two facts must be to be on the same subject: the groups the
/// summarizer is asked about. Measured likewise: a change of value reads
/// 0.29–0.97 against what it changes ("Plays curling" / "Plays judo" the
/// lowest), unrelated facts about a person −0.03–0.09. A pair asked about
/// needlessly costs a line of the request.
pub const SAME_SUBJECT: f32 = 0.25;

/// The most facts one group on a subject holds, and the most facts one
/// run asks the summarizer about: one request per user, of bounded size.
pub const GROUP_MAX: usize = 8;
pub const ASK_MAX: usize = 64;

/// A fact said again: `dup` goes into `keep` (its sources with it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merge {
    pub keep: String,
    pub dup: String,
}

/// `old` no longer true since `new` (both facts of the user).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replace {
    pub old: String,
    pub new: String,
}

/// What a run decided, by fact id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merges: Vec<Merge>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<Replace>,
    /// Facts no longer true from that time, with nothing in their place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalidates: Vec<(String, f64)>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.merges.is_empty() && self.replaces.is_empty() && self.invalidates.is_empty()
    }
}

/// A run's outcome, as reported: of the live facts it found, how many
/// went into another (merged), were replaced, were ended, or stayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub merged: u32,
    pub replaced: u32,
    pub invalidated: u32,
    pub unchanged: u32,
}

/// What [`apply`] changed: the facts to store (their new lines), the
/// counts, and the steps carried out (a step found stale is left out).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Consolidated {
    pub changed: Vec<UserFact>,
    pub counts: Counts,
    pub done: Plan,
}

/// The facts a run may change: live ones a compaction wrote.
fn changeable(f: &UserFact) -> bool {
    f.is_live() && !f.fact.is_clients()
}

/// `plan` carried out over `known` (the last version of each fact), every
/// step checked against the facts as the earlier steps left them: a merge
/// needs both facts live and the duplicate changeable; a replacement
/// needs both live, the old one changeable and the new one not older; an
/// invalidation needs the fact live and changeable. Idempotent: a plan
/// applied again finds its facts no longer live and changes nothing.
pub fn apply(known: &[UserFact], plan: &Plan) -> Consolidated {
    let mut facts: Vec<UserFact> = known.to_vec();
    let at: HashMap<String, usize> = facts
        .iter()
        .enumerate()
        .map(|(i, f)| (f.fact.id.clone(), i))
        .collect();
    let live_before = facts.iter().filter(|f| f.is_live()).count() as u32;
    let mut changed: BTreeSet<usize> = BTreeSet::new();
    let mut done = Plan::default();
    let mut counts = Counts::default();
    for m in &plan.merges {
        let (Some(&k), Some(&d)) = (at.get(&m.keep), at.get(&m.dup)) else {
            continue;
        };
        if k == d || !facts[k].is_live() || !changeable(&facts[d]) {
            continue;
        }
        // The earlier saying is when it became true; a client's fact is
        // kept as the client wrote it (the duplicate keeps its sources).
        if !facts[k].fact.is_clients() {
            let sources = std::mem::take(&mut facts[d].sources);
            let keep = &mut facts[k];
            keep.sources.extend(sources);
            let since = keep.fact.valid_since().min(facts[d].fact.valid_since());
            facts[k].fact.valid_from = Some(since);
            changed.insert(k);
        }
        // Said again, not ended: `as_of` finds the fact it went into.
        facts[d].fact.superseded_by = Some(facts[k].fact.id.clone());
        changed.insert(d);
        counts.merged += 1;
        done.merges.push(m.clone());
    }
    for r in &plan.replaces {
        let (Some(&o), Some(&n)) = (at.get(&r.old), at.get(&r.new)) else {
            continue;
        };
        let newer = facts[n].fact.valid_since() >= facts[o].fact.valid_since();
        if o == n || !changeable(&facts[o]) || !facts[n].is_live() || !newer {
            continue;
        }
        facts[o].fact = facts[o].fact.replaced_by(&facts[n].fact);
        changed.insert(o);
        counts.replaced += 1;
        done.replaces.push(r.clone());
    }
    for (id, when) in &plan.invalidates {
        let Some(&i) = at.get(id) else { continue };
        if !changeable(&facts[i]) {
            continue;
        }
        facts[i].fact = facts[i].fact.invalidated(*when);
        changed.insert(i);
        counts.invalidated += 1;
        done.invalidates.push((id.clone(), *when));
    }
    counts.unchanged = live_before - counts.merged - counts.replaced - counts.invalidated;
    Consolidated {
        changed: changed.into_iter().map(|i| facts[i].clone()).collect(),
        counts,
        done,
    }
}

/// The most facts one run compares (pairwise: the work grows with the
/// square): the latest written, where what a new conversation said meets
/// what was known.
pub const CONSIDER_MAX: usize = 400;

/// The facts a run looks at, by index into `facts`: the live ones, the
/// latest [`CONSIDER_MAX`] written when there are more.
pub fn considered(facts: &[UserFact]) -> Vec<usize> {
    let mut live: Vec<usize> = (0..facts.len()).filter(|&i| facts[i].is_live()).collect();
    if live.len() > CONSIDER_MAX {
        live.sort_by(|&a, &b| facts[b].fact.ts.total_cmp(&facts[a].fact.ts));
        live.truncate(CONSIDER_MAX);
    }
    live
}

/// What a run found among the user's live facts: repeats to merge, and
/// groups on one subject (fact ids, oldest first) for the summarizer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidates {
    pub merges: Vec<Merge>,
    pub groups: Vec<Vec<String>>,
}

/// The words that tell two facts on one subject apart whatever their
/// meaning's closeness: names (a capitalized word past the first) and
/// numbers (digits or words). "Lives in Lisbon" and "Lives in Berlin" read
/// alike to a small model; they are not the same fact.
fn marks(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .enumerate()
        .filter(|(n, w)| {
            w.chars().any(|c| c.is_ascii_digit())
                || NUMBERS.contains(&w.to_lowercase().as_str())
                || (*n > 0 && w.chars().next().is_some_and(char::is_uppercase) && *w != "I")
        })
        .map(|(_, w)| w.to_lowercase())
        .collect()
}

/// Numbers in words: "two children" and "three children" differ as 2
/// and 3 do.
const NUMBERS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "twenty", "hundred", "thousand", "once", "twice",
];

/// Whether `a` and `b` say the same thing: the same value words and
/// negations, or (with `similarity`, the cosine of their vectors) close
/// in meaning with the same negations, names and numbers.
pub fn same_fact(a: &str, b: &str, similarity: Option<f32>) -> bool {
    if repeat_key(a).is_some_and(|k| repeat_key(b) == Some(k)) {
        return true;
    }
    similarity.is_some_and(|s| s >= SAME_FACT)
        && negations(a) == negations(b)
        && marks(a) == marks(b)
}

/// The candidates among `facts` (the user's, any state): of those
/// [`considered`], repeats ([`same_fact`]) merge into the one a client wrote, else
/// into the earliest said; pairs on one subject ([`SAME_SUBJECT`]) of
/// which at least one is changeable join a group (at most
/// [`GROUP_MAX`] facts each, [`ASK_MAX`] in all). `similarity(i, j)` is
/// the cosine of facts `i` and `j` of `facts` (`None` without vectors:
/// repeats by words only, no groups).
pub fn candidates(
    facts: &[UserFact],
    similarity: impl Fn(usize, usize) -> Option<f32>,
) -> Candidates {
    let mut live = considered(facts);
    // Clients' facts first (they survive), then by when they were said.
    live.sort_by(|&a, &b| {
        let (fa, fb) = (&facts[a].fact, &facts[b].fact);
        fb.is_clients()
            .cmp(&fa.is_clients())
            .then(fa.valid_since().total_cmp(&fb.valid_since()))
    });
    let mut out = Candidates::default();
    let mut gone: BTreeSet<usize> = BTreeSet::new();
    for (n, &k) in live.iter().enumerate() {
        if gone.contains(&k) {
            continue;
        }
        for &d in &live[n + 1..] {
            if gone.contains(&d) || !changeable(&facts[d]) {
                continue;
            }
            if same_fact(&facts[k].fact.fact, &facts[d].fact.fact, similarity(k, d)) {
                gone.insert(d);
                out.merges.push(Merge {
                    keep: facts[k].fact.id.clone(),
                    dup: facts[d].fact.id.clone(),
                });
            }
        }
    }
    // Groups: each fact joins the first group holding a fact close to it.
    let mut remaining: Vec<usize> = live.iter().copied().filter(|i| !gone.contains(i)).collect();
    remaining.sort_by(|&a, &b| {
        facts[a]
            .fact
            .valid_since()
            .total_cmp(&facts[b].fact.valid_since())
    });
    let mut groups: Vec<Vec<usize>> = vec![];
    let mut grouped: BTreeSet<usize> = BTreeSet::new();
    for (n, &a) in remaining.iter().enumerate() {
        if grouped.contains(&a) {
            continue;
        }
        let mut group = vec![a];
        for &b in &remaining[n + 1..] {
            if group.len() >= GROUP_MAX || grouped.contains(&b) {
                continue;
            }
            let close = group
                .iter()
                .any(|&g| similarity(g, b).is_some_and(|s| s >= SAME_SUBJECT));
            if close {
                group.push(b);
            }
        }
        let any_changeable = group.iter().any(|&i| changeable(&facts[i]));
        if group.len() > 1 && any_changeable {
            grouped.extend(group.iter().copied());
            groups.push(group);
        }
    }
    let mut asked = 0;
    for group in groups {
        if asked + group.len() > ASK_MAX {
            break;
        }
        asked += group.len();
        out.groups
            .push(group.iter().map(|&i| facts[i].fact.id.clone()).collect());
    }
    out
}

/// How many runs a user's consolidation log keeps (the latest).
pub const LOG_KEEP: usize = 100;

/// One run, as the user's consolidation log keeps it. The store numbers
/// it and fills in what [`apply`] did; the engine the rest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConsolidationRecord {
    /// Increases with each run of the user.
    pub seq: u64,
    /// When it ended (Unix seconds).
    pub at: f64,
    pub duration_secs: f64,
    /// `request` (ConsolidateUser) or `idle` (a conversation went quiet).
    pub trigger: String,
    pub counts: Counts,
    /// Groups on one subject the summarizer was asked about.
    pub asked: u32,
    /// Who decided about them (`""`: nobody was asked).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summarizer: String,
    /// Handles of its answer that named no fact it was shown.
    #[serde(default)]
    pub unknown_handles: u32,
    /// Why the summarizer could not decide (repeats were merged anyway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The steps carried out.
    #[serde(default)]
    pub done: Plan,
}

#[cfg(test)]
mod tests;
