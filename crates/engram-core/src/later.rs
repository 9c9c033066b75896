//! What became of the facts a message stated (DESIGN §15): a recalled
//! message that a fact replaced or ended since came from says so —
//! `later changed: Lives in Berlin, 2026-10-03` — so that an old statement
//! never reads as current.
//!
//! A fact keeps the turns of the compaction window it was drawn from, not
//! the message, so a message counts as its source when it is of one of
//! those turns (of the same conversation) and holds at least half of the
//! fact's content words: "I live in Lisbon and work as a nurse" for "Lives
//! in Lisbon", not the talk about curling in the same window.

use std::collections::{HashMap, HashSet};

use crate::compaction::merge::content_words;
use crate::memory::SemanticItem;
use crate::text::shorten;
use crate::trace::RawTrace;
use crate::users::UserFact;

/// At most this many notes on one message.
const MAX_NOTES: usize = 2;

/// A replacement chain is followed this far at most (a chain is short; a
/// cycle in bad data must not loop).
const MAX_HOPS: usize = 16;

/// A note's fact in at most this many characters.
const MAX_FACT: usize = 200;

/// The facts no longer true, each with where it was said and what became
/// of it.
#[derive(Debug, Default)]
pub struct Later {
    changed: Vec<Changed>,
}

#[derive(Debug)]
struct Changed {
    /// (conversation, turn) pairs it was drawn from.
    said: HashSet<(String, String)>,
    words: Vec<String>,
    note: String,
}

impl Later {
    /// Over conversation `agent`'s own facts (an agent without a user).
    pub fn of_agent(agent: &str, facts: &[SemanticItem]) -> Self {
        let sources = |f: &SemanticItem| {
            f.turn_ids
                .iter()
                .map(|t| (agent.to_owned(), t.clone()))
                .collect()
        };
        Self::build(facts.iter().map(|f| (f, sources(f))).collect())
    }

    /// Over a user's facts: each says which conversations' turns gave it.
    pub fn of_user(facts: &[UserFact]) -> Self {
        let sources = |f: &UserFact| {
            f.sources
                .iter()
                .flat_map(|s| s.turn_ids.iter().map(|t| (s.agent_id.clone(), t.clone())))
                .collect()
        };
        Self::build(facts.iter().map(|f| (&f.fact, sources(f))).collect())
    }

    fn build(facts: Vec<(&SemanticItem, HashSet<(String, String)>)>) -> Self {
        let by_id: HashMap<&str, &SemanticItem> =
            facts.iter().map(|(f, _)| (f.id.as_str(), *f)).collect();
        let changed = facts
            .into_iter()
            .filter(|(_, said)| !said.is_empty())
            .filter_map(|(f, said)| {
                let note = what_became(f, &by_id)?;
                let words = content_words(&f.fact);
                (!words.is_empty()).then_some(Changed { said, words, note })
            })
            .collect();
        Self { changed }
    }

