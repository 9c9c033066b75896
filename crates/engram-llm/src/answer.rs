//! What the summarizer LLM is asked, and how its answer is read.
//!
//! The model is asked for one JSON object; answers are read tolerantly:
//! plain JSON, JSON in a ``` fence, or JSON after prose. An answer with no
//! JSON at all but some text is kept as the episodic summary with no facts,
//! tagged [`UNSTRUCTURED_TAG`] (a model that ignores the format still
//! summarized); an empty answer, or JSON without a summary, is unusable and
//! nothing is pruned.

use engram_core::compaction::{FactUpdate, Named, Replacing, render_turns};
use engram_core::memory::SemanticItem;
use serde_json::Value;

use crate::{NewFact, SummarizeError, Summary, SummaryRequest};

/// Tag on a summary taken from an answer that held no JSON.
pub const UNSTRUCTURED_TAG: &str = "unstructured";

const INSTRUCTIONS: &str = "You maintain the long-term memory of an AI agent. \
Summarize the conversation turns you are given into an episodic summary \
and semantic facts. The agent keeps working from your summary alone, so the episodic \
summary is a few sentences of what happened, then these sections, each a line starting \
with its name and left out when empty: \"Rules:\" (the user's standing instructions and \
constraints, in their words), \"Decisions:\" (what was decided and why), \"Open tasks:\" \
(what is asked and not done yet), \"Identifiers:\" (file paths, URLs, ports, versions, \
ids, error codes, exactly as written, with where they came from), \"Errors:\" (errors \
met and how they were fixed, if they were), \"Current task:\" (what the agent is doing \
now and its next step). Tool calls and results count as much as messages. The semantic \
facts are stable facts, preferences, constraints and decisions worth remembering. \
Known facts are listed with a handle in brackets and the date since which they are true. \
When the turns change a known fact (a new value of the same thing about the same person \
or subject: they moved, changed jobs, stopped being allergic, sold the car), answer it in \
\"updates\" as {\"replaces\": \"<handle>\", \"fact\": \"<the fact as it is now>\"}; when a \
known fact stopped being true with nothing in its place, put its handle in \"invalidates\". \
A fact about another thing, or one that adds to a known fact without contradicting it, is \
a new semantic fact, not an update. Do not repeat known facts unchanged; state each fact \
whole (\"Does judo now, no longer curling\", not only the old value). \
Answer with one JSON object and nothing else, of the form \
{\"episodic_summary\": \"...\", \"semantic_facts\": [{\"fact\": \"...\", \"tags\": [\"...\"], \
\"confidence\": 0.0-1.0, \"salience\": 0.0-1.0}], \"updates\": [{\"replaces\": \"f1\", \
\"fact\": \"...\"}], \"invalidates\": [\"f2\"]}";

/// The known facts a request shows, in the order of their handles: `f1`
/// is the first. Only live ones: the summarizer decides about the current
/// truth.
pub fn shown_facts(known: &[SemanticItem]) -> Vec<&SemanticItem> {
    known.iter().filter(|f| f.is_live()).collect()
}

fn handle(n: usize) -> String {
    format!("f{}", n + 1)
}

/// The system and user messages for `request`.
pub fn messages(request: &SummaryRequest<'_>) -> (String, String) {
    let mut system = INSTRUCTIONS.to_owned();
    if let Some(focus) = request.focus.map(str::trim).filter(|f| !f.is_empty()) {
        system.push_str("\n\nFocus of this summary: ");
        system.push_str(focus);
    }
    let mut user = String::new();
    if let Some(state) = request
        .working_memory
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        user.push_str(
            "Working memory of the task at hand (kept as it is; for context, not to restate):\n",
        );
        user.push_str(state);
        user.push_str("\n\n");
    }
    let known = shown_facts(request.known_facts);
    if !known.is_empty() {
        user.push_str("Known facts:\n");
        for (n, f) in known.iter().enumerate() {
            let line = engram_core::compaction::fact_line(f);
            let line = line.strip_prefix("- ").unwrap_or(&line);
            user.push_str(&format!("- [{}] {line}", handle(n)));
        }
        user.push('\n');
    }
    user.push_str("Turns to summarize:\n");
    user.push_str(&render_turns(request.traces));
    (system, user)
}

