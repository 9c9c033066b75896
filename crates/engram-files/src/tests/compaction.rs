//! Compaction in the store: the happy path, recovery after a fault at
//! each step, failures.
use std::collections::HashMap;

use engram_core::compaction::NewFact;
use engram_core::memory::EpisodicItem;
use engram_core::transcript::Role;
use serde_json::json;

use super::*;
use crate::{Memory, MemoryQuery, Policy};
use engram_core::compaction::Summary;

const POLICY: Policy = Policy {
    raw_tail_turns: 2,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

async fn conversation(store: &FileStore, a: &AgentId, turns: usize) {
    for t in 1..=turns {
        store
            .ingest(
                a,
                &[
                    NewEvent::user(format!("question {t}")),
                    NewEvent::tool_call(format!("c{t}"), "lookup", json!({"t": t})),
                    NewEvent::tool_result(format!("c{t}"), json!("found")),
                    NewEvent::assistant(format!("answer {t}")),
                ],
                None,
                None,
                None,
            )
            .await
            .unwrap();
    }
}

fn summary() -> Summary {
    Summary {
        episodic_summary: "Asked five questions.".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![NewFact {
            fact: "User asks many questions".into(),
            tags: vec![],
            confidence: 0.8,
            salience: 0.6,
        }],
        ..Default::default()
    }
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The crash-safety invariants of DESIGN §5, read from the files.
fn assert_consistent(dir: &Path, ingested: usize) {
    let agent = dir.join("agents/c");
    let active = lines(&agent.join("raw_traces.jsonl"));
    let archived = lines(&agent.join("raw_traces_archive.jsonl"));
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in active.iter().chain(&archived) {
        *seen
            .entry(t["id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), ingested, "every trace is somewhere");
    assert!(seen.values().all(|n| *n == 1), "and only once");
    let episodic: Vec<EpisodicItem> = lines(&agent.join("episodic.jsonl"))
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let mut summarized = HashMap::new();
    for e in &episodic {
        for t in &e.turn_ids {
            assert!(
                summarized.insert(t.clone(), e.id.clone()).is_none(),
                "turn {t} summarized twice"
            );
        }
    }
    for t in &active {
        assert!(
            !summarized.contains_key(t["turn_id"].as_str().unwrap()),
            "a summarized turn is still active"
        );
    }
}

#[tokio::test]
async fn a_compaction_archives_old_turns_and_starts_an_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("c");
    conversation(&store, &a, 6).await;
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    assert_eq!(
        job.turn_ids,
        ["turn_0001", "turn_0002", "turn_0003"],
        "tail 2 + current kept"
    );
    assert!(
        store
            .begin_compaction(&a, POLICY)
            .await
            .unwrap()
            .job()
            .is_none(),
        "one at a time"
    );
    // Ingest keeps working while the summarizer runs.
    store
        .ingest(&a, &[NewEvent::assistant("meanwhile")], None, None, None)
        .await
        .unwrap();
    let out = store
        .finish_compaction(&a, job, Some(summary()), POLICY)
        .await
        .unwrap();
    assert_eq!(out.traces_pruned, 12);
    assert_eq!(
        (out.epoch, out.semantic_added, out.semantic_updated),
        (1, 1, 0)
    );
    assert_consistent(dir.path(), 25);
    let (meta, first, messages) = store
        .read(&a, |v| {
            (
                v.meta.clone(),
                v.transcript.messages()[0].clone(),
                v.transcript.messages().len(),
            )
        })
        .await
        .unwrap();
    assert_eq!(
        (meta.epoch, meta.compactions, meta.compaction_required),
        (1, 1, false)
    );
    assert_eq!(first.role, Role::System);
    // The fact dated since the message that said it.
    assert!(
        first.content.starts_with(
            "[MEMORY:EPISODIC]\n1) Asked five questions.\n[MEMORY:SEMANTIC]\n- (since "
        ) && first
            .content
            .contains(") User asks many questions\n[RECENT TURNS]\nTurn 4:\n"),
        "{}",
        first.content
    );
    // snapshot + current turn (user, call step, result, answer) + "meanwhile"
    assert_eq!(messages, 1 + 5);
    // Turns keep counting, retries of archived events are still known.
    let next = store
        .ingest(&a, &[NewEvent::user("q7")], None, None, None)
        .await
        .unwrap();
    assert_eq!(next.traces[0].turn_id, "turn_0007");
    drop(store);
    let store = open(dir.path()).await;
    let again = store
        .read(&a, |v| (v.meta.epoch, v.transcript.messages().len()))
        .await
        .unwrap();
    assert_eq!(again, (1, 7), "the epoch survives a restart");
}

#[tokio::test]
async fn an_interrupted_compaction_is_finished_at_the_next_load() {
    for step in crate::CommitStep::ALL {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let a = id("c");
        conversation(&store, &a, 5).await;
        let job = store
            .begin_compaction(&a, POLICY)
            .await
            .unwrap()
            .job()
            .unwrap();
        store.inject_compaction_fault(Some(step));
        let err = store
            .finish_compaction(&a, job, Some(summary()), POLICY)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("injected"), "{step}: {err}");
        drop(store);
        // As after a crash at that step: a new process loads the agent.
        let store = open(dir.path()).await;
        let epoch = store.read(&a, |v| v.meta.epoch).await.unwrap();
        assert_eq!(epoch, 1, "{step}: finished, not lost");
        assert_consistent(dir.path(), 20);
        assert_eq!(
            lines(&dir.path().join("agents/c/episodic.jsonl")).len(),
            1,
            "{step}"
        );
    }
}

#[tokio::test]
async fn a_failed_summary_writes_nothing_but_the_count() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("c");
    conversation(&store, &a, 5).await;
    store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    assert_eq!(store.abort_compaction(&a, true).await.unwrap(), 1);
    assert!(
        !dir.path()
            .join("agents/c/raw_traces_archive.jsonl")
            .exists()
    );
    assert!(
        store
            .begin_compaction(&a, POLICY)
            .await
            .unwrap()
            .job()
            .is_some(),
        "may try again"
    );
    assert_eq!(
        store.abort_compaction(&a, false).await.unwrap(),
        1,
        "a summarizer that was not called is not the agent's failure"
    );
    let short = id("short");
    conversation(&store, &short, 2).await;
    assert!(
        store
            .begin_compaction(&short, POLICY)
            .await
            .unwrap()
            .job()
            .is_none(),
        "nothing old enough"
    );
}

#[tokio::test]
async fn loads_start_from_the_turn_checkpoint_unless_it_is_stale() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("c");
    let mut first = NewEvent::user("first question");
    first.event_id = Some("e1".into());
    let original = store
        .ingest(&a, std::slice::from_ref(&first), None, None, None)
        .await
        .unwrap();
    conversation(&store, &a, 5).await;
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    store
        .finish_compaction(&a, job, Some(summary()), POLICY)
        .await
        .unwrap();
    drop(store);
    let agent = dir.path().join("agents/c");
    let turns = agent.join("turns.json");
    let archive_len = std::fs::metadata(agent.join("raw_traces_archive.jsonl"))
        .unwrap()
        .len();
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&turns).unwrap()).unwrap();
    assert_eq!(written["archive_len"], archive_len);

    // Out of date or unreadable: ignored, the archive is replayed, and the
    // checkpoint is written again for the archive as it is.
    let mut stale = written.clone();
    stale["archive_len"] = json!(archive_len + 1);
    stale["tracker"]["last_turn"] = json!(99);
    let bad = [serde_json::to_vec(&stale).unwrap(), b"not json".to_vec()];
    for (expected_turn, bad) in (7..).zip(bad) {
        std::fs::write(&turns, bad).unwrap();
        let store = open(dir.path()).await;
        let next = store
            .ingest(&a, &[NewEvent::user("next")], None, None, None)
            .await
            .unwrap();
        assert_eq!(next.traces[0].turn_id, format!("turn_{expected_turn:04}"));
        // Retries of archived events are still recognised.
        let retry = store
            .ingest(&a, std::slice::from_ref(&first), None, None, None)
            .await
            .unwrap();
        assert_eq!(retry.traces[0].id, original.traces[0].id);
        drop(store);
        let rewritten: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&turns).unwrap()).unwrap();
        assert_eq!(rewritten["archive_len"], archive_len);
    }

    // Current: a load starts from it (a doctored one shows through).
    let mut doctored = written;
    doctored["tracker"]["last_turn"] = json!(41);
    std::fs::write(&turns, serde_json::to_vec(&doctored).unwrap()).unwrap();
    let store = open(dir.path()).await;
    let next = store
        .ingest(
            &a,
            &[NewEvent::user("after the checkpoint")],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(next.traces[0].turn_id, "turn_0042");
    let retry = store
        .ingest(&a, std::slice::from_ref(&first), None, None, None)
        .await
        .unwrap();
    assert_eq!(retry.traces[0].id, original.traces[0].id);
}

