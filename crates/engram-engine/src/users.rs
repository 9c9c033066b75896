//! A user's memory as compaction uses it: the user's facts shown to the
//! summarizer as known (so that a fact said in another conversation is not
//! written again), and the agent's facts folded into the user's store
//! after each compaction.

use std::collections::HashSet;

use engram_core::compaction::normalize;
use engram_core::{AgentId, UserId};
use engram_store::{Job, Store};

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
    for f in facts.into_iter().filter(|f| f.is_live()) {
        if f.sources.iter().any(|s| s.agent_id == agent.as_str()) {
            continue;
        }
        if seen.insert(normalize(&f.fact.fact)) {
            job.known_facts.push(f.fact);
        }
    }
}

/// Folds the agent's facts into its user's store. The agent keeps them in
/// any case: a failure is logged and made good by its next compaction
/// (folding is idempotent).
pub async fn fold_facts(store: &dyn Store, agent: &AgentId, user: &str) {
    let Ok(user) = UserId::parse(user) else {
        return;
    };
    let folded = match store.bundle(agent, 0).await {
        Ok(bundle) => store.fold_user_facts(&user, agent, &bundle.semantic).await,
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
