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
use std::sync::Arc;

use engram_core::embed::{EmbedError, EmbedFuture, Embedder, normalize};
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

/// Texts per encoder pass: enough for large matrix products, small enough
/// that a query waiting behind a batch is not held up for long.
pub const BATCH: usize = 32;

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
    /// blocking thread). Texts are encoded [`BATCH`] at a time, grouped by
    /// length so that a batch's attention blocks are alike.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inner = &self.inner;
        let mut ids = Vec::with_capacity(texts.len());
        for text in texts {
            let encoding = inner
                .tokenizer
                .encode(text.as_str(), true)
                .map_err(|e| EmbedError::BadAnswer(format!("tokenizer: {e}")))?;
            ids.push(encoding.get_ids().to_vec());
        }
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<Vec<u32>> = chunk.iter().map(|&i| std::mem::take(&mut ids[i])).collect();
            let pooled = inner
                .bert
                .mean_pooled(&batch)
                .map_err(|e| EmbedError::BadAnswer(format!("encoder: {e}")))?;
            for (&i, mut v) in chunk.iter().zip(pooled) {
                normalize(&mut v);
                out[i] = v;
            }
        }
        Ok(out)
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
        self.off_the_workers(texts.to_vec(), true)
    }

    /// A search's query: at normal priority, a search is waiting for it.
    fn embed_query<'a>(&'a self, text: &'a str) -> EmbedFuture<'a> {
        self.off_the_workers(vec![text.to_owned()], false)
    }
}

impl LocalModel {
    /// Embeds on a blocking thread, or on the [`background`] threads.
    fn off_the_workers(&self, texts: Vec<String>, background_work: bool) -> EmbedFuture<'static> {
        let model = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                if background_work {
                    background().install(|| model.embed_blocking(&texts))
                } else {
                    model.embed_blocking(&texts)
                }
            })
            .await
            .map_err(|e| EmbedError::Unavailable(format!("embedding task: {e}")))?
        })
    }
}

/// The threads background embedding runs on: one per core, scheduled as
/// idle work (Linux `SCHED_IDLE`: any request's thread that wakes takes the
/// CPU from them at once), so that a busy server's requests keep the CPU
/// and the indexer gets what is left (on an idle server, all of it). The
/// matrix products' own parallelism (rayon, inside candle) stays on these
/// threads.
fn background() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
            .thread_name(|i| format!("engram-embed-{i}"))
            .start_handler(|_| idle_priority())
            .build()
            .expect("starting the embedding threads")
    })
}

/// `SCHED_IDLE` for the calling thread (Linux only; elsewhere the threads
/// keep the normal priority).
fn idle_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
            set_thread_priority_and_policy, thread_native_id,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(e) =
            set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle)
        {
            eprintln!("engram-embed: the embedding threads keep their priority: {e:?}");
        }
    }
}
