//! Memory blocks: named documents the agent always sees (its MEMORY.md, the
//! house rules, what it knows of the user) and its working memory, in one
//! of three scopes. Pure: what a change makes of a block, and how the
//! blocks read in the system message. The backends store every version;
//! the engine puts the current ones in the prompt.

use serde::{Deserialize, Serialize};

use crate::memory::SemanticItem;
use crate::tokens::{Encoding, count_text};
use crate::{AgentId, CoreError, UserId};

/// A block's size limit when its writer names none, in characters.
pub const DEFAULT_LIMIT_CHARS: u32 = 5_000;
/// The largest limit a block may have, in characters: every block is in
/// every prompt of the agents that see it.
pub const MAX_LIMIT_CHARS: u32 = 200_000;
/// Longest label, in characters.
pub const MAX_LABEL_LEN: usize = 64;
/// The agent-scope JSON block holding the state of the task at hand.
pub const WORKING_MEMORY: &str = "working_memory";
/// The heading of the blocks in the system message.
pub const HEADING: &str = "[MEMORY:BLOCKS]";

/// Who sees a block.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every agent of the deployment.
    Global,
    /// Every conversation of one user.
    User(UserId),
    /// One conversation.
    Agent(AgentId),
}

impl Scope {
    /// `global`, `user` or `agent`: how the prompt names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::User(_) => "user",
            Self::Agent(_) => "agent",
        }
    }

    /// The user or agent id ("" for global).
    pub fn id(&self) -> &str {
        match self {
            Self::Global => "",
            Self::User(u) => u.as_str(),
            Self::Agent(a) => a.as_str(),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Global => f.write_str("the global scope"),
            Self::User(u) => write!(f, "user {u:?}"),
            Self::Agent(a) => write!(f, "agent {a:?}"),
        }
    }
}

/// How a block's value is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Text,
    /// Always a valid JSON document; edited with merge patches.
    Json,
}

/// One version of a block, as stored. The last version of a label is the
/// block; a deleted block's last version is a tombstone with no text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub label: String,
    pub value: String,
    #[serde(default)]
    pub format: Format,
    /// What belongs in it, shown to the model.
    #[serde(default)]
    pub description: String,
    pub limit_chars: u32,
    /// For model-facing tools: they may read it, not write it.
    #[serde(default)]
    pub read_only: bool,
    /// 1 for the first version, +1 on every change (a delete included).
    pub version: u64,
    /// Epoch seconds.
    pub updated_at: f64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// Create or replace a block. Fields left `None` keep the block's current
/// setting (the defaults for a new block).
#[derive(Debug, Clone, Default)]
pub struct Put {
    pub value: String,
    pub format: Option<Format>,
    pub description: Option<String>,
    pub limit_chars: Option<u32>,
    pub read_only: Option<bool>,
}

/// A change to part of a block's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    /// Adds `text` at the end, on a line of its own.
    Append(String),
    /// Replaces `old`, which must occur exactly once, by `new`.
    Replace { old: String, new: String },
    /// Inserts `text` after line `line` (0: before the first line).
    Insert { line: u32, text: String },
    /// An RFC 7396 merge patch of a JSON block (a missing block starts as
    /// `{}`: this is how working memory begins).
    MergePatch(String),
}

/// What a write asks for.
#[derive(Debug, Clone)]
pub enum Change {
    Put(Put),
    Edit(Edit),
    Delete,
}

/// Checks a label: 1–64 characters of `[a-z0-9_.-]`.
pub fn check_label(label: &str) -> Result<(), CoreError> {
    let ok = !label.is_empty()
        && label.len() <= MAX_LABEL_LEN
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(CoreError::Invalid(format!(
            "label {:?} is not valid; use 1-{MAX_LABEL_LEN} characters of [a-z0-9_.-]",
            crate::text::shorten(label, 80)
        )))
    }
}

/// The version `current` is at for `expected_version` (0: none, or
/// deleted).
fn live_version(current: Option<&Block>) -> u64 {
    current.filter(|b| !b.deleted).map_or(0, |b| b.version)
}

