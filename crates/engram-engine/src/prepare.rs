//! PrepareRequest: the prompt of the agent's next LLM call, compacted
//! first when it must be, with the turn's recall attached.

use std::sync::Arc;

use engram_core::compaction::{
    CompactionError, CompactionReport, Signals, Strategy, Trigger, decide,
};
use engram_core::render::{Format, Prompt};
use engram_core::{AgentId, NewEvent, TraceType, tokens};
use engram_store::{AgentContext, PrepareInput};

use crate::api::{PrepareRequest, Prepared, PromptMessages};
use crate::budget::Budgets;
use crate::caches::{Caches, TurnRecall};
use crate::compactor::{How, Wait};
use crate::error::{EngineError, Result};
use crate::recall;
use crate::sizing::{self, Sizing, sizing};
use crate::strategy::Strategies;
use crate::{Engine, limits};

/// What a PrepareRequest asks for, parsed.
struct Ask<'a> {
    agent: &'a AgentId,
    model: Option<&'a str>,
    format: Option<Format>,
    max_output: Option<u32>,
    force: bool,
    max_active_turns: usize,
    /// The request's strategy, if it named one.
    strategy: Option<Strategy>,
    strategies: &'a Strategies,
}

/// What the first look at an agent's prompt decided.
enum Look {
    /// Its size now, and its model; and where the next summary may start
    /// being written ahead (`budget.precompact_ratio`), if it may.
    Ready(Sizing, String, Option<u32>),
    /// Compact first (trigger, prompt tokens now, how).
    Compact(Trigger, u32, How),
    /// A trigger fired that the strategy does not answer (`none`; a turn
    /// count with `compact_tool_results`): the prompt as it stands, with
    /// the report of the compaction that did not run when the client
    /// forced one.
    Off(Sizing, String, Option<CompactionReport>),
}

