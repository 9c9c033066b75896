//! ExportMemory and ImportMemory: the bundle streamed out in pieces and
//! read in from any chunking. An export is authorized as a read of its
//! scope; an import by what the bundle holds: a user's bundle as soon as
//! its first line names the user, then every agent in it (by the user it
//! names and, for one that exists, by its stored user), before anything
//! is written.

use engram_core::bundle::BundleScope;
use engram_proto::pb;
use futures_util::{Stream, StreamExt};
use tonic::Status;

use crate::api::{Api, ExportStream};
use crate::auth::{self, Access, Caller};
use crate::convert;
use crate::status::from_engine;

impl Api {
    pub async fn export_memory(
        &self,
        caller: &Caller,
        req: pb::ExportMemoryRequest,
    ) -> Result<ExportStream, Status> {
        let _agent =
            auth::authorize(self.engine(), caller, Access::scope(&req.scope, false)).await?;
        let scope = convert::scope_from_pb(req.scope).map_err(from_engine)?;
        let export = self
            .engine()
            .export_memory(&scope)
            .await
            .map_err(from_engine)?;
        let pieces = futures_util::stream::unfold(export, |mut export| async move {
            let piece = export.next().await?;
            let piece = piece
                .map(|lines| pb::MemoryBundleChunk { lines })
                .map_err(from_engine);
            Some((piece, export))
        });
        Ok(Box::pin(pieces))
    }

    /// Reads the bundle from `pieces` (any chunking), checking the
    /// caller's scope as soon as the bundle says what it holds.
    pub async fn import_memory(
        &self,
        caller: &Caller,
        mut pieces: impl Stream<Item = Result<pb::ImportMemoryRequest, Status>> + Unpin,
    ) -> Result<pb::ImportMemoryResponse, Status> {
        let mut import = self.engine().start_import();
        let mut replace = None;
        let mut user_checked = false;
        while let Some(piece) = pieces.next().await.transpose()? {
            replace.get_or_insert(piece.replace);
            import.push(&piece.lines).map_err(from_engine)?;
            if !user_checked && let Some(BundleScope::User(user)) = import.scope() {
                // Refused before the rest of a large bundle is read.
                let _user = auth::authorize(self.engine(), caller, Access::User(user)).await?;
                user_checked = true;
            }
        }
        let bundle = import.finish().map_err(from_engine)?;
        if let BundleScope::User(user) = &bundle.scope
            && !user_checked
        {
            let _user = auth::authorize(self.engine(), caller, Access::User(user)).await?;
        }
        for agent in &bundle.agents {
            let user = agent.meta.user_id.as_deref().unwrap_or_default();
            let access = Access::Agent {
                id: agent.id.as_str(),
                binds: user,
            };
            let _agent = auth::authorize(self.engine(), caller, access).await?;
        }
        let imported = self
            .engine()
            .import_memory(&bundle, replace.unwrap_or(false))
            .await
            .map_err(from_engine)?;
        Ok(pb::ImportMemoryResponse {
            agents: imported.agents,
            facts: imported.facts,
            blocks: imported.blocks,
        })
    }
}
