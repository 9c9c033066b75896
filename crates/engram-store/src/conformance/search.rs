//! Cases of ranked search: relevance, context, filters, paging, a plan's
//! wants, and an index that never misses an acknowledged write. The
//! ranking's policy is written once (`engram_index::pipeline`, unit-tested
//! in `engram-index` over an in-memory index); the cases of the priors
//! and sittings here check that each backend's primitives give it what it
//! weighs — who said a message, whether it asks, where sittings start.

use engram_core::{NewEvent, TraceType};

use super::{Harness, id, ingest, is_invalid, ranked};
use crate::prelude::*;
use crate::{MatchedBy, Policy, Search, Store};

/// A compaction policy for tests: the last turn kept raw, a few summaries
/// and facts (the stores' search tests forget and compact with it).
pub const TEST_POLICY: Policy = Policy {
    raw_tail_turns: 1,
    max_episodic: 3,
    max_semantic: 20,
    carry_tokens: 800,
    fact_ttl: None,
};

fn said(name: &str, text: &str) -> NewEvent {
    NewEvent {
        name: Some(name.into()),
        ..NewEvent::user(text)
    }
}

fn answer(text: &str) -> NewEvent {
    NewEvent::assistant(text)
}

/// Contents of a page's hits, in order.
async fn contents(store: &dyn Store, a: &engram_core::AgentId, search: &Search) -> Vec<String> {
    let page = store.search(a, search).await.expect("search");
    page.hits.into_iter().map(|h| h.trace.content).collect()
}

/// Stemmed words find a message that shares no exact word form with the
/// query; the speaker's name counts; a message whose neighbour matches
/// comes along as context, after every real match; filters hold.
pub async fn ranked_search_orders_by_relevance_with_context_and_filters<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("ranked");
    let turns: [(&str, &str, &str); 4] = [
        (
            "Caroline",
            "I went to a support group for the first time.",
            "How was it?",
        ),
        (
            "Melanie",
            "We painted sunsets with the kids at the lake.",
            "Lovely.",
        ),
        (
            "Caroline",
            "Thinking about adoption agencies lately.",
            "Big step!",
        ),
        ("Melanie", "Our camping trip got rained out.", "Bad luck."),
    ];
    for (name, text, reply) in turns {
        ingest(store.as_ref(), &a, &[said(name, text)]).await;
        ingest(store.as_ref(), &a, &[answer(reply)]).await;
    }
    let got = contents(
        store.as_ref(),
        &a,
        &ranked("When did Caroline go to the support groups?", 10),
    )
    .await;
    assert_eq!(got[0], "I went to a support group for the first time.");
    assert!(
        got.contains(&"How was it?".to_owned()),
        "its reply, as context: {got:?}"
    );
    // Context comes after every real match (it is not an answer).
    let page = store
        .search(
            &a,
            &ranked("When did Caroline go to the support groups?", 10),
        )
        .await
        .unwrap();
    let by: Vec<MatchedBy> = page.hits.iter().map(|h| h.matched_by).collect();
    let context = by.iter().position(|m| *m == MatchedBy::Context).unwrap();
    assert!(
        by[context..].iter().all(|m| *m == MatchedBy::Context),
        "{by:?}"
    );
    let page = store
        .search(&a, &ranked("support groups", 10))
        .await
        .unwrap();
    assert_eq!(page.hits[0].matched_by, MatchedBy::Lexical);
    assert_eq!(page.hits[1].matched_by, MatchedBy::Context);
    assert!(page.hits[0].score > page.hits[1].score);
    assert!(page.index.items >= 8, "{:?}", page.index);
    let painting = contents(store.as_ref(), &a, &ranked("painting sunset", 1)).await;
    assert_eq!(painting, ["We painted sunsets with the kids at the lake."]);

    let only_replies = Search {
        trace_types: vec![TraceType::Assistant],
        ..ranked("support group lovely", 10)
    };
    let got = contents(store.as_ref(), &a, &only_replies).await;
    assert_eq!(got, ["Lovely."], "neither the user's match nor its context");
    let later_turns = Search {
        turns: Some((3, 4)),
        ..ranked("support group adoption camping", 10)
    };
    let got = contents(store.as_ref(), &a, &later_turns).await;
    assert!(got.contains(&"Thinking about adoption agencies lately.".to_owned()));
    assert!(!got.iter().any(|c| c.contains("support")), "{got:?}");

    let with_context = Search {
        neighbours: 1,
        ..ranked("adoption agencies", 1)
    };
    let page = store.search(&a, &with_context).await.unwrap();
    let hit = &page.hits[0];
    assert_eq!(hit.trace.name.as_deref(), Some("Caroline"));
    assert_eq!(hit.before.len(), 1);
    assert_eq!(hit.before[0].content, "Lovely.");
    assert_eq!(hit.after[0].content, "Big step!");
    let nothing = contents(store.as_ref(), &a, &ranked("xylophone", 10)).await;
    assert!(nothing.is_empty());
}

