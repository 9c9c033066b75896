//! Memory across conversations on LoCoMo: each session of a conversation
//! ingested as a conversation (agent) of its own, all of one user, through
//! the agent loop at an 8,192-token window (a PrepareRequest every ten
//! messages, compaction by the embedded summarizer); then each question is
//! the first message of a brand-new conversation of that user. A question
//! counts when the text of its evidence messages is in that first prompt
//! (the previous conversation's summary, the recall block).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use engram_core::text::fold_whitespace;
use engram_proto::pb;

use super::locomo::Conversation;
use super::prompt::{MODEL, Shares, WINDOW, evidence_in};
use crate::server::{Server, connect};

/// The session a LoCoMo dia id ("D3:12") belongs to.
fn session(dia_id: &str) -> &str {
    dia_id.split_once(':').map_or(dia_id, |(s, _)| s)
}

pub async fn run(engramd: &Path, data: &Path, convs: &[Conversation]) -> anyhow::Result<Shares> {
    let server = Server::start_with(engramd, data, WINDOW)?;
    let mut client = connect(&server.addr).await?;
    let mut shares = Shares::default();
    let prepare =
        |agent: &str, user: &str, input: Option<pb::TraceEvent>| pb::PrepareRequestRequest {
            agent_id: agent.into(),
            user_id: user.into(),
            system_prompt: "You are a helpful assistant with a long memory.".into(),
            user_input: input,
            model: MODEL.into(),
            ..Default::default()
        };
    for (n, conv) in convs.iter().enumerate() {
        let user = format!("locomo-{n}");
        // Sessions in the order they happened, each a conversation.
        let mut sessions: BTreeMap<(u64, &str), Vec<&super::locomo::Message>> = BTreeMap::new();
        for m in &conv.messages {
            sessions
                .entry((m.ts as u64, session(&m.dia_id)))
                .or_default()
                .push(m);
        }
        for ((_, s), messages) in &sessions {
            let agent = format!("{user}-{s}");
            for (i, m) in messages.iter().enumerate() {
                let mut said = super::grpc::said(&agent, m);
                said.user_id.clone_from(&user);
                client.ingest(said).await?;
                if i % 10 == 9 {
                    let p = client
                        .prepare_request(prepare(&agent, &user, None))
                        .await?
                        .into_inner();
                    shares.compactions += u32::from(p.compaction.is_some_and(|c| c.performed));
                }
            }
            // The conversation ends: summarized, as an idle one would be.
            client
                .compact(pb::CompactRequest {
                    agent_id: agent.clone(),
                    ..Default::default()
                })
                .await?;
        }
        let text: HashMap<&str, String> = conv
            .messages
            .iter()
            .map(|m| (m.dia_id.as_str(), fold_whitespace(&m.text)))
            .collect();
        for (j, q) in conv.questions.iter().enumerate() {
            let question = pb::TraceEvent {
                trace_type: pb::TraceType::User.into(),
                content: q.question.clone(),
                ..Default::default()
            };
            let agent = format!("{user}-q{j}");
            let p = client
                .prepare_request(prepare(&agent, &user, Some(question)))
                .await?
                .into_inner();
            if !p.recalled.is_empty() {
                shares.with_block += 1;
            }
            shares.add(q, evidence_in(&p, q, &text));
        }
    }
    Ok(shares)
}
