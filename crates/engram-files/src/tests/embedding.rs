//! The background indexer with the real local model (as `make models`
//! installs it), wrapped to play what a remote model may do: go down,
//! refuse a text, or be replaced by another model.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use engram_core::NewEvent;
use engram_core::embed::{EmbedError, EmbedFuture, Embedder};
use engram_core::forget::Forget;
use engram_embed::LocalModel;

use super::id;
use engram_store::MatchedBy;
use engram_store::conformance::{
    AFTER_LATE_CALL, PET_MEMORIES, PETS, TEST_POLICY, late_call, lead,
};

use crate::{FileStore, Search, SearchPage, StoreConfig};
use engram_store::prelude::*;

/// The local model under the name `id`; down while `down` is set; refusing
/// any batch holding a text with `refuse` in it; noting every text it
/// embeds; holding a batch with a text with `hold` in it (when set) until
/// `gate` has a permit, once it said so through `entered`.
#[derive(Debug)]
struct Wrapped {
    model: Arc<LocalModel>,
    id: String,
    down: AtomicBool,
    refuse: &'static str,
    seen: std::sync::Mutex<Vec<String>>,
    hold: std::sync::Mutex<Option<&'static str>>,
    gate: tokio::sync::Semaphore,
    entered: tokio::sync::Notify,
}

impl Wrapped {
    fn new(model: &Arc<LocalModel>, id: &str, refuse: &'static str) -> Arc<Self> {
        Arc::new(Self {
            model: Arc::clone(model),
            id: id.into(),
            down: AtomicBool::new(false),
            refuse,
            seen: Default::default(),
            hold: Default::default(),
            gate: tokio::sync::Semaphore::new(0),
            entered: Default::default(),
        })
    }

    /// Embeds batches with a text holding `text` only once [`Self::release`]
    /// is called.
    fn hold(&self, text: &'static str) {
        *self.hold.lock().unwrap() = Some(text);
    }

    /// Until a batch [`Self::hold`] named is being embedded (not a sleep:
    /// the embedder says so).
    async fn held(&self) {
        tokio::time::timeout(WAIT, self.entered.notified())
            .await
            .expect("the held batch is taken");
    }

    fn release(&self) {
        *self.hold.lock().unwrap() = None;
        self.gate.add_permits(1);
    }
}

impl Embedder for Wrapped {
    fn model(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.model.dim()
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(async move {
            if self.down.load(Ordering::SeqCst) {
                return Err(EmbedError::Unavailable("down for the test".into()));
            }
            if texts.iter().any(|t| t.contains(self.refuse)) {
                return Err(EmbedError::BadAnswer("refused for the test".into()));
            }
            self.seen.lock().unwrap().extend_from_slice(texts);
            self.model.embed(texts).await
        })
    }

    /// Noted as the text after its context, on a line of its own.
    fn embed_after<'a>(&'a self, items: &'a [(Option<String>, String)]) -> EmbedFuture<'a> {
        Box::pin(async move {
            if self.down.load(Ordering::SeqCst) {
                return Err(EmbedError::Unavailable("down for the test".into()));
            }
            let read = |(before, text): &(Option<String>, String)| match before {
                Some(before) => format!("{before}\n{text}"),
                None => text.clone(),
            };
            if items.iter().any(|i| read(i).contains(self.refuse)) {
                return Err(EmbedError::BadAnswer("refused for the test".into()));
            }
            let hold = *self.hold.lock().unwrap();
            if hold.is_some_and(|h| items.iter().any(|i| read(i).contains(h))) {
                self.entered.notify_one();
                let _released = self.gate.acquire().await;
            }
            self.seen.lock().unwrap().extend(items.iter().map(read));
            self.model.embed_after(items).await
        })
    }
}

