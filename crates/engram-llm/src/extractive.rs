//! The embedded summarizer: no model, no network, same input → same output.
//!
//! **Facts** are the user's sentences that state something about the user
//! and what is theirs, or a standing instruction: "my X is/are/was …", "my
//! dog is called …", "my sister Ottoline is getting married …", "Biscuit
//! is my dog", "I'm …", "I live/work/moved …", "I like/love/prefer/hate
//! …", "I have …", "we decided …", "always …", "call me …". Questions,
//! hypotheticals ("if", "would", "suppose"), requests and the assistant's
//! sentences never are. A fact is the sentence as written (dates and places
//! verbatim), without leading fillers ("Oh, and by the way, …").
//!
//! **The summary** picks sentences rather than quoting every turn: each
//! sentence is scored for what it carries (a fact, a decision, the turn's
//! request, an outcome, the answer's lead; specifics such as figures and
//! names count; thanks and pleasantries never), the best sentence of each
//! message goes before the rest, and sentences are taken best first while
//! they fit a budget that grows with the square root of the window's text
//! ([`budget`]); a manual compaction's focus ranks the sentences sharing
//! its words higher. What is taken is printed in conversation order, one
//! line per turn quoted: `Turn 12: user: … [tools: search] assistant: …`
//! (a participant's name instead of the role where the client gave one).
//!
//! Linear in the input: one pass to split and classify (a bounded number of
//! words per sentence), selection by bucketed scores. Everything it writes
//! is tagged [`EXTRACTIVE_TAG`](crate::EXTRACTIVE_TAG) so readers know no
//! model wrote it.

mod classify;
mod sentences;

#[cfg(test)]
mod fixture;
#[cfg(test)]
mod measure;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};

use engram_core::compaction::{Replacing, normalize};
use engram_core::text::{fold_whitespace, shorten};
use engram_core::turns::turn_number;
use engram_core::{RawTrace, TraceType};

use crate::{EXTRACTIVE_TAG, NewFact, Summarizer, Summary, SummaryFuture, SummaryRequest};
use classify::{Reading, Speaker};
use sentences::capitalized;

/// Longest sentence quoted in a summary (and the focus), in characters.
const QUOTE_CHARS: usize = 160;
/// Longest fact, in characters.
const FACT_CHARS: usize = 300;
/// A quoted sentence longer than this ranks a little lower.
const LONG_CHARS: usize = 120;
/// Most facts one summary proposes (the latest are kept).
const MAX_FACTS: usize = 100;
/// The summary's budget per square root of the window's characters.
const BUDGET_PER_ROOT: f64 = 20.0;
/// The budget's floor and ceiling, in characters.
const MIN_BUDGET: usize = 600;
const MAX_BUDGET: usize = 4000;
/// Most tool names listed for a turn.
const MAX_TOOLS: usize = 6;
/// A participant's name, in characters.
const NAME_CHARS: usize = 40;
/// The least a quote can cost: a sentence has 8 bytes or more.
const MIN_COST: usize = 3;
/// Priority added to the best sentence of each message.
const LEAD_BONUS: usize = 16;

/// The summary's length in characters (the focus line aside) for a window
/// whose messages hold `text_chars` characters: 20·√n, at least 600 (a
/// short window is kept nearly whole) and at most 4,000 (~1,000 tokens).
pub fn budget(text_chars: usize) -> usize {
    let root = (text_chars as f64).sqrt() * BUDGET_PER_ROOT;
    (root as usize).clamp(MIN_BUDGET, MAX_BUDGET)
}

/// The embedded extractive summarizer.
#[derive(Debug, Clone, Default)]
pub struct Extractive;

impl Summarizer for Extractive {
    fn name(&self) -> String {
        EXTRACTIVE_TAG.to_owned()
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        let summary = summarize(request);
        Box::pin(async move { Ok(summary) })
    }
}

/// A sentence the summary may quote.
#[derive(Debug)]
struct Candidate {
    turn: usize,
    part: usize,
    text: String,
    chars: usize,
    /// Score, plus [`LEAD_BONUS`] for its message's best sentence.
    priority: usize,
}