impl Engine {
    /// The prompt of the agent's next LLM call: the request's system prompt
    /// and user input stored first, a compaction run first when a trigger
    /// says so, the turn's recall attached where it fits.
    pub async fn prepare(&self, req: PrepareRequest) -> Result<Prepared> {
        let id = limits::agent_id("agent_id", &req.agent_id)?;
        let recall = recall::Settings::of(&self.recall, &req);
        let preview = req.preview;
        let user_input = req.user_input.map(user_event).transpose()?;
        let user = limits::optional_user(req.user_id.as_deref())?;
        let ask = Ask {
            agent: &id,
            model: non_empty(req.model.as_deref()),
            format: req.format,
            max_output: req.max_output_tokens.filter(|&n| n > 0),
            force: req.force_compaction,
            max_active_turns: self.compactor.max_active_turns(),
            strategy: req.strategy,
            strategies: self.compactor.strategies(),
        };
        let input = PrepareInput {
            user: user.as_ref(),
            system_prompt: non_empty(req.system_prompt.as_deref()),
            user_input,
            model: ask.model,
            // Every payload but Gemini's names its model.
            needs_model: matches!(ask.format, Some(f) if f != Format::Gemini),
        };
        if preview
            && (input.user_input.is_some()
                || input.system_prompt.is_some()
                || input.user.is_some()
                || ask.force)
        {
            return Err(EngineError::Invalid(
                "a preview stores nothing: leave user_input, system_prompt, user_id and force_compaction unset".into(),
            ));
        }
        let (store, caches, budgets) = (self.store.as_ref(), &*self.caches, &*self.budgets);
        // A prompt that will recall (a user's conversation; an agent whose
        // last prompt did) embeds its new message while storing it.
        if let Some(event) = &input.user_input
            && recall.enabled
            && recall.max_tokens > 0
            && (input.user.is_some() || caches.recalled_last(&id))
        {
            store.expect_query(event.content.trim());
        }
        // The agent is locked only to store the input and take its prompt;
        // counting, deciding and rendering happen after.
        let prepared = store.prepare(&id, input).await?;
        let mut context = prepared.context;
        // A preview starts nothing and leaves the agent's idle clock alone.
        if context.awaits_first_epoch && self.users.inject_last_summary && !preview {
            context = crate::users::start_first_epoch(store, &id, context).await;
        }
        if context.user_id.is_some() && !preview {
            self.touch(&id);
        }
        // The blocks join the system message before anything is counted:
        // they are part of the prompt's size.
        let (section, max_tokens) = self.blocks_in(&id, &context, &prepared.blocks, &ask);
        let system = section
            .as_deref()
            .map(|s| crate::blocks::with_section(context.system.as_deref(), s));
        if let Some(system) = &system {
            context.system = Some(system.clone());
        }
        let mut look =
            sizing::with_caches(caches, &id, &context, |c| look(&context, c, &ask, budgets));
        let mut due = None;
        if preview {
            // Shown as it stands: a compaction that is due waits for the
            // next PrepareRequest, and nothing is written ahead.
            look = match look {
                Look::Compact(trigger, ..) => {
                    due = Some(trigger);
                    let (size, model) = sizing::with_caches(caches, &id, &context, |c| {
                        size_of(&context, c, &ask, budgets)
                    });
                    Look::Ready(size, model, None)
                }
                Look::Ready(size, model, _) | Look::Off(size, model, _) => {
                    Look::Ready(size, model, None)
                }
            };
        }
        let (context, size, report) = match look {
            Look::Ready(size, model, ahead) => {
                let (tokens, trigger) = (size.prompt_tokens(), size.budget.trigger_tokens);
                if let Some(at) = ahead
                    && self
                        .compactor
                        .ahead_due(&id, (tokens, context.turns), at, trigger)
                {
                    self.compactor.prepare_ahead(&id, Some(context.epoch));
                }
                (context, (size, model), None)
            }
            Look::Off(size, model, report) => (context, (size, model), report),
            Look::Compact(trigger, tokens_before, how) => {
                // Compaction runs before the prompt is built, once; the prompt
                // of the new epoch is built whatever the report says.
                let compacted = self
                    .compactor
                    .compact_waiting(&id, trigger, None, tokens_before, how)
                    .await;
                // Deferred, a compaction changed nothing but, perhaps, a
                // microcompact's placeholders (which it reports).
                let report = (!compacted.deferred || !compacted.report.steps.is_empty())
                    .then_some(compacted.report);
                let mut context = match compacted.context {
                    Some(context) => context,
                    None if compacted.deferred => context,
                    None => store.context(&id).await?,
                };
                if system.is_some() {
                    context.system = system;
                }
                let size = sizing::with_caches(caches, &id, &context, |c| {
                    size_of(&context, c, &ask, budgets)
                });
                (context, size, report)
            }
        };
        // Ranked after any compaction: what it archived is recalled too.
        let recalled = recall::for_turn(store, caches, &id, &context, recall).await;
        let recalled = recalled.as_deref().map(|r| (r, recall.max_tokens));
        let mut prepared = sizing::with_caches(caches, &id, &context, |c| {
            build(&context, c, &ask, size, report, recalled)
        });
        if let Some(trigger) = due {
            prepared.warnings.push(format!(
                "a compaction is due ({}): the next PrepareRequest runs it first; this preview shows the prompt before it",
                trigger.as_str()
            ));
        }
        if let Some(section) = section {
            prepared.blocks = section.shown.clone();
            prepared
                .warnings
                .extend(crate::blocks::cut_warning(&section, max_tokens));
        }
        Ok(prepared)
    }

    /// The blocks section the agent's prompt shows, in at most their share
    /// of the input budget (that share, in tokens, beside it).
    fn blocks_in(
        &self,
        id: &AgentId,
        context: &AgentContext,
        seen: &engram_store::SeenBlocks,
        ask: &Ask<'_>,
    ) -> (Option<Arc<engram_core::blocks::Section>>, u32) {
        let model = context.model(ask.model);
        let budget = self.budgets.budget(id.as_str(), &model, ask.max_output);
        let max = (f64::from(budget.input_budget) * self.blocks.max_share) as u32;
        let encoding = tokens::encoding_for(&model);
        let section =
            crate::blocks::section_for(&self.caches, id, context.transcript, seen, encoding, max);
        (section, max)
    }
}

/// The warning of a prompt over its model's input budget: first, how far
/// over, so that no client misses that the provider will refuse it.
fn over_budget(tokens: u32, budget: &engram_core::budget::TokenBudget, model: &str) -> String {
    let model = if model.is_empty() {
        "the default model"
    } else {
        model
    };
    format!(
        "PROMPT OVER THE MODEL'S WINDOW: ~{tokens} tokens, {} over the input budget of {model} ({} of its {}-token window, output and margin reserved); the provider will refuse it. Compaction keeps the current turn and the raw tail whole: shorten or split the largest messages, or store large content elsewhere",
        tokens - budget.input_budget,
        budget.input_budget,
        budget.max_context_tokens,
    )
}

