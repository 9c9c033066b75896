//! Engram's local embedding model: a sentence-transformers BERT checkpoint
//! (all-MiniLM-L6-v2 by default) run in-process with candle — pure Rust,
//! nothing downloaded at run time.
//!
//! A model directory holds what `sentence-transformers` saves:
//! `config.json`, `tokenizer.json`, `model.safetensors`, and optionally
//! `sentence_bert_config.json` (`max_seq_length`) and
//! `1_Pooling/config.json` (mean pooling is the only pooling supported).

mod bert;
mod int8;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use engram_core::embed::{EmbedError, EmbedFuture, Embedder, normalize};
use engram_core::load::Load;
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};

use bert::Config;
pub use bert::Precision;

/// Why a model directory could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("model in {dir}: {message}")]
    Model { dir: PathBuf, message: String },
}

/// A loaded model; cheap to clone, safe to share between threads.
#[derive(Debug, Clone)]
pub struct LocalModel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    tokenizer: Tokenizer,
    bert: bert::Bert,
}

#[derive(Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct Pooling {
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
}

/// Texts per encoder pass: enough for large matrix products.
pub const BATCH: usize = 32;

/// Tokens per encoder pass (a longer text gets a pass of its own): a pass
/// is the unit the background work yields at, so it is kept short (~20 ms
/// on one core in int8) while still filling the matrix products.
const PASS_TOKENS: usize = 256;

/// How long after a request the background work still counts the server
/// busy: a client in a loop sends its next call within a round trip.
const QUIET: Duration = Duration::from_millis(50);

/// While requests are in flight, background work waits up to this many
/// times as long as it last worked: under constant load it still gets a
/// twenty-first of one core (progress, however slow), and requests the
/// rest. A fifth measured no better than this within the host's noise and
/// left the p99 1.4-1.7x that of an idle indexer in one run.
const REST: u32 = 20;

/// How often a waiting background pass looks whether requests are done.
const WAIT_STEP: Duration = Duration::from_micros(250);

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|e| LoadError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