fn local_model() -> Arc<LocalModel> {
    // Other tests' processes share the machine: idle priority would let
    // them starve the indexer past these tests' deadlines.
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

async fn open(dir: &std::path::Path, embedder: Option<Arc<Wrapped>>) -> FileStore {
    let mut config = StoreConfig::new(dir);
    config.embedder = embedder.map(|e| e as Arc<dyn Embedder>);
    FileStore::open(config).await.unwrap()
}

const DOG: &str = "a dog from the animal rescue";
const WAIT: Duration = Duration::from_secs(60);

/// (model, items, embedded, pending) of the index a search covered.
fn state(page: &SearchPage) -> (&str, u64, u64, u64) {
    let i = &page.index;
    (i.model.as_str(), i.items, i.embedded, i.pending)
}

/// Ranked search, waiting up to `wait` for the index.
async fn search(store: &FileStore, agent: &str, query: &str, wait: Duration) -> SearchPage {
    store
        .search(
            &id(agent),
            &Search {
                query: query.into(),
                limit: 3,
                wait_for_index: Some(wait),
                ..Search::default()
            },
        )
        .await
        .unwrap()
}

async fn ingest(store: &FileStore, agent: &str, texts: &[&str]) {
    let events: Vec<NewEvent> = texts.iter().map(|t| NewEvent::user(*t)).collect();
    store
        .ingest(&id(agent), &events, None, None, None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_change_re_embeds_everything_with_the_new_model() {
    let dir = tempfile::tempdir().unwrap();
    let local = local_model();
    let first = Wrapped::new(&local, "first-model", "\u{0}");
    let store = open(dir.path(), Some(first)).await;
    ingest(&store, "a", &PET_MEMORIES).await;
    let page = search(&store, "a", DOG, WAIT).await;
    assert_eq!(state(&page), ("first-model", 3, 3, 0));
    drop(store);

    // Another model, down at first: none of the first model's vectors
    // count for it, and search falls back to words meanwhile.
    let second = Wrapped::new(&local, "second-model", "\u{0}");
    second.down.store(true, Ordering::SeqCst);
    let store = open(dir.path(), Some(Arc::clone(&second))).await;
    let page = search(&store, "a", "puppy", Duration::ZERO).await;
    assert_eq!(state(&page), ("second-model", 3, 0, 3));
    assert_eq!(page.hits[0].matched_by, MatchedBy::Lexical);
    assert!(page.hits[0].trace.content.contains("puppy"));

    second.down.store(false, Ordering::SeqCst);
    let page = search(&store, "a", DOG, WAIT).await;
    assert_eq!(state(&page), ("second-model", 3, 3, 0));
    assert!(page.hits[0].trace.content.contains("puppy"), "{page:?}");
    assert_eq!(page.hits[0].matched_by, MatchedBy::Semantic);
    drop(store);

    // The file now holds the second model's vectors alone.
    let store = open(
        dir.path(),
        Some(Wrapped::new(&local, "second-model", "\u{0}")),
    )
    .await;
    let page = search(&store, "a", "sunrise", Duration::ZERO).await;
    assert_eq!(state(&page), ("second-model", 3, 3, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_text_is_left_to_its_words_and_the_rest_is_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Wrapped::new(&local_model(), "m", "REFUSE");
    let store = open(dir.path(), Some(embedder)).await;
    let mut texts = PET_MEMORIES.to_vec();
    texts.insert(1, "a text the REFUSE model will not take");
    ingest(&store, "a", &texts).await;
    let page = search(&store, "a", DOG, WAIT).await;
    assert_eq!(
        state(&page),
        ("m", 4, 3, 0),
        "the batch's other items are embedded and nothing stays pending"
    );
    assert!(page.hits[0].trace.content.contains("puppy"));
    let page = search(&store, "a", "REFUSE", Duration::ZERO).await;
    assert!(page.hits[0].trace.content.contains("REFUSE"));
    assert_eq!(page.hits[0].matched_by, MatchedBy::Lexical);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_wait_while_the_model_is_down_and_are_embedded_when_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Wrapped::new(&local_model(), "m", "\u{0}");
    embedder.down.store(true, Ordering::SeqCst);
    let store = open(dir.path(), Some(Arc::clone(&embedder))).await;
    ingest(&store, "a", &PET_MEMORIES).await;
    let page = search(&store, "a", "puppy", Duration::from_millis(200)).await;
    assert_eq!(state(&page), ("m", 3, 0, 3));
    assert!(
        page.hits[0].trace.content.contains("puppy"),
        "words still find it"
    );

    embedder.down.store(false, Ordering::SeqCst);
    let page = search(&store, "a", DOG, WAIT).await;
    assert_eq!(state(&page), ("m", 3, 3, 0));
    assert!(page.hits[0].trace.content.contains("puppy"));
}

/// More items than the queue holds (8 in tests): the rest wait in the index,
/// are counted, and are embedded when the queue runs empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_longer_than_the_queue_is_embedded_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Wrapped::new(&local_model(), "m", "\u{0}");
    embedder.down.store(true, Ordering::SeqCst);
    let store = open(dir.path(), Some(Arc::clone(&embedder))).await;
    let texts: Vec<String> = (0..20)
        .map(|i| format!("note number {i} about the garden"))
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    ingest(&store, "a", &texts).await;
    let page = search(&store, "a", "garden", Duration::from_millis(100)).await;
    assert_eq!(state(&page), ("m", 20, 0, 20));
    drop(store);

    // Reopened with the backlog still there, then the model answers.
    let store = open(dir.path(), Some(Arc::clone(&embedder))).await;
    let page = search(&store, "a", "garden", Duration::ZERO).await;
    assert_eq!(state(&page), ("m", 20, 0, 20));
    embedder.down.store(false, Ordering::SeqCst);
    let page = search(&store, "a", "garden", WAIT).await;
    assert_eq!(state(&page), ("m", 20, 20, 0));
}

/// A question naming a category ("pets") shares no word with the message
/// naming the instance ("puppy"), and names a participant both of whose
/// messages match it by that name alone. The conversation's own words
/// closest in meaning to the question join its word query: the puppy's
/// message leads the other by more than without them. The words' vectors
/// are in memory only; after a restart the indexer gives them again, and a
/// search that waits for the index ranks as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_naming_a_category_finds_the_instance_by_the_conversations_words() {
    let local = local_model();
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Some(Wrapped::new(&local, "m", "\u{0}"))).await;
    ingest(&store, "a", &PET_MEMORIES).await;
    let expanded = search(&store, "a", PETS, WAIT).await;
    assert!(
        expanded.hits[0].trace.content.contains("puppy"),
        "{expanded:?}"
    );
    let words = |store: &FileStore| {
        let indexer = store.inner.indexer.as_ref().unwrap();
        let table = indexer.words();
        ["puppy", "shelter", "sunrise"].map(|w| table.contains(w))
    };
    assert_eq!(words(&store), [true; 3], "every word of the agent embedded");
    drop(store);

    let off_dir = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::new(off_dir.path());
    config.embedder = Some(Wrapped::new(&local, "m", "\u{0}") as Arc<dyn Embedder>);
    config.ranking.expansion_words = 0;
    let off = FileStore::open(config).await.unwrap();
    ingest(&off, "a", &PET_MEMORIES).await;
    let plain = search(&off, "a", PETS, WAIT).await;
    assert_eq!(words(&off), [false; 3], "no expansion: no word embedded");
    let (with, without) = (
        lead(&expanded, "puppy", "support group"),
        lead(&plain, "puppy", "support group"),
    );
    assert!(with > without + 0.05, "{with} against {without}");

    let store = open(dir.path(), Some(Wrapped::new(&local, "m", "\u{0}"))).await;
    assert_eq!(
        words(&store),
        [false; 3],
        "a restart starts the table empty"
    );
    let again = search(&store, "a", PETS, WAIT).await;
    assert_eq!(words(&store), [true; 3], "the wait covered the words");
    let scores = |page: &SearchPage| page.hits.iter().map(|h| h.score).collect::<Vec<_>>();
    assert_eq!(scores(&again), scores(&expanded));
}

/// The table of word vectors is shared and bounded: full, it gives up the
/// words least recently used for new ones (here another agent's flood of
/// words nobody searches for). An agent whose words were given up gets
/// them again: its next search that waits hands it to the indexer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn words_given_up_for_others_are_embedded_again_for_a_search() {
    let local = local_model();
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Some(Wrapped::new(&local, "m", "\u{0}"))).await;
    let indexer = Arc::clone(store.inner.indexer.as_ref().unwrap());
    let dim = indexer.embedder.dim();
    // A small table: the agent's words fit, with room to spare.
    *indexer.words_mut() = engram_index::WordVectors::new(dim, 60);
    ingest(&store, "a", &PET_MEMORIES).await;
    let first = search(&store, "a", PETS, WAIT).await;
    let held = || indexer.words().contains("puppy");
    assert!(held());
    {
        let mut table = indexer.words_mut();
        let mut flood = vec![0.0; dim];
        flood[0] = 1.0;
        for i in 0..60 {
            table.insert(&format!("flood{i}"), &flood);
        }
        assert!(table.evictions() > 0);
    }
    assert!(!held(), "given up for the flood");
    let again = search(&store, "a", PETS, WAIT).await;
    assert!(held(), "embedded again for the search that waited");
    let scores = |page: &SearchPage| page.hits.iter().map(|h| h.score).collect::<Vec<_>>();
    assert_eq!(scores(&again), scores(&first));
}

