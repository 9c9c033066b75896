//! A portable bundle of memory (ExportMemory / ImportMemory): an agent's or
//! a user's records as JSON lines, the same whichever backend wrote them
//! (`docs/EXPORT.md` describes the format).
//!
//! A bundle holds the records a store keeps, not what it derives from them:
//! an agent's settings, its traces (archived and active, in stored order),
//! the whole results its traces point at, its summaries, every version of
//! its facts and of its blocks, its compaction log; a user's facts (every version), blocks and
//! last conversation. Turns, transcripts and indexes are derived again by
//! the store that imports it, so an import gives the same prompts, search
//! results and listings as the source (ids and timestamps kept).
//!
//! Lines are checked as they arrive ([`Decoder`]) and the whole bundle
//! before anything is written ([`MemoryBundle::check`]): an import refused is an
//! import that wrote nothing.

use serde::{Deserialize, Serialize};

use crate::blocks::Block;
use crate::compaction::CompactionRecord;
use crate::memory::{EpisodicItem, SemanticItem};
use crate::state::AgentMeta;
use crate::users::{LastConversation, UserFact};
use crate::{AgentId, CoreError, RawTrace, UserId};

/// The format's version: a reader refuses a bundle of another.
pub const VERSION: u32 = 1;

/// What a bundle holds: one agent, or a user with its conversations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BundleScope {
    Agent(String),
    User(String),
}

/// A result stored aside (a tool result over the budget) that a trace's
/// `tool_result_ref` names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResult {
    /// The name the trace's `tool_result_ref` holds.
    pub path: String,
    /// The whole result as JSON text, as it is stored.
    pub json: String,
}

/// Every record of an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRecords {
    pub id: AgentId,
    /// Its settings as they stand after any interrupted commit or forget
    /// was finished (a bundle carries neither).
    pub meta: AgentMeta,
    /// In stored order.
    pub archived: Vec<RawTrace>,
    /// In stored order.
    pub active: Vec<RawTrace>,
    pub results: Vec<StoredResult>,
    /// In stored order, those waiting for a rewrite included.
    pub summaries: Vec<EpisodicItem>,
    /// Every version of every fact (see [`AgentRecords::canonical`]).
    pub facts: Vec<SemanticItem>,
    /// Every version of the agent's blocks.
    pub blocks: Vec<Block>,
    /// Its compaction log, oldest first.
    pub compactions: Vec<CompactionRecord>,
}

/// A user's own records (its conversations are [`AgentRecords`]).
#[derive(Debug, Clone, PartialEq)]
pub struct UserRecords {
    pub id: UserId,
    /// Every version of every fact.
    pub facts: Vec<UserFact>,
    /// Every version of the user's blocks.
    pub blocks: Vec<Block>,
    pub last: Option<LastConversation>,
}

/// A whole bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryBundle {
    pub scope: BundleScope,
    pub exported_at: f64,
    pub agents: Vec<AgentRecords>,
    /// For a user's bundle.
    pub user: Option<UserRecords>,
}

/// The first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub engram_bundle: u32,
    #[serde(flatten)]
    pub scope: BundleScope,
    pub exported_at: f64,
}

/// One line after the header: a record, and whose it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user_id: Option<String>,
    #[serde(flatten)]
    record: Record,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    /// An agent's settings: starts the agent's lines.
    Agent(Box<AgentMeta>),
    ArchivedTrace(Box<RawTrace>),
    Trace(Box<RawTrace>),
    StoredResult(StoredResult),
    Summary(Box<EpisodicItem>),
    Fact(Box<SemanticItem>),
    /// An agent's block when the line names an agent, else the user's.
    Block(Box<Block>),
    UserFact(Box<UserFact>),
    /// A record of an agent's compaction log.
    Compaction(Box<CompactionRecord>),
    LastConversation(Box<LastConversation>),
    /// The last line: how many lines came before it (a cut bundle is
    /// refused, not half imported).
    End {
        lines: u64,
    },
}

fn line_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).expect("bundle lines serialize");
    bytes.push(b'\n');
    bytes
}

/// Writes a bundle's lines one piece at a time (an exporter streams them
/// as it reads the agents).
#[derive(Debug, Default)]
pub struct Encoder {
    lines: u64,
}

