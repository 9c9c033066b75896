//! Auto-recall: the memories most relevant to the current user message
//! that the prompt does not show, attached to that message as a
//! `[MEMORY:RECALLED]` block.
//!
//! - What: archived messages (with their neighbours), summaries and facts
//!   the search index ranks for the message's text; the active transcript
//!   is left out (the prompt shows it), and so are summaries and facts the
//!   snapshot already shows.
//! - Where: appended to the current turn's user message, never to the
//!   system prompt or the snapshot, so every message before it keeps its
//!   bytes and providers' prompt caches keep hitting.
//! - When: ranked once per turn, at its first prompt, and kept in the
//!   agent's caches for the turn's later prompts (a tool loop's calls), so
//!   those send the same block and hit the cache up to their newest message.
//! - How much: entries in rank order while they fit `max_tokens` and the
//!   room the input budget leaves, none scoring under the floor: a share
//!   of the best score of the same question (`recall.relative_floor`), so
//!   a question with one good answer does not fill the block with
//!   near-misses; the response says what each rule left out.
//! - In what order: the chosen entries newest first, each dated, so that
//!   what is true now reads before what was true once (DESIGN §15).

use engram_store::ranking::RankedReads;
use std::collections::HashSet;
use std::sync::Arc;

use engram_core::blocks::Scope;
use engram_core::later::Later;
use engram_core::text::{fold_whitespace, shorten};
use engram_core::tokens::{self, Encoding};
use engram_core::transcript::{Message, Role};
use engram_core::{AgentId, RawTrace, TraceType, UserId};
use engram_store::{AgentContext, Memory, MemoryQuery, Recalled, Store};

use crate::api::PrepareRequest;
use crate::caches::{self, ContextCaches, RecallEntry as Entry, TurnRecall};
use crate::settings::RecallSection;

/// The block's first line.
pub const HEADER: &str = "[MEMORY:RECALLED]";

/// Memories ranked per turn: more than a block holds, so that the budget
/// decides how many go in.
const CANDIDATES: usize = 24;

/// One shown message's text at most (characters): a long tool result never
/// fills the block alone.
const MAX_LINE: usize = 600;

pub(crate) mod floor;
pub use floor::{Floor, Report};

/// A request's recall settings: the server's, overridden by the request.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub enabled: bool,
    pub max_tokens: u32,
    pub floor: Floor,
    /// Memories as they stood then (`recall_as_of`).
    pub as_of: Option<f64>,
}

impl Settings {
    pub fn of(config: &RecallSection, req: &PrepareRequest) -> Self {
        Self {
            enabled: req.recall.unwrap_or(config.enabled),
            max_tokens: req.recall_max_tokens.unwrap_or(config.max_tokens),
            floor: Floor {
                min_score: config.min_score,
                relative: config.relative_floor,
            },
            as_of: req.recall_as_of,
        }
    }
}

/// The block attached: the message that carries it and what it holds.
#[derive(Debug)]
pub struct Attached {
    pub at: usize,
    pub message: Message,
    pub tokens: u32,
    pub recalled: Vec<Recalled>,
}