/// A trace is embedded after the end of the trace before it in its
/// sitting (what it answers), and alone in a sitting of its own; once the
/// trace before it is forgotten, it is embedded again, alone. A text the
/// model refuses does not take the trace after it along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_is_embedded_after_what_it_answers_and_again_once_that_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Wrapped::new(&local_model(), "m", "REFUSE");
    let store = open(dir.path(), Some(Arc::clone(&embedder))).await;
    let at = |days: f64, event: NewEvent| NewEvent {
        ts: Some(1_700_000_000.0 + days * 86_400.0),
        ..event
    };
    let asked = "We made coconut milk ice cream. How did it taste?";
    let reply = "Super good! Rich and creamy.";
    let events = [
        at(0.0, NewEvent::assistant(asked)),
        at(0.001, NewEvent::user(reply)),
        at(2.0, NewEvent::user("Super good, and rich!")),
        at(2.001, NewEvent::user("REFUSE this one")),
        at(2.002, NewEvent::user("and this one is fine")),
    ];
    store
        .ingest(&id("a"), &events, None, None, None)
        .await
        .unwrap();
    let page = search(&store, "a", "ice cream", WAIT).await;
    assert_eq!(state(&page), ("m", 5, 4, 0));
    let seen = |text: &str| {
        let seen = embedder.seen.lock().unwrap();
        seen.iter().filter(|t| *t == text).count()
    };
    let in_context = format!("{asked}\n{reply}");
    assert_eq!(seen(&in_context), 1, "{:?}", embedder.seen.lock().unwrap());
    assert_eq!(seen(reply), 0);
    assert_eq!(
        seen("Super good, and rich!"),
        1,
        "alone in a sitting of its own"
    );
    assert_eq!(
        seen("and this one is fine"),
        1,
        "after a refused text: alone"
    );

    let policy = TEST_POLICY;
    store
        .forget(&id("a"), &Forget::Turn("turn_0001".into()), policy)
        .await
        .unwrap();
    let page = search(&store, "a", "ice cream", WAIT).await;
    assert_eq!(state(&page), ("m", 4, 3, 0));
    assert_eq!(seen(reply), 1, "embedded again, with nothing before it");
    assert_eq!(seen(&in_context), 1);
}

