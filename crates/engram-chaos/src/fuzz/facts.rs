//! Requests of the managed-fact RPCs (and ForgetTurn, ForgetEvents,
//! ExportMemory, ImportMemory): agent scopes mostly (the agents the other
//! calls use), a user's or the global scope sometimes (refused by
//! name), texts, tags and metadata of every kind, expiries past, future
//! and absurd, and ids that are real-looking, empty or hostile.

use engram_proto::pb;
use prost::Message;
use rand::Rng;

use crate::hostile::Gen;

fn scope(g: &mut Gen) -> Option<pb::MemoryScope> {
    use pb::memory_scope::Scope;
    Some(pb::MemoryScope {
        scope: match g.rng.random_range(0..8) {
            0 => Some(Scope::Global(true)),
            1 => Some(Scope::UserId(g.user_id())),
            2 => None,
            _ => Some(Scope::AgentId(g.agent_id())),
        },
    })
}

fn id(g: &mut Gen) -> String {
    if g.wild {
        g.unicode(0..200)
    } else {
        format!(
            "0190{:04x}-0000-7000-8000-{:012x}",
            g.u32() % 0x1_0000,
            g.u32()
        )
    }
}

/// A time (expiry, valid_from, as_of): epoch seconds, or wild ones.
fn expires_at(g: &mut Gen) -> Option<f64> {
    match g.rng.random_range(0..6) {
        0 => Some(1.0),
        1 => Some(4.0e9),
        2 if g.wild => Some([f64::NAN, f64::INFINITY, -1.0, 0.0][g.rng.random_range(0..4)]),
        _ => None,
    }
}

fn tags(g: &mut Gen) -> Vec<String> {
    (0..g.rng.random_range(0..4))
        .map(|_| g.unicode(0..20))
        .collect()
}

fn metadata(g: &mut Gen) -> std::collections::HashMap<String, String> {
    (0..g.rng.random_range(0..3))
        .map(|_| (g.unicode(0..20), g.unicode(0..40)))
        .collect()
}

/// A turn id: mostly one the fuzzed agents have, else anything.
fn turn_id(g: &mut Gen) -> String {
    if g.wild {
        g.unicode(0..30)
    } else {
        format!("turn_{:04}", g.u32() % 12)
    }
}

/// A bundle for ImportMemory: mostly one that reads (one of the fuzzed
/// agents, with a trace, a fact and a block; a user's with that user),
/// with a line cut, repeated or made wild now and then.
fn bundle(g: &mut Gen) -> Vec<u8> {
    let agent = g.agent_id();
    let user = g.user_id();
    let own = g.rng.random_bool(0.5);
    let scope = if own {
        format!(r#""user":{}"#, json_str(&user))
    } else {
        format!(r#""agent":{}"#, json_str(&agent))
    };
    let bound = if own {
        format!(r#""user_id":{},"#, json_str(&user))
    } else {
        String::new()
    };
    let a = json_str(&agent);
    let text = json_str(&g.text());
    let mut lines = vec![
        format!(r#"{{"engram_bundle":1,{scope},"exported_at":1.5}}"#),
        format!(r#"{{"agent_id":{a},"agent":{{{bound}"epoch":0}}}}"#),
        format!(
            r#"{{"agent_id":{a},"trace":{{"id":"t1","ts":1.0,"turn_id":"turn_0001","seq":0,"trace_type":"user","content":{text}}}}}"#
        ),
        format!(r#"{{"agent_id":{a},"fact":{{"id":"f1","ts":2.0,"fact":{text}}}}}"#),
        format!(
            r#"{{"agent_id":{a},"block":{{"label":"human","value":{text},"limit_chars":5000,"version":1,"updated_at":3.0}}}}"#
        ),
    ];
    if own {
        lines.push(format!(
            r#"{{"user_id":{},"user_fact":{{"id":"u1","ts":2.0,"fact":{text}}}}}"#,
            json_str(&user)
        ));
    }
    if g.wild {
        match g.rng.random_range(0..4) {
            0 => {
                let at = g.rng.random_range(0..lines.len());
                lines[at] = g.unicode(0..200);
            }
            1 => {
                let at = g.rng.random_range(0..lines.len());
                let line = lines[at].clone();
                lines.insert(at, line);
            }
            2 => {
                let at = g.rng.random_range(0..lines.len());
                lines.truncate(at);
            }
            _ => {}
        }
    }
    let n = lines.len();
    lines.push(format!(r#"{{"end":{{"lines":{n}}}}}"#));
    (lines.join("\n") + "\n").into_bytes()
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

pub(super) fn request(g: &mut Gen, method: &str) -> Vec<u8> {
    let scope = scope(g);
    match method {
        "ForgetTurn" => pb::ForgetTurnRequest {
            agent_id: g.agent_id(),
            turn_id: turn_id(g),
        }
        .encode_to_vec(),
        "ForgetEvents" => pb::ForgetEventsRequest {
            agent_id: g.agent_id(),
            ids: (0..g.rng.random_range(0..4)).map(|_| id(g)).collect(),
        }
        .encode_to_vec(),
        "ExportMemory" => pb::ExportMemoryRequest { scope }.encode_to_vec(),
        "ImportMemory" => pb::ImportMemoryRequest {
            lines: bundle(g),
            replace: g.rng.random_bool(0.3),
        }
        .encode_to_vec(),
        "AddMemories" => pb::AddMemoriesRequest {
            scope,
            memories: (0..g.rng.random_range(0..6))
                .map(|_| pb::NewMemory {
                    text: g.text(),
                    tags: tags(g),
                    pinned: g.rng.random_bool(0.2),
                    expires_at: expires_at(g),
                    metadata: metadata(g),
                    valid_from: expires_at(g),
                })
                .collect(),
        }
        .encode_to_vec(),
        "ListMemories" => pb::ListMemoriesRequest {
            scope,
            query: g.unicode(0..30),
            tags: tags(g),
            include_superseded: g.rng.random_bool(0.5),
            include_expired: g.rng.random_bool(0.5),
            page_size: g.u32() % 2000,
            page_token: if g.rng.random_bool(0.8) {
                String::new()
            } else {
                g.unicode(0..20)
            },
            source_agent_id: if g.rng.random_bool(0.8) {
                String::new()
            } else {
                g.unicode(0..20)
            },
            as_of: expires_at(g),
        }
        .encode_to_vec(),
        "GetMemory" => pb::GetMemoryRequest { scope, id: id(g) }.encode_to_vec(),
        "GetMemoryHistory" => pb::GetMemoryHistoryRequest { scope, id: id(g) }.encode_to_vec(),
        "UpdateMemory" => pb::UpdateMemoryRequest {
            scope,
            id: id(g),
            text: g.rng.random_bool(0.5).then(|| g.text()),
            tags: g
                .rng
                .random_bool(0.3)
                .then(|| pb::StringList { values: tags(g) }),
            pinned: g.rng.random_bool(0.3).then(|| g.rng.random_bool(0.5)),
            expires_at: expires_at(g),
            metadata: g.rng.random_bool(0.3).then(|| pb::Metadata {
                entries: metadata(g),
            }),
            expected_version: u64::from(g.u32() % 4),
            valid_from: expires_at(g),
        }
        .encode_to_vec(),
        _ => pb::DeleteMemoryRequest {
            scope,
            id: id(g),
            expected_version: u64::from(g.u32() % 4),
        }
        .encode_to_vec(),
    }
}