/// While a summary is being written, hiding old tool results would start
/// an epoch under it and make the summary's work stale: it waits.
#[tokio::test]
async fn microcompact_waits_for_a_running_summary() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("mc");
    conversation(&store, &a, 5).await;
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    assert!(
        store
            .hide_old(&a, Hiding::Microcompact, 1, None)
            .await
            .unwrap()
            .is_none()
    );
    let out = store
        .finish_compaction(&a, job, Some(summary()), POLICY)
        .await
        .unwrap();
    assert_eq!(out.epoch, 1, "the summary's work was not thrown away");
    let b = id("mc2");
    conversation(&store, &b, 5).await;
    assert!(
        store
            .hide_old(&b, Hiding::Microcompact, 1, None)
            .await
            .unwrap()
            .is_some(),
        "the same history, no summary running: results are hidden"
    );
}

/// A compaction whose agent is deleted while the summary is written ends
/// as NOT_FOUND, also when its last step was already waiting for the
/// agent's lock as the delete took it, and never brings the agent's
/// directory back.
#[tokio::test]
async fn a_compaction_outlived_by_its_agent_ends_as_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("gone");
    for finish in [false, true] {
        conversation(&store, &a, 5).await;
        let job = store
            .begin_compaction(&a, POLICY)
            .await
            .unwrap()
            .job()
            .unwrap();
        // Polled in order: the delete takes the lock and waits for its log
        // record; the compaction's step then waits for the lock.
        let (deleted, step) = tokio::join!(store.delete_agent(&a), async {
            if finish {
                store
                    .finish_compaction(&a, job, Some(summary()), POLICY)
                    .await
                    .map(|_| ())
            } else {
                store.abort_compaction(&a, true).await.map(|_| ())
            }
        });
        deleted.unwrap();
        let err = step.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
        assert!(!dir.path().join("agents/gone").exists());
    }
}

