//! The block tools: a tool reads any block it may see, and writes only
//! blocks not marked `read_only` (the flag is for model-facing tools; the
//! RPCs write them all the same). The check and the write are one: the
//! write expects the version the check read, so a block made read-only in
//! between is never written by a tool.

use engram_proto::pb;
use tonic::Status;

use super::Memory;
use crate::api::Api;
use crate::auth::Caller;

pub async fn read(
    api: &Api,
    caller: &Caller,
    memory: &Memory,
    label: String,
) -> Result<pb::GetMemoryBlockResponse, Status> {
    let request = pb::GetMemoryBlockRequest {
        scope: Some(memory.scope()),
        label,
        include_history: false,
    };
    api.get_memory_block(caller, request).await
}

/// The block's current version, if it exists and a tool may write it.
async fn writable(
    api: &Api,
    caller: &Caller,
    memory: &Memory,
    label: &str,
) -> Result<Option<u64>, Status> {
    match read(api, caller, memory, label.to_owned()).await {
        Ok(found) => {
            let block = found.block.unwrap_or_default();
            if block.read_only {
                return Err(Status::failed_precondition(format!(
                    "block {label:?} is read-only for tools; the application changes it"
                )));
            }
            Ok(Some(block.version))
        }
        Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

/// Adds `text` on a line of its own at the end; a missing block is made
/// with `text` as its value.
pub async fn append(
    api: &Api,
    caller: &Caller,
    memory: &Memory,
    label: String,
    text: String,
) -> Result<pb::EditMemoryBlockResponse, Status> {
    match writable(api, caller, memory, &label).await? {
        Some(version) => {
            let edit = pb::block_edit::Edit::Append(text);
            write(api, caller, memory, label, edit, version).await
        }
        None => {
            let request = pb::PutMemoryBlockRequest {
                scope: Some(memory.scope()),
                label,
                value: text,
                // Made by nobody else meanwhile.
                expected_version: Some(0),
                ..Default::default()
            };
            let put = api.put_memory_block(caller, request).await?;
            Ok(pb::EditMemoryBlockResponse { block: put.block })
        }
    }
}

/// Applies `edit` to an existing block a tool may write.
pub async fn edit(
    api: &Api,
    caller: &Caller,
    memory: &Memory,
    label: String,
    edit: pb::block_edit::Edit,
) -> Result<pb::EditMemoryBlockResponse, Status> {
    match writable(api, caller, memory, &label).await? {
        Some(version) => write(api, caller, memory, label, edit, version).await,
        None => Err(Status::not_found(format!(
            "block {label:?} does not exist; append_memory_block creates it"
        ))),
    }
}

async fn write(
    api: &Api,
    caller: &Caller,
    memory: &Memory,
    label: String,
    edit: pb::block_edit::Edit,
    version: u64,
) -> Result<pb::EditMemoryBlockResponse, Status> {
    let request = pb::EditMemoryBlockRequest {
        scope: Some(memory.scope()),
        label,
        edit: Some(pb::BlockEdit { edit: Some(edit) }),
        expected_version: Some(version),
        user_id: String::new(),
    };
    api.edit_memory_block(caller, request).await
}
