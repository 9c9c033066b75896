//! The summarizer's decisions about known facts, counted (DESIGN §15).

/// What a summarizer decided about known facts, by handle (DESIGN §15):
/// updates, invalidations, and handles that named no fact it was shown.
pub(super) fn count(summary: &engram_core::compaction::Summary) {
    let decided = |kind: &'static str, n: usize| {
        if n > 0 {
            metrics::counter!("engram_fact_decisions_total", "kind" => kind).increment(n as u64);
        }
    };
    decided("update", summary.updates.len());
    decided("invalidate", summary.invalidates.len());
    decided("unknown_handle", summary.unknown_handles as usize);
    if summary.unknown_handles > 0 {
        tracing::debug!(
            unknown = summary.unknown_handles,
            "the summarizer named facts it was not shown; ignored"
        );
    }
}
