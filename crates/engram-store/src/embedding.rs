//! Embedding items and queries with a model, the same way for both
//! backends: a batch that the model refuses is retried item by item, and
//! a query that cannot be embedded is searched by its words.

use std::time::Instant;

use engram_core::embed::{EmbedError, Embedder};
use engram_index::{Embedded, Item, WordVectors};

/// What one batch came to; items in neither list were refused by the
/// model (they are found by their words only).
#[derive(Debug)]
pub struct Outcome {
    pub embedded: Vec<Embedded>,
    /// Items for a later try (the model was unavailable), and why.
    pub retry: Vec<Item>,
    pub failed: Option<String>,
}

/// Embeds `batch`: each item with the text of the trace before it, if it
/// is read after it ([`crate::context_of`], `Embedder::embed_after`). A
/// model that refuses the batch (a remote one may refuse a text it cannot
/// take) gets each item alone; an item refused after its context is tried
/// on its own (the text before it is not its to answer for); an item
/// refused alone is left to the words (counted, logged; the next load of
/// the agent tries it again), so one text never holds up its agent's
/// queue.
pub async fn embed_batch(embedder: &dyn Embedder, batch: Vec<(Item, Option<String>)>) -> Outcome {
    let read: Vec<(Option<String>, String)> = batch
        .iter()
        .map(|(i, before)| (before.as_deref().map(crate::context_of), i.text.clone()))
        .collect();
    let why = match embedder.embed_after(&read).await {
        Ok(vectors) if vectors.len() == batch.len() => {
            return Outcome {
                embedded: batch
                    .into_iter()
                    .map(|(i, _)| i)
                    .zip(vectors)
                    .map(embedded)
                    .collect(),
                retry: vec![],
                failed: None,
            };
        }
        Err(EmbedError::Unavailable(why)) => {
            return Outcome {
                embedded: vec![],
                retry: batch.into_iter().map(|(i, _)| i).collect(),
                failed: Some(why),
            };
        }
        Err(EmbedError::BadAnswer(why)) => why,
        Ok(v) => format!("{} vectors for {} texts", v.len(), read.len()),
    };
    tracing::warn!(error = %why, items = batch.len(), "the model refused a batch; embedding its items one by one");
    let mut out = Vec::with_capacity(batch.len());
    let mut items = batch.into_iter().map(|(i, _)| i).zip(read);
    while let Some((item, one)) = items.next() {
        let mut answer = embedder.embed_after(std::slice::from_ref(&one)).await;
        if one.0.is_some() && matches!(answer, Err(EmbedError::BadAnswer(_))) {
            answer = embedder.embed(std::slice::from_ref(&item.text)).await;
        }
        match answer {
            Ok(mut v) if v.len() == 1 => out.push(embedded((item, v.remove(0)))),
            Err(EmbedError::Unavailable(why)) => {
                return Outcome {
                    embedded: out,
                    retry: std::iter::once(item).chain(items.map(|(i, _)| i)).collect(),
                    failed: Some(why),
                };
            }
            refused => {
                let why = refused
                    .err()
                    .map_or_else(|| "no vector".to_owned(), |e| e.to_string());
                tracing::warn!(key = %item.key, error = %why, "the model refused an item; it is found by its words only");
                metrics::counter!("engram_embed_refused_items_total").increment(1);
            }
        }
    }
    Outcome {
        embedded: out,
        retry: vec![],
        failed: None,
    }
}

/// Gives `words` (of a vocabulary, without vectors in `table`) their
/// vectors, `batch` words per call to the model, with the table unlocked
/// while it runs. A batch the model refuses (or answers out of shape) is
/// noted as refused: those words are not used for expansion, and not
/// asked for again. An unavailable model ends the round (`Err`, why); the
/// words left are asked for at a later search.
pub async fn embed_words(
    embedder: &dyn Embedder,
    table: &std::sync::RwLock<WordVectors>,
    words: &[String],
    batch: usize,
) -> Result<(), String> {
    for words in words.chunks(batch.max(1)) {
        let started = Instant::now();
        match embedder.embed(words).await {
            Ok(vectors) if vectors.len() == words.len() => {
                let mut table = crate::write(table);
                for (word, vector) in words.iter().zip(&vectors) {
                    table.insert(word, vector);
                }
                metrics::gauge!("engram_vocabulary_words").set(table.len() as f64);
            }
            Err(EmbedError::Unavailable(why)) => return Err(why),
            refused => {
                let why = refused
                    .err()
                    .map_or_else(|| "out of shape".to_owned(), |e| e.to_string());
                tracing::warn!(error = %why, words = words.len(), "the model refused a batch of words; they are not used for expansion");
                crate::write(table).refuse(words);
            }
        }
        metrics::histogram!("engram_embed_batch_seconds").record(started.elapsed());
    }
    Ok(())
}

