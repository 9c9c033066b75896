//! Whole requests and answers between the wire and the engine.

use engram_engine::{
    AgentPage, ContextStats, EngineError, IngestRequest, PrepareRequest, Prepared, RetrieveRequest,
    Retrieved,
};
use engram_proto::pb;
use engram_store::Ingested;

use super::{
    budget_to_pb, episodic_to_pb, event_from_pb, format_from_pb, index_state_into_pb,
    interaction_to_pb, message_to_pb, non_empty, recalled_into_pb, report_to_pb, semantic_to_pb,
    trace_into_pb, trace_to_pb, usage_from_pb,
};

pub fn ingest_from_pb(req: pb::IngestRequest) -> IngestRequest {
    IngestRequest {
        agent_id: req.agent_id,
        events: req.events.into_iter().map(event_from_pb).collect(),
        usage: req.usage.map(usage_from_pb),
        model: non_empty(req.model),
        user_id: non_empty(req.user_id),
    }
}

pub fn ingested_to_pb(out: Ingested) -> pb::IngestResponse {
    pb::IngestResponse {
        traces: out.traces.into_iter().map(trace_into_pb).collect(),
        current_turn_id: out.current_turn_id,
        compaction_required: out.compaction_required,
    }
}

pub fn prepare_from_pb(req: pb::PrepareRequestRequest) -> Result<PrepareRequest, EngineError> {
    Ok(PrepareRequest {
        format: format_from_pb(req.render_format)?,
        agent_id: req.agent_id,
        system_prompt: non_empty(req.system_prompt),
        user_input: req.user_input.map(event_from_pb),
        model: non_empty(req.model),
        max_output_tokens: Some(req.max_output_tokens).filter(|&n| n > 0),
        force_compaction: req.force_compaction,
        recall: req.recall,
        recall_max_tokens: req.recall_max_tokens,
        user_id: non_empty(req.user_id),
        preview: req.preview,
        strategy: super::strategy_from_pb(&req.strategy)?,
        recall_as_of: req.recall_as_of,
    })
}

pub fn prepared_to_pb(p: Prepared) -> pb::PrepareRequestResponse {
    let compaction = match &p.compaction {
        Some(report) => report_to_pb(report),
        // No compaction ran: the report carries the prompt's size only.
        None => pb::CompactionReport {
            tokens_before: p.transcript_tokens,
            tokens_after: p.transcript_tokens,
            ..Default::default()
        },
    };
    pb::PrepareRequestResponse {
        blocks: p.blocks.into_iter().map(super::shown_to_pb).collect(),
        messages: p.messages.iter().map(message_to_pb).collect(),
        rendered_payload_json: p.rendered,
        turn_id: p.turn_id,
        estimated_prompt_tokens: p.estimated_prompt_tokens,
        budget: Some(budget_to_pb(&p.budget)),
        compaction: Some(compaction),
        epoch: p.epoch,
        warnings: p.warnings,
        recalled: p.recalled.into_iter().map(recalled_into_pb).collect(),
        recall: p.recall.map(|r| pb::RecallReport {
            ranked: r.ranked,
            best_score: r.best_score,
            floor: r.floor,
            below_floor: r.below_floor,
            already_shown: r.already_shown,
            over_budget: r.over_budget,
            unanswered: r.unanswered,
        }),
    }
}

pub fn retrieve_from_pb(req: pb::RetrieveRequest) -> RetrieveRequest {
    RetrieveRequest {
        agent_id: req.agent_id,
        user_id: req.user_id,
        max_episodic: req.max_episodic,
        max_semantic: req.max_semantic,
        raw_tail_turns: req.raw_tail_turns,
        include_tool_interactions: req.include_tool_interactions,
        query: req.query,
        max_recalled: req.max_recalled,
        context_messages: req.context_messages,
        wait_for_index_ms: req.wait_for_index_ms,
        as_of: req.as_of,
    }
}

pub fn retrieved_to_pb(r: Retrieved) -> pb::RetrieveResponse {
    pb::RetrieveResponse {
        bundle: Some(pb::MemoryBundle {
            episodic: r.episodic.iter().map(episodic_to_pb).collect(),
            semantic: r.semantic.iter().map(semantic_to_pb).collect(),
        }),
        tool_interactions: r.tool_interactions.iter().map(interaction_to_pb).collect(),
        raw_tail: r.raw_tail.iter().map(trace_to_pb).collect(),
        recalled: r.recalled.into_iter().map(recalled_into_pb).collect(),
        index: r.index.map(index_state_into_pb),
    }
}

pub fn stats_to_pb(s: ContextStats) -> pb::GetContextStatsResponse {
    pb::GetContextStatsResponse {
        user_id: s.user_id.unwrap_or_default(),
        estimated_tokens: s.estimated_tokens,
        last_reported_prompt_tokens: s.last_reported_prompt_tokens,
        estimated_tokens_since_report: s.estimated_tokens_since_report,
        budget: Some(budget_to_pb(&s.budget)),
        trigger_tokens: s.budget.trigger_tokens,
        percent_used: s.percent_used,
        messages: s.messages,
        turns: s.turns,
        epoch: s.epoch,
        compactions: s.compactions,
        consecutive_failures: s.consecutive_failures,
        files: s
            .files
            .into_iter()
            .map(|(name, bytes)| pb::FileSize { name, bytes })
            .collect(),
        compaction_required: s.compaction_required,
        precompact_tokens: s.precompact_tokens,
        summary_ahead: s.summary_ahead.to_owned(),
        strategy: s.strategy.strategy.as_str().to_owned(),
        keep_last_turns: u32::try_from(s.strategy.keep_last_turns).unwrap_or(u32::MAX),
        last_event_at: s.last_event_at,
        model: s.model,
        index: Some(index_state_into_pb(s.index)),
    }
}

pub fn compaction_page_to_pb(page: engram_engine::CompactionPage) -> pb::ListCompactionsResponse {
    let record = |r: engram_core::compaction::CompactionRecord| pb::CompactionRecord {
        seq: r.seq,
        at: r.at,
        duration_secs: r.duration_secs,
        report: Some(pb::CompactionReport {
            // The prompt changed, unless it failed.
            performed: r.outcome != "failed",
            trigger: r.trigger,
            steps: r.steps,
            turn_ids: r.turn_ids,
            episodic_id: r.episodic_id,
            semantic_added: r.semantic_added,
            semantic_updated: r.semantic_updated,
            carried: r.carried,
            carry_dropped: r.carry_dropped,
            traces_pruned: r.traces_pruned,
            tokens_before: r.tokens_before,
            tokens_after: r.tokens_after,
            error: r.error,
            prepared_in_background: r.prepared_in_background,
            prepared_secs_ago: 0.0,
            // Records from before strategies all summarized.
            strategy: if r.strategy.is_empty() {
                "summarize".to_owned()
            } else {
                r.strategy
            },
        }),
        outcome: r.outcome,
        summarizer: r.summarizer,
    };
    pb::ListCompactionsResponse {
        compactions: page.compactions.into_iter().map(record).collect(),
        next_page_token: page.next_page_token.unwrap_or_default(),
    }
}

pub fn user_page_to_pb(page: engram_engine::UserPage) -> pb::ListUsersResponse {
    pb::ListUsersResponse {
        user_ids: page.user_ids,
        next_page_token: page.next_page_token.unwrap_or_default(),
    }
}

pub fn agent_page_to_pb(page: AgentPage) -> pb::ListAgentsResponse {
    pb::ListAgentsResponse {
        agent_ids: page.agent_ids,
        next_page_token: page.next_page_token.unwrap_or_default(),
    }
}
