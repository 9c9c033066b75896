//! The delete storm: valid reads and writes of a few agents while a
//! client deletes them, and the agents ListAgents shows without files.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use engram_proto::pb;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Caller, FuzzConfig, STORM_AGENTS};
use crate::daemon::Client;

/// Words of the storm's messages and queries, so that searches match.
const WORDS: [&str; 12] = [
    "plan", "trip", "okapi", "budget", "garden", "meeting", "report", "river", "lisbon", "puppy",
    "invoice", "deadline",
];

fn sentence(rng: &mut StdRng) -> String {
    let n = rng.random_range(3..9);
    let words: Vec<&str> = (0..n)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect();
    words.join(" ")
}

fn message(kind: pb::TraceType, content: String) -> pb::TraceEvent {
    pb::TraceEvent {
        trace_type: kind.into(),
        content,
        ..Default::default()
    }
}

/// The storm's one user, named by half the requests that may name one:
/// its agents are bound to it as they are made, and erased with it.
const STORM_USER: &str = "storm-user";

fn storm_user(rng: &mut StdRng) -> String {
    if rng.random_bool(0.5) {
        STORM_USER.into()
    } else {
        String::new()
    }
}

/// One valid call of the storm on `agent`: a write (Ingest, PrepareRequest
/// with recall, Compact), or a read that goes through the agent's search
/// index (ranked SearchHistory, Retrieve with a query, GetContextStats) or
/// its files.
fn storm_request(rng: &mut StdRng, agent: &str) -> (&'static str, Vec<u8>) {
    let agent_id = agent.to_owned();
    let wait_for_index_ms = if rng.random_bool(0.2) {
        rng.random_range(1..30)
    } else {
        0
    };
    match rng.random_range(0..100) {
        0..30 => {
            let events = vec![
                message(pb::TraceType::User, sentence(rng)),
                message(pb::TraceType::Assistant, sentence(rng)),
            ];
            let request = pb::IngestRequest {
                agent_id,
                events,
                user_id: storm_user(rng),
                ..Default::default()
            };
            ("Ingest", request.encode_to_vec())
        }
        30..50 => {
            let request = pb::SearchHistoryRequest {
                agent_id,
                query: sentence(rng),
                limit: rng.random_range(1..10),
                mode: pb::SearchMode::Ranked.into(),
                context_messages: rng.random_range(0..3),
                wait_for_index_ms,
                ..Default::default()
            };
            ("SearchHistory", request.encode_to_vec())
        }
        50..55 => {
            let request = pb::SearchHistoryRequest {
                agent_id,
                query: WORDS[rng.random_range(0..WORDS.len())].into(),
                limit: 5,
                mode: pb::SearchMode::MatchAllWords.into(),
                ..Default::default()
            };
            ("SearchHistory", request.encode_to_vec())
        }
        55..70 => {
            let request = pb::GetContextStatsRequest {
                agent_id,
                ..Default::default()
            };
            ("GetContextStats", request.encode_to_vec())
        }
        70..85 => {
            let request = pb::RetrieveRequest {
                agent_id,
                query: sentence(rng),
                max_recalled: Some(rng.random_range(1..8)),
                context_messages: rng.random_range(0..3),
                wait_for_index_ms,
                ..Default::default()
            };
            ("Retrieve", request.encode_to_vec())
        }
        85..94 => {
            let request = pb::PrepareRequestRequest {
                agent_id,
                user_input: Some(message(pb::TraceType::User, sentence(rng))),
                model: "gpt-4o".into(),
                render_format: pb::RenderFormat::OpenaiChat.into(),
                recall: Some(true),
                user_id: storm_user(rng),
                ..Default::default()
            };
            ("PrepareRequest", request.encode_to_vec())
        }
        94..97 => {
            let request = pb::CompactRequest {
                agent_id,
                ..Default::default()
            };
            ("Compact", request.encode_to_vec())
        }
        _ => {
            let request = pb::ListAgentsRequest {
                user_id: storm_user(rng),
                ..Default::default()
            };
            ("ListAgents", request.encode_to_vec())
        }
    }
}

/// The delete storm: as many rounds as there are hostile cases, of valid
/// writes and reads on [`STORM_AGENTS`] by `config.concurrency` clients,
/// while one more deletes those agents as fast as it can (a pause of at
/// most a few milliseconds between deletes).
pub(super) async fn delete_storm(config: &FuzzConfig, caller: &Caller) -> anyhow::Result<()> {
    let done = Arc::new(AtomicBool::new(false));
    let deleter = {
        let (caller, done) = (caller.clone(), Arc::clone(&done));
        let mut rng = StdRng::seed_from_u64(config.seed ^ 0x5707_de1e);
        let seed = config.seed;
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let agent = STORM_AGENTS[rng.random_range(0..STORM_AGENTS.len())];
                if rng.random_bool(0.2) {
                    let body = pb::DeleteUserRequest {
                        user_id: STORM_USER.into(),
                    }
                    .encode_to_vec();
                    let what = format!("seed {seed} storm: DeleteUser {STORM_USER}");
                    caller.call("DeleteUser", body, what).await;
                } else {
                    let body = pb::DeleteAgentRequest {
                        agent_id: agent.into(),
                    }
                    .encode_to_vec();
                    let what = format!("seed {seed} storm: DeleteAgent {agent}");
                    caller.call("DeleteAgent", body, what).await;
                }
                caller.tally.lock().expect("tally").report.storm.deletes += 1;
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..4))).await;
            }
        })
    };
    let clients = config.concurrency.max(1);
    let mut workers = vec![];
    for w in 0..clients {
        let caller = caller.clone();
        let (seed, rounds) = (config.seed, config.cases);
        workers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x5707_5707_5707) ^ w as u64);
            for round in (w..rounds).step_by(clients) {
                let agent = STORM_AGENTS[rng.random_range(0..STORM_AGENTS.len())];
                let (method, body) = storm_request(&mut rng, agent);
                let what = format!("seed {seed} storm round {round}: {method} {agent}");
                caller.call(method, body, what).await;
                caller.tally.lock().expect("tally").report.storm.rounds += 1;
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    done.store(true, Ordering::SeqCst);
    deleter.await?;
    Ok(())
}

/// The storm's agents that ListAgents shows without their files: not
/// found, or found with every file empty. What a delete left, or a late
/// write to the index brought back.
pub(super) async fn ghosts(c: &mut Client) -> anyhow::Result<Vec<String>> {
    let mut listed = vec![];
    let mut page_token = String::new();
    loop {
        let page = c
            .list_agents(pb::ListAgentsRequest {
                page_size: 1000,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        listed.extend(page.agent_ids);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    let mut ghosts = vec![];
    for id in listed
        .into_iter()
        .filter(|id| STORM_AGENTS.contains(&id.as_str()))
    {
        let stats = c
            .get_context_stats(pb::GetContextStatsRequest {
                agent_id: id.clone(),
                ..Default::default()
            })
            .await;
        match stats {
            Err(status) if status.code() == tonic::Code::NotFound => ghosts.push(id),
            Err(status) => anyhow::bail!("GetContextStats {id} after the storm: {status:?}"),
            // Every write of the storm stores words: an agent whose files
            // are all empty is a directory that a late write of its index
            // brought back (and its first read then took for an agent).
            Ok(stats) if stats.get_ref().files.iter().all(|f| f.bytes == 0) => ghosts.push(id),
            Ok(_) => {}
        }
    }
    Ok(ghosts)
}