/// The primitives behind the speaker prior (who said each message, each
/// name's terms): a question that names one participant ranks what
/// they said above what another participant said, though the other's
/// message matches more of its words; a question naming both, or nobody,
/// ranks by the words.
pub async fn a_question_naming_one_participant_prefers_their_messages<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("speakers");
    ingest(store.as_ref(), &a, &[said("Caroline", "I love pottery")]).await;
    let melanie = NewEvent {
        name: Some("Melanie".into()),
        ..NewEvent::assistant("We take the pottery class, a pottery class we take weekly")
    };
    ingest(store.as_ref(), &a, &[melanie]).await;
    let first = async |query: &str| {
        let texts = contents(store.as_ref(), &a, &ranked(query, 10)).await;
        texts.into_iter().next().unwrap_or_default()
    };
    let words = first("which pottery class do they take?").await;
    assert!(words.starts_with("We take"), "by the words: {words}");
    let named = first("What pottery class did Caroline take?").await;
    assert_eq!(named, "I love pottery");
}

/// The primitive behind the question prior (which messages mostly ask):
/// a message that mostly asks ranks after the reply
/// that tells, though it holds more of the question's words (each its own
/// sitting: no context between them).
pub async fn a_message_that_mostly_asks_ranks_after_one_that_tells<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("asking");
    let day = |n: f64, event: NewEvent| NewEvent {
        ts: Some(1_700_000_000.0 + n * 86_400.0),
        ..event
    };
    let asks = day(
        0.0,
        NewEvent::user("Which pottery class do you take? The pottery class?"),
    );
    ingest(store.as_ref(), &a, &[asks]).await;
    let tells = day(
        1.0,
        NewEvent::assistant("I take a pottery class on Mondays."),
    );
    ingest(store.as_ref(), &a, &[tells]).await;
    let texts = contents(
        store.as_ref(),
        &a,
        &ranked("Which pottery class does she take?", 10),
    )
    .await;
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], "I take a pottery class on Mondays.", "{texts:?}");
}

/// The primitives behind sittings (their spans by event time, a term's
/// counts by sitting): of two messages that share one word with the
/// question, the one whose sitting holds the question's other words comes
/// first, though alone the other (shorter) scores higher and the words it
/// lacks are too far away to lend it theirs as context.
pub async fn a_sitting_that_holds_the_question_lifts_its_messages<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("sittings");
    let at = |ts: f64, text: &str| NewEvent {
        ts: Some(1_700_000_000.0 + ts),
        ..NewEvent::user(text)
    };
    let filler = [
        "the weather stayed grey all week",
        "coffee tastes better in the morning",
        "I repainted the hallway",
        "the train was late again",
    ];
    ingest(
        store.as_ref(),
        &a,
        &[at(0.0, "the camping weekend went well overall")],
    )
    .await;
    for (i, text) in filler.iter().enumerate() {
        ingest(store.as_ref(), &a, &[at(60.0 * (i + 1) as f64, text)]).await;
    }
    ingest(
        store.as_ref(),
        &a,
        &[at(400.0, "the kids asked about the lake trip")],
    )
    .await;
    // A day later: another sitting.
    ingest(
        store.as_ref(),
        &a,
        &[at(86_400.0, "camping gear sale this week")],
    )
    .await;
    for (i, text) in filler.iter().enumerate() {
        ingest(store.as_ref(), &a, &[at(86_460.0 + 60.0 * i as f64, text)]).await;
    }
    // The messages on camping, in their order among the results.
    let camping = async || {
        let question = ranked("camping with the kids at the lake", 10);
        let texts = contents(store.as_ref(), &a, &question).await;
        let camping = texts.iter().filter(|t| t.contains("camping")).cloned();
        (camping.collect::<Vec<_>>(), texts)
    };
    let want = [
        "the camping weekend went well overall",
        "camping gear sale this week",
    ];
    let (found, texts) = camping().await;
    assert_eq!(found, want, "{texts:?}");
    // Two days on, a sitting of its own with the question's other words.
    // Counted with the day before's (sittings read before this write),
    // they would lift the day before's camping message as well.
    ingest(
        store.as_ref(),
        &a,
        &[at(200_000.0, "the kids and the lake")],
    )
    .await;
    let (found, texts) = camping().await;
    assert_eq!(found, want, "{texts:?}");
}

