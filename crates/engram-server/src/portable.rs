//! ExportMemory and ImportMemory: the bundle streamed out in pieces and
//! read in from any chunking. An export is authorized as a read of its
//! scope; an import by what the bundle holds: a user's bundle as soon as
//! its first line names the user, then every agent in it (by the user it
//! names and, for one that exists, by its stored user), before anything
//! is written.

use std::sync::Arc;

use engram_core::bundle::BundleScope;
use engram_proto::pb;
use tonic::{Request, Response, Status, Streaming};

use crate::auth;
use crate::convert;
use crate::service::{Engram, ExportStream};
use crate::status::from_engine;

impl Engram {
    pub(crate) async fn handle_export_memory(
        &self,
        request: Request<pb::ExportMemoryRequest>,
    ) -> Result<Response<ExportStream>, Status> {
        auth::authorize_scope(self.engine(), &request, &request.get_ref().scope, "", false).await?;
        let scope = convert::scope_from_pb(request.into_inner().scope).map_err(from_engine)?;
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
        Ok(Response::new(Box::pin(pieces)))
    }

    pub(crate) async fn handle_import_memory(
        &self,
        request: Request<Streaming<pb::ImportMemoryRequest>>,
    ) -> Result<Response<pb::ImportMemoryResponse>, Status> {
        // The caller's scope, for the checks once the bundle says what it
        // holds.
        let mut caller = Request::new(());
        if let Some(scope) = auth::scope(&request) {
            caller.extensions_mut().insert::<Arc<_>>(scope);
        }
        let mut pieces = request.into_inner();
        let mut import = self.engine().start_import();
        let mut replace = None;
        let mut user_checked = false;
        while let Some(piece) = pieces.message().await? {
            replace.get_or_insert(piece.replace);
            import.push(&piece.lines).map_err(from_engine)?;
            if !user_checked && let Some(BundleScope::User(user)) = import.scope() {
                // Refused before the rest of a large bundle is read.
                auth::authorize_user(&caller, user)?;
                user_checked = true;
            }
        }
        let bundle = import.finish().map_err(from_engine)?;
        if let BundleScope::User(user) = &bundle.scope
            && !user_checked
        {
            auth::authorize_user(&caller, user)?;
        }
        for agent in &bundle.agents {
            let user = agent.meta.user_id.as_deref().unwrap_or_default();
            auth::authorize(self.engine(), &caller, agent.id.as_str(), user).await?;
        }
        let imported = self
            .engine()
            .import_memory(&bundle, replace.unwrap_or(false))
            .await
            .map_err(from_engine)?;
        Ok(Response::new(pb::ImportMemoryResponse {
            agents: imported.agents,
            facts: imported.facts,
            blocks: imported.blocks,
        }))
    }
}
