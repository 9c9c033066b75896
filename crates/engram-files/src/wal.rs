//! The shared write-ahead log behind the `always` fsync policy.
//!
//! Every append to an agent's file is also recorded here, and an Ingest is
//! acknowledged once the log is flushed. All agents share the log, so one
//! `fdatasync` covers every append waiting at that moment, across agents:
//! concurrency raises throughput instead of multiplying flushes. The agent
//! files themselves are flushed at checkpoints, after which the log segments
//! they cover are deleted; on start-up the remaining segments are replayed
//! into the agent files (idempotently, by offset) before anything is served.
//!
//! Record layout (little-endian): kind u8, agent length u8, file length u8,
//! payload length u32, offset u64, crc32 u32 of everything else, then the
//! agent id, file name and payload. A record that is short or fails its
//! checksum ends the replay of its segment: it was being written when the
//! process died, so it was never acknowledged.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::durable::{DurableFile, StorageHealth};
use crate::error::{Result, StoreError};
use crate::jsonl::sync_dir;

const HEADER: usize = 1 + 1 + 1 + 4 + 8 + 4;
const SUFFIX: &str = ".wal";

/// One logged change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// `bytes` were appended to `agent/file` at `offset`.
    Append {
        agent: &'a str,
        file: &'a str,
        offset: u64,
        bytes: &'a [u8],
    },
    /// `agent/file` was rewritten: earlier appends to it no longer apply.
    Reset { agent: &'a str, file: &'a str },
    /// The agent was deleted: earlier appends to any of its files are void.
    Delete { agent: &'a str },
}

impl Record<'_> {
    fn encode(&self) -> Vec<u8> {
        let (kind, agent, file, offset, bytes): (u8, &str, &str, u64, &[u8]) = match *self {
            Record::Append {
                agent,
                file,
                offset,
                bytes,
            } => (1, agent, file, offset, bytes),
            Record::Reset { agent, file } => (2, agent, file, 0, &[]),
            Record::Delete { agent } => (3, agent, "", 0, &[]),
        };
        let mut out = Vec::with_capacity(HEADER + agent.len() + file.len() + bytes.len());
        out.push(kind);
        out.push(u8::try_from(agent.len()).expect("agent ids are at most 128 bytes"));
        out.push(u8::try_from(file.len()).expect("file names are short"));
        out.extend_from_slice(
            &u32::try_from(bytes.len())
                .expect("traces are bounded")
                .to_le_bytes(),
        );
        out.extend_from_slice(&offset.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out);
        crc.update(agent.as_bytes());
        crc.update(file.as_bytes());
        crc.update(bytes);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        out.extend_from_slice(agent.as_bytes());
        out.extend_from_slice(file.as_bytes());
        out.extend_from_slice(bytes);
        out
    }

    /// Decodes the record at the start of `buf`, and its length; `None` for a
    /// short or damaged record.
    fn decode(buf: &[u8]) -> Option<(Record<'_>, usize)> {
        let header = buf.get(..HEADER)?;
        let (kind, agent_len, file_len) = (header[0], header[1] as usize, header[2] as usize);
        let len = u32::from_le_bytes(header[3..7].try_into().ok()?) as usize;
        let offset = u64::from_le_bytes(header[7..15].try_into().ok()?);
        let crc = u32::from_le_bytes(header[15..19].try_into().ok()?);
        let total = HEADER + agent_len + file_len + len;
        let body = buf.get(HEADER..total)?;
        let mut check = crc32fast::Hasher::new();
        check.update(&header[..15]);
        check.update(body);
        if check.finalize() != crc {
            return None;
        }
        let agent = std::str::from_utf8(&body[..agent_len]).ok()?;
        let file = std::str::from_utf8(&body[agent_len..agent_len + file_len]).ok()?;
        let bytes = &body[agent_len + file_len..];
        let record = match kind {
            1 => Record::Append {
                agent,
                file,
                offset,
                bytes,
            },
            2 => Record::Reset { agent, file },
            3 => Record::Delete { agent },
            _ => return None,
        };
        Some((record, total))
    }
}