/// A turn's line: its messages and tool calls, in order.
#[derive(Debug)]
struct Line {
    number: u32,
    parts: Vec<Part>,
    /// `tools: …` for the turn's calls, if it made any.
    tools: Option<String>,
    opened: bool,
}

#[derive(Debug)]
enum Part {
    Tools,
    Text {
        label: String,
        /// Chosen candidates, by index.
        chosen: Vec<usize>,
    },
}

/// The synchronous core, for callers without a runtime.
pub fn summarize(request: SummaryRequest<'_>) -> Summary {
    let mut turns: BTreeMap<u32, Vec<&RawTrace>> = BTreeMap::new();
    for trace in request.traces {
        turns
            .entry(turn_number(&trace.turn_id).unwrap_or(0))
            .or_default()
            .push(trace);
    }
    let focus = request.focus.map(str::trim).filter(|f| !f.is_empty());
    let focus_words: Vec<String> = focus
        .map(|f| {
            f.split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.chars().count() >= 3)
                .take(32)
                .map(str::to_lowercase)
                .collect()
        })
        .unwrap_or_default();

    let mut seen: HashSet<String> = request
        .known_facts
        .iter()
        .map(|f| normalize(&f.fact))
        .collect();
    let mut facts = vec![];
    let mut lines = vec![];
    let mut candidates = vec![];
    let mut text_chars = 0;
    for (number, traces) in &turns {
        let mut ordered = traces.clone();
        ordered.sort_by_key(|t| t.seq);
        let final_answer = ordered
            .iter()
            .rposition(|t| t.trace_type == TraceType::Assistant && !t.content.trim().is_empty());
        let mut line = Line {
            number: *number,
            parts: vec![],
            tools: tools(&ordered),
            opened: false,
        };
        // The tools part goes where the first call is.
        let mut tools_placed = line.tools.is_none();
        for (k, trace) in ordered.iter().enumerate() {
            let speaker = match trace.trace_type {
                TraceType::User => Speaker::User,
                TraceType::Assistant => Speaker::Assistant,
                TraceType::ToolCall => {
                    if !tools_placed {
                        line.parts.push(Part::Tools);
                        tools_placed = true;
                    }
                    continue;
                }
                TraceType::ToolResult => continue,
            };
            text_chars += trace.content.chars().count();
            let part = line.parts.len();
            line.parts.push(Part::Text {
                label: label(trace, speaker),
                chosen: vec![],
            });
            let message = Message {
                turn: lines.len(),
                part,
                speaker,
                final_answer: final_answer == Some(k),
                focus: &focus_words,
            };
            message.read(&trace.content, &mut candidates, |fact| {
                let fact = shorten(&fact, FACT_CHARS);
                let key = normalize(&fact);
                if !key.is_empty() && seen.insert(key) {
                    facts.push(NewFact {
                        fact,
                        tags: vec![EXTRACTIVE_TAG.to_owned()],
                        confidence: 0.5,
                        salience: 0.6,
                    });
                }
            });
        }
        lines.push(line);
    }
    if facts.len() > MAX_FACTS {
        facts.drain(..facts.len() - MAX_FACTS);
    }
    select(&candidates, &mut lines, budget(text_chars));

    let mut out = vec![];
    if let Some(focus) = focus {
        out.push(format!("Focus: {}", quote(focus)));
    }
    for line in lines.iter().filter(|l| l.opened) {
        out.push(render(line, &candidates));
    }
    if !lines.iter().any(|l| l.opened) {
        out.push(nothing_to_quote(&lines));
    }
    Summary {
        episodic_summary: out.join("\n"),
        tags: vec![EXTRACTIVE_TAG.to_owned()],
        salience: 0.5,
        semantic_facts: facts,
        // No fact is replaced by guesswork: repeats merge, the rest stand
        // beside what they may change, dated.
        replacing: Replacing::Never,
        ..Default::default()
    }
}

/// One message being read into candidates.
struct Message<'f> {
    turn: usize,
    part: usize,
    speaker: Speaker,
    /// The turn's last assistant message: its answer.
    final_answer: bool,
    focus: &'f [String],
}

