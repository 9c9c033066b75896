//! Windows larger than the summarizer model's own context are summarized in
//! chunks of whole turns and the results merged, so a long window never
//! fails for being too big.

use engram_core::RawTrace;
use engram_core::tokens::{Encoding, count_text};

use crate::{Summarizer, Summary, SummaryFuture, SummaryRequest};
use engram_core::compaction::render_turns;

#[derive(Debug)]
pub struct Chunked<S> {
    inner: S,
    /// Tokens of turn text one call may carry.
    max_input_tokens: u32,
}

impl<S: Summarizer> Chunked<S> {
    /// `context_tokens` is the summarizer model's window; a chunk gets half
    /// of it, leaving room for instructions, known facts and the answer.
    pub fn new(inner: S, context_tokens: u32) -> Self {
        Self {
            inner,
            max_input_tokens: (context_tokens / 2).max(256),
        }
    }
}

/// Splits traces into runs of whole turns under `max` tokens each (a turn
/// larger than `max` is a chunk of its own).
pub fn chunks(traces: &[RawTrace], max: u32) -> Vec<&[RawTrace]> {
    let mut out = vec![];
    let mut start = 0;
    let mut size = 0u32;
    let mut i = 0;
    while i < traces.len() {
        let turn = &traces[i].turn_id;
        let end = traces[i..]
            .iter()
            .position(|t| t.turn_id != *turn)
            .map_or(traces.len(), |n| i + n);
        let tokens = count_text(Encoding::Cl100k, &render_turns(&traces[i..end]));
        if size > 0 && size + tokens > max {
            out.push(&traces[start..i]);
            start = i;
            size = 0;
        }
        size += tokens;
        i = end;
    }
    if start < traces.len() {
        out.push(&traces[start..]);
    }
    out
}

impl<S: Summarizer> Summarizer for Chunked<S> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn reconcile<'a>(
        &'a self,
        groups: &'a [Vec<engram_core::memory::SemanticItem>],
    ) -> Option<crate::ReconcileFuture<'a>> {
        self.inner.reconcile(groups)
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        Box::pin(async move {
            let parts = chunks(request.traces, self.max_input_tokens);
            if parts.len() <= 1 {
                return self.inner.summarize(request).await;
            }
            let mut merged = Summary {
                episodic_summary: String::new(),
                tags: vec![],
                salience: 0.0,
                semantic_facts: vec![],
                ..Default::default()
            };
            for (n, part) in parts.iter().enumerate() {
                let s = self
                    .inner
                    .summarize(SummaryRequest {
                        traces: part,
                        ..request
                    })
                    .await?;
                if n > 0 {
                    merged.episodic_summary.push('\n');
                }
                merged.episodic_summary.push_str(&s.episodic_summary);
                for tag in s.tags {
                    if !merged.tags.contains(&tag) {
                        merged.tags.push(tag);
                    }
                }
                merged.salience = merged.salience.max(s.salience);
                // Later chunks are newer: their facts come last and win.
                merged.semantic_facts.extend(s.semantic_facts);
                // Each chunk saw the same known facts, under the same
                // handles; one that decided by handle decides for all.
                merged.updates.extend(s.updates);
                merged.invalidates.extend(s.invalidates);
                merged.unknown_handles += s.unknown_handles;
                if n == 0 || s.replacing == engram_core::compaction::Replacing::Never {
                    merged.replacing = s.replacing;
                }
            }
            Ok(merged)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use engram_core::NewEvent;
    use engram_core::turns::assign_all;

    use super::*;
    use crate::{NewFact, SummarizeError};

    /// Records the turns of each call; answers with their ids.
    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<Vec<String>>>);

    impl Summarizer for &Recorder {
        fn name(&self) -> String {
            "recorder".into()
        }
        fn summarize<'a>(&'a self, r: SummaryRequest<'a>) -> SummaryFuture<'a> {
            let mut turns: Vec<String> = r.traces.iter().map(|t| t.turn_id.clone()).collect();
            turns.dedup();
            self.0.lock().unwrap().push(turns.clone());
            Box::pin(async move {
                Ok::<_, SummarizeError>(Summary {
                    episodic_summary: turns.join(","),
                    tags: vec!["t".into()],
                    salience: 0.5,
                    semantic_facts: vec![NewFact {
                        fact: format!("fact of {}", turns[0]),
                        tags: vec![],
                        confidence: 1.0,
                        salience: 0.5,
                    }],
                    ..Default::default()
                })
            })
        }
    }

    #[tokio::test]
    async fn big_windows_go_in_chunks_of_whole_turns() {
        let traces = assign_all((1..=6).flat_map(|t| {
            [
                NewEvent::user(format!("question {t} {}", "word ".repeat(150))),
                NewEvent::assistant("answer ".repeat(150)),
            ]
        }));
        let recorder = Recorder::default();
        let chunked = Chunked::new(&recorder, 1400);
        let s = chunked
            .summarize(SummaryRequest {
                traces: &traces,
                known_facts: &[],
                focus: None,
                working_memory: None,
            })
            .await
            .unwrap();
        let calls = recorder.0.lock().unwrap().clone();
        assert!(calls.len() > 1, "{calls:?}");
        let all: Vec<String> = calls.concat();
        assert_eq!(
            all,
            (1..=6).map(|t| format!("turn_{t:04}")).collect::<Vec<_>>(),
            "every turn once, in order"
        );
        assert_eq!(s.episodic_summary.lines().count(), calls.len());
        assert_eq!(s.semantic_facts.len(), calls.len());
        assert_eq!(s.tags, ["t"]);
        // Small windows are one call.
        let small = Recorder::default();
        Chunked::new(&small, 100_000)
            .summarize(SummaryRequest {
                traces: &traces,
                known_facts: &[],
                focus: None,
                working_memory: None,
            })
            .await
            .unwrap();
        assert_eq!(small.0.lock().unwrap().len(), 1);
    }
}
