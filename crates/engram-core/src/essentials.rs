//! What a working agent must not lose when its old turns are summarized
//! (DESIGN §1, "carry-forward"): the user's standing rules, the tasks
//! still open, the latest request, decisions, errors and their fixes, and
//! identifiers (paths, ports, hashes, tickets, codes), found by rule in
//! the window a compaction replaces and checked against the summary
//! written for it. What the summary does not hold is carried forward
//! verbatim ([`crate::compaction::carry`]), so a poor summarizer still
//! leaves the agent its rules, tasks and identifiers.
//!
//! Deterministic and linear in the window: each line, sentence or token is
//! checked once; each message and tool result gives a bounded number.

mod scan;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::text::{excerpt, fold_whitespace, shorten};
use crate::transcript::result_text;
use crate::turns::turn_number;
use crate::{RawTrace, TraceType};

pub use scan::content_words;

/// Longest essential, in characters.
pub const TEXT_CHARS: usize = 200;
/// Longest line shown around an identifier, in characters.
const AROUND_CHARS: usize = 160;
/// Most identifiers and error lines one trace gives (its last ones: a
/// long output ends with what matters).
const PER_TRACE_IDS: usize = 8;
const PER_TRACE_ERRORS: usize = 2;
/// Most essentials one window keeps of a kind (the latest).
const PER_KIND: usize = 16;
const PER_WINDOW_IDS: usize = 24;
/// Share of a task's words a report of something done must name to
/// close it.
const CLOSE_SHARE: f64 = 0.6;
/// Share of an essential's words a summary must name to hold it.
const HOLD_SHARE: f64 = 0.75;

/// What an essential is. The order is the carry-forward's priority when
/// its budget is full: rules first, identifiers last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A standing rule or constraint the user gave ("never push to main
    /// on Fridays").
    Rule,
    /// An item of a task list the user gave, not reported done.
    Task,
    /// The user's latest request.
    Request,
    /// A decision, with its reason when the sentence gives one.
    Decision,
    /// An error a tool reported, or how one was fixed.
    Error,
    /// A path, port, hash, ticket, code or URL.
    Identifier,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Rule => "Rule",
            Kind::Task => "Open task",
            Kind::Request => "Latest request",
            Kind::Decision => "Decision",
            Kind::Error => "Error",
            Kind::Identifier => "Identifier",
        }
    }
}

/// One thing a working agent needs, as it was said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Essential {
    pub kind: Kind,
    /// Verbatim (whitespace folded), at most [`TEXT_CHARS`]; for an
    /// identifier, the line it was in.
    pub text: String,
    /// An identifier itself: what a summary must name to hold it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub turn_id: String,
    pub trace_id: String,
    /// Who said it: `user`, `assistant`, or `<tool> result`.
    pub from: String,
    /// Whether the summary of its window holds it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

impl Essential {
    /// Two essentials with the same key are the same (the latest counts).
    pub fn key(&self) -> String {
        match self.kind {
            Kind::Identifier => format!("identifier:{}", self.name),
            // One latest request at a time.
            Kind::Request => "request".to_owned(),
            kind => format!("{kind:?}:{}", content_words(&self.text).join(" ")),
        }
    }

    /// The key's FNV-1a hash, in hex: names an essential without its
    /// words.
    pub fn tag(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.key().bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    pub fn turn(&self) -> Option<u32> {
        turn_number(&self.turn_id)
    }
}

/// What a summary's window gave, kept on the summary: its essentials, in
/// conversation order, and earlier open tasks it reports done (by
/// [`Essential::tag`]: no words of them, so that forgetting their turn
/// leaves nothing of it here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Carrying {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub essentials: Vec<Essential>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<String>,
}

impl Carrying {
    pub fn is_empty(&self) -> bool {
        self.essentials.is_empty() && self.closed.is_empty()
    }
}

/// The essentials of `window` (its traces, in any order); `open` are the
/// tasks still open before it, which a report in the window may close.
pub fn extract(window: &[&RawTrace], open: &[&Essential]) -> Carrying {
    let mut ordered = window.to_vec();
    ordered.sort_by_key(|t| (turn_number(&t.turn_id), t.seq));
    let mut reader = Reader {
        found: vec![],
        closed: vec![],
        open: open
            .iter()
            .filter(|e| e.kind == Kind::Task)
            .map(|e| (e.tag(), content_words(&e.text)))
            .collect(),
    };
    for t in ordered {
        reader.read(t);
    }
    let mut essentials = latest_per_key(reader.found);
    cap(&mut essentials);
    Carrying {
        essentials,
        closed: reader.closed,
    }
}

/// Marks the essentials `summary` holds: an identifier it names as
/// written, anything else whose words it names ([`HOLD_SHARE`] of them).
pub fn hold(essentials: &mut [Essential], summary: &str) {
    let words: HashSet<String> = content_words(summary).into_iter().collect();
    for e in essentials {
        e.held = match e.kind {
            Kind::Identifier => summary.contains(&e.name),
            _ => {
                let own = content_words(&e.text);
                let named = own.iter().filter(|w| words.contains(*w)).count();
                !own.is_empty() && named as f64 >= HOLD_SHARE * own.len() as f64
            }
        };
    }
}

/// Whether a report of something done, with `words`, closes a task of
/// `task` words: it names most of them (two at least, or all of a short
/// task's).
fn closes(task: &[String], words: &HashSet<String>) -> bool {
    let shared = task.iter().filter(|w| words.contains(*w)).count();
    if task.len() <= 2 {
        return shared == task.len() && shared > 0;
    }
    shared >= 2 && shared as f64 >= CLOSE_SHARE * task.len() as f64
}

