//! Long-term memories: episodic summaries and semantic facts, as stored in
//! `episodic.jsonl` and `semantic.jsonl`, and how they are picked.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::RawTrace;
use crate::essentials::Carrying;

/// Where a memory came from: the traces of the turns a compaction
/// summarized, and the event times of the first and last of them. Items
/// written before provenance was kept have none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ts: Option<f64>,
}

impl Provenance {
    /// The provenance of what `traces` (in order) say.
    pub fn of(traces: &[&RawTrace]) -> Self {
        let times = traces.iter().map(|t| t.ts).filter(|ts| ts.is_finite());
        Self {
            trace_ids: traces.iter().map(|t| t.id.clone()).collect(),
            from_ts: times.clone().reduce(f64::min),
            to_ts: times.reduce(f64::max),
        }
    }
}

/// A summary of a block of whole turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodicItem {
    pub id: String,
    /// When it was written (the server's clock at the compaction).
    pub ts: f64,
    pub turn_ids: Vec<String>,
    pub summary: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub salience: f32,
    #[serde(flatten)]
    pub source: Provenance,
    /// A trace it summarized was forgotten: it has no text until the
    /// summarizer rewrites it from the others, and is shown nowhere.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewriting: bool,
    /// What its window gave that a working agent needs, and which of it
    /// the summary holds: the carry-forward's source.
    #[serde(default, skip_serializing_if = "Carrying::is_empty")]
    pub carrying: Carrying,
}

impl EpisodicItem {
    /// Whether prompts, search and Retrieve show it.
    pub fn is_shown(&self) -> bool {
        !self.rewriting
    }

    /// Whether everything it summarizes had been said by `at` (event
    /// time): what stood then.
    pub fn said_by(&self, at: f64) -> bool {
        self.source.to_ts.unwrap_or(self.ts) <= at
    }
}

/// Tag on every item the embedded summarizer writes: facts drawn without
/// an LLM, which nothing replaces by guesswork.
pub const EXTRACTIVE_TAG: &str = "extractive";

/// A stable fact, preference, constraint or decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticItem {
    pub id: String,
    /// When it was written (the server's clock at the compaction).
    pub ts: f64,
    pub fact: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub confidence: f32,
    #[serde(default)]
    pub salience: f32,
    /// Id of the item that replaced this one; superseded items stay on disk
    /// for history but are never shown as current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// When it became true: the event time of the statement it came from
    /// (not of the compaction that drew it out), or of the client's write.
    /// Absent on lines written before facts had time: see
    /// [`SemanticItem::valid_since`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<f64>,
    /// When it stopped being true: the event time of the statement that
    /// replaced it (set with `superseded_by`), or of its invalidation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_at: Option<f64>,
    /// A fact of the user's store, from another conversation, that this
    /// one replaces (when it is live) or ends (when it is itself no longer
    /// valid: the summarizer said the user's fact stopped being true). The
    /// agent's store cannot supersede what it does not hold; folding into
    /// the user's store carries it out (again, idempotently).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// The turns of the compaction window it was drawn from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turn_ids: Vec<String>,
    #[serde(flatten)]
    pub source: Provenance,
    /// Who wrote it, its version, pin, expiry and the client's metadata
    /// (absent from lines written by compaction before facts were managed:
    /// their defaults).
    #[serde(flatten)]
    pub managed: Managed,
}

/// Who wrote a fact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Drawn from the conversation by a compaction.
    #[default]
    Compaction,
    /// Written by a client (AddMemories, UpdateMemory).
    Client,
}

impl Origin {
    fn is_compaction(&self) -> bool {
        *self == Origin::Compaction
    }
}