/// A search's query as a vector, or `None`: an empty query, or a model
/// that failed or answered out of shape (the search is then by words, and
/// its index state's counts say so). Both backends' searches embed through
/// here, timed and counted alike.
pub async fn query_vector(embedder: &dyn Embedder, query: &str) -> Option<Vec<f32>> {
    if query.trim().is_empty() {
        return None;
    }
    let text = meaning_of(query);
    let started = Instant::now();
    match embedder.embed_query(&text).await {
        Ok(mut v) if v.len() == 1 && v[0].len() == embedder.dim() => {
            metrics::histogram!("engram_embed_query_seconds").record(started.elapsed());
            v.pop()
        }
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, "query not embedded; searching by words only");
            metrics::counter!("engram_embed_query_failures_total").increment(1);
            None
        }
    }
}

/// The characters of a query its vector is made of, at most: about two
/// sentences. The words side ranks by the whole query; its meaning comes
/// from its end. A prompt's recall uses the user's message as its query,
/// and a long message (a pasted text, then a question) embedded whole
/// costs the prompt its length in model time (the local model: ~60 ms for
/// 256 wordpieces on two cores, ~15 ms for 40) for a vector that averages
/// everything it says; the ask is mostly at the end.
pub const QUERY_CHARS: usize = 200;

/// The part of `query` that is embedded: its last [`QUERY_CHARS`]
/// characters or fewer, from the start of a word.
pub fn meaning_of(query: &str) -> String {
    let query = query.trim();
    let Some((at, _)) = query.char_indices().rev().nth(QUERY_CHARS - 1) else {
        return query.to_owned();
    };
    let tail = &query[at..];
    // A word cut by the bound is left out, unless it is all there is.
    match tail.find(char::is_whitespace) {
        Some(space) if !query[..at].ends_with(char::is_whitespace) => tail[space..].trim_start(),
        _ => tail,
    }
    .to_owned()
}

/// Starts embedding `query` as [`query_vector`] would, in the background:
/// with a [`crate::Remembering`] embedder, the search that asks for it
/// next takes the vector (or waits for this run) instead of starting its
/// own. Errors are the search's to report, when it tries again.
pub fn expect_query(embedder: std::sync::Arc<dyn Embedder>, query: &str) {
    if query.trim().is_empty() || !embedder.remembers() {
        return;
    }
    let text = meaning_of(query);
    tokio::spawn(async move {
        let _ = embedder.embed_query(&text).await;
    });
}

fn embedded((item, vector): (Item, Vec<f32>)) -> Embedded {
    Embedded {
        key: item.key,
        kind: item.kind,
        trace_type: item.trace_type,
        order: item.order,
        ts: item.ts,
        vector,
    }
}

#[cfg(test)]
mod tests {
    use super::{QUERY_CHARS, meaning_of};

    #[test]
    fn a_long_query_is_embedded_by_its_last_whole_words() {
        assert_eq!(
            meaning_of("  where did we go in June?  "),
            "where did we go in June?"
        );
        let pasted = "lorem ipsum ".repeat(100);
        let long = format!("{pasted}So, where did we go in June?");
        let meaning = meaning_of(&long);
        assert!(meaning.ends_with("So, where did we go in June?"));
        assert!(meaning.chars().count() <= QUERY_CHARS, "{meaning}");
        assert!(meaning.chars().count() > QUERY_CHARS - 12, "{meaning}");
        assert!(
            meaning.starts_with("lorem ") || meaning.starts_with("ipsum "),
            "{meaning}"
        );
        // Multi-byte characters, and one word longer than the bound.
        let wide = "é".repeat(3 * QUERY_CHARS);
        assert_eq!(meaning_of(&wide).chars().count(), QUERY_CHARS);
        let exact = "a".repeat(QUERY_CHARS);
        assert_eq!(meaning_of(&exact), exact);
    }
}
