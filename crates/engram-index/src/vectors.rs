//! The semantic side: one embedding per item, in an append-only file.
//!
//! The file starts with the model's id and the vectors' dimension; a file
//! of another model is started over (two models' vectors are never
//! compared). Each record is an item's vector (int8 plus a scale: a
//! quarter of f32's size, cosine within ~1%) or a removal, with a CRC: a
//! torn or damaged tail — a crash mid-append — is cut off at load, and
//! what it held is embedded again.
//!
//! Search is exact: a dot product with every live vector. An agent's
//! memory is thousands of items; 100k is a few milliseconds.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::{Filter, Kind, Result};

const MAGIC: &[u8; 4] = b"EGV1";
const ADD: u8 = 0;
const REMOVE: u8 = 1;
/// Longest key a record holds (item ids are far shorter).
const MAX_KEY: usize = 1024;

/// An item's vector, before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub key: String,
    pub kind: Kind,
    pub trace_type: u8,
    pub order: u64,
    pub ts: f64,
    /// Unit length, [`Vectors::dim`] long.
    pub vector: Vec<f32>,
}

#[derive(Debug, Clone)]
struct Entry {
    key: String,
    kind: Kind,
    trace_type: u8,
    order: u64,
    ts: f64,
    scale: f32,
    live: bool,
}

/// A stored item's closeness to a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Near {
    pub key: String,
    pub kind: Kind,
    pub order: u64,
    pub ts: f64,
    /// Cosine similarity.
    pub cosine: f32,
}

/// One agent's vectors for one model.
pub struct Vectors {
    model: String,
    dim: usize,
    entries: Vec<Entry>,
    /// `dim` values per entry, in entry order.
    values: Vec<i8>,
    live: HashMap<String, usize>,
    file: Option<(PathBuf, BufWriter<File>)>,
    /// Each sitting's mean vector, for the last split asked about.
    centroids: std::sync::Mutex<Option<std::sync::Arc<centroids::Centroids>>>,
}

impl std::fmt::Debug for Vectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vectors")
            .field("model", &self.model)
            .field("live", &self.live.len())
            .finish()
    }
}

fn header(model: &str, dim: usize) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(dim as u32).to_le_bytes());
    out.extend_from_slice(&(model.len() as u32).to_le_bytes());
    out.extend_from_slice(model.as_bytes());
    out
}

/// Reads little-endian fields off a byte slice.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

impl Vectors {
    /// Vectors that live in memory only.
    pub fn in_memory(model: &str, dim: usize) -> Self {
        Self {
            model: model.to_owned(),
            dim,
            entries: Vec::new(),
            values: Vec::new(),
            live: HashMap::new(),
            file: None,
            centroids: Default::default(),
        }
    }

    /// Opens `path` for `model`: its vectors if it holds that model's, or
    /// a new file in its place. A damaged tail is cut off.
    pub fn open(path: &Path, model: &str, dim: usize) -> Result<Self> {
        let mut me = Self::in_memory(model, dim);
        let mut bytes = Vec::new();
        if let Ok(mut f) = File::open(path) {
            f.read_to_end(&mut bytes)?;
        }
        let head = header(model, dim);
        let kept = if bytes.starts_with(&head) {
            head.len() + me.load(&bytes[head.len()..])
        } else {
            0
        };
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        if kept == 0 {
            file.set_len(0)?;
            file.write_all(&head)?;
        } else if kept < bytes.len() {
            file.set_len(kept as u64)?;
        }
        let mut file = BufWriter::new(file);
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
        me.file = Some((path.to_owned(), file));
        Ok(me)
    }

    /// Applies the whole records of `bytes`; returns how many bytes they span.
    fn load(&mut self, bytes: &[u8]) -> usize {
        let mut used = 0;
        let mut rest = Bytes(bytes);
        while let Some(len) = rest.u32() {
            let (Some(crc), Some(body)) = (rest.u32(), rest.take(len as usize)) else {
                break;
            };
            if crc32(body) != crc || self.apply(body).is_none() {
                break;
            }
            used += 8 + len as usize;
        }
        used
    }

