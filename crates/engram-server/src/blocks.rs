//! The memory-block and user handlers of `MemoryService` (auth → convert →
//! engine → convert), behind the same request boundary as the others.

use engram_proto::pb;
use tonic::Status;

use crate::api::Api;
use crate::auth::{self, Access, Caller};
use crate::convert;
use crate::status::from_engine;

impl Api {
    pub async fn list_memory_blocks(
        &self,
        caller: &Caller,
        req: pb::ListMemoryBlocksRequest,
    ) -> Result<pb::ListMemoryBlocksResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, false)).await?;
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let blocks = self
            .engine()
            .list_blocks(&scope)
            .await
            .map_err(from_engine)?;
        self.fits(
            pb::ListMemoryBlocksResponse {
                blocks: blocks.into_iter().map(convert::block_to_pb).collect(),
            },
            "the blocks",
        )
    }

    pub async fn get_memory_block(
        &self,
        caller: &Caller,
        req: pb::GetMemoryBlockRequest,
    ) -> Result<pb::GetMemoryBlockResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, false)).await?;
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let (block, history) = self
            .engine()
            .get_block(&scope, &req.label, req.include_history)
            .await
            .map_err(from_engine)?;
        self.fits(
            pb::GetMemoryBlockResponse {
                block: Some(convert::block_to_pb(block)),
                history: history.into_iter().map(convert::block_to_pb).collect(),
            },
            "the block's history",
        )
    }

    pub async fn put_memory_block(
        &self,
        caller: &Caller,
        req: pb::PutMemoryBlockRequest,
    ) -> Result<pb::PutMemoryBlockResponse, Status> {
        let access = Access::Scope {
            scope: req.scope.as_ref(),
            binds: &req.user_id,
            write: true,
        };
        let _agent = auth::authorize(self.engine(), caller, access).await?;
        let write = convert::put_from_pb(req).map_err(from_engine)?;
        let block = self
            .engine()
            .write_block(write)
            .await
            .map_err(from_engine)?;
        Ok(pb::PutMemoryBlockResponse {
            block: Some(convert::block_to_pb(block)),
        })
    }

    pub async fn edit_memory_block(
        &self,
        caller: &Caller,
        req: pb::EditMemoryBlockRequest,
    ) -> Result<pb::EditMemoryBlockResponse, Status> {
        let access = Access::Scope {
            scope: req.scope.as_ref(),
            binds: &req.user_id,
            write: true,
        };
        let _agent = auth::authorize(self.engine(), caller, access).await?;
        let write = convert::edit_from_pb(req).map_err(from_engine)?;
        let block = self
            .engine()
            .write_block(write)
            .await
            .map_err(from_engine)?;
        Ok(pb::EditMemoryBlockResponse {
            block: Some(convert::block_to_pb(block)),
        })
    }

    pub async fn delete_memory_block(
        &self,
        caller: &Caller,
        req: pb::DeleteMemoryBlockRequest,
    ) -> Result<pb::DeleteMemoryBlockResponse, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, true)).await?;
        let write = convert::delete_from_pb(req).map_err(from_engine)?;
        let block = self
            .engine()
            .write_block(write)
            .await
            .map_err(from_engine)?;
        Ok(pb::DeleteMemoryBlockResponse {
            version: block.version,
        })
    }
}
