//! ExportMemory and ImportMemory: a scope's records streamed out as a
//! bundle of JSON lines (`engram_core::bundle`, docs/EXPORT.md), and a
//! bundle read back in. The store reads and writes the records
//! (`engram_store::Portable`); here they are encoded a piece at a time,
//! and a bundle coming in is bounded, checked whole, then handed over.

use std::collections::VecDeque;

use engram_core::AgentId;
use engram_core::blocks::Scope;
use engram_core::bundle::{BundleScope, Decoder, Encoder, MemoryBundle, UserRecords};
use engram_store::{Imported, StoreError};

use crate::error::{EngineError, Result};
use crate::{Engine, ScopeRequest, limits};

/// The most an export answers with in one piece (a gRPC message stays
/// well under its 4 MiB default).
pub const EXPORT_CHUNK_BYTES: usize = 1 << 20;

/// An export under way: agents are read one at a time as the reader asks
/// for more, so a user with many conversations is never held whole.
pub struct Export {
    engine: Engine,
    encoder: Encoder,
    agents: VecDeque<AgentId>,
    /// A user's own records, read when the export began, written after
    /// its agents.
    user: Option<UserRecords>,
    /// Encoded lines, sent from `sent` on.
    ready: Vec<u8>,
    sent: usize,
    ended: bool,
}

impl Engine {
    /// Starts exporting `scope` (an agent or a user); NOT_FOUND for an
    /// agent that does not exist or a user with nothing.
    pub async fn export_memory(&self, scope: &ScopeRequest) -> Result<Export> {
        let mut encoder = Encoder::default();
        let now = engram_store::unix_now();
        let (ready, agents, user) = match limits::scope(scope)? {
            Scope::Agent(a) => {
                // Read now, so a missing agent is a status, not a stream
                // cut short.
                let records = self.store.export_agent(&a).await?;
                let mut ready = encoder.header(&BundleScope::Agent(a.to_string()), now);
                ready.extend(encoder.agent(&records));
                (ready, vec![], None)
            }
            Scope::User(u) => {
                let agents = self.store.user_agents(&u).await?;
                let own = self.store.export_user(&u).await?;
                if agents.is_empty() && own.facts.is_empty() && own.blocks.is_empty() {
                    return Err(crate::EngineError::NotFound(format!(
                        "user {:?} has no memory here",
                        u.as_str()
                    )));
                }
                let ready = encoder.header(&BundleScope::User(u.to_string()), now);
                (ready, agents, Some(own))
            }
            Scope::Global => {
                return Err(EngineError::Invalid(
                    "scope: export an agent or a user (the global blocks are not a bundle's)"
                        .into(),
                ));
            }
        };
        Ok(Export {
            engine: self.clone(),
            encoder,
            agents: agents.into(),
            user,
            ready,
            sent: 0,
            ended: false,
        })
    }

    /// A bundle to read in, a chunk at a time ([`Import::push`]), then
    /// [`Import::finish`] and [`Engine::import_memory`].
    pub fn start_import(&self) -> Import {
        Import {
            decoder: Decoder::default(),
            bytes: 0,
            max_bytes: self.import_max_bytes,
        }
    }

    /// Recreates `bundle` (read by an [`Import`]), ids and times kept;
    /// with `replace`, over what exists under its ids.
    pub async fn import_memory(&self, bundle: &MemoryBundle, replace: bool) -> Result<Imported> {
        let imported = self.store.import(bundle, replace).await?;
        for agent in &bundle.agents {
            self.caches.drop_agent(&agent.id);
        }
        tracing::info!(
            agents = imported.agents,
            facts = imported.facts,
            blocks = imported.blocks,
            replace,
            "bundle imported"
        );
        Ok(imported)
    }
}

impl Export {
    /// The next piece of the bundle; `None` after its last line.
    pub async fn next(&mut self) -> Option<Result<Vec<u8>>> {
        while self.ready.len() - self.sent < EXPORT_CHUNK_BYTES && !self.ended {
            // What was sent goes before more is read in.
            self.ready.drain(..self.sent);
            self.sent = 0;
            if let Some(agent) = self.agents.pop_front() {
                match self.engine.store.export_agent(&agent).await {
                    Ok(records) => self.ready.extend(self.encoder.agent(&records)),
                    // Deleted since it was listed: not part of the bundle.
                    Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Some(Err(e.into())),
                }
            } else {
                if let Some(own) = self.user.take() {
                    self.ready.extend(self.encoder.user(&own));
                }
                self.ready.extend(self.encoder.end());
                self.ended = true;
            }
        }
        let rest = &self.ready[self.sent..];
        if rest.is_empty() {
            return None;
        }
        let piece = rest[..rest.len().min(EXPORT_CHUNK_BYTES)].to_vec();
        self.sent += piece.len();
        Some(Ok(piece))
    }
}

/// A bundle being read in.
#[derive(Debug)]
pub struct Import {
    decoder: Decoder,
    bytes: u64,
    max_bytes: u64,
}

impl Import {
    /// Takes the next chunk; RESOURCE_EXHAUSTED past `memory.import_max_mb`.
    pub fn push(&mut self, chunk: &[u8]) -> Result<()> {
        self.bytes += chunk.len() as u64;
        if self.bytes > self.max_bytes {
            return Err(EngineError::Exhausted(format!(
                "the bundle passes memory.import_max_mb ({} MiB)",
                self.max_bytes >> 20
            )));
        }
        Ok(self.decoder.push(chunk)?)
    }

    /// What the bundle holds, once its first line was read (the caller
    /// authorizes it before reading more).
    pub fn scope(&self) -> Option<&BundleScope> {
        self.decoder.scope()
    }

    /// The whole bundle, checked (INVALID_ARGUMENT for a bundle cut short
    /// or one no store can take).
    pub fn finish(self) -> Result<MemoryBundle> {
        Ok(self.decoder.finish()?)
    }
}