/// Writes the index has not read yet (not searched since, then a restart,
/// then a compaction that archived them) are found, archived or not.
pub async fn ranked_search_covers_every_acknowledged_write_after_a_restart<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("catchup");
    ingest(store.as_ref(), &a, &[NewEvent::user("the aardvark report")]).await;
    assert_eq!(
        contents(store.as_ref(), &a, &ranked("aardvark", 5))
            .await
            .len(),
        1
    );
    for word in ["bison", "caracal", "dingo", "echidna"] {
        ingest(
            store.as_ref(),
            &a,
            &[NewEvent::user(format!("the {word} report"))],
        )
        .await;
        ingest(store.as_ref(), &a, &[answer(&format!("noted {word}"))]).await;
    }
    let store = h.reopen(store).await;
    let got = contents(store.as_ref(), &a, &ranked("bison report", 5)).await;
    assert_eq!(got[0], "the bison report");

    // Written, then archived by a compaction, before any search.
    ingest(store.as_ref(), &a, &[NewEvent::user("the fossa report")]).await;
    ingest(store.as_ref(), &a, &[NewEvent::user("the gerenuk report")]).await;
    ingest(store.as_ref(), &a, &[NewEvent::user("the ibex report")]).await;
    let job = store
        .begin_compaction(&a, TEST_POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    let archived: Vec<String> = job.traces.iter().map(|t| t.content.clone()).collect();
    assert!(
        archived.contains(&"the fossa report".to_owned()),
        "never indexed, now archived"
    );
    store
        .finish_compaction(&a, job, Some(super::agents::summary()), TEST_POLICY)
        .await
        .unwrap();
    let store = h.reopen(store).await;
    for word in ["aardvark", "dingo", "fossa", "gerenuk", "ibex"] {
        let page = store
            .search(&a, &ranked(&format!("{word} report"), 5))
            .await
            .unwrap();
        let first = &page.hits[0];
        assert_eq!(first.trace.content, format!("the {word} report"));
        assert_eq!(
            first.archived,
            archived.contains(&first.trace.content),
            "{word}"
        );
    }
}

/// Pages of a ranked search follow each other without gaps or repeats;
/// a token of the other mode, or none of ours, is refused.
pub async fn ranked_search_pages_and_refuses_foreign_tokens<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("paged");
    for i in 0..7 {
        ingest(
            store.as_ref(),
            &a,
            &[NewEvent::user(format!("llama number {i}"))],
        )
        .await;
    }
    let all = contents(store.as_ref(), &a, &ranked("llama", 50)).await;
    assert_eq!(all.len(), 7);
    let mut paged = vec![];
    let mut token = None;
    loop {
        let search = Search {
            page_token: token.take(),
            ..ranked("llama", 3)
        };
        let page = store.search(&a, &search).await.unwrap();
        paged.extend(page.hits.into_iter().map(|h| h.trace.content));
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, all);
    for bad in ["bogus", "a0", "k", "k-1"] {
        let search = Search {
            page_token: Some(bad.into()),
            ..ranked("llama", 3)
        };
        assert!(is_invalid(&store.search(&a, &search).await), "{bad}");
    }
    let empty = ranked("   ", 3);
    assert!(is_invalid(&store.search(&a, &empty).await));
}

/// Text as hostile as a client may send is stored whole and found: NUL
/// characters, a word longer than any index keeps, a message of hundreds
/// of kilobytes of distinct words, characters from every plane. Nothing of
/// it is refused for the backend's sake.
pub async fn hostile_text_is_stored_whole_and_found<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = id("hostile");
    let long_word = "x".repeat(5000);
    let many: String = (0..40_000).map(|i| format!("w{i} ")).collect();
    let texts = [
        "zebra \0 quagga\0".to_owned(),
        format!("{long_word} zebra okapi"),
        format!("{many}zebra"),
        "zebra 🦓 \u{202e}gnu\u{202c} 𝔷𝔢𝔟𝔯𝔞 \u{10ffff}".to_owned(),
    ];
    for text in &texts {
        ingest(store.as_ref(), &a, &[NewEvent::user(text.clone())]).await;
    }
    let mut stored: Vec<String> = super::all_traces(store.as_ref(), &a)
        .await
        .into_iter()
        .map(|(t, _)| t.content)
        .collect();
    stored.sort();
    let mut want = texts.to_vec();
    want.sort();
    assert!(stored == want, "every text stored whole");
    for (query, text) in [
        ("quagga", &texts[0]),
        ("okapi", &texts[1]),
        ("gnu", &texts[3]),
    ] {
        let found = contents(store.as_ref(), &a, &ranked(query, 5)).await;
        assert_eq!(found.first(), Some(text), "{query}");
    }
}

/// Three messages for both stores' tests of query expansion with the real
/// model: the one a question about [`PETS`] is after shares only the
/// participant's name with it.
pub const PET_MEMORIES: [&str; 3] = [
    "Caroline: I adopted a puppy from the shelter last week",
    "Melanie: we painted a sunrise over the lake together",
    "Caroline: the support group meets every Tuesday evening",
];

