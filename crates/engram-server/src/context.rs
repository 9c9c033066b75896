//! PrepareRequest and GetContextStats: the prompt of the next LLM call and
//! the numbers behind it.

use engram_core::compaction::{CompactionReport, Signals, Trigger, decide};
use engram_core::render::{Format, Prompt};
use engram_core::{AgentId, tokens};
use engram_proto::pb;
use engram_store::{AgentContext, PrepareInput, Store};
use tonic::Status;

use crate::budget::Budgets;
use crate::caches::{Caches, ContextCaches};
use crate::compactor::Compactor;
use crate::config::RecallSection;
use crate::convert::{self, non_empty};
use crate::recall::{self, TurnRecall};
use crate::sizing::{self, Sizing, sizing};
use crate::status::{from_core, from_store};

/// What a PrepareRequest asks for, parsed.
struct Ask<'a> {
    agent: &'a AgentId,
    model: Option<&'a str>,
    format: Option<Format>,
    max_output: Option<u32>,
    force: bool,
    max_active_turns: usize,
}

/// What the first look at an agent's prompt decided.
enum Look {
    /// Its size now, and its model.
    Ready(Sizing, String),
    /// Compact first (trigger, prompt tokens now).
    Compact(Trigger, u32),
}

pub async fn prepare_request(
    store: &dyn Store,
    caches: &ContextCaches,
    budgets: &Budgets,
    compactor: &Compactor,
    recall: &RecallSection,
    req: pb::PrepareRequestRequest,
) -> Result<pb::PrepareRequestResponse, Status> {
    let id = AgentId::parse(&req.agent_id).map_err(from_core)?;
    let recall = recall::Settings::of(recall, &req);
    let user_input = req.user_input.map(convert::user_event).transpose()?;
    let ask = Ask {
        agent: &id,
        model: non_empty(req.model.as_str()),
        format: convert::format_from_pb(req.render_format)?,
        max_output: (req.max_output_tokens > 0).then_some(req.max_output_tokens),
        force: req.force_compaction,
        max_active_turns: compactor.max_active_turns(),
    };
    let input = PrepareInput {
        system_prompt: non_empty(req.system_prompt.as_str()),
        user_input,
        model: ask.model,
        // Every payload but Gemini's names its model.
        needs_model: matches!(ask.format, Some(f) if f != Format::Gemini),
    };
    // The agent is locked only to store the input and take its prompt;
    // counting, deciding and rendering happen after.
    let context = store.prepare(&id, input).await.map_err(from_store)?.context;
    let look = sizing::with_caches(caches, &id, &context, |c| look(&context, c, &ask, budgets));
    let (context, size, report) = match look {
        Look::Ready(size, model) => (context, (size, model), None),
        Look::Compact(trigger, tokens_before) => {
            // Compaction runs before the prompt is built, once; the prompt
            // of the new epoch is built whatever the report says.
            let compacted = compactor.compact(&id, trigger, None, tokens_before).await;
            let context = match compacted.context {
                Some(context) => context,
                None => store.context(&id).await.map_err(from_store)?,
            };
            let size = sizing::with_caches(caches, &id, &context, |c| {
                size_of(&context, c, &ask, budgets)
            });
            (context, size, Some(compacted.report))
        }
    };
    // Ranked after any compaction: what it archived is recalled too.
    let recalled = recall::for_turn(store, caches, &id, &context, recall).await;
    let recalled = recalled.as_deref().map(|r| (r, recall.max_tokens));
    Ok(sizing::with_caches(caches, &id, &context, |c| {
        build(&context, c, &ask, size, report, recalled)
    }))
}

/// The size of the prompt `ask` would get now, and its model.
fn size_of(
    context: &AgentContext,
    caches: &mut Caches,
    ask: &Ask<'_>,
    budgets: &Budgets,
) -> (Sizing, String) {
    sizing(
        context,
        caches,
        ask.agent,
        budgets,
        ask.model,
        ask.max_output,
    )
}

/// The prompt, unless a compaction must come first.
fn look(context: &AgentContext, caches: &mut Caches, ask: &Ask<'_>, budgets: &Budgets) -> Look {
    let (size, model) = size_of(context, caches, ask, budgets);
    let signals = Signals {
        compaction_required: context.compaction_required,
        force: ask.force,
        finished_turns: context.finished_turns,
        max_active_turns: ask.max_active_turns,
    };
    match decide(size.size, &size.budget, signals) {
        Some(trigger) => Look::Compact(trigger, size.prompt_tokens()),
        None => Look::Ready(size, model),
    }
}

