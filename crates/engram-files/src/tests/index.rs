//! The file store's search index on disk: an index with nothing committed
//! reads everything, archive included; an unreadable one is rebuilt.

use engram_core::NewEvent;
use engram_core::turns::assign_all;

use super::{id, open};
use crate::Search;
use engram_store::prelude::*;

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
