//! Managed facts between protobuf and the engine.

use std::collections::BTreeMap;

use engram_core::facts::{Change, Listing, NewFact};
use engram_core::memory::{Origin, SemanticItem};
use engram_core::users::FactSource;
use engram_engine::EngineError;
use engram_proto::pb;

fn invalid(message: &str) -> EngineError {
    EngineError::Invalid(message.to_owned())
}

fn map(entries: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    entries.into_iter().collect()
}

pub fn new_fact_from_pb(m: pb::NewMemory) -> NewFact {
    NewFact {
        text: m.text,
        tags: m.tags,
        pinned: m.pinned,
        expires_at: m.expires_at,
        metadata: map(m.metadata),
        valid_from: m.valid_from,
    }
}

pub fn listing_from_pb(r: &pb::ListMemoriesRequest) -> Listing {
    Listing {
        query: r.query.clone(),
        tags: r.tags.clone(),
        include_superseded: r.include_superseded,
        include_expired: r.include_expired,
        as_of: r.as_of,
    }
}

pub fn change_from_pb(r: pb::UpdateMemoryRequest) -> Result<Change, EngineError> {
    let expires_at = match r.expires_at {
        None => None,
        Some(0.0) => Some(None),
        Some(at) => Some(Some(at)),
    };
    let change = Change {
        text: r.text,
        tags: r.tags.map(|t| t.values),
        pinned: r.pinned,
        expires_at,
        metadata: r.metadata.map(|m| map(m.entries)),
        valid_from: r.valid_from,
        expected_version: r.expected_version,
    };
    if change.text.is_none()
        && change.tags.is_none()
        && change.pinned.is_none()
        && change.expires_at.is_none()
        && change.metadata.is_none()
        && change.valid_from.is_none()
    {
        return Err(invalid(
            "the update changes nothing: set text, tags, pinned, expires_at, metadata or valid_from",
        ));
    }
    Ok(change)
}

pub fn origin_to_pb(origin: Origin) -> pb::MemoryOrigin {
    match origin {
        Origin::Compaction => pb::MemoryOrigin::Compaction,
        Origin::Client => pb::MemoryOrigin::Client,
    }
}

/// A user's fact with the conversations that said it (an agent's fact:
/// `sources` is empty).
pub fn fact_with_sources_to_pb(fact: &SemanticItem, sources: &[FactSource]) -> pb::SemanticItem {
    pb::SemanticItem {
        sources: sources
            .iter()
            .map(|s| pb::FactSource {
                agent_id: s.agent_id.clone(),
                fact_id: s.fact_id.clone(),
                turn_ids: s.turn_ids.clone(),
            })
            .collect(),
        ..super::semantic_to_pb(fact)
    }
}

/// A consolidation run as the API reports it.
pub fn consolidation_to_pb(
    r: &engram_core::users::consolidate::ConsolidationRecord,
) -> pb::Consolidation {
    let change = |kind: &str, fact: &str, by: &str, at: Option<f64>| pb::FactChange {
        kind: kind.to_owned(),
        fact_id: fact.to_owned(),
        by_fact_id: by.to_owned(),
        invalid_at: at,
    };
    let done = &r.done;
    let changes = (done.merges.iter())
        .map(|m| change("merged", &m.dup, &m.keep, None))
        .chain((done.replaces.iter()).map(|x| change("replaced", &x.old, &x.new, None)))
        .chain((done.invalidates.iter()).map(|(id, at)| change("invalidated", id, "", Some(*at))))
        .collect();
    pb::Consolidation {
        seq: r.seq,
        at: r.at,
        duration_secs: r.duration_secs,
        trigger: r.trigger.clone(),
        merged: r.counts.merged,
        replaced: r.counts.replaced,
        invalidated: r.counts.invalidated,
        unchanged: r.counts.unchanged,
        groups_asked: r.asked,
        summarizer: r.summarizer.clone(),
        unknown_handles: r.unknown_handles,
        error: r.error.clone().unwrap_or_default(),
        changes,
    }
}
