//! Memory in the prompt, as an agent gets it: each conversation ingested
//! into an agent whose model has an 8,192-token window (1,024 of it for the
//! answer), with a PrepareRequest every ten messages so that compaction
//! (the embedded summarizer) keeps it inside the window; then each question
//! is asked as the next user message, with recall on (and, for the
//! baseline, off: the snapshot and the recent turns alone). A question counts
//! when the text of its evidence messages appears in the prompt, verbatim
//! (whitespace aside): in the recalled block, the snapshot or the active
//! transcript. Retrieve(query) is asked on the same compacted agents.
//!
//! How the questions follow the conversation ([`Pace`]) is what an agent
//! meets: back to back (a fast loop, or an agent that imports history and
//! asks at once: nothing waits for the index), paced (an LLM call's time
//! between turns), or after Retrieve has waited for the index to catch up
//! (the kindest case, which earlier runs measured alone).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use engram_core::text::fold_whitespace;
use engram_proto::pb;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use tonic::transport::Channel;

use super::locomo::{CATEGORIES, Conversation, Question, Score};
use crate::server::{Server, connect};

/// The model the agents are prepared for, and its window.
pub(super) const MODEL: &str = "locomo-8k";
pub(super) const WINDOW: &str =
    "[budget.models.\"locomo-8k\"]\ncontext_tokens = 8192\nmax_output_tokens = 1024\n";

/// Share of questions with all / any of their evidence in the prompt, by
/// category.
#[derive(Debug, Default)]
pub struct Shares {
    by_category: BTreeMap<u8, (usize, usize, usize)>,
    /// Prompts that carried a recall block, and its tokens in all.
    pub with_block: usize,
    pub block_tokens: u64,
    pub compactions: u32,
}

impl Shares {
    pub(super) fn add(&mut self, q: &Question, found: usize) {
        let e = self.by_category.entry(q.category).or_default();
        e.0 += 1;
        e.1 += usize::from(found == q.evidence.len());
        e.2 += usize::from(found > 0);
    }

    pub fn questions(&self) -> usize {
        self.by_category.values().map(|e| e.0).sum()
    }

    pub fn table(&self, name: &str) -> String {
        let mut out = String::new();
        for (cat, label) in CATEGORIES {
            let (mut n, mut all, mut any) = (0, 0, 0);
            for (c, e) in &self.by_category {
                if cat.is_none_or(|want| want == *c) {
                    n += e.0;
                    all += e.1;
                    any += e.2;
                }
            }
            let n = n.max(1) as f64;
            writeln!(
                out,
                "| {name} | {label} | {:.3} / {:.3} |",
                all as f64 / n,
                any as f64 / n
            )
            .ok();
        }
        out
    }
}

/// How the questions come after the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Each question right after the last message and the one before it.
    BackToBack,
    /// A pause after the conversation, and one between questions: an
    /// agent whose every turn waits for its model.
    Paced {
        after: std::time::Duration,
        between: std::time::Duration,
    },
    /// Before each question, Retrieve(question) waits for the index to
    /// take in everything (and its ranking is scored).
    Waited,
}

impl Pace {
    pub fn label(self) -> String {
        match self {
            Pace::BackToBack => "back to back".into(),
            Pace::Paced { after, between } => format!(
                "paced ({} s after, {} ms between)",
                after.as_secs_f64(),
                between.as_millis()
            ),
            Pace::Waited => "after the index (Retrieve waits)".into(),
        }
    }
}

/// The prompt's evidence with recall on or off, the questions coming as
/// `pace` says, on the store `store` configures ("": files under `data`);
/// when waited, Retrieve's ranking on the same agents too.
pub async fn run(
    (engramd, data, store): (&Path, &Path, &str),
    convs: &[Conversation],
    recall: bool,
    pace: Pace,
) -> anyhow::Result<(Shares, Score)> {
    let server = Server::start_with(engramd, data, &format!("{store}{WINDOW}"))?;
    let mut client = connect(&server.addr).await?;
    let mut shares = Shares::default();
    let mut retrieve = Score::default();
    let prepare = |agent: &str, user_input: Option<pb::TraceEvent>| pb::PrepareRequestRequest {
        agent_id: agent.into(),
        system_prompt: "You are a helpful assistant with a long memory.".into(),
        user_input,
        model: MODEL.into(),
        ..Default::default()
    };
    for (n, conv) in convs.iter().enumerate() {
        let agent = format!("prompt-{n}");
        for (i, m) in conv.messages.iter().enumerate() {
            client.ingest(super::grpc::said(&agent, m)).await?;
            if i % 10 == 9 {
                let p = client
                    .prepare_request(prepare(&agent, None))
                    .await?
                    .into_inner();
                shares.compactions += u32::from(p.compaction.is_some_and(|c| c.performed));
            }
        }
        if let Pace::Paced { after, .. } = pace {
            tokio::time::sleep(after).await;
        }
        let text: HashMap<&str, String> = conv
            .messages
            .iter()
            .map(|m| (m.dia_id.as_str(), fold_whitespace(&m.text)))
            .collect();
        for (k, q) in conv.questions.iter().enumerate() {
            match pace {
                // Ranked first: asking the question adds it to the agent.
                Pace::Waited if recall => {
                    retrieve.add(q, &retrieved(&mut client, &agent, q).await?);
                }
                Pace::Paced { between, .. } if k > 0 => tokio::time::sleep(between).await,
                _ => {}
            }
            let question = pb::TraceEvent {
                trace_type: pb::TraceType::User.into(),
                content: q.question.clone(),
                ..Default::default()
            };
            let p = client
                .prepare_request(pb::PrepareRequestRequest {
                    recall: Some(recall),
                    ..prepare(&agent, Some(question))
                })
                .await?
                .into_inner();
            shares.compactions += u32::from(p.compaction.as_ref().is_some_and(|c| c.performed));
            if !p.recalled.is_empty() {
                shares.with_block += 1;
                let block = p
                    .messages
                    .last()
                    .and_then(|m| m.content.split_once("[MEMORY:RECALLED]"))
                    .map_or(0, |(_, b)| b.len() as u64);
                // Bytes / 4: a rough token count, for the report only.
                shares.block_tokens += block / 4;
            }
            shares.add(q, evidence_in(&p, q, &text));
        }
    }
    Ok((shares, retrieve))
}

/// The event ids of the traces Retrieve(query) ranks, best first.
async fn retrieved(
    client: &mut MemoryServiceClient<Channel>,
    agent: &str,
    q: &Question,
) -> anyhow::Result<Vec<String>> {
    let out = client
        .retrieve(pb::RetrieveRequest {
            agent_id: agent.into(),
            query: q.question.clone(),
            max_recalled: Some(25),
            wait_for_index_ms: 60_000,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(out
        .recalled
        .into_iter()
        .filter_map(|m| m.trace.map(|t| t.event_id))
        .collect())
}

/// How many of `q`'s evidence messages (`text`: by dia id, whitespace
/// folded) the prompt holds verbatim.
pub(super) fn evidence_in(
    p: &pb::PrepareRequestResponse,
    q: &Question,
    text: &HashMap<&str, String>,
) -> usize {
    let prompt = fold_whitespace(
        &p.messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    );
    q.evidence
        .iter()
        .filter(|e| {
            text.get(e.as_str())
                .is_some_and(|t| prompt.contains(t.as_str()))
        })
        .count()
}
