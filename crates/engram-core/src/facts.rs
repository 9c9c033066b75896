//! Facts that clients manage (docs/DESIGN.md §9a): an add that finds the same fact
//! merges into it instead of duplicating it; an update is a new version
//! of the same id (the old one stays in the history); a delete is a last
//! version with no text, and every earlier version loses its text too; a
//! pinned fact is always shown and never expires; an expired one is
//! neither searched nor shown. Pure steps over a scope's facts (the
//! latest version of each id); the stores keep the versions.

use std::collections::{BTreeMap, HashMap};

use crate::CoreError;
use crate::compaction::normalize;
use crate::memory::{Managed, Origin, SemanticItem, top_semantic};

/// Longest fact a client may write, in characters.
pub const MAX_FACT_CHARS: usize = 4_000;
/// Facts in one AddMemories.
pub const MAX_ADDED: usize = 100;
const MAX_TAGS: usize = 32;
const MAX_TAG_CHARS: usize = 64;
const MAX_METADATA: usize = 32;
const MAX_KEY_CHARS: usize = 64;
const MAX_VALUE_CHARS: usize = 1_024;

/// A fact a client adds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewFact {
    pub text: String,
    pub tags: Vec<String>,
    pub pinned: bool,
    pub expires_at: Option<f64>,
    pub metadata: BTreeMap<String, String>,
    /// When it became true (event time); unset: when it is written.
    pub valid_from: Option<f64>,
}

/// An update: each field set replaces the fact's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Change {
    pub text: Option<String>,
    pub tags: Option<Vec<String>>,
    pub pinned: Option<bool>,
    /// `Some(None)`: never expires.
    pub expires_at: Option<Option<f64>>,
    pub metadata: Option<BTreeMap<String, String>>,
    /// When the new text became true (event time); unset: when it is
    /// written if the text changes, else as it was.
    pub valid_from: Option<f64>,
    /// 0: any version.
    pub expected_version: u64,
}

/// What an add came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    Added,
    /// The same fact (same words) was there: it was updated.
    Merged,
}

/// Checks a fact's fields as a client wrote them.
pub fn check(
    text: &str,
    tags: &[String],
    expires_at: Option<f64>,
    metadata: &BTreeMap<String, String>,
) -> Result<(), CoreError> {
    let bad = |why: String| Err(CoreError::Invalid(why));
    let chars = text.chars().count();
    if text.trim().is_empty() || chars > MAX_FACT_CHARS {
        return bad(format!(
            "a fact is 1 to {MAX_FACT_CHARS} characters, not {chars}"
        ));
    }
    if normalize(text).is_empty() {
        return bad("a fact needs at least one word".into());
    }
    if tags.len() > MAX_TAGS {
        return bad(format!("at most {MAX_TAGS} tags, not {}", tags.len()));
    }
    if let Some(tag) = tags
        .iter()
        .find(|t| t.trim().is_empty() || t.chars().count() > MAX_TAG_CHARS)
    {
        return bad(format!(
            "a tag is 1 to {MAX_TAG_CHARS} characters, not {:?}",
            crate::text::cut(tag.clone(), MAX_TAG_CHARS + 1)
        ));
    }
    if let Some(at) = expires_at
        && !(at.is_finite() && at > 0.0)
    {
        return bad(format!(
            "expires_at is epoch seconds, not {at} (unset: never)"
        ));
    }
    if metadata.len() > MAX_METADATA {
        return bad(format!(
            "at most {MAX_METADATA} metadata entries, not {}",
            metadata.len()
        ));
    }
    for (key, value) in metadata {
        let k = key.chars().count();
        if k == 0 || k > MAX_KEY_CHARS || value.chars().count() > MAX_VALUE_CHARS {
            return bad(format!(
                "a metadata key is 1 to {MAX_KEY_CHARS} characters and a value at most {MAX_VALUE_CHARS}"
            ));
        }
    }
    Ok(())
}

