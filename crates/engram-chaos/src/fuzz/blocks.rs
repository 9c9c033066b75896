//! Requests of the memory-block RPCs: agent scopes mostly (the agents the
//! other calls use), a user's or the global scope sometimes, labels valid
//! or not, values of every kind.

use engram_proto::pb;
use prost::Message;
use rand::Rng;

use crate::hostile::Gen;

/// A memory-block request: agent scopes mostly (the agents the other
/// calls use), labels valid or not, values of every kind.
pub(super) fn request(g: &mut Gen, method: &str) -> Vec<u8> {
    use pb::memory_scope::Scope;
    let scope = Some(pb::MemoryScope {
        scope: match g.rng.random_range(0..8) {
            0 => Some(Scope::Global(g.rng.random_bool(0.8))),
            1 => Some(Scope::UserId(g.agent_id())),
            2 => None,
            _ => Some(Scope::AgentId(g.agent_id())),
        },
    });
    let label = if g.wild {
        g.unicode(0..80)
    } else {
        ["working_memory", "human", "rules"][g.rng.random_range(0..3)].to_owned()
    };
    let expected_version = g.rng.random_bool(0.3).then(|| u64::from(g.u32() % 4));
    match method {
        "ListMemoryBlocks" => pb::ListMemoryBlocksRequest { scope }.encode_to_vec(),
        "GetMemoryBlock" => pb::GetMemoryBlockRequest {
            scope,
            label,
            include_history: g.rng.random_bool(0.5),
        }
        .encode_to_vec(),
        "PutMemoryBlock" => pb::PutMemoryBlockRequest {
            scope,
            label,
            value: g.text(),
            format: g.rng.random_range(0..4),
            description: g.rng.random_bool(0.5).then(|| g.unicode(0..60)),
            limit_chars: g.u32() % 10_000,
            read_only: None,
            expected_version,
            user_id: g.user_id(),
        }
        .encode_to_vec(),
        "EditMemoryBlock" => {
            use pb::block_edit::Edit;
            let edit = match g.rng.random_range(0..5) {
                0 => Some(Edit::Append(g.text())),
                1 => Some(Edit::Replace(pb::BlockReplace {
                    old: g.unicode(0..6),
                    new: g.text(),
                })),
                2 => Some(Edit::Insert(pb::BlockInsert {
                    line: g.u32() % 8,
                    text: g.text(),
                })),
                3 => Some(Edit::JsonMergePatch(g.text())),
                _ => None,
            };
            pb::EditMemoryBlockRequest {
                scope,
                label,
                edit: Some(pb::BlockEdit { edit }),
                expected_version,
                user_id: g.user_id(),
            }
            .encode_to_vec()
        }
        _ => pb::DeleteMemoryBlockRequest {
            scope,
            label,
            expected_version,
        }
        .encode_to_vec(),
    }
}