    fn apply(&mut self, body: &[u8]) -> Option<()> {
        let mut b = Bytes(body);
        let op = b.u8()?;
        let key_len = b.u32()? as usize;
        let key = std::str::from_utf8(b.take(key_len)?).ok()?.to_owned();
        match op {
            REMOVE => self.forget(&key),
            ADD => {
                let kind = Kind::from_u64(u64::from(b.u8()?));
                let trace_type = b.u8()?;
                let order = b.u64()?;
                let ts = f64::from_bits(b.u64()?);
                let scale = f32::from_bits(b.u32()?);
                let values = b.take(self.dim)?;
                self.forget(&key);
                self.live.insert(key.clone(), self.entries.len());
                self.entries.push(Entry {
                    key,
                    kind,
                    trace_type,
                    order,
                    ts,
                    scale,
                    live: true,
                });
                self.values
                    .extend(values.iter().map(|v| i8::from_ne_bytes([*v])));
            }
            _ => return None,
        }
        Some(())
    }

    fn forget(&mut self, key: &str) {
        if let Some(i) = self.live.remove(key) {
            self.entries[i].live = false;
        }
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// About how many bytes these vectors hold in memory (the memory
    /// budget's account): the values, an entry and a key per vector, the
    /// map of live keys.
    pub fn memory_bytes(&self) -> usize {
        // A key is an id of about 36 bytes; a map slot holds one more.
        const KEY: usize = 48;
        self.values.capacity()
            + self.entries.capacity() * (std::mem::size_of::<Entry>() + KEY)
            + self.live.capacity() * (std::mem::size_of::<(String, usize)>() + KEY)
            + self.centroid_bytes()
    }

    /// Live vectors.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.live.contains_key(key)
    }

    /// The stored vector of `key` (as quantized), with what it is of.
    pub fn get(&self, key: &str) -> Option<Embedded> {
        let i = *self.live.get(key)?;
        let e = &self.entries[i];
        let values = &self.values[i * self.dim..(i + 1) * self.dim];
        Some(Embedded {
            key: e.key.clone(),
            kind: e.kind,
            trace_type: e.trace_type,
            order: e.order,
            ts: e.ts,
            vector: values.iter().map(|v| f32::from(*v) * e.scale).collect(),
        })
    }

    /// The keys of the items placed in `lo..=hi`.
    pub fn keys_between(&self, lo: u64, hi: u64) -> Vec<String> {
        self.live
            .iter()
            .filter(|(_, i)| (lo..=hi).contains(&self.entries[**i].order))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Stores vectors (replacing any of the same key) and removals, and
    /// writes them to the file. A vector of the wrong length is skipped.
    pub fn write(&mut self, add: &[Embedded], remove: &[&str]) -> Result<()> {
        self.vectors_changed();
        let mut records = Vec::new();
        for key in remove.iter().filter(|k| k.len() <= MAX_KEY) {
            let mut body = vec![REMOVE];
            push_key(&mut body, key);
            records.push(body);
        }
        for e in add {
            if e.vector.len() != self.dim || e.key.len() > MAX_KEY {
                continue;
            }
            let (scale, values) = quantize(&e.vector);
            let mut body = vec![ADD];
            push_key(&mut body, &e.key);
            body.push(e.kind as u8);
            body.push(e.trace_type);
            body.extend_from_slice(&e.order.to_le_bytes());
            body.extend_from_slice(&e.ts.to_bits().to_le_bytes());
            body.extend_from_slice(&scale.to_bits().to_le_bytes());
            body.extend(values.iter().map(|v| v.to_ne_bytes()[0]));
            records.push(body);
        }
        for body in &records {
            if let Some((_, file)) = &mut self.file {
                file.write_all(&(body.len() as u32).to_le_bytes())?;
                file.write_all(&crc32(body).to_le_bytes())?;
                file.write_all(body)?;
            }
            self.apply(body);
        }
        if let Some((_, file)) = &mut self.file {
            file.flush()?;
        }
        Ok(())
    }

    /// The `limit` items closest to `query` (unit length) within `filter`,
    /// closest first.
    pub fn nearest(&self, query: &[f32], filter: &Filter, limit: usize) -> Vec<Near> {
        if query.len() != self.dim || limit == 0 {
            return Vec::new();
        }
        // Integer products vectorize (a float sum in order does not), and
        // i16 keeps the query's rounding three orders below the items'.
        let (query_scale, query) = quantize_i16(query);
        let mut scored: Vec<(f32, usize)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live && filter.accepts(e.kind, e.trace_type, e.order, e.ts))
            .map(|(i, e)| {
                let values = &self.values[i * self.dim..(i + 1) * self.dim];
                (dot(values, &query) as f32 * e.scale * query_scale, i)
            })
            .collect();
        let by_score = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0);
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, by_score);
            scored.truncate(limit);
        }
        scored.sort_by(by_score);
        scored
            .into_iter()
            .map(|(cosine, i)| {
                let e = &self.entries[i];
                Near {
                    key: e.key.clone(),
                    kind: e.kind,
                    order: e.order,
                    ts: e.ts,
                    cosine,
                }
            })
            .collect()
    }
}