struct Reader {
    found: Vec<Essential>,
    closed: Vec<String>,
    /// Tasks open before the window: (tag, words).
    open: Vec<(String, Vec<String>)>,
}

impl Reader {
    fn push(&mut self, t: &RawTrace, kind: Kind, text: &str, name: &str, from: &str) {
        let text = shorten(&fold_whitespace(text), TEXT_CHARS);
        if text.is_empty() {
            return;
        }
        self.found.push(Essential {
            kind,
            text,
            name: name.to_owned(),
            turn_id: t.turn_id.clone(),
            trace_id: t.id.clone(),
            from: from.to_owned(),
            held: false,
        });
    }

    fn read(&mut self, t: &RawTrace) {
        match t.trace_type {
            TraceType::User => self.user(t),
            TraceType::Assistant => {
                for line in t.content.lines() {
                    for s in scan::sentences(line) {
                        if scan::is_done(s) {
                            self.close(s);
                        }
                        if scan::is_decision(s) {
                            self.push(t, Kind::Decision, s, "", "assistant");
                        } else if scan::is_fix(s) {
                            self.push(t, Kind::Error, s, "", "assistant");
                        }
                    }
                }
            }
            TraceType::ToolCall => {
                let args = t
                    .tool_args
                    .as_ref()
                    .map(|a| serde_json::Value::Object(a.clone()).to_string())
                    .unwrap_or_default();
                let from = format!("{} call", tool(t));
                self.identifiers(t, &args, &from);
            }
            TraceType::ToolResult => {
                let text = result_text(t);
                let from = format!("{} result", tool(t));
                let errors: Vec<&str> = text.lines().filter(|l| scan::is_error_line(l)).collect();
                for line in &errors[errors.len().saturating_sub(PER_TRACE_ERRORS)..] {
                    self.push(t, Kind::Error, line, "", &from);
                }
                self.identifiers(t, &text, &from);
            }
        }
    }

    fn user(&mut self, t: &RawTrace) {
        let text = &t.content;
        let cues = scan::cues_tasks(text);
        for line in text.lines() {
            if let Some((item, ticked)) = scan::list_item(line) {
                if item.is_empty() {
                    continue;
                }
                if ticked {
                    self.close(item);
                } else if cues {
                    self.push(t, Kind::Task, item, "", "user");
                }
                continue;
            }
            for s in scan::sentences(line) {
                if scan::is_done(s) {
                    self.close(s);
                }
                if scan::is_rule(s) {
                    self.push(t, Kind::Rule, s, "", "user");
                } else if scan::is_decision(s) {
                    self.push(t, Kind::Decision, s, "", "user");
                }
            }
        }
        if text.chars().any(char::is_alphabetic) {
            self.push(t, Kind::Request, text, "", "user");
        }
        self.identifiers(t, text, "user");
    }

    /// The last identifiers of `text` (a trace's), each with the line it
    /// is in.
    fn identifiers(&mut self, t: &RawTrace, text: &str, from: &str) {
        let mut found: Vec<(String, &str)> = vec![];
        let mut seen: HashSet<String> = HashSet::new();
        for line in text.lines() {
            let names = line
                .split_whitespace()
                .filter_map(|w| scan::identifier(w).map(str::to_owned))
                .chain(scan::ports(line));
            for name in names {
                if seen.insert(name.clone()) {
                    found.push((name, line));
                }
            }
        }
        for (name, line) in &found[found.len().saturating_sub(PER_TRACE_IDS)..] {
            let words: Vec<String> = name
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect();
            let around = excerpt(&fold_whitespace(line), AROUND_CHARS, &words).text;
            self.push(t, Kind::Identifier, &around, name, from);
        }
    }

    /// `report` says something is done: the tasks it names leave the open
    /// list (those of this window) or are recorded closed (earlier ones).
    fn close(&mut self, report: &str) {
        let words: HashSet<String> = content_words(report).into_iter().collect();
        self.found
            .retain(|e| e.kind != Kind::Task || !closes(&content_words(&e.text), &words));
        let closed = &mut self.closed;
        self.open.retain(|(tag, task)| {
            let done = closes(task, &words);
            if done {
                closed.push(tag.clone());
            }
            !done
        });
    }
}

fn tool(t: &RawTrace) -> String {
    shorten(
        &fold_whitespace(t.tool_name.as_deref().unwrap_or("tool")),
        40,
    )
}

/// The latest essential of each key, in the order of the latest.
pub fn latest_per_key(list: Vec<Essential>) -> Vec<Essential> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut out: Vec<Essential> = list
        .into_iter()
        .rev()
        .filter(|e| seen.insert(e.key()))
        .collect();
    out.reverse();
    out
}

/// At most [`PER_KIND`] of a kind ([`PER_WINDOW_IDS`] identifiers): the
/// latest.
fn cap(list: &mut Vec<Essential>) {
    let mut counts = std::collections::HashMap::new();
    let mut keep = vec![false; list.len()];
    for (i, e) in list.iter().enumerate().rev() {
        let n = counts.entry(e.kind).or_insert(0usize);
        let most = if e.kind == Kind::Identifier {
            PER_WINDOW_IDS
        } else {
            PER_KIND
        };
        if *n < most {
            *n += 1;
            keep[i] = true;
        }
    }
    let mut i = 0;
    list.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}