/// The next version of `label` after `current` (its last stored version,
/// a tombstone included), made by `change` at `now`. `expected_version`
/// (0: the block must not exist) guards against lost updates. Refused
/// changes say why: INVALID for malformed input, TooLarge past the limit,
/// Precondition for an edit that does not fit the value, Stale for an
/// expected version that is not current, Absent for a missing block.
pub fn apply(
    scope: &Scope,
    label: &str,
    current: Option<&Block>,
    change: Change,
    expected_version: Option<u64>,
    now: f64,
) -> Result<Block, CoreError> {
    check_label(label)?;
    let live = current.filter(|b| !b.deleted);
    if let Some(expected) = expected_version {
        let at = live_version(current);
        if at != expected {
            return Err(CoreError::Stale(format!(
                "block {label:?} of {scope} is at version {at}, not the expected {expected}; read it again and retry"
            )));
        }
    }
    let version = current.map_or(1, |b| b.version + 1);
    let absent = || CoreError::Absent(format!("block {label:?} of {scope} does not exist"));
    let mut next = match change {
        Change::Delete => {
            let Some(live) = live else {
                return Err(absent());
            };
            Block {
                value: String::new(),
                description: String::new(),
                deleted: true,
                ..live.clone()
            }
        }
        Change::Put(put) => put_block(label, live, put)?,
        Change::Edit(edit) => {
            let base = match (live, &edit) {
                (Some(live), _) => live.clone(),
                (None, Edit::MergePatch(_)) => Block {
                    value: "{}".into(),
                    format: Format::Json,
                    ..new_block(label)
                },
                (None, _) => return Err(absent()),
            };
            edit_block(base, edit)?
        }
    };
    next.version = version;
    next.updated_at = now;
    check_limit(&next)?;
    Ok(next)
}

fn new_block(label: &str) -> Block {
    Block {
        label: label.to_owned(),
        value: String::new(),
        format: Format::Text,
        description: String::new(),
        limit_chars: DEFAULT_LIMIT_CHARS,
        read_only: false,
        version: 0,
        updated_at: 0.0,
        deleted: false,
    }
}

fn put_block(label: &str, live: Option<&Block>, put: Put) -> Result<Block, CoreError> {
    let base = live.cloned().unwrap_or_else(|| new_block(label));
    if let Some(limit) = put.limit_chars
        && !(1..=MAX_LIMIT_CHARS).contains(&limit)
    {
        return Err(CoreError::Invalid(format!(
            "limit_chars is {limit}; use 1-{MAX_LIMIT_CHARS} (0 or unset: keep the block's, {DEFAULT_LIMIT_CHARS} for a new one)"
        )));
    }
    let block = Block {
        value: put.value,
        format: put.format.unwrap_or(base.format),
        description: put.description.unwrap_or(base.description),
        limit_chars: put.limit_chars.unwrap_or(base.limit_chars),
        read_only: put.read_only.unwrap_or(base.read_only),
        ..base
    };
    if block.format == Format::Json {
        check_json(&block.value, "value")?;
    }
    Ok(block)
}

fn edit_block(mut block: Block, edit: Edit) -> Result<Block, CoreError> {
    let label = block.label.clone();
    match edit {
        Edit::Append(text) => {
            if block.format == Format::Json {
                return Err(CoreError::Precondition(format!(
                    "block {label:?} is JSON: edit it with json_merge_patch, not append"
                )));
            }
            if !block.value.is_empty() && !block.value.ends_with('\n') {
                block.value.push('\n');
            }
            block.value.push_str(&text);
        }
        Edit::Replace { old, new } => {
            if old.is_empty() {
                return Err(CoreError::Invalid(
                    "replace.old is empty; give the exact text to replace".into(),
                ));
            }
            let n = block.value.matches(old.as_str()).count();
            if n != 1 {
                return Err(CoreError::Precondition(format!(
                    "replace.old occurs {n} times in block {label:?}; it must occur exactly once (quote more of the text around it)"
                )));
            }
            block.value = block.value.replacen(old.as_str(), &new, 1);
        }
        Edit::Insert { line, text } => {
            block.value = insert_line(&block.value, line, &text).ok_or_else(|| {
                CoreError::Invalid(format!(
                    "insert.line is {line}, but block {label:?} has {} lines; use 0-{0}",
                    line_count(&block.value)
                ))
            })?;
        }
        Edit::MergePatch(patch) => {
            if block.format != Format::Json {
                return Err(CoreError::Precondition(format!(
                    "block {label:?} is text: json_merge_patch applies to JSON blocks only"
                )));
            }
            let patch = check_json(&patch, "json_merge_patch")?;
            let mut doc = check_json(&block.value, "the stored value")?;
            json_patch::merge(&mut doc, &patch);
            block.value = doc.to_string();
        }
    }
    if block.format == Format::Json {
        check_json(&block.value, "the edited value")?;
    }
    Ok(block)
}

fn line_count(value: &str) -> usize {
    value.lines().count()
}

/// `value` with `text` after its line `line` (0: first), or `None` when it
/// has fewer lines.
fn insert_line(value: &str, line: u32, text: &str) -> Option<String> {
    let line = line as usize;
    if line > line_count(value) {
        return None;
    }
    let mut lines: Vec<&str> = value.lines().collect();
    lines.insert(line, text);
    let mut out = lines.join("\n");
    if value.ends_with('\n') {
        out.push('\n');
    }
    Some(out)
}

