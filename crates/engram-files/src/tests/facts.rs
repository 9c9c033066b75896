//! Managed facts on files: a delete cut short by a crash is finished at
//! the next load (no text of the fact left in `semantic.jsonl`, and the
//! snapshot no longer shows it).

use engram_core::blocks::Scope;
use engram_core::facts::{self, NewFact, Op, Outcome};
use engram_core::memory::SemanticItem;

use super::{id, open};
use crate::agent::SEMANTIC;
use engram_store::prelude::*;

#[tokio::test]
async fn a_delete_cut_short_by_a_crash_is_finished_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let a = id("facts-crash");
    let scope = Scope::Agent(a.clone());
    let store = open(dir.path()).await;
    let new = NewFact {
        text: "The vault code is 99-kestrel".into(),
        ..NewFact::default()
    };
    let added = store
        .change_facts(&scope, Op::Add(vec![new]), Some(20))
        .await
        .unwrap();
    let Outcome::Added(fact, _) = &added.outcomes[0] else {
        panic!("{added:?}")
    };
    let context = store.context(&a).await.unwrap();
    assert!(context.messages[0].content.contains("99-kestrel"));
    store.close().await;
    drop(store);
    // The deleting version reached the file; the scrub and the settings
    // did not (the process died between them).
    let path = dir.path().join("agents").join(a.as_str()).join(SEMANTIC);
    let mut bytes = std::fs::read(&path).unwrap();
    serde_json::to_writer(&mut bytes, &facts::tombstone(fact, 1.0)).unwrap();
    bytes.push(b'\n');
    std::fs::write(&path, &bytes).unwrap();

    let store = open(dir.path()).await;
    let context = store.context(&a).await.unwrap();
    assert!(!context.messages[0].content.contains("99-kestrel"));
    assert!(store.facts(&scope).await.unwrap().is_empty());
    let lines = std::fs::read_to_string(&path).unwrap();
    assert!(!lines.contains("99-kestrel"), "{lines}");
    let state = std::fs::read_to_string(path.with_file_name("state.json")).unwrap();
    assert!(!state.contains("99-kestrel"), "{state}");
    let versions: Vec<SemanticItem> = store.fact_history(&scope, &fact.id).await.unwrap();
    assert_eq!(versions.len(), 2);
}