/// The recall of the agent's current turn: the one its caches kept, or
/// ranked now. `None` when recall is off, there is no user message, or the
/// index could not answer (the prompt goes out without a block; logged).
pub async fn for_turn(
    store: &dyn Store,
    caches: &ContextCaches,
    id: &AgentId,
    context: &AgentContext,
    settings: Settings,
) -> Option<Arc<TurnRecall>> {
    // Before the first compaction an agent has nothing archived and no
    // summaries or facts: nothing to recall, and no query to embed. A
    // user's conversation recalls from the user's others from its first
    // prompt on.
    let user = context
        .user_id
        .as_deref()
        .and_then(|u| UserId::parse(u).ok());
    if !settings.enabled || settings.max_tokens == 0 || (context.compactions == 0 && user.is_none())
    {
        return None;
    }
    let at = context
        .messages
        .iter()
        .rposition(|m| m.role == Role::User)?;
    let query = context.messages[at].content.trim();
    if query.is_empty() {
        return None;
    }
    let cell = caches.of(id);
    let kept = caches::lock(&cell).recall.clone();
    if let Some(kept) = kept.filter(|r| {
        r.transcript == context.transcript
            && r.epoch == context.epoch
            && r.turn_id == context.current_turn_id
            && r.at == at
            && r.floor == settings.floor
            && r.as_of == settings.as_of
    }) {
        return Some(kept);
    }
    let asked = MemoryQuery {
        query: query.to_owned(),
        limit: CANDIDATES,
        neighbours: 1,
        wait_for_index: None,
        archived_only: true,
        episodic: 0,
        semantic: 0,
        as_of: settings.as_of,
    };
    let ranked = match &user {
        Some(user) => store.rank_user_memories(user, &asked, Some(id)).await,
        None => store.rank_memories(id, &asked).await,
    };
    let memories: Vec<Recalled> = match ranked {
        // The conversation asked about is not named (it is this one).
        Ok(found) => found
            .memories
            .into_iter()
            .map(|mut m| {
                if m.agent_id.as_deref() == Some(id.as_str()) {
                    m.agent_id = None;
                }
                m
            })
            .collect(),
        Err(e) => {
            tracing::warn!(agent = %id, error = %e, "recall skipped: the search index did not answer");
            return None;
        }
    };
    let snapshot = context
        .messages
        .first()
        .filter(|m| m.role == Role::System)
        .map_or("", |m| m.content.as_str());
    let later = what_became(store, id, user.as_ref(), &memories).await;
    let words = engram_core::compaction::merge::content_words(query);
    let (entries, report) = entries(
        memories,
        snapshot,
        settings.floor,
        id.as_str(),
        &later,
        &words,
    );
    let recall = Arc::new(TurnRecall {
        transcript: context.transcript,
        epoch: context.epoch,
        turn_id: context.current_turn_id.clone(),
        floor: settings.floor,
        as_of: settings.as_of,
        at,
        entries,
        report,
    });
    caches::lock(&cell).recall = Some(Arc::clone(&recall));
    Some(recall)
}

/// What became of the facts that the recalled messages of `memories`
/// stated: read from the user's facts (or the agent's own) only when a
/// message was recalled. Unreadable, the block goes without the notes.
async fn what_became(
    store: &dyn Store,
    id: &AgentId,
    user: Option<&UserId>,
    memories: &[Recalled],
) -> Later {
    if !memories
        .iter()
        .any(|m| matches!(m.memory, Memory::Trace { .. }))
    {
        return Later::default();
    }
    let read = match user {
        Some(user) => store.user_facts(user).await.map(|facts| {
            engram_store::offload_over(facts.len() as u64 * 256, || Later::of_user(&facts))
        }),
        None => store.facts(&Scope::Agent(id.clone())).await.map(|facts| {
            engram_store::offload_over(facts.len() as u64 * 256, || {
                Later::of_agent(id.as_str(), &facts)
            })
        }),
    };
    read.unwrap_or_else(|e| {
        tracing::warn!(agent = %id, error = %e, "recall without later changes: the facts did not read");
        Later::default()
    })
}