/// After a compaction, a query ranks the archived messages, the summary
/// and the fact together, each with where it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_of_every_kind_rank_together_with_their_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("kinds");
    let said = [
        "I saw an okapi at the zoo",
        "okapis are shy forest giraffes",
        "what about the weather",
        "it rains",
        "and tomorrow",
        "sunny",
        "one more okapi question",
        "ask away",
    ];
    for pair in said.chunks(2) {
        let events = [NewEvent::user(pair[0]), NewEvent::assistant(pair[1])];
        store.ingest(&a, &events, None, None, None).await.unwrap();
    }
    let job = store
        .begin_compaction(&a, POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    let summarized: Vec<String> = job.traces.iter().map(|t| t.id.clone()).collect();
    let times: Vec<f64> = job.traces.iter().map(|t| t.ts).collect();
    let turn_ids = job.turn_ids.clone();
    let okapi = Summary {
        episodic_summary: "Talked about the okapi seen at the zoo.".into(),
        semantic_facts: vec![NewFact {
            fact: "The user has seen an okapi".into(),
            tags: vec![],
            confidence: 0.9,
            salience: 0.5,
        }],
        ..summary()
    };
    store
        .finish_compaction(&a, job, Some(okapi), POLICY)
        .await
        .unwrap();

    let query = |archived_only| MemoryQuery {
        query: "okapi".into(),
        limit: 10,
        archived_only,
        episodic: 3,
        semantic: 3,
        ..MemoryQuery::default()
    };
    let found = store.rank_memories(&a, &query(false)).await.unwrap();
    let kinds: Vec<&str> = found
        .memories
        .iter()
        .map(|m| match &m.memory {
            Memory::Trace { archived: true, .. } => "archived",
            Memory::Trace {
                archived: false, ..
            } => "active",
            Memory::Episodic(_) => "episodic",
            Memory::Semantic(_) => "semantic",
        })
        .collect();
    for kind in ["archived", "active", "episodic", "semantic"] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let episodic = &found.episodic[0];
    assert_eq!(episodic.turn_ids, turn_ids);
    assert_eq!(episodic.source.trace_ids, summarized);
    assert_eq!(
        (episodic.source.from_ts, episodic.source.to_ts),
        (times.first().copied(), times.last().copied())
    );
    let fact = &found.semantic[0];
    assert_eq!(
        (&fact.turn_ids, &fact.source),
        (&turn_ids, &episodic.source)
    );
    let on_disk = lines(&dir.path().join("agents/kinds/semantic.jsonl"));
    assert_eq!(on_disk[0]["trace_ids"], json!(summarized));

    // What the prompt shows already can be left out.
    let found = store.rank_memories(&a, &query(true)).await.unwrap();
    assert!(!found.memories.is_empty());
    assert!(
        found.memories.iter().all(|m| !matches!(
            m.memory,
            Memory::Trace {
                archived: false,
                ..
            }
        )),
        "{:?}",
        found.memories
    );
}