/// A time a client gave (`valid_from`): epoch seconds.
fn check_time(at: Option<f64>) -> Result<(), CoreError> {
    match at {
        Some(at) if !(at.is_finite() && at >= 0.0) => Err(CoreError::Invalid(format!(
            "valid_from is epoch seconds, not {at} (unset: now)"
        ))),
        _ => Ok(()),
    }
}

/// Adds `new` to `facts`: the line to store, and whether it merged into
/// the live fact with the same words (keeping its id) or is a new one
/// (named by `new_id`).
pub fn add(
    facts: &[SemanticItem],
    new: NewFact,
    now: f64,
    new_id: impl FnOnce() -> String,
) -> Result<(SemanticItem, Added), CoreError> {
    let words = normalize(&new.text);
    let same = facts
        .iter()
        .find(|f| f.is_live() && normalize(&f.fact) == words);
    add_beside(same, new, now, new_id)
}

/// [`add`] with the live fact of the same words, if any, already found.
fn add_beside(
    same: Option<&SemanticItem>,
    new: NewFact,
    now: f64,
    new_id: impl FnOnce() -> String,
) -> Result<(SemanticItem, Added), CoreError> {
    check(&new.text, &new.tags, new.expires_at, &new.metadata)?;
    check_time(new.valid_from)?;
    if let Some(old) = same {
        let mut tags = old.tags.clone();
        for t in new.tags {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let mut metadata = old.managed.metadata.clone();
        metadata.extend(new.metadata);
        if metadata.len() > MAX_METADATA {
            return Err(CoreError::Invalid(format!(
                "the merged fact would have {} metadata entries, at most {MAX_METADATA}",
                metadata.len()
            )));
        }
        let pinned = old.managed.pinned || new.pinned;
        let item = SemanticItem {
            ts: now,
            tags,
            managed: Managed {
                origin: Origin::Client,
                pinned,
                expires_at: new.expires_at.or(old.managed.expires_at),
                version: old.version() + 1,
                metadata,
                deleted_at: None,
            },
            ..old.clone()
        };
        return Ok((unexpiring_if_pinned(item), Added::Merged));
    }
    let item = SemanticItem {
        ts: now,
        tags: new.tags,
        valid_from: Some(new.valid_from.unwrap_or(now)),
        managed: Managed {
            origin: Origin::Client,
            pinned: new.pinned,
            expires_at: new.expires_at,
            version: 1,
            metadata: new.metadata,
            deleted_at: None,
        },
        ..SemanticItem::new(new_id(), new.text.trim())
    };
    Ok((unexpiring_if_pinned(item), Added::Added))
}

/// A pinned fact keeps no expiry.
fn unexpiring_if_pinned(mut item: SemanticItem) -> SemanticItem {
    if item.managed.pinned {
        item.managed.expires_at = None;
    }
    item
}

/// The fact `id` among `facts`, to be changed at `expected` (0: any).
pub fn changeable<'a>(
    facts: &'a [SemanticItem],
    id: &str,
    expected: u64,
) -> Result<&'a SemanticItem, CoreError> {
    let fact = facts
        .iter()
        .find(|f| f.id == id && f.managed.deleted_at.is_none())
        .ok_or_else(|| CoreError::Absent(format!("fact {id:?} not found")))?;
    if let Some(by) = &fact.superseded_by {
        return Err(CoreError::Precondition(format!(
            "fact {id:?} was replaced by {by:?}; change that one"
        )));
    }
    if expected != 0 && expected != fact.version() {
        return Err(CoreError::Stale(format!(
            "fact {id:?} is at version {}, not {expected}; nothing changed",
            fact.version()
        )));
    }
    Ok(fact)
}

