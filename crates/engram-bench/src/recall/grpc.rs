//! The benchmark through the real server: each conversation ingested as
//! one agent (speaker A as `user`, B as `assistant`, each speaker's name,
//! the session's date as the event time, the dia id as `event_id`), each
//! question asked of SearchHistory; the event ids of the matches are the
//! ranking.

use std::path::Path;
use std::time::Instant;

use hdrhistogram::Histogram;

use engram_proto::pb;

use super::locomo::{Conversation, Message, Score};
use crate::server::{Server, connect};

/// `m` as the benchmark ingests it: speaker A as the user, with the
/// speaker's name, the session's date and the dia id as `event_id`.
pub fn said(agent: &str, m: &Message) -> pb::IngestRequest {
    let trace_type = if m.is_a {
        pb::TraceType::User
    } else {
        pb::TraceType::Assistant
    };
    pb::IngestRequest {
        agent_id: agent.into(),
        events: vec![pb::TraceEvent {
            trace_type: trace_type.into(),
            content: m.text.clone(),
            event_id: m.dia_id.clone(),
            ts: Some(m.ts),
            name: m.speaker.clone(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Evidence recall of ranked SearchHistory over `convs`, by an engramd
/// with `extra` configuration, and the latency of its searches: each
/// question asked again once its conversation is embedded, timed (what a
/// ranking mechanism costs, on real conversations).
pub async fn search_history(
    engramd: &Path,
    data: &Path,
    convs: &[Conversation],
    extra: &str,
) -> anyhow::Result<(Score, Histogram<u64>)> {
    let server = Server::start_with(engramd, data, extra)?;
    let mut client = connect(&server.addr).await?;
    let mut score = Score::default();
    let mut timed = crate::ingest::histogram();
    // RECALL_DEPTH: how deep a miss's evidence is looked for (the scores
    // count the first 25 whatever it is).
    let depth = std::env::var("RECALL_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(25u32)
        .max(25);
    let mut dump = match std::env::var("RECALL_DUMP") {
        Ok(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        Err(_) => None,
    };
    for (n, conv) in convs.iter().enumerate() {
        let agent = format!("locomo-{n}");
        let ask = |question: &str, wait_for_index_ms: u32| pb::SearchHistoryRequest {
            agent_id: agent.clone(),
            query: question.to_owned(),
            limit: depth,
            wait_for_index_ms,
            ..Default::default()
        };
        for m in &conv.messages {
            client.ingest(said(&agent, m)).await?;
        }
        for q in &conv.questions {
            // Every message embedded before it is asked about.
            let page = client
                .search_history(ask(&q.question, 60_000))
                .await?
                .into_inner();
            if let Some(dump) = dump.as_mut() {
                use std::io::Write as _;
                for m in &page.matches {
                    if let Some(t) = &m.trace {
                        writeln!(
                            dump,
                            "{n}\t{}\t{}\t{}\t{}",
                            q.question, t.event_id, m.score, m.matched_by
                        )?;
                    }
                }
            }
            let ranked: Vec<String> = page
                .matches
                .into_iter()
                .filter_map(|m| m.trace.map(|t| t.event_id))
                .collect();
            super::locomo::print_miss("served", conv, q, &ranked);
            score.add(q, &ranked);
        }
        for q in &conv.questions {
            let started = Instant::now();
            client.search_history(ask(&q.question, 0)).await?;
            timed.record(started.elapsed().as_nanos() as u64)?;
        }
    }
    Ok((score, timed))
}

/// `label`'s search latency, p50 / p99 in milliseconds, as a line.
pub fn latency_line(label: &str, h: &Histogram<u64>) -> String {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e6;
    format!(
        "{label}: SearchHistory p50 {:.2} ms, p99 {:.2} ms ({} searches)\n",
        ms(0.5),
        ms(0.99),
        h.len()
    )
}
