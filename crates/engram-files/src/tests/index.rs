//! The file store's search index on disk: an index with nothing committed
//! reads everything, archive included; an unreadable one is rebuilt.

use engram_core::NewEvent;
use engram_core::turns::assign_all;

use super::{id, open};
use crate::Search;
use engram_store::prelude::*;

/// A prompt's recall of `text`: the archive and the memories.
fn recall(text: &str) -> crate::MemoryQuery {
    crate::MemoryQuery {
        query: text.into(),
        limit: 10,
        archived_only: true,
        ..crate::MemoryQuery::default()
    }
}

/// Items the agent's open index has committed (0 when it is not open).
async fn committed(store: &crate::FileStore, a: &engram_core::AgentId) -> u64 {
    let handle = store.existing_handle(a).unwrap();
    let slot = handle.index.lock().await;
    slot.as_ref()
        .map_or(0, |index| index.lexical.committed_len())
}

/// Items the agent's open index has staged, not committed.
async fn staged(store: &crate::FileStore, a: &engram_core::AgentId) -> u64 {
    let handle = store.existing_handle(a).unwrap();
    let slot = handle.index.lock().await;
    slot.as_ref().map_or(0, |index| index.lexical.staged())
}

fn search(query: &str) -> Search {
    Search {
        query: query.into(),
        limit: 10,
        ..Search::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_index_reads_the_archive_and_a_broken_one_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    // Files as an operator may bring them: an archive, no compaction count.
    let agent_dir = dir.path().join("agents/brought");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let traces = assign_all([
        NewEvent::user("the okapi report"),
        NewEvent::user("the quokka report"),
    ]);
    std::fs::write(
        agent_dir.join("raw_traces_archive.jsonl"),
        traces[0].to_line(),
    )
    .unwrap();
    std::fs::write(agent_dir.join("raw_traces.jsonl"), traces[1].to_line()).unwrap();
    let a = id("brought");
    let store = open(dir.path()).await;
    // The best match (its neighbour follows as context).
    let found = |page: crate::SearchPage| {
        let best = page.hits.into_iter().next().expect("a match");
        (best.trace.content, best.archived)
    };
    let okapi = ("the okapi report".to_owned(), true);
    assert_eq!(
        found(store.search(&a, &search("okapi")).await.unwrap()),
        okapi
    );
    drop(store);

    std::fs::write(agent_dir.join(".index/meta.json"), b"{ not json").unwrap();
    let store = open(dir.path()).await;
    assert_eq!(
        found(store.search(&a, &search("okapi")).await.unwrap()),
        okapi
    );
    let quokka = found(store.search(&a, &search("quokka")).await.unwrap());
    assert_eq!(quokka, ("the quokka report".to_owned(), false));
}

/// Keeps the background indexer away from `a`: its turn never comes
/// (a catch-up it would make, the test makes with [`commit`]).
fn hold_indexer(store: &crate::FileStore, a: &engram_core::AgentId) {
    engram_store::lock(&store.inner.queue.queued).insert(a.clone());
}

/// What the indexer does in its turn: the index committed (what searches
/// staged read again from the files) and written out.
async fn commit(store: &crate::FileStore, a: &engram_core::AgentId) {
    drop(store.caught_up(a).await.unwrap());
    store.persist_open(a).await;
}

/// A search stages what the index has not committed, and finds it; recall
/// (a search of the archive and the memories) leaves the active traces
/// written since to the background, and nothing else. The indexer's
/// commit then holds the same, and answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_stage_what_is_not_committed_and_recall_leaves_only_new_active_traces() {
    use engram_core::blocks::Scope;
    use engram_core::facts::{NewFact, Op};

    let dir = tempfile::tempdir().unwrap();
    let a = id("lagging");
    let store = open(dir.path()).await;
    hold_indexer(&store, &a);
    let say = |text: &'static str| {
        let store = store.clone();
        let a = a.clone();
        async move {
            store
                .ingest(&a, &[NewEvent::user(text)], None, None, None)
                .await
                .unwrap();
        }
    };
    let held = || async { (committed(&store, &a).await, staged(&store, &a).await) };
    say("the okapi report").await;
    // The first search opens the index and stages everything.
    let page = store.search(&a, &search("okapi")).await.unwrap();
    assert_eq!(page.hits[0].trace.content, "the okapi report");
    assert_eq!(held().await, (0, 1));
    commit(&store, &a).await;
    assert_eq!(held().await, (1, 0));

    say("the quokka report").await;
    let found = store.rank_memories(&a, &recall("quokka")).await.unwrap();
    assert!(found.memories.is_empty(), "{found:?}");
    assert_eq!(held().await, (1, 0), "recall read an active trace in");

    // A fact is what recall finds: staged before the search, with the
    // active trace written before it.
    let fact = NewFact {
        text: "The quokka vault code is 12-kestrel".into(),
        ..NewFact::default()
    };
    store
        .change_facts(&Scope::Agent(a.clone()), Op::Add(vec![fact]), Some(20))
        .await
        .unwrap();
    let found = store.rank_memories(&a, &recall("kestrel")).await.unwrap();
    assert_eq!(found.memories.len(), 1, "{found:?}");
    assert_eq!(held().await, (1, 2));

    // A search of everything stages what recall left.
    say("the wombat report").await;
    let staged_page = store.search(&a, &search("wombat report")).await.unwrap();
    assert_eq!(staged_page.hits[0].trace.content, "the wombat report");
    assert_eq!(held().await, (1, 3));

    // Committed, the index answers as it did staged.
    commit(&store, &a).await;
    assert_eq!(held().await, (4, 0));
    let committed_page = store.search(&a, &search("wombat report")).await.unwrap();
    let scored = |page: &crate::SearchPage| {
        let hits = page.hits.iter();
        hits.map(|h| (h.trace.content.clone(), (h.score * 1e3).round() as i64))
            .collect::<Vec<_>>()
    };
    assert_eq!(scored(&staged_page), scored(&committed_page));
}