fn json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, LoadError> {
    serde_json::from_slice(&read(path)?).map_err(|e| LoadError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

impl LocalModel {
    /// Loads `dir` at the precision [`Precision::fastest`] picks here.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        Self::load_as(dir, Precision::fastest())
    }

    /// Loads `dir`. The model id is the directory's name and a checksum of
    /// the weights (replaced weights under the same name are a new model),
    /// and `+int8` in int8: its vectors are near those in f32 but not the
    /// same, so changing the precision re-embeds like changing the model.
    pub fn load_as(dir: &Path, precision: Precision) -> Result<Self, LoadError> {
        let model_err = |message: String| LoadError::Model {
            dir: dir.to_owned(),
            message,
        };
        let config: Config = json(&dir.join("config.json"))?;
        let pooling = dir.join("1_Pooling/config.json");
        if pooling.exists() && !json::<Pooling>(&pooling)?.pooling_mode_mean_tokens {
            return Err(model_err("only mean pooling is supported".to_owned()));
        }
        let sentence = dir.join("sentence_bert_config.json");
        let max_len = if sentence.exists() {
            json::<SentenceConfig>(&sentence)?.max_seq_length
        } else {
            None
        }
        .unwrap_or(256)
        .min(config.max_position_embeddings);
        let weights = read(&dir.join("model.safetensors"))?;
        let bert =
            bert::Bert::load(&weights, &config, precision).map_err(|e| model_err(e.to_string()))?;
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|e| LoadError::File {
            path: tokenizer_path.clone(),
            message: e.to_string(),
        })?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| model_err(e.to_string()))?;
        if tokenizer.get_vocab_size(true) > bert.vocab() {
            return Err(model_err(format!(
                "the tokenizer knows {} tokens, the weights {}",
                tokenizer.get_vocab_size(true),
                bert.vocab()
            )));
        }
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_owned());
        let mut id = format!("{name}#{:08x}", crc32fast::hash(&weights));
        if precision == Precision::Int8 {
            id.push_str("+int8");
        }
        Ok(Self {
            inner: Arc::new(Inner {
                id,
                tokenizer,
                bert,
            }),
        })
    }

    /// Embeds `texts` on the calling thread (CPU-heavy: call it from a
    /// blocking thread).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.encode_now(self.read_alone(texts)?)
    }

    /// [`Embedder::embed_after`] on the calling thread (CPU-heavy: call
    /// it from a blocking thread): each text's vector the mean of its own
    /// tokens, read after its context.
    pub fn embed_after_blocking(
        &self,
        items: &[(Option<String>, String)],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.encode_now(self.read_after(items)?)
    }

    /// [`Self::encode`] on the calling thread, without making way.
    fn encode_now(&self, read: Vec<(Vec<u32>, usize)>) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.encode(read, |pass, skips| {
            self.inner.bert.pooled_from(pass, skips, || ())
        })
    }

    /// The token ids of `text`, with the model's special tokens.
    fn tokens(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        Ok(self
            .inner
            .tokenizer
            .encode(text, true)
            .map_err(|e| EmbedError::BadAnswer(format!("tokenizer: {e}")))?
            .get_ids()
            .to_vec())
    }

    /// Each of `texts`, whole: its tokens, none skipped.
    fn read_alone(&self, texts: &[String]) -> Result<Vec<(Vec<u32>, usize)>, EmbedError> {
        texts.iter().map(|t| Ok((self.tokens(t)?, 0))).collect()
    }

    /// Each text after its context: the tokens of both read together, and
    /// how many come before the text's own (`[CLS]` and the context's),
    /// which are read but not averaged in. A text whose own tokens the
    /// joint reading does not end with (cut at the model's length) is
    /// read alone.
    fn read_after(
        &self,
        items: &[(Option<String>, String)],
    ) -> Result<Vec<(Vec<u32>, usize)>, EmbedError> {
        items
            .iter()
            .map(|(before, text)| {
                let own = self.tokens(text)?;
                let Some(before) = before else {
                    return Ok((own, 0));
                };
                let joint = self.tokens(&format!("{before}\n{text}"))?;
                // [CLS] context… own… [SEP]: own[1..] is the joint's tail.
                let tail = own.len().saturating_sub(1);
                let ends_with_own =
                    joint.len() > tail + 1 && joint[joint.len() - tail..] == own[1..];
                Ok(if ends_with_own {
                    let skip = joint.len() - tail;
                    (joint, skip)
                } else {
                    (own, 0)
                })
            })
            .collect()
    }

    /// Embeds `read` (each text's tokens, and how many of them to read
    /// but not average) in passes of alike lengths (sorted by length: a
    /// pass's attention blocks are alike), each run by `run`.
    fn encode(
        &self,
        read: Vec<(Vec<u32>, usize)>,
        mut run: impl FnMut(&[Vec<u32>], &[usize]) -> candle_core::Result<Vec<Vec<f32>>>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (mut ids, skips): (Vec<Vec<u32>>, Vec<usize>) = read.into_iter().unzip();
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let mut out = vec![Vec::new(); ids.len()];
        let mut rest = &order[..];
        while !rest.is_empty() {
            let mut tokens = 0;
            let take = rest
                .iter()
                .take(BATCH)
                .take_while(|&&i| {
                    tokens += ids[i].len();
                    tokens <= PASS_TOKENS
                })
                .count()
                .max(1);
            let (chunk, later) = rest.split_at(take);
            rest = later;
            let pass: Vec<Vec<u32>> = chunk.iter().map(|&i| std::mem::take(&mut ids[i])).collect();
            let pass_skips: Vec<usize> = chunk.iter().map(|&i| skips[i]).collect();
            let pooled = run(&pass, &pass_skips)
                .map_err(|e| EmbedError::BadAnswer(format!("encoder: {e}")))?;
            for (&i, mut v) in chunk.iter().zip(pooled) {
                normalize(&mut v);
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// The indexer's work, on the [`background`] threads. While calls
    /// arrive it runs on one of them, and before each matrix product it
    /// waits while a call is in flight, up to [`REST`] times as long as it
    /// last worked: a server with moderate traffic (mostly no call in
    /// flight) still embeds at a core's speed, a saturated one barely.
    fn embed_in_background(
        &self,
        read: Vec<(Vec<u32>, usize)>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let load = Load::global();
        let bert = &self.inner.bert;
        self.encode(read, |pass, skips| {
            if !load.busy(QUIET) {
                return background(Threads::All).install(|| bert.pooled_from(pass, skips, || ()));
            }
            background(Threads::One).install(|| {
                let mut worked_since = Instant::now();
                bert.pooled_from(pass, skips, || {
                    let worked = worked_since.elapsed();
                    let until = Instant::now() + worked * REST;
                    while load.in_flight() && Instant::now() < until {
                        std::thread::sleep(WAIT_STEP);
                    }
                    worked_since = Instant::now();
                })
            })
        })
    }
}

impl Embedder for LocalModel {
    fn model(&self) -> &str {
        &self.inner.id
    }

    fn dim(&self) -> usize {
        self.inner.bert.hidden()
    }

    /// The indexer's batches: on the background threads, which only get
    /// the CPU that Ingest, PrepareRequest and searches leave.
    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        self.off_the_workers(Input::Alone(texts.to_vec()), true)
    }

    /// The indexer's batches of traces, each read after the one before.
    fn embed_after<'a>(&'a self, items: &'a [(Option<String>, String)]) -> EmbedFuture<'a> {
        self.off_the_workers(Input::After(items.to_vec()), true)
    }

    /// A search's query: at normal priority, a search is waiting for it.
    fn embed_query<'a>(&'a self, text: &'a str) -> EmbedFuture<'a> {
        self.off_the_workers(Input::Alone(vec![text.to_owned()]), false)
    }
}

/// What a call gives the model to read.
enum Input {
    Alone(Vec<String>),
    After(Vec<(Option<String>, String)>),
}

impl LocalModel {
    /// Embeds on a blocking thread, or on the [`background`] threads.
    fn off_the_workers(&self, input: Input, background_work: bool) -> EmbedFuture<'static> {
        let model = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let read = match &input {
                    Input::Alone(texts) => model.read_alone(texts)?,
                    Input::After(items) => model.read_after(items)?,
                };
                if background_work {
                    model.embed_in_background(read)
                } else {
                    model.encode_now(read)
                }
            })
            .await
            .map_err(|e| EmbedError::Unavailable(format!("embedding task: {e}")))?
        })
    }
}