fn push_key(body: &mut Vec<u8>, key: &str) {
    body.extend_from_slice(&(key.len() as u32).to_le_bytes());
    body.extend_from_slice(key.as_bytes());
}

fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The largest finite magnitude in `v` (0 for none).
fn max_abs(v: &[f32]) -> f32 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0.0_f32, |m, x| m.max(x.abs()))
}

/// Symmetric int8: `v ≈ scale × q`.
pub(crate) fn quantize(v: &[f32]) -> (f32, Vec<i8>) {
    let max = max_abs(v);
    if max == 0.0 {
        return (0.0, vec![0; v.len()]);
    }
    let scale = max / 127.0;
    let q = v
        .iter()
        .map(|x| {
            let x = if x.is_finite() { *x } else { 0.0 };
            (x / scale).round().clamp(-127.0, 127.0) as i8
        })
        .collect();
    (scale, q)
}

/// `v ≈ scale × q` in i16, bounded so that a dot product with int8 values
/// (at most 127) over `v.len()` of them cannot overflow an i32.
pub(crate) fn quantize_i16(v: &[f32]) -> (f32, Vec<i16>) {
    let max = max_abs(v);
    if max == 0.0 {
        return (0.0, vec![0; v.len()]);
    }
    let bound = (i32::MAX / 127 / v.len().max(1) as i32).min(i32::from(i16::MAX)) as f32;
    let scale = max / bound;
    let q = v
        .iter()
        .map(|x| {
            let x = if x.is_finite() { *x } else { 0.0 };
            (x / scale).round().clamp(-bound, bound) as i16
        })
        .collect();
    (scale, q)
}

pub(crate) fn dot(values: &[i8], query: &[i16]) -> i32 {
    values
        .iter()
        .zip(query)
        .map(|(v, q)| i32::from(*v) * i32::from(*q))
        .sum()
}