/// Reads a summarizer's answer to a request that showed `known` (see the
/// module docs for what is accepted); handles are read against the facts
/// it showed ([`shown_facts`]).
pub fn parse(text: &str, known: &[SemanticItem]) -> Result<Summary, SummarizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SummarizeError::BadAnswer("empty answer".into()));
    }
    let Some(json) = find_json(text) else {
        return Ok(Summary {
            episodic_summary: text.to_owned(),
            tags: vec![UNSTRUCTURED_TAG.to_owned()],
            salience: 0.5,
            semantic_facts: vec![],
            ..Default::default()
        });
    };
    let summary = json
        .get("episodic_summary")
        .or_else(|| json.get("summary"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| SummarizeError::BadAnswer("JSON answer without episodic_summary".into()))?;
    let list = |key: &str| json.get(key).and_then(Value::as_array);
    let facts = list("semantic_facts")
        .or_else(|| list("facts"))
        .map(|facts| facts.iter().filter_map(fact).collect())
        .unwrap_or_default();
    let shown = shown_facts(known);
    let mut unknown = 0u32;
    let mut named = |v: Option<&Value>| {
        let found = v.and_then(Value::as_str).and_then(|h| resolve(h, &shown));
        if found.is_none() {
            unknown += 1;
        }
        found
    };
    let mut updates = vec![];
    for u in list("updates").into_iter().flatten() {
        let Some(new) = fact(u) else { continue };
        if let Some(old) = named(u.get("replaces")) {
            updates.push(FactUpdate {
                replaces: old.id.clone(),
                fact: new,
            });
        }
    }
    let mut invalidates = vec![];
    for h in list("invalidates").into_iter().flatten() {
        if let Some(old) = named(Some(h)) {
            invalidates.push(Named {
                id: old.id.clone(),
                fact: old.fact.clone(),
            });
        }
    }
    // An answer that speaks of updates at all decides them by handle;
    // one that does not is an older model's: its facts replace by words.
    let handles = json.get("updates").is_some() || json.get("invalidates").is_some();
    Ok(Summary {
        episodic_summary: summary.to_owned(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: facts,
        updates,
        invalidates,
        unknown_handles: unknown,
        replacing: if handles {
            Replacing::Never
        } else {
            Replacing::ByOverlap
        },
    })
}

/// The fact a handle names (`f3`, `[f3]`, `F3`).
fn resolve<'a>(handle: &str, shown: &[&'a SemanticItem]) -> Option<&'a SemanticItem> {
    let h = handle.trim().trim_start_matches('[').trim_end_matches(']');
    let n: usize = h.strip_prefix(['f', 'F'])?.parse().ok()?;
    shown.get(n.checked_sub(1)?).copied()
}