fn check_json(text: &str, what: &str) -> Result<serde_json::Value, CoreError> {
    serde_json::from_str(text).map_err(|e| {
        CoreError::Invalid(format!(
            "{what} is not valid JSON ({e}); a JSON block holds one JSON document"
        ))
    })
}

fn check_limit(block: &Block) -> Result<(), CoreError> {
    // Bytes bound characters from above: most values need no count.
    if block.value.len() <= block.limit_chars as usize {
        return Ok(());
    }
    let chars = block.value.chars().count();
    if chars > block.limit_chars as usize {
        return Err(CoreError::TooLarge {
            what: format!("block {:?} would be {chars} characters: it", block.label),
            actual: chars,
            limit: block.limit_chars as usize,
            setting: "the block's limit_chars",
        });
    }
    Ok(())
}

/// A block as the prompt shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub scope: &'static str,
    pub label: String,
    pub version: u64,
    /// Cut to fit `blocks.max_share` of the input budget.
    pub cut: bool,
}

/// The blocks section of the system message, what it shows, and whether
/// anything was cut.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Section {
    pub text: String,
    pub shown: Vec<Shown>,
}

/// The heading of the user's pinned facts in the blocks section (a space:
/// never a block's label).
pub const PINNED_FACTS: &str = "pinned facts";

/// The user's pinned facts as the blocks section shows them: a part of
/// its own after the user's blocks, one fact a line.
fn pinned_part(pinned: &[SemanticItem]) -> Option<Block> {
    (!pinned.is_empty()).then(|| Block {
        label: PINNED_FACTS.into(),
        value: pinned
            .iter()
            .map(crate::compaction::fact_line)
            .collect::<String>()
            .trim_end()
            .to_owned(),
        format: Format::Text,
        description: "what the user asked to be always remembered".into(),
        limit_chars: 0,
        read_only: true,
        version: 0,
        updated_at: 0.0,
        deleted: false,
    })
}

/// The blocks an agent sees (`blocks`: global, then user, then agent, each
/// by label; tombstones left out), with its user's `pinned` facts after
/// the user's blocks, as one section of at most `max_tokens`: past it,
/// each value is cut by the same share, with a marker saying how much is
/// left out. Empty for no blocks and no pinned facts.
pub fn section(
    blocks: &[(&'static str, &Block)],
    pinned: &[SemanticItem],
    encoding: Encoding,
    max_tokens: u32,
) -> Section {
    let facts = pinned_part(pinned);
    let mut live: Vec<(&'static str, &Block)> =
        blocks.iter().filter(|(_, b)| !b.deleted).copied().collect();
    if let Some(facts) = &facts {
        let at = live
            .iter()
            .position(|(s, _)| *s == "agent")
            .unwrap_or(live.len());
        live.insert(at, ("user", facts));
    }
    let live: Vec<&(&str, &Block)> = live.iter().collect();
    if live.is_empty() {
        return Section::default();
    }
    let whole = render(&live, None);
    let tokens = count_text(encoding, &whole);
    if tokens <= max_tokens {
        return Section {
            text: whole,
            shown: shown(&live, false),
        };
    }
    // Each value keeps the same share of its characters; the share shrinks
    // until the headings and markers fit too (a few rounds at most).
    let mut share = f64::from(max_tokens) / f64::from(tokens.max(1));
    loop {
        let text = render(&live, Some(share));
        if count_text(encoding, &text) <= max_tokens || share < 0.001 {
            return Section {
                text,
                shown: shown(&live, true),
            };
        }
        share *= 0.8;
    }
}

fn shown(live: &[&(&'static str, &Block)], cut: bool) -> Vec<Shown> {
    live.iter()
        .filter(|(_, b)| b.label != PINNED_FACTS)
        .map(|(scope, b)| Shown {
            scope,
            label: b.label.clone(),
            version: b.version,
            cut,
        })
        .collect()
}

fn render(live: &[&(&'static str, &Block)], share: Option<f64>) -> String {
    let mut out = String::from(HEADING);
    for (scope, block) in live {
        out.push_str("\n## ");
        out.push_str(&block.label);
        out.push_str(" (");
        out.push_str(scope);
        out.push(')');
        if !block.description.is_empty() {
            out.push_str(": ");
            // One line: a description cannot forge a heading.
            out.push_str(&block.description.replace(['\r', '\n'], " "));
        }
        out.push('\n');
        match share {
            None => out.push_str(&block.value),
            Some(share) => {
                let total = block.value.chars().count();
                let keep = (total as f64 * share) as usize;
                let end = block
                    .value
                    .char_indices()
                    .nth(keep)
                    .map_or(block.value.len(), |(i, _)| i);
                out.push_str(&block.value[..end]);
                if keep < total {
                    out.push_str(&format!(
                        "\n[… cut: {keep} of {total} characters shown; the blocks take more than their share of the prompt]"
                    ));
                }
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
