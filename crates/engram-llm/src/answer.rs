//! What the summarizer LLM is asked, and how its answer is read.
//!
//! The model is asked for one JSON object; answers are read tolerantly:
//! plain JSON, JSON in a ``` fence, or JSON after prose. An answer with no
//! JSON at all but some text is kept as the episodic summary with no facts,
//! tagged [`UNSTRUCTURED_TAG`] (a model that ignores the format still
//! summarized); an empty answer, or JSON without a summary, is unusable and
//! nothing is pruned.

use engram_core::compaction::render_turns;
use serde_json::Value;

use crate::{NewFact, SummarizeError, Summary, SummaryRequest};

/// Tag on a summary taken from an answer that held no JSON.
pub const UNSTRUCTURED_TAG: &str = "unstructured";

const INSTRUCTIONS: &str = "You maintain the long-term memory of an AI agent. \
Summarize the conversation turns you are given into an episodic summary \
(what was asked, done and decided, in a few sentences) and semantic facts \
(stable facts, preferences, constraints and decisions worth remembering). \
Return only facts that are new or that change a known fact; do not repeat \
known facts unchanged. Answer with one JSON object and nothing else, of the form \
{\"episodic_summary\": \"...\", \"semantic_facts\": [{\"fact\": \"...\", \"tags\": [\"...\"], \
\"confidence\": 0.0-1.0, \"salience\": 0.0-1.0}]}";

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
    if !request.known_facts.is_empty() {
        user.push_str("Known facts:\n");
        for f in request.known_facts.iter().filter(|f| f.is_live()) {
            user.push_str(&format!("- {}\n", f.fact));
        }
        user.push('\n');
    }
    user.push_str("Turns to summarize:\n");
    user.push_str(&render_turns(request.traces));
    (system, user)
}

/// Reads a summarizer's answer; see the module docs for what is accepted.
pub fn parse(text: &str) -> Result<Summary, SummarizeError> {
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
        });
    };
    let summary = json
        .get("episodic_summary")
        .or_else(|| json.get("summary"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| SummarizeError::BadAnswer("JSON answer without episodic_summary".into()))?;
    let facts = json
        .get("semantic_facts")
        .or_else(|| json.get("facts"))
        .and_then(Value::as_array)
        .map(|facts| facts.iter().filter_map(fact).collect())
        .unwrap_or_default();
    Ok(Summary {
        episodic_summary: summary.to_owned(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: facts,
    })
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
fn find_json(text: &str) -> Option<Value> {
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
    use engram_core::memory::SemanticItem;
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
            let s = parse(&text).unwrap();
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
        let s = parse("The user asked about the weather and got an answer.").unwrap();
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
                matches!(parse(text), Err(SummarizeError::BadAnswer(_))),
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
        assert!(user.starts_with("Known facts:\n- User likes tea\n"));
        assert!(user.contains("Turn 1:\n  User: weather in Oslo?\n  Tool call: weather({\"city\":\"Oslo\"})\n  Tool result: {\"temp\":3}\n  Assistant: 3 degrees\n"));
    }
}