/// A fact as a string or as an object with `fact` (scores clamped to 0..1).
fn fact(v: &Value) -> Option<NewFact> {
    let unit = |key: &str, default: f32| {
        v.get(key)
            .and_then(Value::as_f64)
            .map_or(default, |x| (x as f32).clamp(0.0, 1.0))
    };
    let text = match v {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get("fact").and_then(Value::as_str)?,
        _ => return None,
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let tags = v
        .get("tags")
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Some(NewFact {
        fact: text.to_owned(),
        tags,
        confidence: unit("confidence", 0.7),
        salience: unit("salience", 0.5),
    })
}

/// The answer's JSON object: the whole text, a ``` fenced block, or the
/// outermost braces found after prose.
pub(crate) fn find_json(text: &str) -> Option<Value> {
    let object = |s: &str| {
        serde_json::from_str::<Value>(s.trim())
            .ok()
            .filter(Value::is_object)
    };
    if let Some(v) = object(text) {
        return Some(v);
    }
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body = after.strip_prefix("json").unwrap_or(after);
        let Some(end) = body.find("```") else { break };
        if let Some(v) = object(&body[..end]) {
            return Some(v);
        }
        rest = &body[end + 3..];
    }
    let (start, end) = (text.find('{')?, text.rfind('}')?);
    (start < end).then(|| object(&text[start..=end])).flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use engram_core::NewEvent;
    use engram_core::turns::assign_all;

    const ANSWER: &str = r#"{"episodic_summary": "User asked about Oslo weather; it was 3 degrees.",
        "semantic_facts": [{"fact": "User lives in Oslo", "tags": ["location"], "confidence": 1.5, "salience": 0.9}, "Prefers metric units", {"fact": ""}]}"#;

    #[test]
    fn plain_fenced_and_embedded_json_all_parse() {
        for text in [
            ANSWER.to_owned(),
            format!("```json\n{ANSWER}\n```"),
            format!("Here is the memory you asked for:\n```\n{ANSWER}\n```\nAnything else?"),
            format!("Sure! {ANSWER} Hope this helps."),
        ] {
            let s = parse(&text, &[]).unwrap();
            assert_eq!(
                s.episodic_summary,
                "User asked about Oslo weather; it was 3 degrees."
            );
            let facts: Vec<_> = s.semantic_facts.iter().map(|f| f.fact.as_str()).collect();
            assert_eq!(facts, ["User lives in Oslo", "Prefers metric units"]);
            assert_eq!(s.semantic_facts[0].confidence, 1.0, "clamped");
            assert_eq!(s.semantic_facts[0].tags, ["location"]);
            assert!(s.tags.is_empty());
        }
    }

    #[test]
    fn prose_without_json_is_an_unstructured_summary() {
        let s = parse("The user asked about the weather and got an answer.", &[]).unwrap();
        assert_eq!(s.tags, [UNSTRUCTURED_TAG]);
        assert!(s.semantic_facts.is_empty());
    }

    #[test]
    fn unusable_answers_are_errors() {
        for text in [
            "",
            "   ",
            r#"{"semantic_facts": []}"#,
            r#"{"episodic_summary": "  "}"#,
        ] {
            assert!(
                matches!(parse(text, &[]), Err(SummarizeError::BadAnswer(_))),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_request_shows_the_working_memory_first() {
        let traces = assign_all([NewEvent::user("next file?")]);
        let (_, user) = messages(&SummaryRequest {
            traces: &traces,
            known_facts: &[],
            focus: None,
            working_memory: Some(r#"{"files_reviewed":3}"#),
        });
        assert!(
            user.starts_with("Working memory of the task at hand"),
            "{user}"
        );
        assert!(
            user.contains("{\"files_reviewed\":3}\n\nTurns to summarize:\n"),
            "{user}"
        );
    }

    #[test]
    fn the_request_shows_turns_known_facts_and_focus() {
        let traces = assign_all([
            NewEvent::user("weather in Oslo?"),
            NewEvent::tool_call("c", "weather", json!({"city": "Oslo"})),
            NewEvent::tool_result("c", json!({"temp": 3})),
            NewEvent::assistant("3 degrees"),
        ]);
        let known = [SemanticItem::new("f1", "User likes tea")];
        let (system, user) = messages(&SummaryRequest {
            traces: &traces,
            known_facts: &known,
            focus: Some("travel plans"),
            working_memory: None,
        });
        assert!(
            system.contains("JSON object")
                && system.ends_with("Focus of this summary: travel plans")
        );
        assert!(
            user.starts_with("Known facts:\n- [f1] User likes tea\n"),
            "{user}"
        );
        assert!(user.contains("Turn 1:\n  User: weather in Oslo?\n  Tool call: weather({\"city\":\"Oslo\"})\n  Tool result: {\"temp\":3}\n  Assistant: 3 degrees\n"));
    }

    #[test]
    fn handles_name_the_facts_shown_and_unknown_ones_are_counted() {
        let mut gone = SemanticItem::new("old", "Lives in Porto");
        gone.superseded_by = Some("x".into());
        let mut lisbon = SemanticItem::new("a1", "Lives in Lisbon");
        lisbon.valid_from = Some(1_759_449_600.0);
        let known = [gone, lisbon, SemanticItem::new("a2", "Allergic to peanuts")];
        let traces = assign_all([NewEvent::user("I moved to Berlin")]);
        let (system, user) = messages(&SummaryRequest {
            traces: &traces,
            known_facts: &known,
            focus: None,
            working_memory: None,
        });
        assert!(system.contains("\"updates\""), "{system}");
        assert!(
            user.starts_with(
                "Known facts:\n- [f1] (since 2025-10-03) Lives in Lisbon\n- [f2] Allergic to peanuts\n"
            ),
            "only live facts, with handles and dates: {user}"
        );
        let answer = r#"{"episodic_summary": "Moved.", "semantic_facts": [],
            "updates": [{"replaces": "f1", "fact": "Lives in Berlin"}, {"replaces": "f9", "fact": "x"},
                        {"replaces": "[F1]", "fact": {"no": 1}}],
            "invalidates": ["f2", "f0", 7]}"#;
        let s = parse(answer, &known).unwrap();
        assert_eq!(s.updates.len(), 1);
        assert_eq!(
            (
                s.updates[0].replaces.as_str(),
                s.updates[0].fact.fact.as_str()
            ),
            ("a1", "Lives in Berlin")
        );
        assert_eq!(
            s.invalidates,
            [Named {
                id: "a2".into(),
                fact: "Allergic to peanuts".into()
            }]
        );
        assert_eq!(s.unknown_handles, 3, "f9, f0 and 7");
        assert_eq!(s.replacing, Replacing::Never, "an answer with handles");
        let older = parse(
            r#"{"episodic_summary": "Moved.", "semantic_facts": ["Lives in Berlin"]}"#,
            &known,
        )
        .unwrap();
        assert_eq!(
            older.replacing,
            Replacing::ByOverlap,
            "no handles: words decide"
        );
        assert!(older.updates.is_empty() && older.unknown_handles == 0);
    }
}
