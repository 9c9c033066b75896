//! Memory blocks and scopes between the wire and the engine.

use engram_core::blocks::{Block, Change, Edit, Format, Put, Shown};
use engram_engine::{BlockWrite, EngineError, ScopeRequest};
use engram_proto::pb;

fn invalid(message: &str) -> EngineError {
    EngineError::invalid(message)
}

/// The scope a request names: exactly one of agent, user, global.
pub fn scope_from_pb(scope: Option<pb::MemoryScope>) -> Result<ScopeRequest, EngineError> {
    use pb::memory_scope::Scope as S;
    match scope.and_then(|s| s.scope) {
        Some(S::AgentId(a)) => Ok(ScopeRequest::Agent(a)),
        Some(S::UserId(u)) => Ok(ScopeRequest::User(u)),
        Some(S::Global(true)) => Ok(ScopeRequest::Global),
        Some(S::Global(false)) | None => Err(invalid(
            "scope is missing: set exactly one of scope.agent_id, scope.user_id or scope.global = true",
        )),
    }
}

fn format_from_pb(format: i32) -> Result<Option<Format>, EngineError> {
    match pb::BlockFormat::try_from(format) {
        Ok(pb::BlockFormat::Unspecified) => Ok(None),
        Ok(pb::BlockFormat::Text) => Ok(Some(Format::Text)),
        Ok(pb::BlockFormat::Json) => Ok(Some(Format::Json)),
        Err(_) => Err(invalid(&format!(
            "format {format} is not a BlockFormat; use BLOCK_FORMAT_TEXT or BLOCK_FORMAT_JSON"
        ))),
    }
}

pub fn block_to_pb(b: Block) -> pb::MemoryBlock {
    pb::MemoryBlock {
        label: b.label,
        value: b.value,
        format: match b.format {
            Format::Text => pb::BlockFormat::Text,
            Format::Json => pb::BlockFormat::Json,
        } as i32,
        description: b.description,
        limit_chars: b.limit_chars,
        read_only: b.read_only,
        version: b.version,
        updated_at: b.updated_at,
        deleted: b.deleted,
    }
}

pub fn shown_to_pb(s: Shown) -> pb::ShownBlock {
    pb::ShownBlock {
        scope: s.scope.to_owned(),
        label: s.label,
        version: s.version,
        cut: s.cut,
    }
}

pub fn put_from_pb(req: pb::PutMemoryBlockRequest) -> Result<BlockWrite, EngineError> {
    Ok(BlockWrite {
        scope: scope_from_pb(req.scope)?,
        change: Change::Put(Put {
            value: req.value,
            format: format_from_pb(req.format)?,
            description: req.description,
            limit_chars: Some(req.limit_chars).filter(|&n| n > 0),
            read_only: req.read_only,
        }),
        label: req.label,
        expected_version: req.expected_version,
        user_id: Some(req.user_id),
    })
}

pub fn edit_from_pb(req: pb::EditMemoryBlockRequest) -> Result<BlockWrite, EngineError> {
    use pb::block_edit::Edit as E;
    let edit = match req.edit.and_then(|e| e.edit) {
        Some(E::Append(text)) => Edit::Append(text),
        Some(E::Replace(r)) => Edit::Replace {
            old: r.old,
            new: r.new,
        },
        Some(E::Insert(i)) => Edit::Insert {
            line: i.line,
            text: i.text,
        },
        Some(E::JsonMergePatch(patch)) => Edit::MergePatch(patch),
        None => {
            return Err(invalid(
                "edit is missing: set one of append, replace, insert or json_merge_patch",
            ));
        }
    };
    Ok(BlockWrite {
        scope: scope_from_pb(req.scope)?,
        label: req.label,
        change: Change::Edit(edit),
        expected_version: req.expected_version,
        user_id: Some(req.user_id),
    })
}

pub fn delete_from_pb(req: pb::DeleteMemoryBlockRequest) -> Result<BlockWrite, EngineError> {
    Ok(BlockWrite {
        scope: scope_from_pb(req.scope)?,
        label: req.label,
        change: Change::Delete,
        expected_version: req.expected_version,
        user_id: None,
    })
}