/// The entries of the block, best first: under the `floor`, already in
/// the snapshot, or already shown (a neighbour of a better hit) left out,
/// and counted as such. An entry from another of the user's conversations
/// than `current` says which; a message that a fact replaced or ended
/// since came from says what became of it (`later`). A message or summary
/// too long for an entry is cut around where it names the question's
/// content `words`, and says which part it shows.
pub fn entries(
    memories: Vec<Recalled>,
    snapshot: &str,
    floor: Floor,
    current: &str,
    later: &Later,
    words: &[String],
) -> (Vec<Entry>, Report) {
    let ranked = memories.len() as u32;
    // A question nobody answered is no candidate: it neither shows nor
    // sets the floor for what answers the question asked now.
    let memories: Vec<Recalled> = memories
        .into_iter()
        .filter(
            |r| !matches!(&r.memory, Memory::Trace { trace, .. } if unanswered(trace, &r.after)),
        )
        .collect();
    let best_score = memories.iter().map(|r| r.score).fold(0.0, f32::max);
    let mut report = Report {
        ranked,
        best_score,
        floor: floor.under(best_score),
        unanswered: ranked - memories.len() as u32,
        ..Report::default()
    };
    let mut shown: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for r in memories {
        if r.score < report.floor {
            report.below_floor += 1;
            continue;
        }
        let whose = match r.agent_id.as_deref() {
            Some(agent) if agent != current => format!("conversation {agent}, "),
            _ => String::new(),
        };
        let text = match &r.memory {
            Memory::Trace { trace, .. } => {
                if !shown.insert(trace.id.clone()) {
                    report.already_shown += 1;
                    continue;
                }
                let conversation = r.agent_id.as_deref().unwrap_or(current);
                let mut lines = vec![format!("- ({whose}{})", when_and_turn(trace))];
                let mut say = |t: &RawTrace| {
                    lines.push(format!("  {}", line(t, words)));
                    if let Some(note) = later.note(conversation, t) {
                        lines.push(format!("  ({note})"));
                    }
                };
                for t in r.before.iter().filter(|t| shown.insert(t.id.clone())) {
                    say(t);
                }
                say(trace);
                for t in r.after.iter().filter(|t| shown.insert(t.id.clone())) {
                    say(t);
                }
                lines.join("\n")
            }
            Memory::Episodic(e) if !snapshot.contains(&fold_whitespace(&e.summary)) => {
                let (from, to) = (e.source.from_ts, e.source.to_ts);
                let when = span(from.unwrap_or(e.ts), to.unwrap_or(e.ts), &e.turn_ids);
                format!("- ({whose}{when}) Summary: {}", around(&e.summary, words))
            }
            // A fact is dated by when it became true (the message it was
            // drawn from); one no longer true by its span, and says so, so
            // that it never reads as current.
            Memory::Semantic(f) if !snapshot.contains(&fold_whitespace(&f.fact)) => {
                let at = f.valid_since();
                let until = f.valid_until(|_| None).filter(|_| !f.is_live());
                let (to, state) = match (until, &f.superseded_by) {
                    (Some(end), Some(_)) => (end, ", since replaced"),
                    (Some(end), None) => (end, ", no longer true"),
                    (None, _) => (at, ""),
                };
                format!(
                    "- ({whose}{}{state}) Fact: {}",
                    span(at, to, &f.turn_ids),
                    one_line(&f.fact)
                )
            }
            Memory::Episodic(_) | Memory::Semantic(_) => {
                report.already_shown += 1;
                continue;
            }
        };
        out.push(Entry { text, memory: r });
    }
    (out, report)
}

/// The block for a prompt: the entries that fit `room` tokens, attached to
/// the current user message. `None` when not one fits.
pub fn attach(
    recall: &TurnRecall,
    messages: &[Message],
    encoding: Encoding,
    room: u32,
    counted: &mut caches::EntryTokens,
) -> Option<Attached> {
    let carrier = messages.get(recall.at)?;
    // "\n\n" before the header and "\n" before each entry.
    let mut tokens = tokens::count_text(encoding, &format!("\n\n{HEADER}"));
    let mut chosen: Vec<&Entry> = Vec::new();
    for entry in &recall.entries {
        let cost = counted.count(encoding, &format!("\n{}", entry.text));
        if tokens + cost > room {
            break;
        }
        tokens += cost;
        chosen.push(entry);
    }
    // Chosen by relevance, shown newest first: of two memories on the same
    // thing, what is true now reads before what was true once (each is
    // dated).
    chosen.sort_by(|a, b| event_time(&b.memory.memory).total_cmp(&event_time(&a.memory.memory)));
    let mut block = String::from(HEADER);
    let mut recalled = Vec::new();
    for entry in chosen {
        block.push('\n');
        block.push_str(&entry.text);
        recalled.push(entry.memory.clone());
    }
    if recalled.is_empty() {
        return None;
    }
    let mut message = carrier.clone();
    message.content = format!("{}\n\n{block}", message.content);
    Some(Attached {
        at: recall.at,
        message,
        tokens,
        recalled,
    })
}

