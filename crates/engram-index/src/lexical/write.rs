//! The writing side of the lexical index: items added and removed, the
//! commits that make them searchable (in memory, or persisted), and the
//! writer's life.

use std::ops::Bound;

use tantivy::query::RangeQuery;
use tantivy::{IndexWriter, TantivyDocument, Term};

use super::{Lexical, WRITER_BUDGET};
use crate::{Item, Kind, Placed, Result};

impl Lexical {
    /// Adds items, replacing any of the same key. Visible after `commit`.
    pub fn upsert(&mut self, items: &[Item]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let f = self.fields;
        let writer = self.writer()?;
        for item in items {
            writer.delete_term(Term::from_field_text(f.key, &item.key));
            let mut doc = TantivyDocument::new();
            doc.add_text(f.key, &item.key);
            doc.add_u64(f.kind, item.kind as u64);
            doc.add_u64(f.trace_type, u64::from(item.trace_type));
            doc.add_u64(f.order, item.order);
            doc.add_f64(f.ts, item.ts);
            // The speaker's name as a transcript shows it ("Caroline: I
            // went…"): measured better than a field of its own, where a
            // name that half the messages carry scores next to nothing.
            let text = item.full_text();
            doc.add_text(f.words, &text);
            doc.add_text(f.text, text);
            doc.add_text(f.when, crate::time::words(item.ts));
            doc.add_text(f.body, &item.body);
            let speaker = crate::rank::speaker_name(item.name.as_deref().unwrap_or_default());
            doc.add_text(f.speaker, &speaker);
            doc.add_u64(f.asks, u64::from(item.asks()));
            writer.add_document(doc)?;
        }
        for item in items.iter().filter(|i| i.kind == Kind::Trace) {
            self.traces.insert(item.order, item.ts);
            let name = item.name.as_deref().unwrap_or_default();
            self.speakers
                .note(&mut self.analyzer, item.order, name, item.asks());
        }
        Ok(())
    }

    fn writer(&mut self) -> Result<&mut IndexWriter> {
        if self.writer.is_none() {
            let options = tantivy::indexer::IndexWriterOptions::builder()
                .memory_budget_per_thread(WRITER_BUDGET)
                .num_worker_threads(1)
                .num_merge_threads(1)
                .build();
            let writer = self.index.writer_with_options(options)?;
            // A commit writes a segment's deletions to a file named after
            // the segment and the operation's stamp, and only then the
            // index's metadata. Killed in between, the file stays behind,
            // and the same operations replayed after a restart reach the
            // same stamp: tantivy then refuses to create the file again
            // (FileAlreadyExists), and the index never commits. Its own
            // garbage collection runs only after a commit, so every new
            // writer clears what no committed segment uses first.
            writer.garbage_collect_files().wait()?;
            self.writer = Some(writer);
        }
        Ok(self.writer.as_mut().expect("opened above"))
    }

    /// Removes the items of these keys. Visible after `commit`. Returns
    /// the place and time of each trace among them (what
    /// [`Self::traces_after_removed`] reads).
    pub fn remove(&mut self, keys: &[&str]) -> Result<Vec<Placed>> {
        let mut removed = Vec::new();
        if keys.is_empty() {
            return Ok(removed);
        }
        // A removed trace is no one's neighbour, nor the trace another is
        // embedded after.
        for key in keys {
            if let Some(order) = self.trace_order_of(key)? {
                if let Some(ts) = self.traces.remove(&order) {
                    removed.push((order, ts));
                }
                self.speakers.forget_between(order, order);
            }
        }
        let field = self.fields.key;
        let writer = self.writer()?;
        for key in keys {
            writer.delete_term(Term::from_field_text(field, key));
        }
        Ok(removed)
    }

    /// Removes every item placed in `lo..=hi` (one conversation's, in an
    /// index of several). Visible after `commit`.
    pub fn remove_between(&mut self, lo: u64, hi: u64) -> Result<()> {
        let field = self.fields.order;
        let writer = self.writer()?;
        writer.delete_query(Box::new(RangeQuery::new(
            Bound::Included(Term::from_field_u64(field, lo)),
            Bound::Included(Term::from_field_u64(field, hi)),
        )))?;
        let gone: Vec<u64> = self.traces.range(lo..=hi).map(|(o, _)| *o).collect();
        for order in gone {
            self.traces.remove(&order);
        }
        self.speakers.forget_between(lo, hi);
        Ok(())
    }

    /// Makes every upsert so far durable and searchable, with `payload`.
    pub fn commit(&mut self, payload: &str) -> Result<()> {
        self.commit_in_memory(payload)?;
        self.persist()
    }

    /// Makes every upsert so far searchable, with `payload`, without
    /// writing to disk: on disk, the index stays at its last persisted
    /// commit until [`Self::persist`] (what a request may afford: no file
    /// written or synced).
    pub fn commit_in_memory(&mut self, payload: &str) -> Result<()> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        let mut prepared = writer.prepare_commit()?;
        prepared.set_payload(payload);
        prepared.commit()?;
        self.reader.reload()?;
        Ok(())
    }

    /// Writes the commits held in memory to disk, synced (see
    /// `tiered.rs`). A merge still running is persisted next time.
    pub fn persist(&mut self) -> Result<()> {
        match &self.tiered {
            Some(tiered) => Ok(tiered.persist()?),
            None => Ok(()),
        }
    }

    /// Bytes of commits held in memory, not persisted yet.
    pub fn unpersisted_bytes(&self) -> usize {
        self.tiered
            .as_ref()
            .map_or(0, super::tiered::Tiered::unpersisted_bytes)
    }

    /// Rewrites the committed segments that hold removed items without
    /// them, and deletes the files they leave: an erased item's text is
    /// then in no file of the index (a removal alone only marks it). It
    /// persists what the index held in memory.
    pub fn purge_removed(&mut self) -> Result<()> {
        // The merges the writer's policy started are finished first: a
        // segment being merged cannot be merged again (tantivy refuses),
        // and a commit just before this (the forget's catch-up) may have
        // started one.
        self.release_writer()?;
        let with_removed: Vec<tantivy::index::SegmentId> = self
            .index
            .searchable_segment_metas()?
            .iter()
            .filter(|m| m.has_deletes())
            .map(|m| m.id())
            .collect();
        if with_removed.is_empty() {
            return Ok(());
        }
        let writer = self.writer()?;
        writer.merge(&with_removed).wait()?;
        self.reader.reload()?;
        let writer = self.writer()?;
        writer.garbage_collect_files().wait()?;
        self.release_writer()?;
        // Done once the segments that held them are off the disk too.
        self.persist()
    }

    /// Closes the writer (its threads and memory) until the next upsert,
    /// once the merges it started are finished. (Dropping a writer does
    /// not wait for them: a merge would go on writing segment files into
    /// the directory, under the next writer, or while the directory is
    /// being deleted.)
    pub fn release_writer(&mut self) -> Result<()> {
        match self.writer.take() {
            Some(writer) => Ok(writer.wait_merging_threads()?),
            None => Ok(()),
        }
    }

    /// Closes the index: when this returns, nothing of it writes in its
    /// directory any more, and the directory may be removed.
    pub fn close(mut self) -> Result<()> {
        self.release_writer()?;
        self.persist()
    }
}