    /// Whether there is nothing to say of any message.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    /// What became of the facts message `trace` of conversation `agent`
    /// stated: "later changed: Lives in Berlin,
    /// 2026-10-03", or none.
    pub fn note(&self, agent: &str, trace: &RawTrace) -> Option<String> {
        if self.changed.is_empty() || trace.content.trim().is_empty() {
            return None;
        }
        let key = (agent.to_owned(), trace.turn_id.clone());
        let said: HashSet<String> = content_words(&trace.content).into_iter().collect();
        let mut notes: Vec<&str> = Vec::new();
        for c in self.changed.iter().filter(|c| c.said.contains(&key)) {
            let held = c.words.iter().filter(|w| said.contains(*w)).count();
            if held * 2 >= c.words.len() && !notes.contains(&c.note.as_str()) {
                notes.push(&c.note);
            }
        }
        notes.truncate(MAX_NOTES);
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

/// What became of fact `f`: replaced (by what is true at the end of its
/// chain of replacements, and since when) or ended; `None` while it holds,
/// or when it was only merged into a saying that holds.
fn what_became(f: &SemanticItem, by_id: &HashMap<&str, &SemanticItem>) -> Option<String> {
    if f.managed.deleted_at.is_some() || f.is_live() {
        return None;
    }
    let mut at = f;
    let mut replaced = false;
    for _ in 0..MAX_HOPS {
        match at.superseded_by.as_deref().and_then(|id| by_id.get(id)) {
            Some(next) => {
                // A merge ends no span: said again, not changed.
                replaced |= at.invalid_at.is_some();
                at = next;
            }
            None => break,
        }
    }
    let date = |ts: f64| {
        crate::dates::date(ts)
            .map(|d| format!(", {d}"))
            .unwrap_or_default()
    };
    if at.managed.deleted_at.is_some() {
        return None;
    }
    if at.is_live() {
        return replaced.then(|| {
            format!(
                "later changed: {}{}",
                shorten(&crate::text::fold_whitespace(&at.fact), MAX_FACT),
                date(at.valid_since())
            )
        });
    }
    // The end of the chain no longer holds either, with nothing after it
    // (or what replaced it is gone): it ended.
    let end = at.invalid_at.unwrap_or(at.valid_since());
    Some(format!("later no longer true{}", date(end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(id: &str, text: &str, since: f64, turns: &[&str]) -> SemanticItem {
        SemanticItem {
            valid_from: Some(since),
            turn_ids: turns.iter().map(|t| (*t).to_owned()).collect(),
            ..SemanticItem::new(id, text)
        }
    }

    fn said(turn: &str, text: &str) -> RawTrace {
        let line = serde_json::json!({
            "id": "t", "ts": 0.0, "turn_id": turn, "seq": 0, "trace_type": "user", "content": text,
        });
        RawTrace::from_line(line.to_string().as_bytes()).unwrap()
    }

    const DAY: f64 = 86_400.0;

    #[test]
    fn a_message_a_replaced_fact_came_from_says_what_is_true_now() {
        // Lisbon (turn 1), replaced by Porto, replaced by Berlin; the
        // allergy (turn 1) ended; curling (turn 1) holds; a repeat of the
        // hobby merged into it.
        let berlin = fact("berlin", "Lives in Berlin", 40.0 * DAY, &["turn_0009"]);
        let porto =
            fact("porto", "Lives in Porto", 20.0 * DAY, &["turn_0005"]).replaced_by(&berlin);
        let lisbon = fact("lisbon", "Lives in Lisbon", DAY, &["turn_0001"]).replaced_by(&porto);
        let allergy = SemanticItem {
            invalid_at: Some(30.0 * DAY),
            ..fact("allergy", "Allergic to peanuts", DAY, &["turn_0001"])
        };
        let curling = fact("curling", "Plays curling", DAY, &["turn_0001"]);
        let again = SemanticItem {
            superseded_by: Some("curling".into()),
            ..fact("again", "Enjoys playing curling", DAY, &["turn_0002"])
        };
        let later = Later::of_agent("a", &[lisbon, porto, berlin, allergy, curling, again]);
        let note = |turn: &str, text: &str| later.note("a", &said(turn, text));
        assert_eq!(
            note(
                "turn_0001",
                "I live in Lisbon, and I am allergic to peanuts."
            ),
            Some(
                "later changed: Lives in Berlin, 1970-02-10; later no longer true, 1970-01-31"
                    .into()
            )
        );
        assert_eq!(
            note("turn_0005", "We moved to Porto."),
            Some("later changed: Lives in Berlin, 1970-02-10".into())
        );
        // Not the message that said it; a fact that holds; a repeat.
        assert_eq!(note("turn_0001", "I play curling on Sundays."), None);
        assert_eq!(note("turn_0002", "I enjoy playing curling."), None);
        assert_eq!(note("turn_0003", "I live in Lisbon."), None, "another turn");
        assert_eq!(note("turn_0009", "Berlin it is: I live here now."), None);
    }

    #[test]
    fn a_users_fact_is_matched_by_its_conversation() {
        let berlin = fact("u2", "Lives in Berlin", 40.0 * DAY, &[]);
        let lisbon = fact("u1", "Lives in Lisbon", DAY, &[]).replaced_by(&berlin);
        let source = |agent: &str, turn: &str| crate::users::FactSource {
            agent_id: agent.into(),
            fact_id: "f1".into(),
            turn_ids: vec![turn.into()],
        };
        let later = Later::of_user(&[
            UserFact {
                fact: lisbon,
                sources: vec![source("talk-1", "turn_0001")],
            },
            UserFact {
                fact: berlin,
                sources: vec![source("talk-2", "turn_0001")],
            },
        ]);
        let message = said("turn_0001", "I live in Lisbon");
        assert!(
            later
                .note("talk-1", &message)
                .unwrap()
                .starts_with("later changed: Lives in Berlin")
        );
        assert_eq!(later.note("talk-2", &message), None);
        assert_eq!(later.note("", &message), None);
    }

    #[test]
    fn a_cycle_in_bad_data_ends() {
        let mut a = fact("a", "Lives in Lisbon", DAY, &["turn_0001"]);
        let mut b = fact("b", "Lives in Porto", DAY, &["turn_0002"]);
        a.superseded_by = Some("b".into());
        a.invalid_at = Some(2.0 * DAY);
        b.superseded_by = Some("a".into());
        b.invalid_at = Some(3.0 * DAY);
        let later = Later::of_agent("a", &[a, b]);
        assert!(
            later
                .note("a", &said("turn_0001", "I live in Lisbon"))
                .is_some()
        );
    }
}