impl Encoder {
    pub fn header(&mut self, scope: &BundleScope, exported_at: f64) -> Vec<u8> {
        self.lines += 1;
        line_bytes(&Header {
            engram_bundle: VERSION,
            scope: scope.clone(),
            exported_at,
        })
    }

    fn line(&mut self, out: &mut Vec<u8>, agent: Option<&str>, user: Option<&str>, r: Record) {
        self.lines += 1;
        out.extend(line_bytes(&Line {
            agent_id: agent.map(str::to_owned),
            user_id: user.map(str::to_owned),
            record: r,
        }));
    }

    /// An agent's lines.
    pub fn agent(&mut self, a: &AgentRecords) -> Vec<u8> {
        let mut out = vec![];
        let id = Some(a.id.as_str());
        self.line(&mut out, id, None, Record::Agent(Box::new(a.meta.clone())));
        for t in &a.archived {
            self.line(
                &mut out,
                id,
                None,
                Record::ArchivedTrace(Box::new(t.clone())),
            );
        }
        for t in &a.active {
            self.line(&mut out, id, None, Record::Trace(Box::new(t.clone())));
        }
        for r in &a.results {
            self.line(&mut out, id, None, Record::StoredResult(r.clone()));
        }
        for s in &a.summaries {
            self.line(&mut out, id, None, Record::Summary(Box::new(s.clone())));
        }
        for f in &a.facts {
            self.line(&mut out, id, None, Record::Fact(Box::new(f.clone())));
        }
        for b in &a.blocks {
            self.line(&mut out, id, None, Record::Block(Box::new(b.clone())));
        }
        for c in &a.compactions {
            self.line(&mut out, id, None, Record::Compaction(Box::new(c.clone())));
        }
        out
    }

    /// A user's own lines.
    pub fn user(&mut self, u: &UserRecords) -> Vec<u8> {
        let mut out = vec![];
        let id = Some(u.id.as_str());
        for f in &u.facts {
            self.line(&mut out, None, id, Record::UserFact(Box::new(f.clone())));
        }
        for b in &u.blocks {
            self.line(&mut out, None, id, Record::Block(Box::new(b.clone())));
        }
        if let Some(last) = &u.last {
            let r = Record::LastConversation(Box::new(last.clone()));
            self.line(&mut out, None, id, r);
        }
        out
    }

    /// The last line.
    pub fn end(&mut self) -> Vec<u8> {
        let lines = self.lines;
        self.lines += 1;
        line_bytes(&Line {
            agent_id: None,
            user_id: None,
            record: Record::End { lines },
        })
    }
}

/// The whole bundle as bytes (tests, small exports).
pub fn encode(bundle: &MemoryBundle) -> Vec<u8> {
    let mut e = Encoder::default();
    let mut out = e.header(&bundle.scope, bundle.exported_at);
    for a in &bundle.agents {
        out.extend(e.agent(a));
    }
    if let Some(u) = &bundle.user {
        out.extend(e.user(u));
    }
    out.extend(e.end());
    out
}

fn invalid(line: u64, why: impl std::fmt::Display) -> CoreError {
    CoreError::Invalid(format!("bundle line {line}: {why}"))
}

/// Reads a bundle from chunks cut anywhere; each line is parsed as soon as
/// it is whole, so memory holds the records and at most one partial line.
#[derive(Debug, Default)]
pub struct Decoder {
    partial: Vec<u8>,
    lines: u64,
    header: Option<Header>,
    agents: Vec<AgentRecords>,
    user: Option<UserRecords>,
    ended: bool,
}

impl Decoder {
    /// Takes the next chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), CoreError> {
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(at);
            rest = &tail[1..];
            if self.partial.is_empty() {
                self.line(head)?;
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(head);
                self.line(&whole)?;
            }
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// The bundle's scope, once its header was read.
    pub fn scope(&self) -> Option<&BundleScope> {
        self.header.as_ref().map(|h| &h.scope)
    }

