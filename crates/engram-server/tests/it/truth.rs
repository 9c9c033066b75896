//! Memory that stays true (DESIGN §15): a summarizer that answers by
//! handle replaces and ends the user's facts across conversations, and the
//! next conversation sees the current truth, dated.

use crate::common;

use common::{TestServer, user};
use engram_proto::pb;

/// The handle the request shows for the known fact `text`.
fn handle_of(said: &str, text: &str) -> Option<String> {
    said.lines()
        .filter(|l| l.ends_with(text))
        .find_map(|l| Some(l.strip_prefix("- [")?.split(']').next()?.to_owned()))
}

/// A summarizer that reads the known facts it is shown: in the user's
/// first conversation it learns where they live and an allergy; in the
/// second, that they moved (an update of the first by handle, in words
/// that share little with it) and that the allergy is gone (an
/// invalidation), and it names a fact it was never shown.
fn summarizer(said: &str) -> String {
    let facts = match (
        handle_of(said, "Lives in Lisbon"),
        handle_of(said, "Allergic to peanuts"),
    ) {
        (Some(lisbon), Some(peanuts)) => format!(
            r#""semantic_facts": [], "updates": [{{"replaces": "{lisbon}", "fact": "Moved to Berlin"}}], "invalidates": ["{peanuts}", "f99"]"#
        ),
        _ if said.contains("Berlin") => r#""semantic_facts": []"#.to_owned(),
        _ => r#""semantic_facts": ["Lives in Lisbon", "Allergic to peanuts"], "updates": []"#
            .to_owned(),
    };
    format!(r#"{{"episodic_summary": "Talked about home.", {facts}}}"#)
}

/// The server with [`summarizer`] as its LLM (what it was asked, in
/// order), the raw tail one turn.
async fn with_summarizer() -> (TestServer, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let (base, asked) = common::fake_llm_answering(summarizer).await;
    let server = TestServer::start_with(&[
        ("ENGRAM__LLM__BASE_URL", &base),
        ("ENGRAM__LLM__MODEL", "summarizer"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ])
    .await;
    (server, asked)
}

#[tokio::test]
async fn a_summarizer_answering_by_handle_keeps_the_users_facts_true() {
    let (server, asked) = with_summarizer().await;
    let mut c = server.client().await;
    common::compacted_conversation(
        &mut c,
        "ana",
        "talk-1",
        "I live in Lisbon. I am allergic to peanuts.",
    )
    .await;
    common::compacted_conversation(
        &mut c,
        "ana",
        "talk-2",
        "I moved to Berlin; the allergy is gone.",
    )
    .await;

    let second = asked.lock().unwrap()[1].clone();
    assert!(
        second.starts_with("Known facts:\n- [f1] (since ")
            && second.contains(") Lives in Lisbon\n"),
        "the user's facts shown with handles and dates: {second}"
    );
    let current: Vec<String> = common::user_facts(&mut c, "ana", false)
        .await
        .into_iter()
        .map(|f| f.fact)
        .collect();
    assert_eq!(
        current,
        ["Moved to Berlin"],
        "only the current truth is live"
    );
    let all = common::user_facts(&mut c, "ana", true).await;
    let by_text = |t: &str| all.iter().find(|f| f.fact == t).unwrap().clone();
    let (lisbon, berlin, peanuts) = (
        by_text("Lives in Lisbon"),
        by_text("Moved to Berlin"),
        by_text("Allergic to peanuts"),
    );
    assert_eq!(
        lisbon.superseded_by, berlin.id,
        "replaced by the fact named"
    );
    assert!(lisbon.invalid_at.is_some() && lisbon.valid_from.is_some());
    assert!(lisbon.invalid_at >= lisbon.valid_from);
    assert!(
        peanuts.invalid_at.is_some(),
        "ended with nothing in its place"
    );
    assert!(peanuts.superseded_by.is_empty());

    // A new conversation: the prompt presents no ended fact as current.
    let p = c
        .prepare_request(pb::PrepareRequestRequest {
            agent_id: "talk-3".into(),
            user_id: "ana".into(),
            user_input: Some(user("Where do I live now, and can I eat peanut butter?")),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let text: String = p
        .messages
        .iter()
        .map(|m| m.content.clone())
        .collect::<Vec<_>>()
        .join("\n");
    // An ended fact recalled says so, with its span.
    for (stale, state) in [
        ("Fact: Lives in Lisbon", "since replaced) "),
        ("Fact: Allergic to peanuts", "no longer true) "),
    ] {
        for line in text.lines().filter(|l| l.contains(stale)) {
            assert!(line.contains(state), "{stale} shown as current: {text}");
        }
    }
    // The message those facts came from, recalled, says what became of
    // them, so that it never reads as current either.
    let said = text
        .lines()
        .position(|l| l.ends_with("I live in Lisbon. I am allergic to peanuts."))
        .unwrap_or_else(|| panic!("the first conversation's message recalled: {text}"));
    let note = text.lines().nth(said + 1).unwrap_or_default();
    assert!(
        note.starts_with("  (later changed: Moved to Berlin, 20")
            && note.contains("; later no longer true, 20"),
        "{text}"
    );
}

/// Epoch seconds now.
fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Retrieve by user `ana`, as of `as_of`: the facts it returns, in order.
async fn facts_as_of(c: &mut common::Client, query: &str, as_of: Option<f64>) -> Vec<String> {
    let got = c
        .retrieve(pb::RetrieveRequest {
            user_id: "ana".into(),
            query: query.into(),
            as_of,
            wait_for_index_ms: 30_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut facts: Vec<String> = got
        .bundle
        .unwrap()
        .semantic
        .into_iter()
        .map(|f| f.fact)
        .collect();
    facts.sort();
    facts
}

#[tokio::test]
async fn memory_as_of_a_time_is_what_stood_then() {
    let (server, _) = with_summarizer().await;
    let mut c = server.client().await;
    let before = now();
    common::compacted_conversation(
        &mut c,
        "ana",
        "talk-1",
        "I live in Lisbon. I am allergic to peanuts.",
    )
    .await;
    // Between the conversations, by the server's clock (the same machine's).
    let between = now();
    common::compacted_conversation(
        &mut c,
        "ana",
        "talk-2",
        "I moved to Berlin; the allergy is gone.",
    )
    .await;

    // Retrieve: the facts true then, with a query or without.
    for query in ["", "where do I live"] {
        assert_eq!(
            facts_as_of(&mut c, query, None).await,
            ["Moved to Berlin"],
            "{query:?}"
        );
        assert_eq!(
            facts_as_of(&mut c, query, Some(between)).await,
            ["Allergic to peanuts", "Lives in Lisbon"],
            "{query:?}"
        );
        assert!(
            facts_as_of(&mut c, query, Some(before - 1.0))
                .await
                .is_empty(),
            "{query:?}"
        );
    }

    // SearchHistory: only what had been said by then.
    let search = |as_of: Option<f64>| pb::SearchHistoryRequest {
        user_id: "ana".into(),
        query: "Berlin Lisbon".into(),
        as_of,
        wait_for_index_ms: 30_000,
        ..Default::default()
    };
    let said = |r: pb::SearchHistoryResponse| -> Vec<String> {
        r.matches
            .into_iter()
            .map(|m| m.trace.unwrap().content)
            .collect()
    };
    let all = said(c.search_history(search(None)).await.unwrap().into_inner());
    assert!(all.iter().any(|t| t.contains("Berlin")), "{all:?}");
    let then = said(
        c.search_history(search(Some(between)))
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(
        !then.is_empty() && then.iter().all(|t| !t.contains("Berlin")),
        "{then:?}"
    );

    // Recall as of then: a new conversation asking where the user lives
    // recalls the home of that time, never the later one.
    let recalled = |as_of: Option<f64>| pb::PrepareRequestRequest {
        agent_id: format!("talk-3-{}", as_of.is_some()),
        user_id: "ana".into(),
        user_input: Some(user("Where did I live, Lisbon or Berlin?")),
        recall_as_of: as_of,
        ..Default::default()
    };
    let facts = |p: pb::PrepareRequestResponse| -> Vec<String> {
        p.recalled
            .into_iter()
            .filter_map(|r| r.semantic.map(|f| f.fact))
            .collect()
    };
    let now_recalled = facts(
        c.prepare_request(recalled(None))
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(
        now_recalled.iter().any(|f| f == "Moved to Berlin"),
        "{now_recalled:?}"
    );
    let then_recalled = facts(
        c.prepare_request(recalled(Some(between)))
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(
        then_recalled.iter().any(|f| f == "Lives in Lisbon")
            && then_recalled.iter().all(|f| f != "Moved to Berlin"),
        "{then_recalled:?}"
    );
}