/// The next version of `fact` with `change` applied.
pub fn update(fact: &SemanticItem, change: Change, now: f64) -> Result<SemanticItem, CoreError> {
    let text = change.text.unwrap_or_else(|| fact.fact.clone());
    let tags = change.tags.unwrap_or_else(|| fact.tags.clone());
    let expires_at = change.expires_at.unwrap_or(fact.managed.expires_at);
    let metadata = change
        .metadata
        .unwrap_or_else(|| fact.managed.metadata.clone());
    check(&text, &tags, expires_at, &metadata)?;
    check_time(change.valid_from)?;
    let text = text.trim().to_owned();
    let valid_from = match change.valid_from {
        Some(at) => Some(at),
        None if text != fact.fact => Some(now),
        None => fact.valid_from,
    };
    let item = SemanticItem {
        ts: now,
        valid_from,
        // A client's version is true from its time on: an ended fact the
        // client changes is true again (the summarizer was wrong).
        invalid_at: None,
        fact: text,
        tags,
        managed: Managed {
            origin: Origin::Client,
            pinned: change.pinned.unwrap_or(fact.managed.pinned),
            expires_at,
            version: fact.version() + 1,
            metadata,
            deleted_at: None,
        },
        ..fact.clone()
    };
    Ok(unexpiring_if_pinned(item))
}

/// The version that deletes `fact`: its id, version and time, no text.
pub fn tombstone(fact: &SemanticItem, now: f64) -> SemanticItem {
    SemanticItem {
        ts: now,
        confidence: 0.0,
        salience: 0.0,
        managed: Managed {
            origin: Origin::Client,
            version: fact.version() + 1,
            deleted_at: Some(now),
            ..Managed::default()
        },
        ..SemanticItem::new(fact.id.clone(), "")
    }
}

/// A version of a deleted fact as its history keeps it: id, version,
/// time and origin, no text.
pub fn scrubbed(version: &SemanticItem) -> SemanticItem {
    SemanticItem {
        ts: version.ts,
        confidence: 0.0,
        salience: 0.0,
        managed: Managed {
            origin: version.managed.origin,
            version: version.managed.version,
            deleted_at: version.managed.deleted_at,
            ..Managed::default()
        },
        ..SemanticItem::new(version.id.clone(), "")
    }
}

/// The facts a prompt shows at `now`: every pinned one (oldest first),
/// then the `n` most salient of the others that are live and unexpired,
/// newest first (of two facts on the same thing, the later one reads
/// first; each line is dated).
pub fn shown(facts: &[SemanticItem], n: usize, now: f64) -> Vec<SemanticItem> {
    let mut pinned: Vec<SemanticItem> = facts
        .iter()
        .filter(|f| f.is_live() && f.managed.pinned)
        .cloned()
        .collect();
    pinned.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    let others: Vec<SemanticItem> = facts
        .iter()
        .filter(|f| f.is_shown(now) && !f.managed.pinned)
        .cloned()
        .collect();
    let mut top = top_semantic(&others, n);
    top.sort_by(|a, b| b.valid_since().total_cmp(&a.valid_since()));
    pinned.extend(top);
    pinned
}

/// A change a client asks of a scope's facts.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Add(Vec<NewFact>),
    Update { id: String, change: Change },
    Delete { id: String, expected_version: u64 },
}

/// What a change came to, per fact.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Added(SemanticItem, Added),
    Updated(SemanticItem),
    /// The deleting version.
    Deleted(u64),
}

/// A change worked out: the versions to store (in order), the id whose
/// earlier versions are to lose their text (a delete), and the outcomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    pub lines: Vec<SemanticItem>,
    pub erase: Option<String>,
    pub outcomes: Vec<Outcome>,
}

