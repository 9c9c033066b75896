//! The memory-block and user handlers of `MemoryService` (auth → convert →
//! engine → convert), behind the same request boundary as the others.

use engram_proto::pb;
use tonic::{Request, Response, Status};

use crate::auth;
use crate::convert;
use crate::service::Engram;
use crate::status::from_engine;

impl Engram {
    pub(crate) async fn handle_list_memory_blocks(
        &self,
        request: Request<pb::ListMemoryBlocksRequest>,
    ) -> Result<Response<pb::ListMemoryBlocksResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", false).await?;
        let scope = convert::scope_from_pb(request.into_inner().scope).map_err(from_engine)?;
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

    pub(crate) async fn handle_get_memory_block(
        &self,
        request: Request<pb::GetMemoryBlockRequest>,
    ) -> Result<Response<pb::GetMemoryBlockResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", false).await?;
        let req = request.into_inner();
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

    pub(crate) async fn handle_put_memory_block(
        &self,
        request: Request<pb::PutMemoryBlockRequest>,
    ) -> Result<Response<pb::PutMemoryBlockResponse>, Status> {
        let r = request.get_ref();
        auth::authorize_scope(self.engine(), &request, &r.scope, &r.user_id, true).await?;
        let write = convert::put_from_pb(request.into_inner()).map_err(from_engine)?;
        let block = self
            .engine()
            .write_block(write)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::PutMemoryBlockResponse {
            block: Some(convert::block_to_pb(block)),
        }))
    }

    pub(crate) async fn handle_edit_memory_block(
        &self,
        request: Request<pb::EditMemoryBlockRequest>,
    ) -> Result<Response<pb::EditMemoryBlockResponse>, Status> {
        let r = request.get_ref();
        auth::authorize_scope(self.engine(), &request, &r.scope, &r.user_id, true).await?;
        let write = convert::edit_from_pb(request.into_inner()).map_err(from_engine)?;
        let block = self
            .engine()
            .write_block(write)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::EditMemoryBlockResponse {
            block: Some(convert::block_to_pb(block)),
        }))
    }

    pub(crate) async fn handle_delete_memory_block(
        &self,
        request: Request<pb::DeleteMemoryBlockRequest>,
    ) -> Result<Response<pb::DeleteMemoryBlockResponse>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", true).await?;
        let write = convert::delete_from_pb(request.into_inner()).map_err(from_engine)?;
        let block = self
            .engine()
            .write_block(write)
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::DeleteMemoryBlockResponse {
            version: block.version,
        }))
    }
}