/// A prompt's recall after a compaction sees the new epoch at once (what
/// it archived, its summary) without a commit: it is staged, and the
/// disk's index is written by the indexer, off the request path. A forget
/// is committed before the next recall, and on disk before it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_stages_a_compactions_epoch_at_once_and_a_forget_is_committed_to_disk() {
    use crate::Policy;
    use engram_core::compaction::Summary;
    use engram_core::forget::Forget;

    let dir = tempfile::tempdir().unwrap();
    let a = id("compacting");
    let store = open(dir.path()).await;
    hold_indexer(&store, &a);
    let mut turns = vec![];
    for t in 1..=6 {
        let events = [
            NewEvent::user(format!("question {t} about the okapi{t}")),
            NewEvent::assistant(format!("answer {t}")),
        ];
        let ingested = store.ingest(&a, &events, None, None, None).await.unwrap();
        turns.push(ingested.current_turn_id);
    }
    let held = || async { (committed(&store, &a).await, staged(&store, &a).await) };
    // Opened and staged whole: nothing is archived yet.
    let found = store.rank_memories(&a, &recall("okapi1")).await.unwrap();
    assert!(found.memories.is_empty(), "{found:?}");
    assert_eq!(held().await, (0, 12));
    commit(&store, &a).await;
    assert_eq!(held().await, (12, 0));

    let policy = Policy {
        raw_tail_turns: 2,
        max_episodic: 3,
        max_semantic: 20,
        carry_tokens: 800,
        fact_ttl: None,
    };
    let job = store
        .begin_compaction(&a, policy)
        .await
        .unwrap()
        .job()
        .unwrap();
    let summary = Summary {
        episodic_summary: "The zebra questions.".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![],
        ..Default::default()
    };
    store
        .finish_compaction(&a, job, Some(summary), policy)
        .await
        .unwrap();

    // The archived turn is found, from the index as it was.
    let recalled = || async {
        let found = store.rank_memories(&a, &recall("okapi1")).await.unwrap();
        let texts: Vec<String> = found
            .memories
            .iter()
            .map(|m| format!("{:?}", m.memory))
            .collect();
        texts.iter().any(|t| t.contains("okapi1"))
    };
    let on_disk = || std::fs::read(store.agent_dir(&a).join(".index/meta.json")).ok();
    let persisted = on_disk();
    assert!(recalled().await, "the archived turn");
    let found = store.rank_memories(&a, &recall("zebra")).await.unwrap();
    assert_eq!(found.memories.len(), 1, "the summary: {found:?}");
    assert_eq!(
        held().await,
        (12, 1),
        "the summary staged, nothing committed"
    );
    assert_eq!(on_disk(), persisted, "nothing written by the request");
    commit(&store, &a).await;
    assert_eq!(held().await, (13, 0));
    assert_ne!(on_disk(), persisted, "written out by the indexer");
    assert!(recalled().await, "the archived turn, committed");

    // A forget is committed first: the forgotten turn is not recalled.
    store
        .forget(&a, &Forget::Turn(turns[0].clone()), policy)
        .await
        .unwrap();
    assert!(!recalled().await, "the forgotten turn");
}

/// What searches staged is committed and written out at a clean shutdown:
/// the next start reads nothing of it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_commits_and_writes_out_what_searches_staged() {
    let dir = tempfile::tempdir().unwrap();
    let a = id("closing");
    let store = open(dir.path()).await;
    store
        .ingest(
            &a,
            &[NewEvent::user("the narwhal report")],
            None,
            None,
            None,
        )
        .await
        .unwrap();
    // The background indexer is kept away: only the search stages it.
    hold_indexer(&store, &a);
    let page = store.search(&a, &search("narwhal")).await.unwrap();
    assert_eq!(page.hits.len(), 1);
    assert_eq!(staged(&store, &a).await, 1);
    let meta = store.agent_dir(&a).join(".index/meta.json");
    assert!(!meta.exists(), "in memory only");
    store.close().await;
    let written = std::fs::read_to_string(&meta).unwrap();
    assert!(written.contains(r#"\"active\":1"#), "{written}");
}