/// The answer of a PrepareRequest: the messages, the rendered payload and
/// the numbers, with the report of the compaction that ran before, if one
/// did, and the turn's recall attached where it fits (at most `max` tokens).
fn build(
    context: &AgentContext,
    caches: &mut Caches,
    ask: &Ask<'_>,
    (size, model): (Sizing, String),
    report: Option<CompactionReport>,
    recalled: Option<(&TurnRecall, u32)>,
) -> pb::PrepareRequestResponse {
    let room = |max: u32| {
        max.min(
            size.budget
                .input_budget
                .saturating_sub(size.prompt_tokens()),
        )
    };
    let encoding = tokens::encoding_for(&model);
    let attached = recalled
        .and_then(|(recall, max)| recall::attach(recall, &context.messages, encoding, room(max)));
    // Compaction is about the transcript: its report leaves the block out;
    // the prompt's estimate counts it.
    let transcript_tokens = size.prompt_tokens();
    let tokens_now = transcript_tokens + attached.as_ref().map_or(0, |a| a.tokens);
    let mut warnings = vec![];
    let report = match report {
        None => convert::no_compaction_to_pb(transcript_tokens),
        Some(mut report) => {
            report.tokens_after = transcript_tokens;
            if let Some(error) = &report.error {
                warnings.push(format!(
                    "compaction ({}) did not run: {error}; the prompt was not pruned",
                    report.trigger.as_str()
                ));
            }
            convert::report_to_pb(&report)
        }
    };
    if tokens_now > size.budget.input_budget {
        warnings.push(format!(
            "the prompt (~{tokens_now} tokens) exceeds the input budget of {} ({} tokens)",
            if model.is_empty() {
                "the default model"
            } else {
                &model
            },
            size.budget.input_budget
        ));
    }
    let system = context.system.as_deref();
    // The message that carries the block and those after it go out as the
    // prompt's tail: the render cache keeps the messages before it.
    let (messages, tail) = match &attached {
        None => (&context.messages[..], context.tail.clone()),
        Some(a) => (
            &context.messages[..a.at],
            std::iter::once(a.message.clone())
                .chain(context.messages[a.at + 1..].iter().cloned())
                .chain(context.tail.iter().cloned())
                .collect(),
        ),
    };
    let prompt = Prompt {
        model: &model,
        system,
        messages,
        tail: &tail,
        max_output_tokens: size.budget.max_output_tokens,
    };
    let rendered = ask
        .format
        .map(|f| caches.render.render_json(f, context.transcript, &prompt))
        .unwrap_or_default();
    let mut messages = Vec::with_capacity(size.messages);
    if let Some(system) = system {
        messages.push(pb::Message {
            role: pb::Role::System.into(),
            content: system.to_owned(),
            ..Default::default()
        });
    }
    messages.extend(
        prompt
            .messages
            .iter()
            .chain(&tail)
            .map(convert::message_to_pb),
    );
    pb::PrepareRequestResponse {
        messages,
        rendered_payload_json: rendered,
        turn_id: context.current_turn_id.clone(),
        estimated_prompt_tokens: tokens_now,
        budget: Some(convert::budget_to_pb(&size.budget)),
        compaction: Some(report),
        epoch: context.epoch,
        warnings,
        recalled: attached.map(|a| a.recalled).unwrap_or_default(),
    }
}

pub async fn context_stats(
    store: &dyn Store,
    caches: &ContextCaches,
    budgets: &Budgets,
    req: pb::GetContextStatsRequest,
) -> Result<pb::GetContextStatsResponse, Status> {
    let id = AgentId::parse(&req.agent_id).map_err(from_core)?;
    let (context, size, model) =
        sizing::measure(store, caches, budgets, &id, non_empty(req.model.as_str()))
            .await
            .map_err(from_store)?;
    let tokens_now = size.prompt_tokens();
    let mut response = pb::GetContextStatsResponse {
        estimated_tokens: size.size.estimate,
        last_reported_prompt_tokens: size.size.reported.map_or(0, |(r, _)| r),
        estimated_tokens_since_report: size.size.reported.map_or(0, |(_, s)| s),
        budget: Some(convert::budget_to_pb(&size.budget)),
        trigger_tokens: size.budget.trigger_tokens,
        percent_used: size.budget.percent_used(tokens_now),
        messages: u32::try_from(size.messages).unwrap_or(u32::MAX),
        turns: context.turns,
        epoch: context.epoch,
        compactions: context.compactions,
        consecutive_failures: context.consecutive_failures,
        files: vec![],
        compaction_required: context.compaction_required,
        model,
        index: None,
    };
    let index = store.index_state(&id).await.map_err(from_store)?;
    response.index = Some(crate::search::index_state_into_pb(index));
    response.files = store
        .file_sizes(&id)
        .await
        .map_err(from_store)?
        .into_iter()
        .map(|(name, bytes)| pb::FileSize { name, bytes })
        .collect();
    Ok(response)
}

/// The agent's prompt size now (for its last reported model).
pub async fn prompt_tokens(
    store: &dyn Store,
    caches: &ContextCaches,
    budgets: &Budgets,
    id: &AgentId,
) -> Result<u32, Status> {
    let (_, size, _) = sizing::measure(store, caches, budgets, id, None)
        .await
        .map_err(from_store)?;
    Ok(size.prompt_tokens())
}
