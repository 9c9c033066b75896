//! Consolidation across a user's conversations (DESIGN §15): what the
//! conversations' own compactions left twice or stale is reconciled on
//! ConsolidateUser — a repeat in other words merged by the local model,
//! a change the summarizer decides by handle in one request — and logged.

use crate::common;

use common::TestServer;
use engram_proto::pb;

/// The handle a request shows for the fact `text`.
fn handle_of(said: &str, text: &str) -> Option<String> {
    said.lines()
        .filter(|l| l.ends_with(text))
        .find_map(|l| Some(l.strip_prefix("- [")?.split(']').next()?.to_owned()))
}

/// A summarizer whose compactions miss that the user moved (they never
/// name a handle), and that, asked to consolidate, replaces Lisbon by
/// Berlin and names a fact it was never shown.
fn summarizer(said: &str) -> String {
    if said.starts_with("Group 1:") {
        let (lisbon, berlin) = (
            handle_of(said, "Lives in Lisbon"),
            handle_of(said, "Moved to Berlin"),
        );
        let (Some(lisbon), Some(berlin)) = (lisbon, berlin) else {
            return r#"{"updates": []}"#.to_owned();
        };
        return format!(
            r#"{{"updates": [{{"replaces": "{lisbon}", "by": "{berlin}"}}], "invalidates": ["f77"]}}"#
        );
    }
    let facts = if said.contains("Berlin") {
        r#"["Moved to Berlin", "Enjoys playing curling"]"#
    } else {
        r#"["Lives in Lisbon", "Plays curling"]"#
    };
    format!(
        r#"{{"episodic_summary": "Talked about life.", "semantic_facts": {facts}, "updates": []}}"#
    )
}

/// Ana's two conversations, each compacted: where she lives and her
/// hobby, then the move and the hobby in other words.
async fn two_conversations(c: &mut common::Client) {
    common::compacted_conversation(c, "ana", "life-1", "I live in Lisbon and play curling.").await;
    common::compacted_conversation(c, "ana", "life-2", "I moved to Berlin; curling is fun.").await;
}

