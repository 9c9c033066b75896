//! An index directory whose new files stay in memory until persisted.
//!
//! A search must see everything that exists when it starts (a prompt's
//! recall, right after its own compaction archived turns), but a commit to
//! disk costs a request 10–55 ms, most of it writing and syncing files. So
//! tantivy writes every new file (segments, its metadata) here into
//! memory: a commit then makes them searchable without touching the disk,
//! and [`Tiered::persist`] later writes them out, synced, and only then
//! the metadata that names them (off the request path: the background
//! indexer). A file deleted meanwhile that is on disk stays there until the
//! persisted metadata no longer names it.
//!
//! Killed before a persist, the disk still holds the last persisted commit,
//! whole: its payload says how far it had read, and the caller reads on
//! from there (the index is derived from the agent's files).

use std::collections::{HashMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tantivy::HasLen;
use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, Directory, DirectoryLock, FileHandle, FileSlice, Lock, MmapDirectory,
    TerminatingWrite, WatchCallback, WatchHandle, WritePtr,
};

/// The metadata file: persisted last, once every file it names is.
const META: &str = "meta.json";

/// See the module's documentation.
#[derive(Clone, Debug)]
pub(crate) struct Tiered {
    disk: MmapDirectory,
    fresh: Arc<Mutex<Fresh>>,
}

/// What is not on disk yet.
#[derive(Debug, Default)]
struct Fresh {
    /// Files written since the last persist, and whether each was written
    /// whole at once (tantivy's metadata: replaced on disk atomically).
    files: HashMap<PathBuf, (FileSlice, bool)>,
    /// Files on disk deleted since: gone for readers, removed from disk
    /// once the persisted metadata no longer names them.
    doomed: HashSet<PathBuf>,
    /// Files being written (a merge may run while a persist does): not
    /// persisted before they are whole.
    writing: HashSet<PathBuf>,
    bytes: usize,
}

impl Fresh {
    fn put(&mut self, path: PathBuf, data: Vec<u8>, atomic: bool) {
        self.bytes += data.len();
        if let Some((old, _)) = self
            .files
            .insert(path.clone(), (FileSlice::from(data), atomic))
        {
            self.bytes -= old.len();
        }
        self.doomed.remove(&path);
        self.writing.remove(&path);
    }
}

impl Tiered {
    pub fn open(dir: &Path) -> tantivy::Result<Self> {
        Ok(Self {
            disk: MmapDirectory::open(dir)?,
            fresh: Arc::default(),
        })
    }

    fn fresh(&self) -> MutexGuard<'_, Fresh> {
        // A panic while held leaves plain maps: still consistent.
        self.fresh.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes held in memory, not on disk yet.
    pub fn unpersisted_bytes(&self) -> usize {
        self.fresh().bytes
    }