impl Message<'_> {
    /// Splits `content` into sentences, hands facts to `fact` and pushes
    /// every sentence worth quoting; the best of them gets [`LEAD_BONUS`].
    fn read(&self, content: &str, candidates: &mut Vec<Candidate>, mut fact: impl FnMut(String)) {
        let mut lead_seen = false;
        let mut best: Option<usize> = None;
        for sentence in sentences::split(content) {
            let reading = Reading::new(&sentence);
            let is_fact = self.speaker == Speaker::User && reading.is_fact();
            if is_fact {
                fact(reading.fact_text());
            }
            let small_talk = !is_fact && reading.is_small_talk();
            let lead = !lead_seen && !small_talk;
            lead_seen |= lead;
            let score = self.score(&reading, is_fact, small_talk, lead);
            if score == 0 {
                continue;
            }
            let text = match self.speaker {
                Speaker::User => reading.trimmed(true),
                Speaker::Assistant => reading.without_evaluation(),
            };
            let text = shorten(&capitalized(text), QUOTE_CHARS);
            let chars = text.chars().count();
            // Specific sentences first, then the vague ("I'll ask her") and
            // the long (more of the budget for the same point).
            let penalty = if reading.is_vague() { 2 } else { 0 } + usize::from(chars > LONG_CHARS);
            let priority = (usize::from(score) + usize::from(reading.specifics()))
                .saturating_sub(penalty)
                .max(1)
                + if reading.mentions(self.focus) { 3 } else { 0 };
            if best.is_none_or(|b| candidates[b].priority < priority) {
                best = Some(candidates.len());
            }
            candidates.push(Candidate {
                turn: self.turn,
                part: self.part,
                chars,
                text,
                priority,
            });
        }
        if let Some(b) = best {
            candidates[b].priority += LEAD_BONUS;
        }
    }

    /// What a sentence carries: 0 (nothing: never quoted) to 8 (a fact or
    /// a decision).
    fn score(&self, r: &Reading<'_>, fact: bool, small_talk: bool, lead: bool) -> u8 {
        match self.speaker {
            Speaker::User if r.is_decision(Speaker::User) || fact => 8,
            _ if small_talk => 0,
            Speaker::User if r.is_request() => {
                if lead {
                    7
                } else {
                    5
                }
            }
            Speaker::User => {
                if lead {
                    6
                } else {
                    4
                }
            }
            Speaker::Assistant if !self.final_answer => {
                if r.is_outcome() {
                    3
                } else {
                    1
                }
            }
            Speaker::Assistant if r.is_decision(Speaker::Assistant) || r.is_outcome() => 7,
            Speaker::Assistant if lead => 6,
            Speaker::Assistant => 2,
        }
    }
}

/// Takes candidates best first (spread over the window among equals, see
/// [`spread`]) while the summary stays within `budget` characters; marks
/// the lines and parts they open.
fn select(candidates: &[Candidate], lines: &mut [Line], budget: usize) {
    let mut buckets: Vec<Vec<usize>> = vec![];
    for (i, c) in candidates.iter().enumerate() {
        if buckets.len() <= c.priority {
            buckets.resize_with(c.priority + 1, Vec::new);
        }
        buckets[c.priority].push(i);
    }
    let mut quoted: HashSet<String> = HashSet::new();
    let mut used = 0;
    let order = buckets
        .iter()
        .rev()
        .flat_map(|bucket| spread(bucket.len()).map(|at| bucket[at]));
    for i in order {
        if budget - used < MIN_COST {
            break;
        }
        let c = &candidates[i];
        let line = &mut lines[c.turn];
        // The text and a space; for a new line "Turn N: ", its newline and
        // "[tools: …] "; for a new part "label: " and a space.
        let mut cost = c.chars + 1;
        if !line.opened {
            cost += format!("Turn {}: ", line.number).len() + 1;
            cost += line.tools.as_ref().map_or(0, |t| t.chars().count() + 2);
        }
        let Part::Text { label, chosen } = &mut line.parts[c.part] else {
            continue;
        };
        if chosen.is_empty() {
            cost += label.chars().count() + 4;
        }
        if used + cost > budget {
            continue;
        }
        let key = normalize(&c.text);
        if !quoted.insert(key) {
            continue;
        }
        used += cost;
        chosen.push(i);
        line.opened = true;
    }
}