#[tokio::test]
async fn consolidate_user_merges_repeats_and_applies_the_summarizers_changes() {
    let (base, asked) = common::fake_llm_answering(summarizer).await;
    let model = common::meaning::model_dir();
    let server = TestServer::start_with(&[
        ("ENGRAM__EMBED__MODEL_DIR", &model),
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    let mut c = server.client().await;
    two_conversations(&mut c).await;
    let before = common::user_facts(&mut c, "ana", true).await;
    assert_eq!(
        before.iter().filter(|f| f.superseded_by.is_empty()).count(),
        4,
        "{before:?}"
    );

    let run = c
        .consolidate_user(pb::ConsolidateUserRequest {
            user_id: "ana".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .consolidation
        .unwrap();
    assert_eq!((run.seq, run.trigger.as_str()), (1, "request"));
    assert_eq!(
        (run.merged, run.replaced, run.invalidated),
        (1, 1, 0),
        "{run:?}"
    );
    assert_eq!(run.unchanged, 2);
    assert_eq!(run.summarizer, "http:summarizer");
    assert!(run.groups_asked >= 1);
    assert_eq!(run.unknown_handles, 1, "f77 named nothing");
    let request = asked.lock().unwrap().last().cloned().unwrap();
    assert!(request.starts_with("Group 1:\n- [f1] (since "), "{request}");

    let after = common::user_facts(&mut c, "ana", true).await;
    let find = |text: &str| after.iter().find(|f| f.fact == text).unwrap();
    let (lisbon, berlin) = (find("Lives in Lisbon"), find("Moved to Berlin"));
    assert_eq!(lisbon.superseded_by, berlin.id);
    assert_eq!(lisbon.invalid_at, berlin.valid_from);
    let curling = find("Plays curling");
    assert!(curling.superseded_by.is_empty());
    let from: Vec<&str> = curling
        .sources
        .iter()
        .map(|s| s.agent_id.as_str())
        .collect();
    assert_eq!(from, ["life-1", "life-2"], "every source kept");
    assert_eq!(find("Enjoys playing curling").superseded_by, curling.id);
    let changes: Vec<(&str, &str)> = run
        .changes
        .iter()
        .map(|ch| (ch.kind.as_str(), ch.fact_id.as_str()))
        .collect();
    assert!(
        changes.contains(&("replaced", lisbon.id.as_str())),
        "{changes:?}"
    );

    // Again: nothing left to do, and the log holds both runs.
    let again = c
        .consolidate_user(pb::ConsolidateUserRequest {
            user_id: "ana".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .consolidation
        .unwrap();
    assert_eq!((again.seq, again.merged, again.replaced), (2, 0, 0));
    let log = c
        .list_consolidations(pb::ListConsolidationsRequest {
            user_id: "ana".into(),
            page_size: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .consolidations;
    let seqs: Vec<u64> = log.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [2, 1]);
    let nobody = c
        .consolidate_user(pb::ConsolidateUserRequest {
            user_id: "nobody".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .consolidation
        .unwrap();
    assert_eq!(nobody.seq, 0, "nothing to do, nothing logged");
    let bad = c
        .consolidate_user(pb::ConsolidateUserRequest {
            user_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

/// A user's facts as a comparable list: (text, replaced by, ended at).
fn states(facts: &[pb::SemanticItem]) -> Vec<(String, String, Option<f64>)> {
    let mut all: Vec<_> = facts
        .iter()
        .map(|f| (f.fact.clone(), f.superseded_by.clone(), f.invalid_at))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// kill -9 while a consolidation waits for the summarizer: nothing of the
/// run is applied or logged. With torn tails left on the user's facts and
/// log (a crash mid-append), the server starts again, and the next run
/// does the whole of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consolidation_killed_midway_changes_nothing_and_runs_again_whole() {
    use std::sync::{Arc, Condvar, Mutex};
    // The summarizer holds a consolidation request until released.
    let held = Arc::new((Mutex::new(true), Condvar::new()));
    let asked = Arc::new(tokio::sync::Notify::new());
    let (hold, told) = (Arc::clone(&held), Arc::clone(&asked));
    let (base, _) = common::fake_llm_answering(move |said| {
        if said.starts_with("Group 1:") {
            told.notify_one();
            let (lock, released) = &*hold;
            let mut waiting = lock.lock().unwrap();
            while *waiting {
                waiting = released.wait(waiting).unwrap();
            }
        }
        summarizer(said)
    })
    .await;
    let model = common::meaning::model_dir();
    let env = [
        ("ENGRAM__EMBED__MODEL_DIR", model.as_str()),
        ("ENGRAM__LLM__BASE_URL", base.as_str()),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ];
    let data = tempfile::tempdir().unwrap();
    let mut daemon = common::Daemon::spawn(data.path(), &env);
    let mut c = daemon.client().await;
    two_conversations(&mut c).await;
    let before = states(&common::user_facts(&mut c, "ana", true).await);

    let mut other = daemon.client().await;
    let run = tokio::spawn(async move {
        other
            .consolidate_user(pb::ConsolidateUserRequest {
                user_id: "ana".into(),
            })
            .await
    });
    asked.notified().await;
    daemon.kill9();
    // The call never answered (its channel would wait for a server to
    // come back).
    assert!(!run.is_finished(), "the run answered before the kill");
    run.abort();
    let user_dir = data.path().join("users/ana");
    for file in ["facts.jsonl", "consolidations.jsonl"] {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(user_dir.join(file))
            .unwrap();
        f.write_all(b"{\"id\":\"half-writ").unwrap();
    }
    {
        let (lock, released) = &*held;
        *lock.lock().unwrap() = false;
        released.notify_all();
    }

    let daemon = common::Daemon::spawn(data.path(), &env);
    let mut c = daemon.client().await;
    assert_eq!(
        states(&common::user_facts(&mut c, "ana", true).await),
        before,
        "nothing applied"
    );
    let log = |c: &mut common::Client| {
        let mut c = c.clone();
        async move {
            c.list_consolidations(pb::ListConsolidationsRequest {
                user_id: "ana".into(),
                page_size: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .consolidations
        }
    };
    assert!(log(&mut c).await.is_empty(), "nothing logged");
    let run = c
        .consolidate_user(pb::ConsolidateUserRequest {
            user_id: "ana".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .consolidation
        .unwrap();
    assert_eq!((run.seq, run.merged, run.replaced), (1, 1, 1), "{run:?}");
    let after = common::user_facts(&mut c, "ana", true).await;
    let find = |text: &str| after.iter().find(|f| f.fact == text).unwrap();
    assert_eq!(
        find("Lives in Lisbon").superseded_by,
        find("Moved to Berlin").id
    );
    assert_eq!(log(&mut c).await.len(), 1);
}