    /// Writes every file held in memory to disk, synced, the metadata
    /// last; then removes what was deleted meanwhile. Best called with no
    /// merge running, or a file it is writing waits for the next persist.
    pub fn persist(&self) -> io::Result<()> {
        let mut fresh = self.fresh();
        if fresh.files.is_empty() && fresh.doomed.is_empty() {
            return Ok(());
        }
        let meta = Path::new(META);
        let (mut whole, mut written): (Vec<_>, Vec<_>) = (Vec::new(), Vec::new());
        for (path, (data, atomic)) in &fresh.files {
            match *atomic {
                true if path != meta => whole.push((path, data)),
                true => {}
                false => written.push((path, data)),
            }
        }
        for (path, data) in written {
            let bytes = data.read_bytes()?;
            let mut out = match self.disk.open_write(path) {
                Ok(out) => out,
                // Left by a persist that died before its metadata: the
                // same name holds the same segment's file, written anew.
                Err(OpenWriteError::FileAlreadyExists(_)) => {
                    self.disk.delete(path).map_err(io::Error::other)?;
                    self.disk.open_write(path).map_err(io::Error::other)?
                }
                Err(e) => return Err(io::Error::other(e)),
            };
            out.write_all(bytes.as_slice())?;
            out.terminate()?;
        }
        for (path, data) in whole {
            self.disk
                .atomic_write(path, data.read_bytes()?.as_slice())?;
        }
        self.disk.sync_directory()?;
        if let Some((data, _)) = fresh.files.get(meta) {
            self.disk
                .atomic_write(meta, data.read_bytes()?.as_slice())?;
        }
        for path in &fresh.doomed {
            match self.disk.delete(path) {
                Ok(()) | Err(DeleteError::FileDoesNotExist(_)) => {}
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        // Readers that hold a file keep its bytes; new ones map the disk's.
        fresh.files.clear();
        fresh.doomed.clear();
        fresh.bytes = 0;
        Ok(())
    }
}

impl Directory for Tiered {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        {
            let fresh = self.fresh();
            if let Some((data, _)) = fresh.files.get(path) {
                return Ok(Arc::new(data.clone()));
            }
            if fresh.doomed.contains(path) {
                return Err(OpenReadError::FileDoesNotExist(path.to_owned()));
            }
        }
        self.disk.get_file_handle(path)
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        let mut fresh = self.fresh();
        fresh.writing.remove(path);
        let held = match fresh.files.remove(path) {
            Some((data, _)) => {
                fresh.bytes -= data.len();
                true
            }
            None => false,
        };
        let on_disk = !fresh.doomed.contains(path) && self.disk.exists(path).unwrap_or(false);
        if on_disk {
            fresh.doomed.insert(path.to_owned());
        }
        match held || on_disk {
            true => Ok(()),
            false => Err(DeleteError::FileDoesNotExist(path.to_owned())),
        }
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        {
            let fresh = self.fresh();
            if fresh.files.contains_key(path) || fresh.writing.contains(path) {
                return Ok(true);
            }
            if fresh.doomed.contains(path) {
                return Ok(false);
            }
        }
        self.disk.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        if self.exists(path).unwrap_or(false) {
            return Err(OpenWriteError::FileAlreadyExists(path.to_owned()));
        }
        // Present at once, as a file on disk would be.
        self.fresh().writing.insert(path.to_owned());
        Ok(BufWriter::new(Box::new(Writer {
            path: path.to_owned(),
            data: Vec::new(),
            fresh: Arc::clone(&self.fresh),
        })))
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        let (in_memory, doomed) = {
            let fresh = self.fresh();
            let held = fresh.files.get(path).map(|(d, _)| d.clone());
            (held, fresh.doomed.contains(path))
        };
        match in_memory {
            Some(data) => data
                .read_bytes()
                .map(|b| b.as_slice().to_vec())
                .map_err(|e| OpenReadError::wrap_io_error(e, path.to_owned())),
            None if doomed => Err(OpenReadError::FileDoesNotExist(path.to_owned())),
            None => self.disk.atomic_read(path),
        }
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.fresh().put(path.to_owned(), data.to_vec(), true);
        Ok(())
    }

    fn sync_directory(&self) -> io::Result<()> {
        // Nothing here is on disk until `persist`, which syncs.
        Ok(())
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.disk.acquire_lock(lock)
    }

    fn watch(&self, _: WatchCallback) -> tantivy::Result<WatchHandle> {
        // Readers reload when told (`ReloadPolicy::Manual`).
        Ok(WatchHandle::empty())
    }
}

/// A file being written into memory; there once terminated.
struct Writer {
    path: PathBuf,
    data: Vec<u8>,
    fresh: Arc<Mutex<Fresh>>,
}

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.data.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Whole at `terminate`: tantivy reads no file it is still writing.
        Ok(())
    }
}

impl TerminatingWrite for Writer {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        let mut fresh = self.fresh.lock().unwrap_or_else(|p| p.into_inner());
        fresh.put(self.path.clone(), std::mem::take(&mut self.data), false);
        Ok(())
    }
}