/// `0..len` in an order that spreads over the range (0, then the middle,
/// then the quarters, …: the bit-reversed order), so that among equally
/// good sentences those taken first cover the whole window, not its start.
fn spread(len: usize) -> impl Iterator<Item = usize> {
    let mut step = len.next_power_of_two();
    let first = (len > 0).then_some(0);
    first.into_iter().chain(
        std::iter::from_fn(move || {
            if step <= 1 {
                return None;
            }
            let half = step / 2;
            step = half;
            Some((half..len).step_by(half * 2))
        })
        .flatten(),
    )
}

fn render(line: &Line, candidates: &[Candidate]) -> String {
    let mut parts = vec![];
    for part in &line.parts {
        match part {
            Part::Tools => parts.extend(line.tools.as_ref().map(|t| format!("[{t}]"))),
            Part::Text { label, chosen } if !chosen.is_empty() => {
                let mut chosen = chosen.clone();
                chosen.sort_unstable();
                let text: Vec<&str> = chosen
                    .iter()
                    .map(|&i| candidates[i].text.as_str())
                    .collect();
                parts.push(format!("{label}: {}", text.join(" ")));
            }
            Part::Text { .. } => {}
        }
    }
    format!("Turn {}: {}", line.number, parts.join(" "))
}

/// The line of a window where no sentence was worth quoting.
fn nothing_to_quote(lines: &[Line]) -> String {
    let span = match (lines.first(), lines.last()) {
        (Some(a), Some(b)) if a.number != b.number => format!("Turns {}–{}", a.number, b.number),
        (Some(a), _) => format!("Turn {}", a.number),
        _ => return "No turns.".to_owned(),
    };
    let tools: Vec<&str> = lines.iter().filter_map(|l| l.tools.as_deref()).collect();
    if tools.is_empty() {
        format!("{span}: small talk only.")
    } else {
        format!("{span}: small talk only; {}.", tools.join("; "))
    }
}

/// `tools: a, b x2 (1 failed)` for the calls of a turn.
fn tools(ordered: &[&RawTrace]) -> Option<String> {
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for t in ordered
        .iter()
        .filter(|t| t.trace_type == TraceType::ToolCall)
    {
        let name = shorten(
            &fold_whitespace(t.tool_name.as_deref().unwrap_or("tool")),
            NAME_CHARS,
        );
        *names.entry(name).or_default() += 1;
    }
    if names.is_empty() {
        return None;
    }
    let errors = ordered
        .iter()
        .filter(|t| {
            t.trace_type == TraceType::ToolResult
                && t.tool_error.as_deref().is_some_and(|e| !e.is_empty())
        })
        .count();
    let mut list: Vec<String> = names
        .iter()
        .take(MAX_TOOLS)
        .map(|(name, n)| {
            if *n > 1 {
                format!("{name} x{n}")
            } else {
                name.clone()
            }
        })
        .collect();
    if names.len() > MAX_TOOLS {
        list.push(format!("+{} more", names.len() - MAX_TOOLS));
    }
    let failed = if errors > 0 {
        format!(" ({errors} failed)")
    } else {
        String::new()
    };
    Some(format!("tools: {}{failed}", list.join(", ")))
}

/// Who spoke: the name the client gave, else the role.
fn label(trace: &RawTrace, speaker: Speaker) -> String {
    match trace.name.as_deref().map(fold_whitespace) {
        Some(name) if !name.is_empty() => shorten(&name, NAME_CHARS),
        _ => match speaker {
            Speaker::User => "user".to_owned(),
            Speaker::Assistant => "assistant".to_owned(),
        },
    }
}

/// One line, trimmed to [`QUOTE_CHARS`], in double quotes.
fn quote(text: &str) -> String {
    let flat = fold_whitespace(text);
    format!("\"{}\"", shorten(&flat, QUOTE_CHARS))
}
