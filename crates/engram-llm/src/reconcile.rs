//! The consolidation request (docs/DESIGN.md §15): a user's facts in
//! groups on one subject, each with a handle and its date, and the
//! question of a compaction's answer about known facts — which one
//! replaces which, which stopped being true. The answer has the same
//! form (`updates`, `invalidates`); an update names the newer fact by its
//! handle (`by`) or by its text (`fact`, matched to the group's facts).

use engram_core::compaction::{fact_line, normalize};
use engram_core::memory::SemanticItem;
use serde_json::Value;

use crate::{SummarizeError, answer};

const INSTRUCTIONS: &str = "You maintain the long-term memory of an AI agent about one user. \
The facts below were drawn from the user's different conversations, in groups that may be \
about the same subject. Each fact has a handle in brackets and the date since which it was \
true. Decide, group by group, which facts are no longer true: when a later fact gives a new \
value of the same thing about the same person (they moved, changed jobs, stopped being \
allergic, sold the car), the earlier one is replaced, answered in \"updates\" as \
{\"replaces\": \"<the earlier handle>\", \"by\": \"<the later handle>\", \"fact\": \"<the \
later fact's text>\"}; a fact that stopped being true with nothing in its place goes in \
\"invalidates\". Facts about different things, or that add to each other without \
contradicting, are both true: leave them out. Never replace a later fact by an earlier one. \
Answer with one JSON object and nothing else, of the form \
{\"updates\": [{\"replaces\": \"f1\", \"by\": \"f2\", \"fact\": \"...\"}], \"invalidates\": [\"f3\"]}";

/// What the summarizer decided about the groups it was shown, by fact id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decisions {
    /// (old, new): `old` no longer true since `new`.
    pub replaces: Vec<(String, String)>,
    pub invalidates: Vec<String>,
    /// Handles that named no fact shown, and updates whose newer fact
    /// could not be told (ignored).
    pub unknown_handles: u32,
}

/// The system and user messages asking about `groups` (facts oldest
/// first within each); handles count across the groups from `f1`.
pub fn messages(groups: &[Vec<SemanticItem>]) -> (String, String) {
    let mut user = String::new();
    let mut n = 0;
    for (g, group) in groups.iter().enumerate() {
        user.push_str(&format!("Group {}:\n", g + 1));
        for f in group {
            n += 1;
            let line = fact_line(f);
            let line = line.strip_prefix("- ").unwrap_or(&line);
            user.push_str(&format!("- [f{n}] {line}"));
        }
        user.push('\n');
    }
    (INSTRUCTIONS.to_owned(), user)
}

/// Reads the answer to a request about `groups`; an answer with neither
/// key decides nothing (prose is no decision).
pub fn parse(text: &str, groups: &[Vec<SemanticItem>]) -> Result<Decisions, SummarizeError> {
    let json = answer::find_json(text.trim())
        .ok_or_else(|| SummarizeError::BadAnswer("no JSON object in the answer".into()))?;
    // Each shown fact with its group.
    let shown: Vec<(usize, &SemanticItem)> = groups
        .iter()
        .enumerate()
        .flat_map(|(g, group)| group.iter().map(move |f| (g, f)))
        .collect();
    let resolve = |v: Option<&Value>| -> Option<(usize, &SemanticItem)> {
        let h = v?
            .as_str()?
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let n: usize = h.strip_prefix(['f', 'F'])?.parse().ok()?;
        shown.get(n.checked_sub(1)?).copied()
    };
    let list = |key: &str| json.get(key).and_then(Value::as_array);
    let mut out = Decisions::default();
    for u in list("updates").into_iter().flatten() {
        let Some((g, old)) = resolve(u.get("replaces")) else {
            out.unknown_handles += 1;
            continue;
        };
        let by_text = || {
            let text = normalize(u.get("fact")?.as_str()?);
            groups[g]
                .iter()
                .find(|f| f.id != old.id && normalize(&f.fact) == text)
        };
        let new = resolve(u.get("by"))
            .filter(|(h, f)| *h == g && f.id != old.id)
            .map(|(_, f)| f)
            .or_else(by_text);
        match new {
            Some(new) => out.replaces.push((old.id.clone(), new.id.clone())),
            None => out.unknown_handles += 1,
        }
    }
    for h in list("invalidates").into_iter().flatten() {
        match resolve(Some(h)) {
            Some((_, f)) => out.invalidates.push(f.id.clone()),
            None => out.unknown_handles += 1,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(id: &str, text: &str, day: f64) -> SemanticItem {
        SemanticItem {
            valid_from: Some(1_700_000_000.0 + day * 86_400.0),
            ..SemanticItem::new(id, text)
        }
    }

    fn groups() -> Vec<Vec<SemanticItem>> {
        vec![
            vec![
                at("u1", "Lives in Lisbon", 0.0),
                at("u2", "Moved to Berlin", 30.0),
            ],
            vec![
                at("u3", "Allergic to peanuts", 0.0),
                at("u4", "No longer allergic to peanuts", 40.0),
            ],
        ]
    }

    #[test]
    fn the_request_shows_every_group_with_handles_and_dates() {
        let (system, user) = messages(&groups());
        assert!(system.contains("\"replaces\""));
        assert!(user.starts_with("Group 1:\n- [f1] (since 2023-11-14) Lives in Lisbon\n"));
        assert!(user.contains("Group 2:\n- [f3] (since 2023-11-14) Allergic to peanuts\n- [f4]"));
    }

    #[test]
    fn updates_name_the_newer_fact_by_handle_or_text() {
        let groups = groups();
        let answer = r#"Here: {"updates": [
            {"replaces": "f1", "by": "f2"},
            {"replaces": "[f3]", "fact": "no longer allergic to peanuts."},
            {"replaces": "f1", "by": "f3"},
            {"replaces": "f9", "by": "f2"}
        ], "invalidates": ["f2", "f12"]}"#;
        let d = parse(answer, &groups).unwrap();
        assert_eq!(
            d.replaces,
            [("u1".into(), "u2".into()), ("u3".into(), "u4".into())]
        );
        assert_eq!(d.invalidates, ["u2"]);
        // f3 is of another group, f9 and f12 name nothing.
        assert_eq!(d.unknown_handles, 3);
        assert!(parse("I cannot decide.", &groups).is_err());
        assert_eq!(parse("{}", &groups).unwrap(), Decisions::default());
    }
}
