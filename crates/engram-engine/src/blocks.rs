//! Memory blocks: documents in a scope that every prompt of the scope's
//! agents shows in its system message (`[MEMORY:BLOCKS]`), and the
//! agent's working memory among them.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use engram_core::AgentId;
use engram_core::blocks::{self, Block, Scope, Section};
use engram_core::tokens::Encoding;
use engram_store::SeenBlocks;

use crate::api::{BlockWrite, ScopeRequest};
use crate::caches::{self, ContextCaches};
use crate::error::{EngineError, Result};
use crate::{Engine, limits};

impl Engine {
    /// The current blocks of a scope, by label.
    pub async fn list_blocks(&self, scope: &ScopeRequest) -> Result<Vec<Block>> {
        let scope = limits::scope(scope)?;
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
        let scope = limits::scope(scope)?;
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
        let scope = limits::scope(&req.scope)?;
        // Checked before the store sees it: a label is a key there (and
        // PostgreSQL refuses text with NUL in it).
        blocks::check_label(&req.label)?;
        let user = limits::optional_user(req.user_id.as_deref())?;
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

/// The blocks section an agent's prompt shows (`None`: it sees no block),
/// in at most `max_tokens`. Counted once per change of the blocks, the
/// encoding or the budget: the agent's caches keep it, since every prompt
/// shows the same section until a block changes. Keyed by the transcript
/// too: an agent deleted and made again (its blocks' versions starting
/// over) is a new transcript, never the old one's section.
pub fn section_for(
    caches: &ContextCaches,
    agent: &AgentId,
    transcript: u64,
    seen: &SeenBlocks,
    encoding: Encoding,
    max_tokens: u32,
) -> Option<Arc<Section>> {
    let in_order = seen.in_order();
    let pinned = &seen.user_pinned;
    if in_order.is_empty() && pinned.is_empty() {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    transcript.hash(&mut h);
    for (scope, block) in &in_order {
        (scope, &block.label, block.version).hash(&mut h);
    }
    for fact in pinned.iter() {
        (&fact.id, fact.version()).hash(&mut h);
    }
    (encoding, max_tokens).hash(&mut h);
    let key = h.finish();
    let cell = caches.of(agent);
    if let Some((k, section)) = &caches::lock(&cell).blocks
        && *k == key
    {
        return Some(Arc::clone(section));
    }
    let bytes: usize = in_order.iter().map(|(_, b)| b.value.len()).sum::<usize>()
        + pinned.iter().map(|f| f.fact.len()).sum::<usize>();
    let section = Arc::new(engram_store::offload_over(bytes as u64, || {
        blocks::section(&in_order, pinned, encoding, max_tokens)
    }));
    caches::lock(&cell).blocks = Some((key, Arc::clone(&section)));
    Some(section)
}

/// `system` followed by the blocks section.
pub fn with_section(system: Option<&str>, section: &Section) -> String {
    match system {
        Some(s) if !s.is_empty() => format!("{s}\n\n{}", section.text),
        _ => section.text.clone(),
    }
}

/// The warning of a prompt whose blocks were cut to `max_tokens`.
pub fn cut_warning(section: &Section, max_tokens: u32) -> Option<String> {
    section.shown.iter().any(|b| b.cut).then(|| {
        format!(
            "memory blocks take more than their share of the input budget ({max_tokens} tokens, blocks.max_share): each was cut; shorten them or raise the share"
        )
    })
}