mod centroids;

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u32, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim)
            .map(|i| ((seed as f32 + 1.0) * (i as f32 + 0.5)).sin())
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    fn item(key: &str, order: u64, vector: Vec<f32>) -> Embedded {
        Embedded {
            key: key.into(),
            kind: Kind::Trace,
            trace_type: 1,
            order,
            ts: order as f64,
            vector,
        }
    }

    #[test]
    fn a_vector_is_read_back_and_found_by_place() {
        let mut v = Vectors::in_memory("m", 8);
        v.write(&[item("a", 5, unit(1, 8)), item("b", 9, unit(2, 8))], &[])
            .unwrap();
        let got = v.get("a").unwrap();
        assert_eq!((got.key.as_str(), got.order), ("a", 5));
        let cos: f32 = got.vector.iter().zip(unit(1, 8)).map(|(x, y)| x * y).sum();
        assert!(cos > 0.999, "{cos}");
        // Copied as read, it quantizes to the same values.
        let mut copy = Vectors::in_memory("m", 8);
        copy.write(std::slice::from_ref(&got), &[]).unwrap();
        assert_eq!(copy.get("a").unwrap().vector, got.vector);
        assert_eq!(v.keys_between(0, 6), ["a"]);
        assert!(v.get("zz").is_none());
    }

    #[test]
    fn nearest_is_exact_cosine_within_quantization() {
        let mut v = Vectors::in_memory("m", 64);
        let items: Vec<Embedded> = (0..50)
            .map(|i| item(&format!("k{i}"), i, unit(i as u32, 64)))
            .collect();
        v.write(&items, &[]).unwrap();
        let q = unit(7, 64);
        let near = v.nearest(&q, &Filter::default(), 3);
        assert_eq!(near[0].key, "k7");
        assert!((near[0].cosine - 1.0).abs() < 0.01, "{}", near[0].cosine);
        for n in &near {
            let exact: f32 = unit(n.order as u32, 64)
                .iter()
                .zip(&q)
                .map(|(a, b)| a * b)
                .sum();
            assert!((n.cosine - exact).abs() < 0.02);
        }
        let only = Filter {
            order: Some((10, 20)),
            ..Filter::default()
        };
        assert!(
            v.nearest(&q, &only, 5)
                .iter()
                .all(|n| (10..=20).contains(&n.order))
        );
    }

    #[test]
    fn the_largest_vectors_do_not_overflow_the_integer_dot_product() {
        for dim in [384, 16_384] {
            let mut v = Vectors::in_memory("m", dim);
            let flat = vec![1.0 / (dim as f32).sqrt(); dim];
            let mut opposite = flat.clone();
            opposite.iter_mut().for_each(|x| *x = -*x);
            v.write(
                &[item("same", 1, flat.clone()), item("opposite", 2, opposite)],
                &[],
            )
            .unwrap();
            let near = v.nearest(&flat, &Filter::default(), 2);
            assert_eq!(near[0].key, "same");
            assert!(
                (near[0].cosine - 1.0).abs() < 1e-3,
                "{dim}: {}",
                near[0].cosine
            );
            assert!(
                (near[1].cosine + 1.0).abs() < 1e-3,
                "{dim}: {}",
                near[1].cosine
            );
        }
    }

    #[test]
    fn the_file_survives_reopening_and_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        {
            let mut v = Vectors::open(&path, "m", 8).unwrap();
            v.write(&[item("a", 1, unit(1, 8)), item("b", 2, unit(2, 8))], &[])
                .unwrap();
            v.write(&[item("c", 3, unit(3, 8))], &["a"]).unwrap();
        }
        let whole = std::fs::read(&path).unwrap();
        let v = Vectors::open(&path, "m", 8).unwrap();
        assert_eq!(
            (v.len(), v.contains("a"), v.contains("c")),
            (2, false, true)
        );
        // A crash mid-append: the last record is cut off, the rest stays.
        std::fs::write(&path, &whole[..whole.len() - 5]).unwrap();
        let mut v = Vectors::open(&path, "m", 8).unwrap();
        assert_eq!(
            (v.len(), v.contains("b"), v.contains("c")),
            (1, true, false)
        );
        v.write(&[item("c", 3, unit(3, 8))], &[]).unwrap();
        drop(v);
        let v = Vectors::open(&path, "m", 8).unwrap();
        assert_eq!(v.len(), 2);
        // Another model's file is started over.
        let v = Vectors::open(&path, "other", 8).unwrap();
        assert!(v.is_empty());
        assert!(Vectors::open(&path, "m", 8).unwrap().is_empty());
    }
}
