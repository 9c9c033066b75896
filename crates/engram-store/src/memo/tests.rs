use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use engram_core::embed::{EmbedError, EmbedFuture, Embedder};
use tokio::sync::Semaphore;

use super::{REMEMBERED, Remembering};

/// Counts the texts it embeds; each waits for a permit of `gate`, and
/// fails while `failing` is set.
#[derive(Debug)]
struct Counting {
    texts: AtomicUsize,
    gate: Semaphore,
    failing: std::sync::atomic::AtomicBool,
}

impl Counting {
    fn new(permits: usize) -> Arc<Self> {
        Arc::new(Self {
            texts: AtomicUsize::new(0),
            gate: Semaphore::new(permits),
            failing: Default::default(),
        })
    }

    fn embedded(&self) -> usize {
        self.texts.load(Ordering::SeqCst)
    }
}

impl Embedder for Counting {
    fn model(&self) -> &str {
        "counting"
    }

    fn dim(&self) -> usize {
        2
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(async move {
            let _permit = self.gate.acquire().await.expect("open");
            if self.failing.load(Ordering::SeqCst) {
                return Err(EmbedError::Unavailable("down".into()));
            }
            self.texts.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
        })
    }
}

fn texts(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_query_spares_the_indexer_the_same_text() {
    let model = Counting::new(100);
    let memo = Remembering::new(model.clone());
    let q = memo.embed_query("where do I live").await.unwrap();
    assert_eq!(model.embedded(), 1);
    let items = memo
        .embed(&texts(&["hello", "where do I live", "bye"]))
        .await
        .unwrap();
    // Only the two others were embedded, in order around the remembered one.
    assert_eq!(model.embedded(), 3);
    assert_eq!(items, vec![vec![5.0, 1.0], q[0].clone(), vec![3.0, 1.0]]);
}

#[tokio::test]
async fn a_query_takes_what_the_indexer_embedded() {
    let model = Counting::new(100);
    let memo = Remembering::new(model.clone());
    memo.embed(&texts(&["I moved to Berlin"])).await.unwrap();
    let q = memo.embed_query("I moved to Berlin").await.unwrap();
    assert_eq!(model.embedded(), 1);
    assert_eq!(q, vec![vec![17.0, 1.0]]);
}

#[tokio::test]
async fn the_indexer_waits_for_a_query_in_flight() {
    let model = Counting::new(0);
    let memo = Arc::new(Remembering::new(model.clone()));
    let query = tokio::spawn({
        let memo = Arc::clone(&memo);
        async move { memo.embed_query("in flight").await }
    });
    // The query holds its cell before the indexer asks.
    while !crate::lock(&memo.recent).cells.contains_key("in flight") {
        tokio::task::yield_now().await;
    }
    let items = tokio::spawn({
        let memo = Arc::clone(&memo);
        async move { memo.embed(&texts(&["in flight"])).await }
    });
    model.gate.add_permits(10);
    let (q, items) = (query.await.unwrap().unwrap(), items.await.unwrap().unwrap());
    assert_eq!(q, items);
    assert_eq!(model.embedded(), 1, "one run of the model for both");
}

#[tokio::test]
async fn failures_are_not_remembered() {
    let model = Counting::new(100);
    let memo = Remembering::new(model.clone());
    model.failing.store(true, Ordering::SeqCst);
    let failed = memo.embed_query("later").await;
    assert!(matches!(failed, Err(EmbedError::Unavailable(_))));
    model.failing.store(false, Ordering::SeqCst);
    assert_eq!(
        memo.embed_query("later").await.unwrap(),
        vec![vec![5.0, 1.0]]
    );
    assert_eq!(model.embedded(), 1);
}

#[tokio::test]
async fn it_remembers_a_bounded_number_of_texts() {
    let model = Counting::new(100_000);
    let memo = Remembering::new(model.clone());
    let many: Vec<String> = (0..=REMEMBERED).map(|i| format!("text {i}")).collect();
    memo.embed(&many).await.unwrap();
    assert_eq!(crate::lock(&memo.recent).cells.len(), REMEMBERED);
    memo.embed_query("text 0").await.unwrap(); // forgotten: embedded again
    memo.embed_query(&format!("text {REMEMBERED}"))
        .await
        .unwrap(); // remembered
    assert_eq!(model.embedded(), REMEMBERED + 2);
}

#[test]
fn wrapping_twice_keeps_one_memory() {
    let once = Remembering::wrap(Counting::new(1));
    let twice = Remembering::wrap(Arc::clone(&once));
    assert!(Arc::ptr_eq(&once, &twice));
}