#[derive(Clone, Copy)]
enum Threads {
    All,
    One,
}

/// The threads background embedding runs on: one per core (or one),
/// scheduled by default as idle work (Linux `SCHED_IDLE`: a request's thread that
/// wakes should take the CPU from them), so that a busy server's requests
/// keep the CPU and the indexer gets what is left (on an idle server, all
/// of it). The matrix products' own parallelism (rayon, inside candle and
/// the int8 kernel) stays on these threads. On a VM a waking thread did not
/// always preempt them at once, hence also [`REST`].
fn background(threads: Threads) -> &'static rayon::ThreadPool {
    static ALL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    static ONE: OnceLock<rayon::ThreadPool> = OnceLock::new();
    let (pool, n, name) = match threads {
        Threads::All => (
            &ALL,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            "engram-embed",
        ),
        Threads::One => (&ONE, 1, "engram-embed-busy"),
    };
    pool.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(move |i| format!("{name}-{i}"))
            .start_handler(|_| idle_priority())
            .build()
            .expect("starting the embedding threads")
    })
}

/// How the [`background`] threads are scheduled (`embed.background_priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackgroundPriority {
    /// Linux `SCHED_IDLE`: only the CPU nothing else on the machine wants.
    /// A machine kept busy by other processes can starve the indexer.
    Idle,
    /// The lowest normal priority (nice 19): behind every other process,
    /// never starved.
    Low,
    /// As the rest of the server.
    Normal,
}

static PRIORITY: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Chooses how the background threads are scheduled. Call it before the
/// first background work: threads already started keep theirs.
pub fn set_background_priority(priority: BackgroundPriority) {
    let code = match priority {
        BackgroundPriority::Idle => 0,
        BackgroundPriority::Low => 1,
        BackgroundPriority::Normal => 2,
    };
    PRIORITY.store(code, std::sync::atomic::Ordering::Relaxed);
}

/// The chosen [`BackgroundPriority`] for the calling thread (Linux only;
/// elsewhere the threads keep the normal priority).
fn idle_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
            set_thread_priority_and_policy, thread_native_id,
        };
        let (priority, policy) = match PRIORITY.load(std::sync::atomic::Ordering::Relaxed) {
            0 => (ThreadPriority::Min, NormalThreadSchedulePolicy::Idle),
            1 => (ThreadPriority::Min, NormalThreadSchedulePolicy::Other),
            _ => return,
        };
        if let Err(e) = set_thread_priority_and_policy(
            thread_native_id(),
            priority,
            ThreadSchedulePolicy::Normal(policy),
        ) {
            eprintln!("engram-embed: the embedding threads keep their priority: {e:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under constant load (a request always in flight) the indexer's work
    /// slows down but ends, with the vectors a query would get.
    #[test]
    fn background_work_ends_under_constant_load() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
        let model = LocalModel::load(&dir).expect("`make models` installs the model");
        let texts = vec![
            "the weather in Paris".to_owned(),
            "a cat on a mat".to_owned(),
        ];
        let serving = Load::global().serving();
        assert!(Load::global().busy(QUIET));
        let background = model
            .embed_in_background(model.read_alone(&texts).unwrap())
            .unwrap();
        drop(serving);
        assert_eq!(background, model.embed_blocking(&texts).unwrap());
    }

    /// A text read after its context: of its own tokens, neither its
    /// reading alone nor the joint text's; without a context, or when the
    /// joint reading would cut the text, it is read alone.
    #[test]
    fn a_text_read_after_its_context_keeps_its_own_meaning() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
        let model = LocalModel::load(&dir).expect("`make models` installs the model");
        let reply = "Super good! Rich and creamy.".to_owned();
        let asked = "We made coconut milk ice cream. How did it taste?".to_owned();
        let long = "word ".repeat(400);
        let got = model
            .embed_after_blocking(&[
                (None, reply.clone()),
                (Some(asked.clone()), reply.clone()),
                (Some(long), reply.clone()),
            ])
            .unwrap();
        let alone = model
            .embed_blocking(std::slice::from_ref(&reply))
            .unwrap()
            .remove(0);
        let joint = model
            .embed_blocking(&[format!("{asked}\n{reply}")])
            .unwrap()
            .remove(0);
        let cosine = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f32>();
        assert_eq!(got[0], alone);
        assert_eq!(got[2], alone, "cut by the joint reading: alone");
        let (to_alone, to_joint) = (cosine(&got[1], &alone), cosine(&got[1], &joint));
        assert!(to_alone < 0.999, "the context counts: {to_alone}");
        assert!(to_joint < 0.999, "its own tokens only: {to_joint}");
    }
}