/// What managing a fact adds to it; every field is left out of its line
/// when it has its default, so a compaction's lines read as they did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Managed {
    #[serde(default, skip_serializing_if = "Origin::is_compaction")]
    pub origin: Origin,
    /// Always shown in the scope's prompts; never expires.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// Epoch seconds; past it the fact is neither searched nor shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<f64>,
    /// 1 for the first version, +1 for each change; 0 (left out) on lines
    /// written before versions were kept, read as 1.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Set on the version that deleted the fact (which keeps no text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<f64>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl SemanticItem {
    /// A fact of full confidence and salience, with no provenance.
    pub fn new(id: impl Into<String>, fact: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            ts: 0.0,
            fact: fact.into(),
            tags: vec![],
            confidence: 1.0,
            salience: 1.0,
            superseded_by: None,
            valid_from: None,
            invalid_at: None,
            replaces: None,
            turn_ids: vec![],
            source: Provenance::default(),
            managed: Managed::default(),
        }
    }

    /// When it became true: `valid_from`, else (a line written before facts
    /// had time) the last event time of what it was drawn from, else when
    /// it was written.
    pub fn valid_since(&self) -> f64 {
        self.valid_from.or(self.source.to_ts).unwrap_or(self.ts)
    }

    /// When it stopped being true, if it did: `invalid_at`, else (replaced
    /// before time was kept) when what replaced it began, as `since` tells
    /// of an id.
    pub fn valid_until(&self, since: impl Fn(&str) -> Option<f64>) -> Option<f64> {
        self.invalid_at.or_else(|| {
            let by = self.superseded_by.as_deref()?;
            Some(since(by).unwrap_or(self.valid_since()))
        })
    }

    /// This fact replaced by `new` (its line as the store keeps it after):
    /// `superseded_by` set, and its span ended when `new` became true
    /// (never before it began itself).
    pub fn replaced_by(&self, new: &SemanticItem) -> SemanticItem {
        SemanticItem {
            superseded_by: Some(new.id.clone()),
            invalid_at: Some(new.valid_since().max(self.valid_since())),
            ..self.clone()
        }
    }

    /// [`Self::replaced_by`] the item named `new_id` among `items`; with no
    /// such item (not expected), only `superseded_by` is set.
    pub fn replaced_by_id(&self, new_id: &str, items: &[SemanticItem]) -> SemanticItem {
        match items.iter().find(|i| i.id == new_id) {
            Some(new) => self.replaced_by(new),
            None => SemanticItem {
                superseded_by: Some(new_id.to_owned()),
                ..self.clone()
            },
        }
    }

    /// This fact no longer true from `at` (never before it began), with
    /// nothing replacing it.
    pub fn invalidated(&self, at: f64) -> SemanticItem {
        SemanticItem {
            invalid_at: Some(at.max(self.valid_since())),
            ..self.clone()
        }
    }

    /// Neither superseded, invalidated nor deleted: the fact as it stands
    /// now.
    pub fn is_live(&self) -> bool {
        self.superseded_by.is_none()
            && self.invalid_at.is_none()
            && self.managed.deleted_at.is_none()
    }

    /// A client's to change: pinned or written by a client. The
    /// consolidation of a user's facts never changes one.
    pub fn is_clients(&self) -> bool {
        self.managed.pinned || self.managed.origin == Origin::Client
    }

    /// Past its expiry at `now` (a pinned fact never is).
    pub fn is_expired(&self, now: f64) -> bool {
        !self.managed.pinned && self.managed.expires_at.is_some_and(|at| at <= now)
    }

    /// Live and not expired at `now`: what search and prompts show.
    pub fn is_shown(&self, now: f64) -> bool {
        self.is_live() && !self.is_expired(now)
    }

    pub fn version(&self) -> u64 {
        self.managed.version.max(1)
    }
}

/// The facts of `items` (the last line of each) that were true at `at`
/// (event time): said by then and not replaced or invalidated by then,
/// whether superseded since or not. Deleted facts never are (they keep no
/// text); expiry is the caller's to weigh.
pub fn valid_at(items: &[SemanticItem], at: f64) -> Vec<SemanticItem> {
    let since: std::collections::HashMap<&str, f64> = items
        .iter()
        .map(|i| (i.id.as_str(), i.valid_since()))
        .collect();
    items
        .iter()
        .filter(|f| f.managed.deleted_at.is_none() && f.valid_since() <= at)
        .filter(|f| {
            f.valid_until(|id| since.get(id).copied())
                .is_none_or(|end| end > at)
        })
        .cloned()
        .collect()
}

/// The `n` most recent episodic items, oldest first (file order is
/// append order, so the tail of the file is the most recent).
pub fn recent_episodic(items: &[EpisodicItem], n: usize) -> Vec<EpisodicItem> {
    let shown: Vec<&EpisodicItem> = items.iter().filter(|e| e.is_shown()).collect();
    shown[shown.len().saturating_sub(n)..]
        .iter()
        .map(|e| (*e).clone())
        .collect()
}

/// [`top_semantic`] of the facts shown at `now` (none expired): what
/// Retrieve returns.
pub fn top_shown(items: &[SemanticItem], n: usize, now: f64) -> Vec<SemanticItem> {
    let shown: Vec<SemanticItem> = items.iter().filter(|f| f.is_shown(now)).cloned().collect();
    top_semantic(&shown, n)
}

/// What Retrieve returns as of `at` (event time): the `n` facts true then
/// ([`valid_at`]: replaced or ended since or not) and not expired by then,
/// the highest salience first, as [`top_semantic`] orders them.
pub fn top_valid_at(items: &[SemanticItem], n: usize, at: f64) -> Vec<SemanticItem> {
    let then: Vec<SemanticItem> = valid_at(items, at)
        .into_iter()
        .filter(|f| !f.is_expired(at))
        .collect();
    by_salience(then.iter().collect(), n)
}