/// A user's message that only asks (every sentence a question) with no
/// answer after it.
fn unanswered(trace: &RawTrace, after: &[RawTrace]) -> bool {
    trace.trace_type == TraceType::User
        && only_asks(&trace.content)
        && !after.iter().any(|t| t.trace_type != TraceType::User)
}

/// Every sentence of `text` ends with a question mark (and there is one).
/// A sentence ends at a `.` or `!` followed by the end or by a capital
/// after a space ("e.g. near" goes on).
fn only_asks(text: &str) -> bool {
    let text = text.trim();
    if !text.ends_with('?') {
        return false;
    }
    let chars: Vec<char> = text.chars().collect();
    // Each whitespace run is looked past by the one mark before it at
    // most: linear.
    !chars.iter().enumerate().any(|(i, c)| {
        if !matches!(c, '.' | '!') {
            return false;
        }
        let mut next = chars[i + 1..].iter().skip_while(|n| n.is_whitespace());
        let spaced = chars.get(i + 1).is_some_and(|n| n.is_whitespace());
        next.next().is_none_or(|n| spaced && n.is_uppercase())
    })
}

/// When what a memory stands for happened: a message's time, the end of
/// what a summary covers, when a fact became true.
fn event_time(memory: &Memory) -> f64 {
    match memory {
        Memory::Trace { trace, .. } => trace.ts,
        Memory::Episodic(e) => e.source.to_ts.unwrap_or(e.ts),
        Memory::Semantic(f) => f.valid_since(),
    }
}

/// "2023-05-08 13:56, turn_0003" (UTC): the time too, so that what was said
/// the same day reads in order.
fn when_and_turn(t: &RawTrace) -> String {
    match engram_core::dates::date_time(t.ts) {
        Some(date) => format!("{date}, {}", t.turn_id),
        None => t.turn_id.clone(),
    }
}

/// "2023-05-08 to 2023-05-20, turn_0001 to turn_0006", shortened where the
/// ends are the same or unknown.
fn span(from: f64, to: f64, turn_ids: &[String]) -> String {
    let range = |a: Option<String>, b: Option<String>| match (a, b) {
        (Some(a), Some(b)) if a != b => Some(format!("{a} to {b}")),
        (a, b) => a.or(b),
    };
    let dates = range(engram_core::dates::date(from), engram_core::dates::date(to));
    let turns = range(turn_ids.first().cloned(), turn_ids.last().cloned());
    [dates, turns]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

/// "Caroline: I went to the support group." — who said it (the
/// participant's name, else the role) and what, on one line.
fn line(t: &RawTrace, words: &[String]) -> String {
    let who = t.name.clone().unwrap_or_else(|| {
        match t.trace_type {
            TraceType::User => "User",
            TraceType::Assistant => "Assistant",
            TraceType::ToolCall => "Tool call",
            TraceType::ToolResult => "Tool result",
        }
        .to_owned()
    });
    let what = if !t.content.trim().is_empty() {
        t.content.clone()
    } else {
        let detail = t
            .tool_args
            .as_ref()
            .map(|a| serde_json::Value::Object(a.clone()))
            .or_else(|| t.tool_result.clone())
            .map(|v| v.to_string())
            .or_else(|| t.tool_error.clone())
            .unwrap_or_default();
        format!("{} {detail}", t.tool_name.as_deref().unwrap_or_default())
    };
    format!("{who}: {}", around(&what, words))
}

/// `text` on one line, in at most [`MAX_LINE`] characters around where it
/// names `words`; cut at its start, it says which characters it shows:
/// "(characters 1201–1790 of 5400) …the build failed with…".
fn around(text: &str, words: &[String]) -> String {
    let e = engram_core::text::excerpt(&fold_whitespace(text), MAX_LINE, words);
    match e.from {
        0 => e.text,
        from => format!("(characters {}–{} of {}) {}", from + 1, e.to, e.of, e.text),
    }
}

/// `text` on one line, in at most [`MAX_LINE`] characters.
fn one_line(text: &str) -> String {
    shorten(&fold_whitespace(text), MAX_LINE)
}

#[cfg(test)]
mod tests;
