//! The tool-result budget, applied at ingest: a result longer than the cap
//! is stored whole in a file of the agent, and the trace keeps a head/tail
//! preview and the file's name (`tool_result_ref`). The prompt then carries
//! the preview; nothing is lost.

use serde_json::Value;

use crate::{RawTrace, TraceType};

/// A result to store in its own file before its trace is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Spill {
    /// Path relative to the agent's directory.
    pub path: String,
    /// The whole result as JSON text.
    pub json: String,
}

/// Where a trace's whole result goes.
pub fn spill_path(trace_id: &str) -> String {
    format!("tool_results/{trace_id}.json")
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Replaces results over `max_chars` characters (0: no cap) by previews
/// and returns what to store.
pub fn spill_large_results(traces: &mut [RawTrace], max_chars: usize) -> Vec<Spill> {
    let mut spills = vec![];
    if max_chars == 0 {
        return spills;
    }
    for t in traces
        .iter_mut()
        .filter(|t| t.trace_type == TraceType::ToolResult)
    {
        let Some(result) = &t.tool_result else {
            continue;
        };
        let text = text_of(result);
        let chars = text.chars().count();
        if chars <= max_chars {
            continue;
        }
        let path = spill_path(&t.id);
        // The preview stays well under the cap: most of it head, some tail.
        let budget = (max_chars / 2).clamp(200, 4000);
        let head: String = text.chars().take(budget * 2 / 3).collect();
        let tail: String = text.chars().skip(chars - budget / 3).collect();
        let preview = format!(
            "{head}\n…[tool result of {chars} characters; the whole result is in {path}]…\n{tail}"
        );
        spills.push(Spill {
            path: path.clone(),
            json: result.to_string(),
        });
        t.tool_result = Some(Value::String(preview));
        t.tool_result_ref = Some(path);
    }
    spills
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::NewEvent;
    use crate::turns::assign_all;

    #[test]
    fn large_results_become_previews_with_a_reference() {
        let big: String = (0..30_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let mut traces = assign_all([
            NewEvent::user("q"),
            NewEvent::tool_call("a", "fetch", json!({})),
            NewEvent::tool_result("a", json!("placeholder")),
            NewEvent::tool_call("b", "fetch", json!({})),
            NewEvent::tool_result("b", json!("small")),
        ]);
        traces[2].tool_result = Some(json!({"page": big.clone()}));
        let spills = spill_large_results(&mut traces, 20_000);
        assert_eq!(spills.len(), 1);
        assert_eq!(
            spills[0].path,
            format!("tool_results/{}.json", traces[2].id)
        );
        let whole: Value = serde_json::from_str(&spills[0].json).unwrap();
        assert_eq!(whole["page"].as_str().unwrap(), big, "stored whole");
        let preview = traces[2].tool_result.as_ref().unwrap().as_str().unwrap();
        assert!(preview.chars().count() < 5_000, "{}", preview.len());
        assert!(
            preview.starts_with("{\"page\":\"abc")
                && preview.contains("30011 characters")
                && preview.ends_with("\"}")
        );
        assert_eq!(
            traces[2].tool_result_ref.as_deref(),
            Some(spills[0].path.as_str())
        );
        assert_eq!(
            traces[4].tool_result,
            Some(json!("small")),
            "small results stay"
        );
        assert!(
            spill_large_results(&mut traces, 0).is_empty(),
            "0 turns the cap off"
        );
    }
}