    /// The bundle, once every chunk was pushed.
    pub fn finish(mut self) -> Result<MemoryBundle, CoreError> {
        // A last line without its newline (`line` skips whitespace).
        let partial = std::mem::take(&mut self.partial);
        self.line(&partial)?;
        let Some(header) = self.header else {
            return Err(CoreError::Invalid("the bundle is empty".into()));
        };
        if !self.ended {
            return Err(CoreError::Invalid(
                "the bundle has no end line: it was cut short".into(),
            ));
        }
        let bundle = MemoryBundle {
            scope: header.scope,
            exported_at: header.exported_at,
            agents: self.agents,
            user: self.user,
        };
        bundle.check()?;
        Ok(bundle)
    }

    fn line(&mut self, bytes: &[u8]) -> Result<(), CoreError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        self.lines += 1;
        let n = self.lines;
        if self.ended {
            return Err(invalid(n, "a line after the end line"));
        }
        let Some(header) = &self.header else {
            let header: Header = serde_json::from_slice(bytes)
                .map_err(|e| invalid(n, format!("not a bundle header: {e}")))?;
            if header.engram_bundle != VERSION {
                return Err(invalid(
                    n,
                    format!(
                        "format version {} (this server reads version {VERSION})",
                        header.engram_bundle
                    ),
                ));
            }
            if let BundleScope::User(u) = &header.scope {
                self.user = Some(UserRecords {
                    id: UserId::parse(u).map_err(|e| invalid(n, e))?,
                    facts: vec![],
                    blocks: vec![],
                    last: None,
                });
            }
            self.header = Some(header);
            return Ok(());
        };
        let scope = &header.scope;
        let line: Line = serde_json::from_slice(bytes).map_err(|e| invalid(n, e))?;
        match (line.agent_id, line.user_id, line.record) {
            (None, None, Record::End { lines }) => {
                if lines != n - 1 {
                    return Err(invalid(
                        n,
                        format!(
                            "the end line counts {lines} lines before it; there were {}",
                            n - 1
                        ),
                    ));
                }
                self.ended = true;
            }
            (Some(agent), None, Record::Agent(meta)) => {
                let id = AgentId::parse(&agent).map_err(|e| invalid(n, e))?;
                if matches!(scope, BundleScope::Agent(a) if *a != agent || !self.agents.is_empty())
                {
                    return Err(invalid(n, "an agent's bundle holds that agent only"));
                }
                self.agents.push(AgentRecords {
                    id,
                    meta: *meta,
                    archived: vec![],
                    active: vec![],
                    results: vec![],
                    summaries: vec![],
                    facts: vec![],
                    blocks: vec![],
                    compactions: vec![],
                });
            }
            (Some(agent), None, record) => {
                let Some(a) = self.agents.last_mut().filter(|a| a.id.as_str() == agent) else {
                    return Err(invalid(
                        n,
                        format!("a record of agent {agent:?} outside its agent's lines"),
                    ));
                };
                match record {
                    Record::ArchivedTrace(t) if a.active.is_empty() => a.archived.push(*t),
                    Record::ArchivedTrace(_) => {
                        return Err(invalid(n, "an archived trace after active ones"));
                    }
                    Record::Trace(t) => a.active.push(*t),
                    Record::StoredResult(r) => a.results.push(r),
                    Record::Summary(s) => a.summaries.push(*s),
                    Record::Fact(f) => a.facts.push(*f),
                    Record::Block(b) => a.blocks.push(*b),
                    Record::Compaction(c) => a.compactions.push(*c),
                    _ => return Err(invalid(n, "not a record of an agent")),
                }
            }
            (None, Some(user), record) => {
                let Some(u) = self.user.as_mut().filter(|u| u.id.as_str() == user) else {
                    return Err(invalid(
                        n,
                        format!("a record of user {user:?} in a bundle of another scope"),
                    ));
                };
                match record {
                    Record::UserFact(f) => u.facts.push(*f),
                    Record::Block(b) => u.blocks.push(*b),
                    Record::LastConversation(l) if u.last.is_none() => u.last = Some(*l),
                    _ => return Err(invalid(n, "not a record of a user")),
                }
            }
            _ => return Err(invalid(n, "a record names neither one agent nor one user")),
        }
        Ok(())
    }
}

mod check;
pub use check::{block_versions, fact_versions};

#[cfg(test)]
mod tests;
