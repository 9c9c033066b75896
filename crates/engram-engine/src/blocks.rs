//! Memory blocks: documents in a scope that every prompt of the scope's
//! agents shows in its system message (`[MEMORY:BLOCKS]`), and the
//! agent's working memory among them.

use engram_core::blocks::{self, Block, Scope, Section};
use engram_core::tokens::Encoding;
use engram_core::{UserId, blocks::Shown};
use engram_store::SeenBlocks;

use crate::api::{BlockWrite, ScopeRequest};
use crate::error::{EngineError, Result};
use crate::{Engine, limits};

/// The share of the input budget blocks may take when not configured.
pub const DEFAULT_MAX_SHARE: f64 = 0.25;

/// A scope, checked.
pub fn scope(req: &ScopeRequest) -> Result<Scope> {
    Ok(match req {
        ScopeRequest::Agent(a) => Scope::Agent(limits::agent_id("scope.agent_id", a)?),
        ScopeRequest::User(u) => Scope::User(user_id("scope.user_id", u)?),
        ScopeRequest::Global => Scope::Global,
    })
}

/// A user id, checked (`field` names it in the error).
pub fn user_id(field: &str, raw: &str) -> Result<UserId> {
    UserId::parse(raw).map_err(|e| match field {
        "user_id" => e.into(),
        _ => EngineError::Invalid(format!("{field}: {e}")),
    })
}

/// A request's optional user id: `None` for unset or "".
pub fn optional_user(raw: Option<&str>) -> Result<Option<UserId>> {
    raw.filter(|u| !u.is_empty())
        .map(|u| user_id("user_id", u))
        .transpose()
}

impl Engine {
    /// The current blocks of a scope, by label.
    pub async fn list_blocks(&self, scope: &ScopeRequest) -> Result<Vec<Block>> {
        let scope = self::scope(scope)?;
        Ok(self.store.list_blocks(&scope).await?)
    }

    /// One block (NOT_FOUND if it does not exist), and with `history`
    /// every stored version, oldest first.
    pub async fn get_block(
        &self,
        scope: &ScopeRequest,
        label: &str,
        history: bool,
    ) -> Result<(Block, Vec<Block>)> {
        let scope = self::scope(scope)?;
        blocks::check_label(label)?;
        let versions = self.store.block_history(&scope, label).await?;
        let Some(current) = versions.last().filter(|b| !b.deleted).cloned() else {
            return Err(EngineError::NotFound(format!(
                "block {label:?} of {scope} does not exist"
            )));
        };
        Ok((current, if history { versions } else { vec![] }))
    }

    /// Creates, replaces, edits or deletes a block; returns the version
    /// written (for a delete, the tombstone).
    pub async fn write_block(&self, req: BlockWrite) -> Result<Block> {
        let scope = self::scope(&req.scope)?;
        let user = optional_user(req.user_id.as_deref())?;
        if user.is_some() && !matches!(scope, Scope::Agent(_)) {
            return Err(EngineError::invalid(
                "user_id binds an agent's user: give it with an agent_id scope only",
            ));
        }
        let block = self
            .store
            .write_block(
                &scope,
                &req.label,
                req.change,
                req.expected_version,
                user.as_ref(),
            )
            .await?;
        tracing::info!(scope = scope.kind(), id = scope.id(), label = %block.label, version = block.version, deleted = block.deleted, "memory block written");
        Ok(block)
    }
}

/// `system` with the blocks the agent sees appended, in at most
/// `max_tokens` for the blocks; what was shown; a warning when they were
/// cut.
pub fn system_with_blocks(
    system: Option<&str>,
    seen: &SeenBlocks,
    encoding: Encoding,
    max_tokens: u32,
) -> (Option<String>, Vec<Shown>, Option<String>) {
    let in_order = seen.in_order();
    if in_order.is_empty() {
        return (system.map(str::to_owned), vec![], None);
    }
    let Section { text, shown } = blocks::section(&in_order, encoding, max_tokens);
    let warning = shown.iter().any(|b| b.cut).then(|| {
        format!(
            "memory blocks take more than their share of the input budget ({max_tokens} tokens, blocks.max_share): each was cut; shorten them or raise the share"
        )
    });
    let system = match system {
        Some(s) if !s.is_empty() => format!("{s}\n\n{text}"),
        _ => text,
    };
    (Some(system), shown, warning)
}