/// A tool result that comes after the next turn began is placed in its
/// call's turn, before that turn's message: the message, embedded after
/// the call, is embedded again after the result, as a rebuild would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_after_a_late_tool_result_is_embedded_again_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Wrapped::new(&local_model(), "m", "\u{0}");
    let store = open(dir.path(), Some(Arc::clone(&embedder))).await;
    let at = |seconds: f64, event: NewEvent| NewEvent {
        ts: Some(1_700_000_000.0 + seconds),
        ..event
    };
    let next = AFTER_LATE_CALL;
    store
        .ingest(&id("a"), &late_call(1_700_000_000.0), None, None, None)
        .await
        .unwrap();
    let page = search(&store, "a", "bread", WAIT).await;
    assert_eq!(state(&page), ("m", 3, 3, 0));
    let read_after = |word: &str| {
        let seen = embedder.seen.lock().unwrap();
        seen.iter()
            .filter(|t| t.ends_with(&format!("\n{next}")) && t.contains(word))
            .count()
    };
    assert_eq!(read_after("oven"), 1, "{:?}", embedder.seen.lock().unwrap());
    assert_eq!(read_after("degrees"), 0);

    let late = NewEvent::tool_result("c1", serde_json::json!("reached 220 degrees"));
    let stored = store
        .ingest(&id("a"), &[at(90.0, late)], None, None, None)
        .await
        .unwrap();
    assert_eq!(
        stored.traces[0].turn_id, "turn_0001",
        "placed in its call's turn"
    );
    let page = search(&store, "a", "bread", WAIT).await;
    assert_eq!(state(&page), ("m", 4, 4, 0));
    assert_eq!(
        read_after("degrees"),
        1,
        "{:?}",
        embedder.seen.lock().unwrap()
    );
}

