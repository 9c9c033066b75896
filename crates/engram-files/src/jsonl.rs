//! Reading JSONL files with crash recovery, and the atomic rewrite helper.
//!
//! Recovery rules: a last line without its newline is a torn append (never
//! acknowledged, since acknowledgement waits for the whole line to be
//! durable): it is cut off. A line in the middle that does not parse was
//! damaged some other way: it is moved verbatim to `<file>.quarantine` and
//! the file is rewritten without it. Neither stops the agent from loading.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::error::{Result, StoreError};

/// What loading a file found and repaired.
#[derive(Debug, Default, PartialEq)]
pub struct Recovery {
    /// Byte offset where a torn last line started, and its length.
    pub torn_tail: Option<(u64, usize)>,
    /// Byte offsets of quarantined lines.
    pub quarantined: Vec<u64>,
}

impl Recovery {
    pub fn is_clean(&self) -> bool {
        self.torn_tail.is_none() && self.quarantined.is_empty()
    }
}

/// Side file that keeps the damaged lines of `path`.
pub fn quarantine_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".quarantine");
    path.with_file_name(name)
}

/// Loads every line of `path` (missing file = empty), repairing it on disk
/// as described in the module docs.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<(Vec<T>, Recovery)> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok((vec![], Recovery::default())),
        Err(e) => return Err(StoreError::io("reading", path)(e)),
    };
    let mut items = vec![];
    let mut recovery = Recovery::default();
    let mut kept: Vec<&[u8]> = vec![];
    let mut bad: Vec<&[u8]> = vec![];
    let mut offset = 0usize;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
            recovery.torn_tail = Some((offset as u64, rest.len()));
            bad.push(rest);
            break;
        };
        let line = &rest[..=nl];
        let body = &line[..nl];
        if !body.iter().all(u8::is_ascii_whitespace) {
            match serde_json::from_slice::<T>(body) {
                Ok(item) => {
                    items.push(item);
                    kept.push(line);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), offset, error = %e,
                        "corrupt line quarantined");
                    recovery.quarantined.push(offset as u64);
                    bad.push(line);
                }
            }
        }
        offset += nl + 1;
    }
    if let Some((at, len)) = recovery.torn_tail {
        tracing::warn!(path = %path.display(), offset = at, bytes = len,
            "torn last line cut off (an append interrupted by a crash; it was never acknowledged)");
    }
    if !bad.is_empty() {
        // Keep the damaged bytes before removing them from the file, so a
        // crash between the two steps loses nothing.
        let qpath = quarantine_path(path);
        let mut q = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&qpath)
            .map_err(StoreError::io("opening", &qpath))?;
        for line in &bad {
            q.write_all(line)
                .map_err(StoreError::io("writing", &qpath))?;
            if !line.ends_with(b"\n") {
                q.write_all(b"\n")
                    .map_err(StoreError::io("writing", &qpath))?;
            }
        }
        q.sync_all().map_err(StoreError::io("syncing", &qpath))?;
        if recovery.quarantined.is_empty() {
            // Only a torn tail: cutting it off is enough.
            let at = recovery.torn_tail.map_or(0, |(at, _)| at);
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(StoreError::io("opening", path))?;
            f.set_len(at).map_err(StoreError::io("truncating", path))?;
            f.sync_all().map_err(StoreError::io("syncing", path))?;
        } else {
            atomic_write(path, &kept.concat())?;
        }
    }
    Ok((items, recovery))
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the
/// new file: write a temp file, fsync it, rename it over, fsync the dir.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, bytes, true)
}

/// [`atomic_write`] without the flushes, for derived files: after a crash
/// the file is the old one, the new one, or unreadable, never half of each.
pub fn replace_unflushed(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, bytes, false)
}

fn replace(path: &Path, bytes: &[u8], flush: bool) -> Result<()> {
    let tmp = tmp_path(path);
    let mut f = File::create(&tmp).map_err(StoreError::io("creating", &tmp))?;
    f.write_all(bytes)
        .map_err(StoreError::io("writing", &tmp))?;
    if flush {
        f.sync_all().map_err(StoreError::io("syncing", &tmp))?;
    }
    drop(f);
    fs::rename(&tmp, path).map_err(StoreError::io("renaming over", path))?;
    if flush {
        sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

/// The temp file [`atomic_write`] uses; a leftover one is debris of a crash.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(".tmp");
    path.with_file_name(name)
}

/// `item` as a line of a JSONL file.
pub(crate) fn line<T: serde::Serialize>(item: &T) -> Vec<u8> {
    let mut l = serde_json::to_vec(item).expect("records serialize");
    l.push(b'\n');
    l
}

/// `items` as lines of a JSONL file.
pub(crate) fn lines<T: serde::Serialize>(items: &[T]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for item in items {
        serde_json::to_writer(&mut bytes, item).expect("records serialize");
        bytes.push(b'\n');
    }
    bytes
}

/// Makes entries created, renamed or removed in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io("syncing directory", dir))
}

