//! An agent's compaction log: what each compaction did, kept after its
//! report was answered, so that an operator can ask afterwards when and why
//! an agent compacted and what it cost (the console's timeline, the
//! ListCompactions RPC).
//!
//! Compactions that changed the prompt and those that failed are logged;
//! those skipped (nothing to compact, another one running, paused) are
//! not: a due prompt meets them on every request and would fill the log
//! with nothing. A store keeps the last [`KEEP`] records of each agent.

use serde::{Deserialize, Serialize};

use super::report::{CompactionError, CompactionReport};
use super::trigger::Tier;

/// The records a store keeps per agent; older ones go.
pub const KEEP: usize = 500;

/// One compaction as the log keeps it: its report's numbers, as strings
/// where the report has enums (the log outlives the names' code), with
/// when it ended and how long it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionRecord {
    /// Increases with each record of the agent; the store assigns it.
    pub seq: u64,
    /// When the compaction ended (Unix seconds).
    pub at: f64,
    /// From its start (or from taking a summary written ahead) to its end.
    pub duration_secs: f64,
    /// `summarized`, `trimmed`, `microcompacted`, `snipped` or `failed`.
    pub outcome: String,
    /// What asked for it (`Trigger::as_str`).
    pub trigger: String,
    /// The strategy it followed (`Strategy::as_str`; empty in records
    /// written before strategies existed, which summarized).
    #[serde(default)]
    pub strategy: String,
    /// The tiers that ran, cheapest first.
    #[serde(default)]
    pub steps: Vec<String>,
    /// The summarized turns, oldest first.
    #[serde(default)]
    pub turn_ids: Vec<String>,
    /// The summary it wrote; empty for none.
    #[serde(default)]
    pub episodic_id: String,
    #[serde(default)]
    pub semantic_added: u32,
    #[serde(default)]
    pub semantic_updated: u32,
    #[serde(default)]
    pub traces_pruned: u32,
    #[serde(default)]
    pub carried: u32,
    #[serde(default)]
    pub carry_dropped: u32,
    /// The transcript's tokens before and after, counted for the agent's
    /// model.
    pub tokens_before: u32,
    pub tokens_after: u32,
    /// Why it failed or stopped short; empty when it did not.
    #[serde(default)]
    pub error: String,
    /// The summary was written in the background before the trigger.
    #[serde(default)]
    pub prepared_in_background: bool,
    /// Who wrote the summary (the summarizer's name); empty when no
    /// summary was asked for.
    #[serde(default)]
    pub summarizer: String,
}

impl CompactionRecord {
    /// The record of `report`, or `None` for a compaction that was
    /// skipped (see the module's notes). `seq` is left for the store.
    pub fn of(
        report: &CompactionReport,
        at: f64,
        duration_secs: f64,
        summarizer: &str,
    ) -> Option<Self> {
        let microcompacted = report.steps.contains(&Tier::Microcompact);
        let snipped = report.steps.contains(&Tier::Snip);
        let outcome = match report.outcome() {
            // Old tool results were hidden (or old messages snipped)
            // before the summary found nothing to do: the prompt did
            // change.
            "skipped" if microcompacted => "microcompacted",
            "skipped" if snipped => "snipped",
            "skipped" => return None,
            // The endpoint's circuit is open: every due prompt meets it at
            // once until it closes (the metrics and /health say so).
            _ if matches!(
                report.error,
                Some(CompactionError::Summarizer { tried: false, .. })
            ) =>
            {
                return None;
            }
            outcome => outcome,
        };
        let summarized = report.steps.contains(&Tier::Summarize);
        Some(Self {
            seq: 0,
            at,
            duration_secs,
            outcome: outcome.to_owned(),
            trigger: report.trigger.as_str().to_owned(),
            strategy: report.strategy.as_str().to_owned(),
            steps: report.steps.iter().map(|t| t.as_str().to_owned()).collect(),
            turn_ids: report.turn_ids.clone(),
            episodic_id: report.episodic_id.clone(),
            semantic_added: report.semantic_added,
            semantic_updated: report.semantic_updated,
            carried: report.carried,
            carry_dropped: report.carry_dropped,
            traces_pruned: report.traces_pruned,
            tokens_before: report.tokens_before,
            tokens_after: report.tokens_after,
            error: report
                .error
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            prepared_in_background: report.prepared_ago.is_some(),
            summarizer: if summarized {
                summarizer.to_owned()
            } else {
                String::new()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::Trigger;

    #[test]
    fn skipped_compactions_are_not_logged_and_the_others_keep_their_numbers() {
        let skipped = CompactionReport::new(Trigger::Estimate, 900)
            .failed(CompactionError::NothingToCompact { raw_tail_turns: 4 });
        assert_eq!(CompactionRecord::of(&skipped, 1.0, 0.1, "embedded"), None);
        let busy = CompactionReport::new(Trigger::Estimate, 900).failed(CompactionError::Busy);
        assert_eq!(CompactionRecord::of(&busy, 1.0, 0.1, "embedded"), None);
        let mut hidden = CompactionReport::new(Trigger::Estimate, 900)
            .failed(CompactionError::NothingToCompact { raw_tail_turns: 4 });
        hidden.steps = vec![Tier::Microcompact];
        hidden.tokens_after = 700;
        let r = CompactionRecord::of(&hidden, 1.0, 0.1, "embedded").unwrap();
        assert_eq!(
            (r.outcome.as_str(), r.tokens_after),
            ("microcompacted", 700)
        );
        assert!(r.error.contains("nothing to compact"), "{}", r.error);

        let mut done = CompactionReport::new(Trigger::TokenPressure, 900);
        done.steps = vec![Tier::Microcompact, Tier::Summarize];
        done.performed = true;
        done.turn_ids = vec!["turn_0001".into(), "turn_0002".into()];
        done.episodic_id = "ep_1".into();
        done.tokens_after = 300;
        let r = CompactionRecord::of(&done, 5.0, 1.5, "embedded").unwrap();
        assert_eq!(r.outcome, "summarized");
        assert_eq!(r.trigger, "token_pressure");
        assert_eq!(r.steps, ["microcompact", "summarize"]);
        assert_eq!((r.tokens_before, r.tokens_after), (900, 300));
        assert_eq!(r.summarizer, "embedded");
        assert_eq!(r.error, "");

        let failed =
            CompactionReport::new(Trigger::Manual, 900).failed(CompactionError::Summarizer {
                message: "the summarizer timed out".into(),
                consecutive_failures: 2,
                tried: true,
            });
        let r = CompactionRecord::of(&failed, 5.0, 1.5, "http").unwrap();
        assert_eq!(r.outcome, "failed");
        assert!(r.error.contains("timed out"), "{}", r.error);
        // No summary step ran as far as the report knows: nobody to name.
        assert_eq!(r.summarizer, "");

        let open =
            CompactionReport::new(Trigger::Estimate, 900).failed(CompactionError::Summarizer {
                message: "circuit open".into(),
                consecutive_failures: 0,
                tried: false,
            });
        assert_eq!(CompactionRecord::of(&open, 5.0, 0.0, "http"), None);

        // A line of an older or newer writer: what it lacks is defaulted.
        let line = r#"{"seq":3,"at":1.0,"duration_secs":0.5,"outcome":"microcompacted","trigger":"estimate","tokens_before":10,"tokens_after":5}"#;
        let r: CompactionRecord = serde_json::from_str(line).unwrap();
        assert_eq!((r.seq, r.tokens_after), (3, 5));
    }
}