/// `None` for an empty string: protocols that cannot tell unset from
/// empty (proto3) send "".
fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// The user input of a PrepareRequest: a user event (its type may be left
/// unset).
fn user_event(mut event: NewEvent) -> Result<NewEvent> {
    match event.trace_type {
        None | Some(TraceType::User) => {
            event.trace_type = Some(TraceType::User);
            Ok(event)
        }
        Some(other) => Err(EngineError::Invalid(format!(
            "user_input must be a user event, not {}; ingest other events with Ingest",
            other.as_str()
        ))),
    }
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
    let tokens = size.prompt_tokens();
    let chosen = ask.strategies.of(ask.agent.as_str(), &model, ask.strategy);
    // Only a summary is written ahead.
    let ahead = chosen
        .strategy
        .summarizes()
        .then(|| budgets.precompact_tokens(ask.agent.as_str(), &model, &size.budget))
        .flatten();
    let how = |wait| How { wait, chosen };
    match decide(size.size, &size.budget, signals) {
        // Nothing is compacted; a client that forced it is told why.
        Some(trigger) if !chosen.strategy.answers(trigger) => {
            let report = ask.force.then(|| {
                let mut report = CompactionReport::new(trigger, tokens);
                report.strategy = chosen.strategy;
                report.failed(CompactionError::Off)
            });
            Look::Off(size, model, report)
        }
        // With summaries written ahead, a prompt that fits its window does
        // not wait for a summarizer.
        Some(trigger) if ahead.is_some() && tokens <= size.budget.input_budget => {
            Look::Compact(trigger, tokens, how(Wait::NotWhileItFits))
        }
        Some(trigger) => Look::Compact(trigger, tokens, how(Wait::Always)),
        None => Look::Ready(size, model, ahead),
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
) -> Prepared {
    let room = |max: u32| {
        max.min(
            size.budget
                .input_budget
                .saturating_sub(size.prompt_tokens()),
        )
    };
    let encoding = tokens::encoding_for(&model);
    let attached = recalled.and_then(|(recall, max)| {
        let counted = &mut caches.recall_tokens;
        recall::attach(recall, &context.messages, encoding, room(max), counted)
    });
    let recall_report = recalled.map(|(recall, _)| {
        let shown = attached.as_ref().map_or(0, |a| a.recalled.len());
        recall.report.showing(recall.entries.len(), shown)
    });
    // Compaction is about the transcript: its report leaves the block out;
    // the prompt's estimate counts it.
    let transcript_tokens = size.prompt_tokens();
    let block_tokens = attached.as_ref().map_or(0, |a| a.tokens);
    let tokens_now = transcript_tokens + block_tokens;
    // The usage reported for this prompt counts the block; the next
    // prompt does not carry it.
    caches.served_extra = Some(block_tokens);
    let mut warnings = vec![];
    let report = report.map(|mut report| {
        report.tokens_after = transcript_tokens;
        if let Some(error) = &report.error {
            let steps: Vec<&str> = report.steps.iter().map(|t| t.as_str()).collect();
            warnings.push(if steps.is_empty() {
                format!(
                    "compaction ({}) did not run: {error}; the prompt was not pruned",
                    report.trigger.as_str()
                )
            } else {
                format!(
                    "compaction ({}) stopped after {}: {error}",
                    report.trigger.as_str(),
                    steps.join(", ")
                )
            });
        }
        report
    });
    if tokens_now > size.budget.input_budget {
        warnings.push(over_budget(tokens_now, &size.budget, &model));
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
    let shared_len = prompt.messages.len();
    Prepared {
        messages: PromptMessages {
            system: system.map(|s| {
                engram_core::transcript::Message::text(engram_core::transcript::Role::System, s)
            }),
            shared: Arc::clone(&context.messages),
            shared_len,
            tail,
        },
        rendered,
        turn_id: context.current_turn_id.clone(),
        estimated_prompt_tokens: tokens_now,
        budget: size.budget,
        transcript_tokens,
        compaction: report,
        epoch: context.epoch,
        warnings,
        recalled: attached.map(|a| a.recalled).unwrap_or_default(),
        recall: recall_report,
        blocks: vec![],
    }
}