/// Works out `op` over the scope's `facts` (latest version of each id)
/// at `now`: all of it, or nothing (the first refusal).
pub fn apply(
    facts: &[SemanticItem],
    op: Op,
    now: f64,
    mut new_id: impl FnMut() -> String,
) -> Result<Applied, CoreError> {
    let mut applied = Applied::default();
    match op {
        Op::Add(new) => {
            if new.is_empty() || new.len() > MAX_ADDED {
                return Err(CoreError::Invalid(format!(
                    "add 1 to {MAX_ADDED} facts at a time, not {}",
                    new.len()
                )));
            }
            // Later items see earlier ones: the same fact twice merges. The
            // live facts by their words, once: a scope of 10,000 facts is
            // not read again for each one added.
            let mut working = facts.to_vec();
            let mut by_words: HashMap<String, usize> = HashMap::new();
            for (at, f) in working.iter().enumerate().filter(|(_, f)| f.is_live()) {
                by_words.entry(normalize(&f.fact)).or_insert(at);
            }
            for (i, nf) in new.into_iter().enumerate() {
                let words = normalize(&nf.text);
                let at = by_words.get(&words).copied();
                let same = at.map(|at| &working[at]);
                let (line, how) = add_beside(same, nf, now, &mut new_id).map_err(|e| match e {
                    CoreError::Invalid(why) => CoreError::Invalid(format!("memories[{i}]: {why}")),
                    other => other,
                })?;
                match at {
                    Some(at) => working[at] = line.clone(),
                    None => {
                        by_words.insert(words, working.len());
                        working.push(line.clone());
                    }
                }
                applied.outcomes.push(Outcome::Added(line.clone(), how));
                applied.lines.push(line);
            }
        }
        Op::Update { id, change } => {
            let expected = change.expected_version;
            let line = update(changeable(facts, &id, expected)?, change, now)?;
            applied.outcomes.push(Outcome::Updated(line.clone()));
            applied.lines.push(line);
        }
        Op::Delete {
            id,
            expected_version,
        } => {
            // A superseded fact can be deleted too (its text goes).
            let fact = match changeable(facts, &id, expected_version) {
                Ok(fact) => fact,
                Err(CoreError::Precondition(_)) => facts
                    .iter()
                    .find(|f| f.id == id)
                    .expect("found, superseded"),
                Err(e) => return Err(e),
            };
            let line = tombstone(fact, now);
            applied.outcomes.push(Outcome::Deleted(line.version()));
            applied.lines.push(line);
            applied.erase = Some(id);
        }
    }
    Ok(applied)
}

/// What ListMemories selects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// Every word of it in the fact (case aside); empty: any.
    pub query: String,
    /// Every one of them among the fact's tags.
    pub tags: Vec<String>,
    pub include_superseded: bool,
    pub include_expired: bool,
    /// The facts true then (event time), superseded since or not.
    pub as_of: Option<f64>,
}

/// The facts `listing` selects at `now`: pinned first, then the most
/// recently written first (ties by id), deleted ones never.
pub fn listed(facts: &[SemanticItem], listing: &Listing, now: f64) -> Vec<SemanticItem> {
    let words: Vec<String> = listing
        .query
        .split_whitespace()
        .map(str::to_lowercase)
        .collect();
    let then = listing.as_of.map(|at| crate::memory::valid_at(facts, at));
    let mut out: Vec<SemanticItem> = then
        .as_deref()
        .unwrap_or(facts)
        .iter()
        .filter(|f| f.managed.deleted_at.is_none())
        .filter(|f| listing.as_of.is_some() || listing.include_superseded || f.is_live())
        .filter(|f| listing.include_expired || !f.is_expired(listing.as_of.unwrap_or(now)))
        .filter(|f| listing.tags.iter().all(|t| f.tags.contains(t)))
        .filter(|f| {
            let text = f.fact.to_lowercase();
            words.iter().all(|w| text.contains(w.as_str()))
        })
        .cloned()
        .collect();
    out.sort_by(|a, b| {
        b.managed
            .pinned
            .cmp(&a.managed.pinned)
            .then(b.ts.total_cmp(&a.ts))
            .then(b.id.cmp(&a.id))
    });
    out
}

/// When the next of `facts` expires after `now` (what a prompt shows
/// changes then).
pub fn next_expiry(facts: &[SemanticItem], now: f64) -> Option<f64> {
    facts
        .iter()
        .filter(|f| f.is_live() && !f.managed.pinned)
        .filter_map(|f| f.managed.expires_at)
        .filter(|&at| at > now)
        .min_by(f64::total_cmp)
}

#[cfg(test)]
mod tests;
