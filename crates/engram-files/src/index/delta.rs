//! What changed in an agent since the index's cursor ([`delta`], read
//! under the agent's lock) and how the index takes it in ([`apply`]):
//! traces, the archive after a compaction, memories, and what a forget
//! erased.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use engram_core::RawTrace;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_index::{Item, Lexical};
use engram_store::items::{episodic_item, for_embedding, semantic_item, trace_item, trace_order};

use super::{AgentIndex, BATCH, Committed, Cursor, ITEM_FORMAT, MAX_PENDING, index_error};
use crate::agent::RAW_ARCHIVE;
use crate::{Result, StoreError};

/// What changed in an agent since a cursor, read under its lock.
pub(crate) struct Delta {
    pub to: Cursor,
    /// The cursor's epoch is gone: every active trace is re-checked and
    /// the archive read on from the cursor.
    pub full: bool,
    pub traces: Vec<RawTrace>,
    pub episodic: Vec<EpisodicItem>,
    pub semantic: Vec<SemanticItem>,
    /// Keys a forget erased: removed, and the segments that held them
    /// rewritten (`AgentMeta::unpurged`).
    pub removed: Vec<String>,
}

impl Delta {
    /// Whether a search may stage this delta (read on from `from`) rather
    /// than commit it: no forget's removal (a forget is done once the
    /// erased text is in no file, which takes a commit), and at most
    /// `room` bytes (about: the archive read and the traces' content).
    pub(super) fn stageable(&self, from: Cursor, room: usize) -> bool {
        let archived = match self.full {
            true => self
                .to
                .archive
                .saturating_sub(from.archive.min(self.to.archive)),
            false => 0,
        };
        let active: usize = self.traces.iter().map(|t| t.content.len() + 256).sum();
        self.removed.is_empty() && (archived as usize).saturating_add(active) <= room
    }

    /// Whether a search of the archive and the memories (a prompt's
    /// recall) may leave the delta to the background indexer: it holds
    /// only active traces written since `from` (same epoch, no memories,
    /// facts or forgets), which such a search leaves out. A compaction's
    /// new epoch is never left: what it archived is what recall is for,
    /// and it is staged at once (searched in memory: no commit).
    pub(super) fn may_wait(&self, from: Cursor) -> bool {
        let to = self.to;
        !self.full
            && self.removed.is_empty()
            && (to.epoch, to.episodic, to.semantic, to.archive, to.facts)
                == (
                    from.epoch,
                    from.episodic,
                    from.semantic,
                    from.archive,
                    from.facts,
                )
    }
}

/// What the agent holds beyond `from`; `None` when the index has it all.
pub(crate) fn delta(state: &crate::agent::AgentState, from: Option<Cursor>) -> Option<Delta> {
    let archive_len = || std::fs::metadata(state.dir.join(RAW_ARCHIVE)).map_or(0, |m| m.len());
    let same = from.is_some_and(|from| {
        from.epoch == state.meta.epoch
            && from.active <= state.traces.len()
            && from.episodic <= state.episodic.len()
            && from.semantic <= state.semantic.len()
            // A compaction's later pass in its own epoch (a trim keeping
            // fewer turns, a summary after microcompact) archives too.
            && from.archive == archive_len()
    });
    let from = from.unwrap_or_default();
    // Within an epoch the files only grow and the archive stays as it is
    // (but for the later passes checked above); a new epoch (a
    // compaction) may have archived what was not read.
    let (a, e, s, archive) = if same {
        // Facts changed in place: all of them read again (a few hundred
        // at most, and rarely).
        let s = if from.facts == state.fact_lines {
            from.semantic
        } else {
            0
        };
        (from.active, from.episodic, s, from.archive)
    } else {
        (0, 0, 0, archive_len())
    };
    let to = Cursor {
        epoch: state.meta.epoch,
        active: state.traces.len(),
        episodic: state.episodic.len(),
        semantic: state.semantic.len(),
        archive,
        facts: state.fact_lines,
    };
    (!same || to != from).then(|| Delta {
        to,
        full: !same,
        traces: state.traces[a..].to_vec(),
        episodic: state.episodic[e..].to_vec(),
        semantic: state.semantic[s..].to_vec(),
        removed: state.meta.unpurged.clone(),
    })
}

