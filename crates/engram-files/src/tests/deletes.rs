//! DeleteAgent meeting the agent's search index: searches, catch-ups, the
//! indexer and idle eviction on agents that are deleted and created again
//! meanwhile. A call that meets a delete answers as if it came before it
//! (OK) or after it (NOT_FOUND), never with a storage error, and no
//! directory of a deleted agent comes back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_core::NewEvent;
use engram_core::embed::{EmbedFuture, Embedder, normalize};

use super::{id, open};
use crate::{AgentHandle, FileStore, MemoryQuery, Search, SearchMode, StoreConfig, StoreError};
use engram_core::blocks::{Change, Edit, Scope, WORKING_MEMORY};
use engram_store::prelude::*;

/// A model that places a text by the words in it: cheap, deterministic,
/// and enough for the indexer to run for real.
#[derive(Debug)]
struct Hashed;

const DIM: usize = 16;

impl Embedder for Hashed {
    fn model(&self) -> &str {
        "hashed-words"
    }

    fn dim(&self) -> usize {
        DIM
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(async move {
            Ok(texts
                .iter()
                .map(|text| {
                    let mut v = vec![0.0; DIM];
                    for word in text.split_whitespace() {
                        let h = word
                            .bytes()
                            .fold(7usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                        v[h % DIM] += 1.0;
                    }
                    normalize(&mut v);
                    v
                })
                .collect())
        })
    }
}

fn ranked(query: &str, wait: Option<Duration>) -> Search {
    Search {
        query: query.into(),
        limit: 5,
        neighbours: 1,
        wait_for_index: wait,
        ..Search::default()
    }
}

/// A tiny xorshift: the storm's choices, the same on every run.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

const AGENTS: [&str; 3] = ["storm-a", "storm-b", "storm-c"];
const WORDS: [&str; 8] = [
    "okapi", "garden", "budget", "lisbon", "puppy", "invoice", "river", "meeting",
];

fn words(dice: &mut Dice) -> String {
    (0..4)
        .map(|_| WORDS[dice.roll(WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

/// One call of the storm; `Err` names what went wrong. Ingest and block
/// writes always succeed (they create the agent again); every other call
/// answers OK or NOT_FOUND.
async fn one_call(store: &FileStore, dice: &mut Dice) -> Result<(), String> {
    let agent = id(AGENTS[dice.roll(AGENTS.len())]);
    let wait = (dice.roll(4) == 0).then(|| Duration::from_millis(5));
    let (what, answer) = match dice.roll(12) {
        0 | 1 => {
            let events = [
                NewEvent::user(words(dice)),
                NewEvent::assistant(words(dice)),
            ];
            let ingested = store.ingest(&agent, &events, None, None, None).await;
            if let Err(e) = ingested {
                return Err(format!("Ingest {agent}: {e}"));
            }
            return Ok(());
        }
        2 => {
            let search = ranked(&words(dice), wait);
            (
                "ranked search",
                store.search(&agent, &search).await.map(drop),
            )
        }
        3 => {
            let query = MemoryQuery {
                query: words(dice),
                limit: 5,
                neighbours: 1,
                wait_for_index: wait,
                episodic: 2,
                semantic: 2,
                ..MemoryQuery::default()
            };
            let ranked = store.rank_memories(&agent, &query).await;
            ("rank_memories", ranked.map(drop))
        }
        4 => (
            "index_state",
            Ranks::index_state(store, &agent).await.map(drop),
        ),
        5 => (
            "file_sizes",
            Reads::file_sizes(store, &agent).await.map(drop),
        ),
        6 => ("context", store.context(&agent).await.map(drop)),
        // The prompt of an agent that may not exist: NOT_FOUND drops the
        // id from the registry, which must not leave a caller with a
        // handle the registry no longer knows.
        7 => (
            "prepare",
            store
                .prepare(&agent, crate::PrepareInput::default())
                .await
                .map(drop),
        ),
        8 => {
            let patch = Change::Edit(Edit::MergePatch(format!(r#"{{"n":{}}}"#, dice.roll(9))));
            let written = store
                .write_block(
                    &Scope::Agent(agent.clone()),
                    WORKING_MEMORY,
                    patch,
                    None,
                    None,
                )
                .await;
            if let Err(e) = written {
                return Err(format!("write_block {agent}: {e}"));
            }
            return Ok(());
        }
        // A fork into an agent that others are writing, reading and
        // deleting: it drops the target's handle if the target was absent.
        10 => {
            let target = id(AGENTS[dice.roll(AGENTS.len())]);
            match store.fork_agent(&agent, &target).await {
                Ok(()) | Err(StoreError::AlreadyExists(_) | StoreError::Core(_)) => {
                    return Ok(());
                }
                other => ("fork", other),
            }
        }
        9 => (
            "block_history",
            store
                .block_history(&Scope::Agent(agent.clone()), WORKING_MEMORY)
                .await
                .map(drop),
        ),
        _ => {
            let search = Search {
                mode: SearchMode::AllWords,
                ..ranked(WORDS[dice.roll(WORDS.len())], None)
            };
            (
                "all-words search",
                store.search(&agent, &search).await.map(drop),
            )
        }
    };
    match answer {
        Ok(()) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(format!("{what} {agent}: {e:?}")),
    }
}

/// The storm of issue 20: reads (ranked searches, Retrieve's ranking, the
/// index state, file sizes, the prompt) and writes of three agents, while
/// another task deletes them again and again and a third unloads whatever
/// is idle, with the background indexer embedding throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_and_writes_that_meet_deletes_answer_as_before_or_after_them() {
    const CLIENTS: u64 = 4;
    const ROUNDS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::new(dir.path());
    config.embedder = Some(Arc::new(Hashed));
    // What is under test is who holds what when, not durability: without
    // a flush per write the storm has more rounds per second.
    config.fsync = crate::FsyncPolicy::Never;
    let store = FileStore::open(config).await.unwrap();
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    let deleter = {
        let (store, done, failures) = (store.clone(), done.clone(), failures.clone());
        tokio::spawn(async move {
            let mut dice = Dice(0xde1e7e);
            let mut deletes = 0;
            while !done.load(Ordering::SeqCst) {
                let agent = id(AGENTS[dice.roll(AGENTS.len())]);
                match store.delete_agent(&agent).await {
                    Ok(()) => deletes += 1,
                    Err(StoreError::NotFound(_)) => {}
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("DeleteAgent {agent}: {e:?}")),
                }
                tokio::task::yield_now().await;
            }
            deletes
        })
    };
    let evicter = {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move {
            let mut evicted = 0;
            while !done.load(Ordering::SeqCst) {
                evicted += store.evict_idle(Duration::ZERO).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            evicted
        })
    };
    let mut clients = vec![];
    for client in 0..CLIENTS {
        let (store, failures) = (store.clone(), failures.clone());
        clients.push(tokio::spawn(async move {
            let mut dice = Dice(0x5707 + client);
            for _ in 0..ROUNDS {
                if let Err(failure) = one_call(&store, &mut dice).await {
                    failures.lock().unwrap().push(failure);
                }
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let deletes = deleter.await.unwrap();
    let evicted = evicter.await.unwrap();
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} of {} calls failed (first ones: {:#?})",
        failures.len(),
        CLIENTS as usize * ROUNDS,
        &failures[..failures.len().min(10)]
    );
    assert!(deletes > 20, "the storm deleted often enough: {deletes}");
    println!(
        "{} rounds, {deletes} deletes, {evicted} unloads in {:.1?}",
        CLIENTS as usize * ROUNDS,
        started.elapsed()
    );

    // Let the indexer finish what it was given.
    for agent in AGENTS {
        let waited = store
            .wait_embedded(&id(agent), Instant::now() + Duration::from_secs(30))
            .await;
        assert!(matches!(waited, Ok(()) | Err(StoreError::NotFound(_))));
    }
    // Only agents are left, each with its files, and an index that holds
    // its own traces and nothing of an agent deleted before it.
    for entry in std::fs::read_dir(dir.path().join("agents")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let traces = entry.path().join(crate::agent::RAW_TRACES);
        // An agent made by a block write alone has an empty trace file.
        let blocks_only = entry.path().join(crate::blocks::BLOCKS).exists();
        assert!(
            std::fs::metadata(&traces).is_ok_and(|m| m.len() > 0 || blocks_only),
            "agents/{name} is left without an agent's files"
        );
    }
    let (listed, _) = store.list_agents(100, None, &|_, _| true).await.unwrap();
    for agent in listed {
        let agent = id(&agent);
        let traces = store.read(&agent, |s| s.traces.len()).await.unwrap();
        let index = Ranks::index_state(&store, &agent).await.unwrap();
        assert_eq!(
            index.items, traces as u64,
            "{agent}'s index holds its {traces} traces, nothing more"
        );
    }
}

/// Waits (yielding, no timing) until `handle` has `n` holders.
async fn held_by(handle: &Arc<AgentHandle>, n: usize) {
    while Arc::strong_count(handle) < n {
        tokio::task::yield_now().await;
    }
}

/// A catch-up that waited for the index while the agent was deleted must
/// not open the index afterwards: that created `agents/<id>/.index` again,
/// a directory that then listed (and loaded) as an empty agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_that_waited_out_a_delete_does_not_bring_the_agent_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("resurrected");
    store
        .ingest(&a, &[NewEvent::user("the okapi report")], None, None, None)
        .await
        .unwrap();
    // Held by the registry and here.
    let handle = store.handle(&a);
    let index = Arc::clone(&handle.index).lock_owned().await;
    let catch_up = {
        let (store, a) = (store.clone(), a.clone());
        tokio::spawn(async move { Ranks::index_state(&store, &a).await })
    };
    // The catch-up has the handle and waits for the index.
    held_by(&handle, 3).await;
    let delete = {
        let (store, a) = (store.clone(), a.clone());
        tokio::spawn(async move { store.delete_agent(&a).await })
    };
    // Done, or waiting for the index with the handle in hand.
    while !delete.is_finished() && Arc::strong_count(&handle) < 4 {
        tokio::task::yield_now().await;
    }
    drop(index);
    let caught_up = catch_up.await.unwrap();
    assert!(
        matches!(caught_up, Ok(_) | Err(StoreError::NotFound(_))),
        "{caught_up:?}"
    );
    delete.await.unwrap().unwrap();
    assert!(
        !dir.path().join("agents/resurrected").exists(),
        "the deleted agent's directory came back"
    );
    let (listed, _) = store.list_agents(10, None, &|_, _| true).await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    assert!(matches!(
        store.search(&a, &ranked("okapi", None)).await,
        Err(StoreError::NotFound(_))
    ));
}

/// A catch-up that waited for an open index while the agent was deleted
/// and created again must not read the new agent into the old index (its
/// directory renamed away, the writes failed with a storage error, or went
/// into the new agent's directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_that_waited_out_a_delete_does_not_mix_in_the_next_agent() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("reborn");
    let events = [
        NewEvent::user("the okapi report"),
        NewEvent::assistant("okapis live in the forest"),
    ];
    store.ingest(&a, &events, None, None, None).await.unwrap();
    // The index is open, and has read both traces.
    assert_eq!(
        store
            .search(&a, &ranked("okapi", None))
            .await
            .unwrap()
            .index
            .items,
        2
    );
    let handle = store.handle(&a);
    let index = Arc::clone(&handle.index).lock_owned().await;
    let catch_up = {
        let (store, a) = (store.clone(), a.clone());
        tokio::spawn(async move { Ranks::index_state(&store, &a).await })
    };
    held_by(&handle, 3).await;
    let delete = {
        let (store, a) = (store.clone(), a.clone());
        tokio::spawn(async move { store.delete_agent(&a).await })
    };
    while !delete.is_finished() && Arc::strong_count(&handle) < 4 {
        tokio::task::yield_now().await;
    }
    // An agent of the same id with other words (or, if the delete still
    // waits for the index, more words for the agent it is about to delete).
    store
        .ingest(&a, &[NewEvent::user("the zebra budget")], None, None, None)
        .await
        .unwrap();
    drop(index);
    let caught_up = catch_up.await.unwrap();
    assert!(
        matches!(caught_up, Ok(_) | Err(StoreError::NotFound(_))),
        "{caught_up:?}"
    );
    delete.await.unwrap().unwrap();
    // Whatever the order was, the agent there now is searched alone.
    store
        .ingest(&a, &[NewEvent::user("the zebra budget")], None, None, None)
        .await
        .unwrap();
    let page = store
        .search(&a, &ranked("zebra okapi", None))
        .await
        .unwrap();
    let traces = store.read(&a, |s| s.traces.len()).await.unwrap();
    assert_eq!(page.index.items, traces as u64);
    let found: Vec<&str> = page.hits.iter().map(|h| h.trace.content.as_str()).collect();
    assert!(found.iter().all(|c| c.contains("zebra")), "{found:?}");
}

/// An agent whose index a search holds stays loaded: unloaded, its next
/// call would open a second index on the same directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_index_is_in_use_is_not_unloaded() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let a = id("busy");
    store
        .ingest(&a, &[NewEvent::user("the okapi report")], None, None, None)
        .await
        .unwrap();
    let current = store.caught_up(&a).await.unwrap();
    assert_eq!(store.evict_idle(Duration::ZERO).await, 0);
    assert_eq!(store.loaded_agents(), 1);
    drop(current);
    assert_eq!(store.evict_idle(Duration::ZERO).await, 1);
    assert_eq!(store.loaded_agents(), 0);
    // Loaded again, with its index opened again from its files.
    let page = store.search(&a, &ranked("okapi", None)).await.unwrap();
    assert_eq!(page.hits.len(), 1);
}