/// Appends `bytes` to `path` (created if missing) and makes them durable
/// before returning: for rare writes that go around the log. A refused
/// append is cut back off: a later one, written after the part that did
/// reach the file, would otherwise be glued to it and lost at the next
/// load with it.
pub(crate) fn append_sync(path: &Path, bytes: &[u8]) -> Result<()> {
    let existed = path.exists();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(StoreError::io("opening", path))?;
    let start = f
        .metadata()
        .map_err(StoreError::io("reading metadata of", path))?
        .len();
    let written = std::io::Write::write_all(&mut f, bytes)
        .map_err(StoreError::io("appending to", path))
        .and_then(|()| f.sync_data().map_err(StoreError::io("syncing", path)));
    if let Err(e) = written {
        if let Err(cut) = f.set_len(start) {
            tracing::warn!(path = %path.display(), error = %cut, "could not cut a refused append back off; the next load repairs the file");
        }
        return Err(e);
    }
    if !existed {
        sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use engram_core::RawTrace;

    use super::*;

    fn line(n: u32) -> String {
        format!(
            "{{\"id\":\"t{n}\",\"ts\":1.0,\"turn_id\":\"turn_0001\",\"seq\":{n},\"trace_type\":\"user\",\"content\":\"c{n}\"}}\n"
        )
    }

    use proptest::prelude::*;

    proptest! {
        /// Good lines with any damage between and after them (noise,
        /// half lines, blank lines, no final newline): loading never
        /// fails or panics, keeps exactly the lines that parse, in order,
        /// leaves a file that loads clean to the same items, and loses no
        /// byte: what is not kept is in the quarantine file.
        #[test]
        fn recovery_keeps_every_good_line_and_loses_no_byte(
            parts in proptest::collection::vec(
                prop_oneof![
                    (0u32..1000).prop_map(line),
                    (0u32..1000, 1usize..60).prop_map(|(n, k)| line(n)[..k].to_owned()),
                    proptest::collection::vec(proptest::num::u8::ANY, 1..40)
                        .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
                    proptest::strategy::Just("\n".to_owned()),
                ],
                0..30,
            ),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("raw_traces.jsonl");
            let text = parts.concat();
            fs::write(&path, &text).unwrap();
            let expected: Vec<String> = text
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n'))
                .filter_map(|l| serde_json::from_str::<RawTrace>(l.trim_end()).ok())
                .map(|t| t.id)
                .collect();
            let (items, first) = load::<RawTrace>(&path).unwrap();
            let ids: Vec<String> = items.iter().map(|t| t.id.clone()).collect();
            prop_assert_eq!(&ids, &expected);
            let (again, recovery) = load::<RawTrace>(&path).unwrap();
            proptest::prop_assert!(recovery.is_clean());
            prop_assert_eq!(again.len(), items.len());
            let kept = fs::read(&path).unwrap().len();
            let quarantined = fs::read(quarantine_path(&path)).map_or(0, |q| q.len());
            let blank: usize = text
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n') && l.bytes().all(|b| b.is_ascii_whitespace()))
                .map(str::len)
                .sum();
            // A torn tail gains a newline in the quarantine file.
            let torn = usize::from(!text.is_empty() && !text.ends_with('\n'));
            // A rewritten file (a line quarantined) drops blank lines.
            let dropped = if first.quarantined.is_empty() { 0 } else { blank };
            prop_assert_eq!(kept + quarantined, text.len() - dropped + torn);
        }
    }

    #[test]
    fn clean_file_loads_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw_traces.jsonl");
        fs::write(&path, line(0) + &line(1)).unwrap();
        let (items, rec) = load::<RawTrace>(&path).unwrap();
        assert_eq!(items.len(), 2);
        assert!(rec.is_clean());
        assert!(!quarantine_path(&path).exists());
        let (none, rec) = load::<RawTrace>(&dir.path().join("missing")).unwrap();
        assert!(none.is_empty() && rec.is_clean());
    }

    #[test]
    fn torn_tail_is_cut_off_at_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw_traces.jsonl");
        let good = line(0) + &line(1);
        let torn = &line(2)[..30];
        fs::write(&path, good.clone() + torn).unwrap();
        let (items, rec) = load::<RawTrace>(&path).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(rec.torn_tail, Some((good.len() as u64, 30)));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            good,
            "file repaired on disk"
        );
        assert_eq!(
            fs::read_to_string(quarantine_path(&path)).unwrap(),
            format!("{torn}\n")
        );
        // A second load finds nothing to repair.
        assert!(load::<RawTrace>(&path).unwrap().1.is_clean());
    }

    #[test]
    fn corrupt_middle_line_is_quarantined_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw_traces.jsonl");
        let garbage = "{\"id\":\"t1\",\"ts\":\u{0}garbage\n";
        fs::write(&path, line(0) + garbage + &line(2) + "\n" + &line(3)[..10]).unwrap();
        let (items, rec) = load::<RawTrace>(&path).unwrap();
        let ids: Vec<_> = items.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t0", "t2"]);
        assert_eq!(rec.quarantined, [line(0).len() as u64]);
        assert!(rec.torn_tail.is_some());
        assert_eq!(fs::read_to_string(&path).unwrap(), line(0) + &line(2));
        let q = fs::read_to_string(quarantine_path(&path)).unwrap();
        assert!(q.starts_with(garbage), "damaged bytes kept verbatim: {q:?}");
        assert!(!tmp_path(&path).exists());
    }

    #[test]
    fn atomic_write_replaces_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        atomic_write(&path, b"one").unwrap();
        atomic_write(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert!(!tmp_path(&path).exists());
    }
}
