//! A user's memory across conversations: the user's facts shown to the
//! summarizer as known (so that a fact said in another conversation is not
//! written again); the agent's facts and summaries folded into the user's
//! store after each compaction; a new conversation started with the
//! summary of the user's previous one.

/// The heading of the first epoch's snapshot that shows the user's
/// previous conversation.
pub const PREVIOUS_HEADING: &str = "[MEMORY:PREVIOUS CONVERSATION]";

use std::collections::HashSet;

use engram_core::compaction::normalize;
use engram_core::users::LastConversation;
use engram_core::{AgentId, UserId};
use engram_store::{AgentContext, Job, Store};

/// Adds the user's live facts from the user's other conversations to the
/// job's known facts (those it knows already left out). A failed read
/// leaves them out: they are context, not what is summarized.
pub async fn add_known_facts(store: &dyn Store, agent: &AgentId, job: &mut Job) {
    let Some(user) = job.user_id.as_deref().and_then(|u| UserId::parse(u).ok()) else {
        return;
    };
    let facts = match store.user_facts(&user).await {
        Ok(facts) => facts,
        Err(e) => {
            tracing::debug!(agent = %agent, error = %e, "the user's facts not read for the summary");
            return;
        }
    };
    let mut seen: HashSet<String> = job.known_facts.iter().map(|f| normalize(&f.fact)).collect();
    // The latest few: the summarizer's request must not grow with every
    // conversation the user ever had (the rest are found by recall).
    let mut others: Vec<_> = facts
        .into_iter()
        .filter(|f| f.is_live() && !f.sources.iter().any(|s| s.agent_id == agent.as_str()))
        .collect();
    others.sort_by(|a, b| b.fact.ts.total_cmp(&a.fact.ts));
    for f in others.into_iter().take(MAX_KNOWN_FROM_USER) {
        if seen.insert(normalize(&f.fact.fact)) {
            job.known_facts.push(f.fact);
        }
    }
}

/// The user's facts from other conversations a summarizer is shown, at
/// most (the most recent).
const MAX_KNOWN_FROM_USER: usize = 50;

/// Folds the agent's facts into its user's store. The agent keeps them in
/// any case: a failure is logged and made good by its next compaction
/// (folding is idempotent).
pub async fn fold_facts(store: &dyn Store, agent: &AgentId, user: &str) {
    let Ok(user) = UserId::parse(user) else {
        return;
    };
    let folded = match store.bundle(agent, 0).await {
        Ok(bundle) => {
            store
                .fold_into_user(&user, agent, &bundle.semantic, &bundle.episodic)
                .await
        }
        Err(e) => Err(e),
    };
    match folded {
        Ok(f) if !f.changed.is_empty() => {
            tracing::debug!(agent = %agent, user = %user, added = f.added, merged = f.merged, superseded = f.superseded, "facts folded into the user's memory");
        }
        Ok(_) => {}
        // Deleted meanwhile (the agent, or its user): nothing to keep.
        Err(engram_store::StoreError::NotFound(_)) => {}
        Err(e) => {
            tracing::warn!(agent = %agent, user = %user, error = %e, "the agent's facts were not folded into its user's memory; the next compaction will");
        }
    }
}

/// The snapshot that starts a new conversation: the summaries of the
/// user's previous conversation, with its agent id and dates. `None`
/// without one (or when it is this conversation).
pub fn previous_snapshot(last: &LastConversation, agent: &AgentId) -> Option<String> {
    if last.agent_id == agent.as_str() || last.summaries.is_empty() {
        return None;
    }
    let from = last
        .summaries
        .iter()
        .filter_map(|s| s.source.from_ts)
        .reduce(f64::min);
    let to = last
        .summaries
        .iter()
        .filter_map(|s| s.source.to_ts)
        .reduce(f64::max);
    let date = |ts: Option<f64>| ts.and_then(engram_core::dates::date);
    let when = match (date(from), date(to)) {
        (Some(a), Some(b)) if a == b => format!(", {a}"),
        (Some(a), Some(b)) => format!(", {a} to {b}"),
        (Some(a), None) | (None, Some(a)) => format!(", {a}"),
        (None, None) => String::new(),
    };
    let mut out = format!(
        "{PREVIOUS_HEADING}\nThe user's previous conversation ({}{when}):\n",
        last.agent_id
    );
    for (i, s) in last.summaries.iter().enumerate() {
        let summary: Vec<&str> = s.summary.split_whitespace().collect();
        out.push_str(&format!("{}) {}\n", i + 1, summary.join(" ")));
    }
    Some(out)
}

/// Gives a user's new conversation the start of its first epoch, before
/// its first prompt: the summary of the user's previous conversation (or
/// nothing, and it is not asked again). The prompt as it then stands;
/// `context` itself when there is nothing to do or it cannot be done (a
/// failed read or write leaves the conversation to start plain, and is
/// tried again at its next prompt).
pub async fn start_first_epoch(
    store: &dyn Store,
    agent: &AgentId,
    context: AgentContext,
) -> AgentContext {
    let Some(user) = context
        .user_id
        .as_deref()
        .and_then(|u| UserId::parse(u).ok())
    else {
        return context;
    };
    let snapshot = match store.last_conversation(&user).await {
        Ok(last) => last.and_then(|l| previous_snapshot(&l, agent)),
        Err(e) => {
            tracing::warn!(agent = %agent, error = %e, "the user's previous conversation could not be read; trying again at the next prompt");
            return context;
        }
    };
    match store.start_first_epoch(agent, snapshot).await {
        Ok(Some(started)) => started,
        // Started by another request meanwhile: its prompt is the one.
        Ok(None) => store.context(agent).await.unwrap_or(context),
        Err(e) => {
            tracing::warn!(agent = %agent, error = %e, "the conversation's start was not stored; trying again at the next prompt");
            context
        }
    }
}