/// A question naming a category ("pets") where [`PET_MEMORIES`] names the
/// instance ("puppy").
pub const PETS: &str = "Which pets does Caroline have?";

/// The message of both stores' tests of a late tool result: said after a
/// call that is answered only once it was ([`late_call`]).
pub const AFTER_LATE_CALL: &str = "And what comes next for the bread?";

/// A request, its tool call and the next turn's message
/// ([`AFTER_LATE_CALL`]), at 0, 1 and 60 seconds past `start`; the call
/// (`c1`) is not answered yet.
pub fn late_call(start: f64) -> [NewEvent; 3] {
    let at = |seconds: f64, event: NewEvent| NewEvent {
        ts: Some(start + seconds),
        ..event
    };
    [
        at(0.0, NewEvent::user("Preheat the oven, please.")),
        at(
            1.0,
            NewEvent::tool_call("c1", "oven", serde_json::json!({})),
        ),
        at(60.0, NewEvent::user(AFTER_LATE_CALL)),
    ]
}

/// The gap between the score of the first hit whose text holds `first` and
/// that of the one holding `second`.
pub fn lead(page: &crate::SearchPage, first: &str, second: &str) -> f32 {
    let score = |part: &str| {
        page.hits
            .iter()
            .find(|h| h.trace.content.contains(part))
            .unwrap_or_else(|| panic!("no hit holds {part:?}: {page:?}"))
            .score
    };
    score(first) - score(second)
}

/// A backend's one ranked duty, a [`Plan`](crate::ranking::Plan) run:
/// each want ranked within its filter and read back over its range (with
/// its context), how many it ranked counted; a want of 0 ranks nothing;
/// an `archived_only` want leaves the active transcript out, which after
/// a compaction still holds the newest turn; a want of summaries alone
/// finds the compaction's; an unknown agent is NOT_FOUND.
pub async fn a_plan_ranks_and_reads_back_each_want<H: Harness>(h: &H) {
    use crate::ranking::{Over, Plan, Want};
    use engram_index::{Filter, Kind};
    let store = h.open().await;
    let a = id("planned");
    super::conversation(store.as_ref(), &a, 4).await;
    let job = store
        .begin_compaction(&a, TEST_POLICY)
        .await
        .unwrap()
        .job()
        .unwrap();
    let summary = engram_core::compaction::Summary {
        episodic_summary: "zebra talk about lookups".into(),
        tags: vec![],
        salience: 0.5,
        semantic_facts: vec![],
        ..Default::default()
    };
    store
        .finish_compaction(&a, job, Some(summary), TEST_POLICY)
        .await
        .unwrap();
    let want = |kinds: Vec<Kind>, limit: usize, archived_only: bool, read, context| Want {
        filter: Filter {
            kinds,
            ..Filter::default()
        },
        limit,
        archived_only,
        read,
        context,
    };
    let plan = Plan {
        query: "zebra answer".into(),
        wants: vec![
            want(vec![Kind::Trace], 10, false, 1..3, 1),
            want(vec![Kind::Trace], 10, true, 0..10, 0),
            want(vec![], 0, false, 0..10, 0),
            want(vec![Kind::Episodic], 5, false, 0..5, 0),
        ],
        wait: None,
    };
    let found = store.rank(Over::Agent(&a), &plan).await.unwrap();
    assert_eq!(found.read.len(), 4);
    assert_eq!(found.ranked.len(), 4);
    // Sixteen traces, every one with "zebra".
    assert_eq!(found.ranked[0], 10, "{:?}", found.ranked);
    assert_eq!(found.read[0].len(), 2, "the range asked, read back");
    for r in &found.read[0] {
        assert!(matches!(r.memory, crate::Memory::Trace { .. }));
        assert!(r.before.len() <= 1 && r.after.len() <= 1);
        assert!(r.before.len() + r.after.len() > 0, "{r:?}");
    }
    let archived = &found.read[1];
    assert!(!archived.is_empty());
    assert!(
        archived
            .iter()
            .all(|r| matches!(r.memory, crate::Memory::Trace { archived: true, .. })),
        "only what the compaction archived: {archived:?}"
    );
    assert!(found.ranked[1] < 16, "the active tail left out");
    assert_eq!((found.ranked[2], found.read[2].len()), (0, 0));
    assert!(
        found.read[3].iter().any(
            |r| matches!(&r.memory, crate::Memory::Episodic(e) if e.summary.contains("lookups"))
        ),
        "{:?}",
        found.read[3]
    );
    assert!(super::is_not_found(
        store.rank(Over::Agent(&id("unplanned")), &plan).await
    ));
}