/// The `n` live semantic items with the highest salience, most recent first
/// among equals.
pub fn top_semantic(items: &[SemanticItem], n: usize) -> Vec<SemanticItem> {
    by_salience(items.iter().filter(|item| item.is_live()).collect(), n)
}

/// The `n` of `items` with the highest salience, most recent first among
/// equals, the later in `items` first among those.
fn by_salience(items: Vec<&SemanticItem>, n: usize) -> Vec<SemanticItem> {
    let mut live: Vec<(usize, &SemanticItem)> = items.into_iter().enumerate().collect();
    live.sort_by(|(ia, a), (ib, b)| {
        b.salience
            .partial_cmp(&a.salience)
            .unwrap_or(Ordering::Equal)
            .then(b.ts.partial_cmp(&a.ts).unwrap_or(Ordering::Equal))
            .then(ib.cmp(ia))
    });
    live.into_iter()
        .take(n)
        .map(|(_, item)| item.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(id: &str, ts: f64, salience: f32) -> SemanticItem {
        SemanticItem {
            ts,
            salience,
            ..SemanticItem::new(id, format!("fact {id}"))
        }
    }

    #[test]
    fn semantic_ranks_by_salience_then_recency_and_skips_superseded() {
        let mut old = fact("old", 1.0, 0.99);
        old.superseded_by = Some("new".into());
        let items = vec![
            fact("a", 1.0, 0.5),
            fact("b", 2.0, 0.9),
            fact("c", 3.0, 0.5),
            old,
            fact("d", 4.0, 0.1),
        ];
        let ids: Vec<_> = top_semantic(&items, 3).into_iter().map(|i| i.id).collect();
        assert_eq!(ids, ["b", "c", "a"]);
        assert_eq!(top_semantic(&items, 0).len(), 0);
        assert_eq!(top_semantic(&items, 10).len(), 4);
    }

    #[test]
    fn as_of_a_time_the_facts_true_then_rank_by_salience() {
        // Lisbon from day 10, replaced by Berlin on day 20; an allergy from
        // day 5, ended on day 15; a note that expired on day 12.
        let mut lisbon = fact("lisbon", 10.0, 0.9);
        let berlin = fact("berlin", 20.0, 0.5);
        lisbon = lisbon.replaced_by(&berlin);
        let mut allergy = fact("allergy", 5.0, 0.7);
        allergy.invalid_at = Some(15.0);
        let mut note = fact("note", 1.0, 0.1);
        note.managed.expires_at = Some(12.0);
        let items = vec![lisbon, berlin, allergy, note];
        let ids = |at: f64, n: usize| -> Vec<String> {
            top_valid_at(&items, n, at)
                .into_iter()
                .map(|f| f.id)
                .collect()
        };
        assert_eq!(ids(11.0, 9), ["lisbon", "allergy", "note"]);
        assert_eq!(ids(11.0, 2), ["lisbon", "allergy"]);
        assert_eq!(ids(13.0, 9), ["lisbon", "allergy"]);
        assert_eq!(ids(16.0, 9), ["lisbon"]);
        assert_eq!(ids(20.0, 9), ["berlin"]);
        assert!(ids(0.5, 9).is_empty());
    }

    #[test]
    fn provenance_is_optional_on_disk_and_round_trips() {
        let old = r#"{"id":"f","ts":5.0,"fact":"Lives in Oslo"}"#;
        let item: SemanticItem = serde_json::from_str(old).unwrap();
        assert_eq!(
            (item.turn_ids.len(), &item.source),
            (0, &Provenance::default())
        );
        assert!(!serde_json::to_string(&item).unwrap().contains("from_ts"));
        let with = SemanticItem {
            turn_ids: vec!["turn_0002".into()],
            source: Provenance {
                trace_ids: vec!["a".into(), "b".into()],
                from_ts: Some(1.5),
                to_ts: Some(9.0),
            },
            ..item
        };
        let line = serde_json::to_string(&with).unwrap();
        assert!(
            line.contains(r#""trace_ids":["a","b"],"from_ts":1.5,"to_ts":9.0"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<SemanticItem>(&line).unwrap(), with);
    }

    #[test]
    fn episodic_keeps_the_most_recent() {
        let item = |id: &str| EpisodicItem {
            id: id.into(),
            ts: 0.0,
            turn_ids: vec![],
            summary: String::new(),
            tags: vec![],
            salience: 0.5,
            source: Provenance::default(),
            rewriting: false,
            carrying: Default::default(),
        };
        let items = vec![item("1"), item("2"), item("3")];
        let ids: Vec<_> = recent_episodic(&items, 2)
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, ["2", "3"]);
        assert_eq!(recent_episodic(&items, 9).len(), 3);
    }
}