/// Brings `index` up to `delta`; `gap` ends a sitting (what a trace is
/// embedded in the context of).
pub(super) fn apply(
    index: &mut AgentIndex,
    agent_dir: &Path,
    delta: Delta,
    gap: f64,
) -> Result<()> {
    let from = index.cursor.unwrap_or_default();
    let embedding = index.vectors.is_some();
    let pending = &mut index.pending;
    let overflowed = &mut index.overflowed;
    let mut queue = |items: &[Item]| {
        if !embedding || *overflowed {
            return;
        }
        let room = MAX_PENDING.saturating_sub(pending.len());
        pending.extend(items.iter().take(room).cloned().map(for_embedding));
        *overflowed = items.len() > room;
    };
    let lexical = &mut index.lexical;
    // The places of the traces indexed now (what a trace after them was
    // embedded without).
    let mut placed: Vec<u64> = Vec::new();
    let mut queue_traces = |items: &[Item]| {
        placed.extend(items.iter().map(|i| i.order));
        queue(items);
    };
    if delta.full {
        // Traces a compaction archived before the index read them.
        archived(agent_dir, from, delta.to, |batch| {
            queue_traces(&upsert_missing(lexical, &batch)?);
            Ok(())
        })?;
        queue_traces(&upsert_missing(lexical, &delta.traces)?);
    } else {
        let items: Vec<Item> = delta.traces.iter().map(trace_item).collect();
        lexical.upsert(&items).map_err(index_error)?;
        queue_traces(&items);
    }
    let (memories, gone) = memories(&delta.episodic, &delta.semantic, &delta.removed);
    lexical.upsert(&memories).map_err(index_error)?;
    queue(&memories);
    let removed = lexical.remove(&gone).map_err(index_error)?;
    // The trace after an erased one was embedded after its text: it is
    // embedded again, after the trace now before it. So is the trace after
    // one placed before it (a late tool result).
    let again = match index.vectors {
        Some(_) => {
            let mut again = lexical
                .traces_after_removed(&removed, gap)
                .map_err(index_error)?;
            again.extend(lexical.traces_after_placed(&placed).map_err(index_error)?);
            again
        }
        None => Vec::new(),
    };
    if let Some(vectors) = &mut index.vectors {
        let again: Vec<&str> = again.iter().map(String::as_str).collect();
        vectors.write(&[], &gone).map_err(index_error)?;
        vectors.write(&[], &again).map_err(index_error)?;
        index.pending.retain(|i| !gone.contains(&i.key.as_str()));
        if index.in_flight > 0 {
            let stale = gone.iter().chain(&again).map(|k| (*k).to_owned());
            index.stale_in_flight.extend(stale);
        }
        // Found again as after an overflow, once the queue runs empty.
        index.overflowed |= !again.is_empty();
    }
    let payload = serde_json::to_string(&Committed {
        format: ITEM_FORMAT,
        cursor: delta.to,
    })
    .expect("a cursor serializes");
    // Searchable at once, on disk once the indexer persists it (a request
    // writes and syncs no file: `engram_index::Lexical::commit_in_memory`).
    lexical.commit_in_memory(&payload).map_err(index_error)?;
    index.cursor = Some(delta.to);
    if !delta.removed.is_empty() {
        // Removed items stay in their segments until these are rewritten
        // (and the rewritten ones are on disk: a forget is done when the
        // erased text is in no file).
        index.lexical.purge_removed().map_err(index_error)?;
    }
    // The writer stays open, its merges running (into memory), until the
    // indexer writes the commit out (`FileStore::persist_open`): a request
    // neither opens a writer for every catch-up nor waits for a merge. A
    // writer holds threads and a memory arena, and agents are many, so
    // it is closed then; a delete or an unload closes the index first,
    // which waits for the merges, so none writes into a directory being
    // removed.
    // Memory holds at most so much not yet on disk.
    if index.lexical.unpersisted_bytes() > MAX_UNPERSISTED {
        index.lexical.release_writer().map_err(index_error)?;
        index.lexical.persist().map_err(index_error)?;
    }
    Ok(())
}