/// A place in the log; durable once [`wait`](Ticket::wait) returns.
#[derive(Debug, Clone)]
pub struct Ticket {
    segment: Arc<DurableFile>,
    end: u64,
}

impl Ticket {
    pub async fn wait(&self) -> Result<()> {
        self.segment.sync_to(self.end).await
    }
}

#[derive(Debug)]
struct Current {
    id: u64,
    file: Arc<DurableFile>,
}

/// The log: a directory of numbered segments, one of them open for appends.
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    current: Mutex<Current>,
    health: Arc<StorageHealth>,
}

impl Wal {
    /// Replays what an earlier run left in `dir` into the agent files under
    /// `agents_dir`, flushes them, removes the old segments and opens a new
    /// one. Blocking.
    pub fn open(dir: &Path, agents_dir: &Path, health: &Arc<StorageHealth>) -> Result<Self> {
        fs::create_dir_all(dir).map_err(StoreError::io("creating", dir))?;
        let segments = list_segments(dir)?;
        if !segments.is_empty() {
            let report = replay(&segments, agents_dir)?;
            tracing::info!(
                segments = segments.len(),
                records = report.records,
                files = report.files,
                "write-ahead log replayed"
            );
            for (_, path) in &segments {
                fs::remove_file(path).map_err(StoreError::io("removing", path))?;
            }
        }
        let id = segments.last().map_or(1, |(id, _)| id + 1);
        let file = new_segment(dir, id, health)?;
        Ok(Self {
            dir: dir.to_owned(),
            current: Mutex::new(Current { id, file }),
            health: Arc::clone(health),
        })
    }

    /// Appends `record` (written at once: a full disk fails here, with
    /// nothing of the record left); the caller awaits the ticket before
    /// acknowledging.
    pub fn append(&self, record: &Record<'_>) -> Result<Ticket> {
        let bytes = record.encode();
        let current = engram_store::lock(&self.current);
        let end = current.file.append(&bytes)?;
        Ok(Ticket {
            segment: Arc::clone(&current.file),
            end,
        })
    }

    /// Bytes in the open segment.
    pub fn segment_len(&self) -> u64 {
        engram_store::lock(&self.current).file.len()
    }

    /// Starts a new segment and returns the ids of the older ones, which a
    /// checkpoint may delete once every agent file is flushed.
    pub fn rotate(&self) -> Result<Vec<u64>> {
        let mut current = engram_store::lock(&self.current);
        let id = current.id + 1;
        let file = new_segment(&self.dir, id, &self.health)?;
        *current = Current { id, file };
        drop(current);
        Ok(list_segments(&self.dir)?
            .into_iter()
            .map(|(sid, _)| sid)
            .filter(|sid| *sid < id)
            .collect())
    }

    /// Deletes segments whose every record is now in flushed agent files.
    pub fn remove(&self, ids: &[u64]) -> Result<()> {
        for id in ids {
            let path = segment_path(&self.dir, *id);
            fs::remove_file(&path).map_err(StoreError::io("removing", &path))?;
        }
        sync_dir(&self.dir)
    }

    /// Makes everything appended so far durable in the log.
    pub async fn sync(&self) -> Result<()> {
        let file = Arc::clone(&engram_store::lock(&self.current).file);
        file.sync_all().await
    }
}

impl Wal {
    /// Makes the next flush of the open segment fail, as a dying disk would.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn inject_sync_failure(&self) {
        let current = engram_store::lock(&self.current);
        current.file.inject_sync_failure();
    }
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}{SUFFIX}"))
}

fn new_segment(dir: &Path, id: u64, health: &Arc<StorageHealth>) -> Result<Arc<DurableFile>> {
    let file = DurableFile::create(&segment_path(dir, id), health)?;
    sync_dir(dir)?;
    Ok(Arc::new(file))
}

fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = vec![];
    for entry in fs::read_dir(dir).map_err(StoreError::io("listing", dir))? {
        let entry = entry.map_err(StoreError::io("listing", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(SUFFIX).and_then(|n| n.parse().ok()) {
            out.push((id, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

#[derive(Debug, Default)]
struct ReplayReport {
    records: usize,
    files: usize,
}

/// Applies the segments' appends to the agent files, skipping appends that a
/// later reset (file rewritten) or delete (agent removed) made void.
fn replay(segments: &[(u64, PathBuf)], agents_dir: &Path) -> Result<ReplayReport> {
    let mut data = vec![];
    for (_, path) in segments {
        let bytes = fs::read(path).map_err(StoreError::io("reading", path))?;
        let mut at = 0;
        while at < bytes.len() {
            let Some((_, len)) = Record::decode(&bytes[at..]) else {
                tracing::warn!(segment = %path.display(), offset = at,
                    "write-ahead log ends in a partial record (never acknowledged); ignored");
                break;
            };
            data.push(bytes[at..at + len].to_vec());
            at += len;
        }
    }
    let records: Vec<Record<'_>> = data
        .iter()
        .map(|r| Record::decode(r).expect("decoded above").0)
        .collect();
    // Index of the last delete per agent and the last reset per file.
    let mut last_delete: HashMap<&str, usize> = HashMap::new();
    let mut last_reset: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        match *r {
            Record::Delete { agent } => {
                last_delete.insert(agent, i);
            }
            Record::Reset { agent, file } => {
                last_reset.insert((agent, file), i);
            }
            Record::Append { .. } => {}
        }
    }
    let mut files: HashMap<PathBuf, File> = HashMap::new();
    let mut dirs: HashSet<PathBuf> = HashSet::new();
    for (i, r) in records.iter().enumerate() {
        let Record::Append {
            agent,
            file,
            offset,
            bytes,
        } = *r
        else {
            continue;
        };
        let void = last_delete.get(agent).is_some_and(|d| *d > i)
            || last_reset.get(&(agent, file)).is_some_and(|d| *d > i);
        if void || engram_core::AgentId::parse(agent).is_err() || file.contains('/') {
            continue;
        }
        let dir = agents_dir.join(agent);
        let path = dir.join(file);
        if !files.contains_key(&path) {
            if !dir.is_dir() {
                fs::create_dir_all(&dir).map_err(StoreError::io("creating", &dir))?;
            }
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(&path)
                .map_err(StoreError::io("opening", &path))?;
            dirs.insert(dir);
            files.insert(path.clone(), f);
        }
        let f = &files[&path];
        f.write_all_at(bytes, offset)
            .map_err(StoreError::io("replaying into", &path))?;
    }
    for (path, f) in &files {
        f.sync_all().map_err(StoreError::io("syncing", path))?;
    }
    for dir in &dirs {
        sync_dir(dir)?;
    }
    sync_dir(agents_dir)?;
    Ok(ReplayReport {
        records: records.len(),
        files: files.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_detected() {
        let recs = [
            Record::Append {
                agent: "a",
                file: "raw_traces.jsonl",
                offset: 42,
                bytes: b"{\"x\":1}\n",
            },
            Record::Reset {
                agent: "a",
                file: "raw_traces.jsonl",
            },
            Record::Delete { agent: "bb" },
        ];
        for r in &recs {
            let enc = r.encode();
            assert_eq!(Record::decode(&enc), Some((r.clone(), enc.len())));
            assert_eq!(Record::decode(&enc[..enc.len() - 1]), None, "short");
            let mut bad = enc.clone();
            *bad.last_mut().unwrap() ^= 1;
            assert_eq!(Record::decode(&bad), None, "checksum");
        }
    }

    proptest::proptest! {
        /// Whatever a crash or a bad disk leaves in a segment, decoding
        /// never panics, and a damaged record is never taken for another:
        /// one flipped byte or a cut is refused, or (a flip in bytes the
        /// checksum does not cover cannot exist) decodes to the original.
        #[test]
        fn decoding_damaged_records_is_safe(
            agent in "[a-z0-9._-]{1,20}",
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            offset in proptest::num::u64::ANY,
            flip in proptest::num::usize::ANY,
            bit in 0u8..8,
            cut in proptest::num::usize::ANY,
            noise in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let record = Record::Append { agent: &agent, file: "raw_traces.jsonl", offset, bytes: &bytes };
            let enc = record.encode();
            let mut flipped = enc.clone();
            flipped[flip % enc.len()] ^= 1 << bit;
            proptest::prop_assert_eq!(Record::decode(&flipped), None);
            proptest::prop_assert_eq!(Record::decode(&enc[..cut % enc.len()]), None);
            let _ = Record::decode(&noise);
            let mut followed = enc.clone();
            followed.extend_from_slice(&noise);
            proptest::prop_assert_eq!(Record::decode(&followed), Some((record, enc.len())));
        }
    }

    fn append(wal: &Wal, agent: &str, offset: u64, bytes: &[u8]) {
        wal.append(&Record::Append {
            agent,
            file: "raw_traces.jsonl",
            offset,
            bytes,
        })
        .unwrap();
    }

    #[tokio::test]
    async fn replay_restores_lost_appends_and_honours_deletes_and_resets() {
        let root = tempfile::tempdir().unwrap();
        let (wal_dir, agents) = (root.path().join("wal"), root.path().join("agents"));
        fs::create_dir_all(agents.join("keep")).unwrap();
        let wal = Wal::open(&wal_dir, &agents, &StorageHealth::new()).unwrap();
        append(&wal, "keep", 0, b"one\n");
        append(&wal, "keep", 4, b"two\n");
        append(&wal, "gone", 0, b"x\n");
        wal.append(&Record::Delete { agent: "gone" }).unwrap();
        append(&wal, "reset", 0, b"old old\n");
        wal.append(&Record::Reset {
            agent: "reset",
            file: "raw_traces.jsonl",
        })
        .unwrap();
        append(&wal, "reset", 0, b"new\n");
        wal.sync().await.unwrap();
        // The agent file only got the first line before the "crash", and
        // the log got half a record more.
        fs::write(agents.join("keep/raw_traces.jsonl"), b"one\n").unwrap();
        let seg = list_segments(&wal_dir).unwrap().pop().unwrap().1;
        let mut tail = Record::Delete { agent: "keep" }.encode();
        tail.truncate(10);
        let mut bytes = fs::read(&seg).unwrap();
        bytes.extend_from_slice(&tail);
        fs::write(&seg, bytes).unwrap();
        drop(wal);

        let wal = Wal::open(&wal_dir, &agents, &StorageHealth::new()).unwrap();
        assert_eq!(
            fs::read(agents.join("keep/raw_traces.jsonl")).unwrap(),
            b"one\ntwo\n"
        );
        assert!(
            !agents.join("gone").exists(),
            "a deleted agent is not revived"
        );
        assert_eq!(
            fs::read(agents.join("reset/raw_traces.jsonl")).unwrap(),
            b"new\n"
        );
        let left = list_segments(&wal_dir).unwrap();
        assert_eq!(left.len(), 1, "old segments removed after replay: {left:?}");
        assert_eq!(wal.segment_len(), 0);
    }

    #[tokio::test]
    async fn rotation_hands_back_the_old_segments() {
        let root = tempfile::tempdir().unwrap();
        let wal = Wal::open(
            &root.path().join("wal"),
            &root.path().join("agents"),
            &StorageHealth::new(),
        )
        .unwrap();
        append(&wal, "a", 0, b"1\n");
        let old = wal.rotate().unwrap();
        assert_eq!(old, [1]);
        append(&wal, "a", 2, b"2\n");
        wal.remove(&old).unwrap();
        assert_eq!(list_segments(&root.path().join("wal")).unwrap().len(), 1);
    }
}