/// While a batch is being embedded (the index unlocked), a search catches
/// up with a late tool result placed before one of its traces: that
/// trace's vector, read after the call, is not written back when the batch
/// comes back; it is read again after the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vector_read_after_a_text_since_displaced_is_not_written_back() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Wrapped::new(&local_model(), "m", "\u{0}");
    embedder.hold(AFTER_LATE_CALL);
    let store = open(dir.path(), Some(Arc::clone(&embedder))).await;
    store
        .ingest(&id("a"), &late_call(1_700_000_000.0), None, None, None)
        .await
        .unwrap();
    embedder.held().await;
    let late = NewEvent {
        ts: Some(1_700_000_090.0),
        ..NewEvent::tool_result("c1", serde_json::json!("reached 220 degrees"))
    };
    store
        .ingest(&id("a"), &[late], None, None, None)
        .await
        .unwrap();
    search(&store, "a", "bread", Duration::ZERO).await;
    embedder.release();
    let page = search(&store, "a", "bread", WAIT).await;
    assert_eq!(state(&page), ("m", 4, 4, 0));
    let seen = embedder.seen.lock().unwrap();
    let readings: Vec<&String> = seen
        .iter()
        .filter(|t| t.ends_with(&format!("\n{AFTER_LATE_CALL}")))
        .collect();
    assert_eq!(readings.len(), 2, "read again: {seen:?}");
    assert!(!readings[0].contains("degrees") && readings[1].contains("degrees"));
}

/// While a batch is being embedded, its trace is forgotten: its vector is
/// not written back when the batch comes back (it would outlive the text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vector_of_a_trace_forgotten_while_it_is_embedded_is_not_written_back() {
    let dir = tempfile::tempdir().unwrap();
    let embedder = Wrapped::new(&local_model(), "m", "\u{0}");
    embedder.hold("secret");
    let store = open(dir.path(), Some(Arc::clone(&embedder))).await;
    let turns = [
        NewEvent::user("The bread needs an hour to rise."),
        NewEvent::user("My secret is the sourdough starter."),
    ];
    for event in turns {
        store
            .ingest(&id("a"), &[event], None, None, None)
            .await
            .unwrap();
    }
    embedder.held().await;
    store
        .forget(&id("a"), &Forget::Turn("turn_0002".into()), TEST_POLICY)
        .await
        .unwrap();
    search(&store, "a", "bread", Duration::ZERO).await;
    embedder.release();
    let page = search(&store, "a", "bread", WAIT).await;
    assert_eq!(
        state(&page),
        ("m", 1, 1, 0),
        "no vector of the forgotten one"
    );
}

mod users;