/// What a delta's memories are to the index: the items to hold (every
/// summary a forget did not hide, every fact not deleted: a replaced or
/// ended one is found with its span, DESIGN §15) and the keys to drop.
fn memories<'a>(
    episodic: &'a [EpisodicItem],
    semantic: &'a [SemanticItem],
    removed: &'a [String],
) -> (Vec<Item>, Vec<&'a str>) {
    // A summary a forget hid is not searched until it is rewritten.
    let (shown, hidden): (Vec<_>, Vec<_>) = episodic.iter().partition(|e| e.is_shown());
    let (live, gone): (Vec<_>, Vec<_>) = semantic
        .iter()
        .partition(|f| f.managed.deleted_at.is_none());
    let items = shown
        .into_iter()
        .map(episodic_item)
        .chain(live.into_iter().map(semantic_item))
        .collect();
    let gone = gone
        .iter()
        .map(|f| f.id.as_str())
        .chain(hidden.iter().map(|e| e.id.as_str()))
        .chain(removed.iter().map(String::as_str))
        .collect();
    (items, gone)
}

/// Stages `delta`, read on from `from`, in the index (searchable at once,
/// no commit: [`Lexical::stage`]); the indexer commits it later, read
/// again from the files. An archived trace the index holds already is not
/// read twice.
pub(super) fn stage(
    index: &mut AgentIndex,
    agent_dir: &Path,
    delta: Delta,
    from: Cursor,
) -> Result<()> {
    let lexical = &mut index.lexical;
    if delta.full {
        archived(agent_dir, from, delta.to, |batch| {
            let items = missing(lexical, &batch);
            lexical.stage(&items).map_err(index_error)
        })?;
    }
    let traces = missing(lexical, &delta.traces);
    lexical.stage(&traces).map_err(index_error)?;
    let (memories, gone) = memories(&delta.episodic, &delta.semantic, &delta.removed);
    lexical.stage(&memories).map_err(index_error)?;
    lexical.stage_removal(&gone).map_err(index_error)?;
    index.staged_to = Some(delta.to);
    Ok(())
}

/// Bytes a search stages in an agent's index at most (about: see
/// [`Delta::stageable`]); a larger delta is committed at once.
pub(crate) const MAX_STAGED: usize = 32 << 20;

/// Bytes of an agent's index commits held in memory at most before a
/// catch-up writes them out itself (the indexer persists them well before,
/// off the request path): a large import read in by its first search.
const MAX_UNPERSISTED: usize = 32 << 20;

/// Indexes the traces the index does not hold yet (a trace is immutable
/// once written, so one that is there is current); returns those.
fn upsert_missing(lexical: &mut Lexical, traces: &[RawTrace]) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    for t in traces {
        if !lexical.contains(&t.id).map_err(index_error)? {
            items.push(trace_item(t));
        }
    }
    lexical.upsert(&items).map_err(index_error)?;
    Ok(items)
}

/// The traces the index does not hold at their places (a trace's place,
/// its turn and seq, is its own in an agent), as items: what a search
/// stages, without a lookup per trace.
fn missing(lexical: &Lexical, traces: &[RawTrace]) -> Vec<Item> {
    let held = |t: &&RawTrace| lexical.has_trace(trace_order(t));
    traces.iter().filter(|t| !held(t)).map(trace_item).collect()
}

/// Calls `f` on the traces archived between the cursors `from` and `to`,
/// [`BATCH`] at a time.
fn archived(
    agent_dir: &Path,
    from: Cursor,
    to: Cursor,
    mut f: impl FnMut(Vec<RawTrace>) -> Result<()>,
) -> Result<()> {
    let path = agent_dir.join(RAW_ARCHIVE);
    let mut batch = Vec::new();
    read_archive(&path, from.archive.min(to.archive), to.archive, |t| {
        batch.push(t);
        if batch.len() == BATCH {
            f(std::mem::take(&mut batch))?;
        }
        Ok(())
    })?;
    f(batch)
}

/// Calls `f` on each whole archived trace in bytes `from..to`.
pub(crate) fn read_archive(
    path: &Path,
    from: u64,
    to: u64,
    mut f: impl FnMut(RawTrace) -> Result<()>,
) -> Result<()> {
    if from >= to {
        return Ok(());
    }
    let mut file = std::fs::File::open(path).map_err(StoreError::io("opening", path))?;
    file.seek(SeekFrom::Start(from))
        .map_err(StoreError::io("seeking in", path))?;
    let mut reader = BufReader::new(file).take(to - from);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(StoreError::io("reading", path))?;
        if n == 0 || line.last() != Some(&b'\n') {
            return Ok(());
        }
        match RawTrace::from_line(&line) {
            Ok(t) => f(t)?,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable archived trace skipped by the index")
            }
        }
    }
}
