//! Consolidation over a real file store and the real local model: the
//! meaning threshold measured on the negation and change pairs, repeats
//! merged across conversations, a summarizer's decisions applied, and
//! what is never changed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use engram_core::compaction::merge::pairs::{MEANING_REPEATS, NOT_REPEATS};
use engram_core::embed::Embedder;
use engram_core::memory::SemanticItem;
use engram_core::users::consolidate::{SAME_FACT, same_fact};
use engram_core::{NewEvent, UserId};
use engram_embed::LocalModel;
use engram_files::{FileStore, StoreConfig};
use engram_llm::reconcile::Decisions;
use engram_llm::{ReconcileFuture, SummarizeError, Summarizer, SummaryFuture, SummaryRequest};

use super::Cause;
use crate::Engine;
use crate::api::IngestRequest;

fn local_model() -> Arc<LocalModel> {
    engram_embed::set_background_priority(engram_embed::BackgroundPriority::Normal);
    let dir = std::env::var_os("ENGRAM_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        });
    Arc::new(
        LocalModel::load(&dir).unwrap_or_else(|e| {
            panic!("{e}: the local model is missing; `make models` installs it")
        }),
    )
}

async fn cosines(model: &LocalModel, pairs: &[(&str, &str)]) -> Vec<f32> {
    let texts: Vec<String> = pairs
        .iter()
        .flat_map(|(a, b)| [a.to_string(), b.to_string()])
        .collect();
    let v = model.embed(&texts).await.unwrap();
    v.chunks(2)
        .map(|p| p[0].iter().zip(&p[1]).map(|(x, y)| x * y).sum())
        .collect()
}

/// The threshold, measured: no change or negation pair merges, however
/// close the model reads it; most repeats in other words do.
#[tokio::test]
async fn the_meaning_threshold_merges_repeats_and_no_change() {
    let model = local_model();
    let changes = cosines(&model, NOT_REPEATS).await;
    let mut false_merges = vec![];
    for ((a, b), s) in NOT_REPEATS.iter().zip(&changes) {
        if same_fact(a, b, Some(*s)) {
            false_merges.push(format!("{a} / {b}: {s:.3}"));
        }
    }
    assert!(false_merges.is_empty(), "false merges: {false_merges:#?}");
    let repeats = cosines(&model, MEANING_REPEATS).await;
    let merged: Vec<bool> = MEANING_REPEATS
        .iter()
        .zip(&repeats)
        .map(|((a, b), s)| same_fact(a, b, Some(*s)))
        .collect();
    let n = merged.iter().filter(|m| **m).count();
    let table: Vec<String> = MEANING_REPEATS
        .iter()
        .zip(&repeats)
        .map(|((a, b), s)| format!("{s:.3} {a} / {b}"))
        .collect();
    // Measured: 4 of 16 (the rest read closer to a change than a change
    // reads to what it changed).
    assert!(
        n * 4 >= MEANING_REPEATS.len(),
        "only {n} of {} repeats merge at {SAME_FACT}: {table:#?}",
        MEANING_REPEATS.len()
    );
}

/// Decides like an LLM would, from a script: replace the fact whose text
/// starts with the key by the one starting with the value.
#[derive(Debug, Default)]
struct Scripted {
    replace: Vec<(&'static str, &'static str)>,
    asked: Mutex<Vec<Vec<String>>>,
}

impl Summarizer for Scripted {
    fn name(&self) -> String {
        "scripted".into()
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        let summary = engram_llm::extractive::summarize(request);
        Box::pin(async move { Ok(summary) })
    }

    fn reconcile<'a>(&'a self, groups: &'a [Vec<SemanticItem>]) -> Option<ReconcileFuture<'a>> {
        let shown: Vec<String> = groups.iter().flatten().map(|f| f.fact.clone()).collect();
        self.asked.lock().unwrap().push(shown);
        let find = |start: &str| {
            groups
                .iter()
                .flatten()
                .find(|f| f.fact.starts_with(start))
                .map(|f| f.id.clone())
        };
        let mut d = Decisions::default();
        for (old, new) in &self.replace {
            if let (Some(o), Some(n)) = (find(old), find(new)) {
                d.replaces.push((o, n));
            }
        }
        Some(Box::pin(async move { Ok::<_, SummarizeError>(d) }))
    }
}

async fn engine_with(dir: &std::path::Path, summarizer: Arc<dyn Summarizer>) -> Engine {
    let mut config = StoreConfig::new(dir);
    config.embedder = Some(local_model() as Arc<dyn Embedder>);
    let store: Arc<dyn engram_store::Store> = Arc::new(FileStore::open(config).await.unwrap());
    let mut settings = crate::idle::tests::settings();
    settings.policy.raw_tail_turns = 1;
    Engine::new(store, summarizer, &settings)
}

/// A conversation of user `ana` that said `facts`, compacted and folded.
async fn said(engine: &Engine, agent: &str, day: f64, facts: &[&str]) {
    let at = 1_700_000_000.0 + day * 86_400.0;
    let mut events: Vec<NewEvent> = vec![];
    for (n, f) in facts.iter().enumerate() {
        let t = at + n as f64;
        events.push(NewEvent {
            ts: Some(t),
            ..NewEvent::user(*f)
        });
        events.push(NewEvent {
            ts: Some(t + 0.5),
            ..NewEvent::assistant("Noted.")
        });
    }
    for (n, text) in ["Thanks, that is all.", "Bye."].iter().enumerate() {
        let t = at + 100.0 + n as f64;
        events.push(NewEvent {
            ts: Some(t),
            ..NewEvent::user(*text)
        });
        events.push(NewEvent {
            ts: Some(t + 0.5),
            ..NewEvent::assistant("You are welcome.")
        });
    }
    engine
        .ingest(IngestRequest {
            agent_id: agent.into(),
            events,
            user_id: Some("ana".into()),
            ..IngestRequest::default()
        })
        .await
        .unwrap();
    let report = engine.compact(agent, None, None).await.unwrap();
    assert!(report.performed, "{agent} compacted: {report:?}");
}

async fn live(engine: &Engine) -> Vec<String> {
    let user = UserId::parse("ana").unwrap();
    let mut out: Vec<String> = engine
        .store
        .user_facts(&user)
        .await
        .unwrap()
        .into_iter()
        .filter(|f| f.is_live())
        .map(|f| f.fact.fact)
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn repeats_across_conversations_merge_and_nothing_is_replaced_by_guesswork() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with(dir.path(), Arc::new(engram_llm::Extractive)).await;
    said(
        &engine,
        "c-1",
        0.0,
        &["I play curling.", "I live in Lisbon."],
    )
    .await;
    said(
        &engine,
        "c-2",
        30.0,
        &["I enjoy playing curling.", "I live in Berlin now."],
    )
    .await;
    let before = live(&engine).await;
    let record = engine
        .consolidate_user("ana", Cause::Request)
        .await
        .unwrap();
    assert_eq!(record.seq, 1, "logged");
    let after = live(&engine).await;
    assert_eq!(
        record.counts.merged as usize,
        before.len() - after.len(),
        "{before:?} -> {after:?}"
    );
    assert!(record.counts.merged >= 1, "curling said twice: {after:?}");
    assert_eq!(record.counts.replaced + record.counts.invalidated, 0);
    assert_eq!(record.asked, 0, "the embedded summarizer decides nothing");
    assert!(
        after.iter().any(|f| f.contains("Lisbon")),
        "kept: {after:?}"
    );
    assert!(
        after.iter().any(|f| f.contains("Berlin")),
        "kept: {after:?}"
    );
    // Again: nothing left.
    let again = engine
        .consolidate_user("ana", Cause::Request)
        .await
        .unwrap();
    assert_eq!((again.seq, again.counts.merged), (2, 0));
    let log = engine.consolidations("ana", 10).await.unwrap();
    assert_eq!(log.len(), 2);
}

#[tokio::test]
async fn a_summarizers_decision_replaces_one_conversations_fact_by_anothers() {
    let dir = tempfile::tempdir().unwrap();
    let scripted = Arc::new(Scripted {
        replace: vec![("I live in Lisbon", "I moved to Berlin")],
        ..Scripted::default()
    });
    let engine = engine_with(dir.path(), Arc::clone(&scripted) as Arc<dyn Summarizer>).await;
    said(
        &engine,
        "c-1",
        0.0,
        &["I live in Lisbon and work as a nurse."],
    )
    .await;
    said(
        &engine,
        "c-2",
        30.0,
        &["I moved to Berlin and work as a teacher."],
    )
    .await;
    let record = engine
        .consolidate_user("ana", Cause::Request)
        .await
        .unwrap();
    assert!(record.asked >= 1, "{record:?}");
    assert_eq!(record.summarizer, "scripted");
    assert_eq!(record.counts.replaced, 1, "{record:?}");
    let user = UserId::parse("ana").unwrap();
    let facts = engine.store.user_facts(&user).await.unwrap();
    let lisbon = facts
        .iter()
        .find(|f| f.fact.fact.contains("Lisbon"))
        .unwrap();
    let berlin = facts
        .iter()
        .find(|f| f.fact.fact.contains("Berlin"))
        .unwrap();
    assert_eq!(
        lisbon.fact.superseded_by.as_deref(),
        Some(berlin.fact.id.as_str())
    );
    assert_eq!(lisbon.fact.invalid_at, Some(berlin.fact.valid_since()));
    let asked = scripted.asked.lock().unwrap().clone();
    assert!(
        asked
            .iter()
            .any(|g| g.iter().any(|f| f.contains("Lisbon"))
                && g.iter().any(|f| f.contains("Berlin"))),
        "one subject: {asked:?}"
    );
}

/// The idle sweep: once a user's conversations go quiet and are
/// summarized, their facts are consolidated (once; an idle run that finds
/// nothing is not logged).
#[tokio::test(start_paused = true)]
async fn a_quiet_users_facts_are_consolidated_after_their_summary() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::new(dir.path());
    config.embedder = Some(local_model() as Arc<dyn Embedder>);
    let store: Arc<dyn engram_store::Store> = Arc::new(FileStore::open(config).await.unwrap());
    let mut settings = crate::idle::tests::settings();
    settings.policy.raw_tail_turns = 1;
    let idle = settings.users.summarize_idle_after_secs;
    let engine = Engine::new(store, Arc::new(engram_llm::Extractive), &settings);
    for (agent, fact) in [
        ("q-1", "I play curling."),
        ("q-2", "I enjoy playing curling."),
    ] {
        let events = [fact, "Thanks, that is all.", "Bye."]
            .iter()
            .flat_map(|t| [NewEvent::user(*t), NewEvent::assistant("Noted.")])
            .collect();
        engine
            .ingest(IngestRequest {
                agent_id: agent.into(),
                events,
                user_id: Some("ana".into()),
                ..IngestRequest::default()
            })
            .await
            .unwrap();
    }
    assert!(engine.consolidations("ana", 10).await.unwrap().is_empty());
    tokio::time::advance(std::time::Duration::from_secs(idle)).await;
    assert_eq!(engine.summarize_idle().await, 2);
    let log = engine.consolidations("ana", 10).await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!((log[0].trigger.as_str(), log[0].counts.merged), ("idle", 1));
    let curling: Vec<String> = live(&engine)
        .await
        .into_iter()
        .filter(|f| f.contains("curling"))
        .collect();
    assert_eq!(curling.len(), 1, "{curling:?}");
    tokio::time::advance(std::time::Duration::from_secs(idle)).await;
    assert_eq!(engine.summarize_idle().await, 0);
    assert_eq!(engine.consolidations("ana", 10).await.unwrap().len(), 1);
}
