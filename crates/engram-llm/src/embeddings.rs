//! The embedder as an OpenAI-compatible `POST {base_url}/embeddings` call
//! (OpenAI, Ollama, vLLM, TEI, llama.cpp), through [`Transport`] and behind
//! a [`Breaker`].
//!
//! The indexer's texts go in requests of at most `batch` inputs, each with
//! every configured retry. A search's query gets one attempt within
//! `query_timeout` and no retry: a slow or dead endpoint costs a search that
//! long at most, and the search falls back to words. Outages of either kind
//! open the circuit, which then answers at once until its trial call.

use std::time::Duration;

use engram_core::embed::{EmbedError, EmbedFuture, Embedder, normalize};
use serde_json::{Value, json};

use crate::circuit::Breaker;
use crate::transport::{PostError, Reach, Transport, snippet};

/// The `[embed]` settings of `provider = "http"`.
#[derive(Debug, Clone)]
pub struct EmbedConfig {
    /// E.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    pub model: String,
    /// The length of the model's vectors; an answer of another length is
    /// refused.
    pub dim: usize,
    pub reach: Reach,
    /// Texts per request.
    pub batch: usize,
    pub query_timeout: Duration,
    /// Outages in a row that open the circuit, its first and its longest
    /// cool-down.
    pub circuit_failures: u32,
    pub circuit_cooldown: Duration,
    pub circuit_max_cooldown: Duration,
}

impl EmbedConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>, dim: usize) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            dim,
            reach: Reach::default(),
            batch: 64,
            query_timeout: Duration::from_secs(2),
            circuit_failures: 3,
            circuit_cooldown: Duration::from_secs(5),
            circuit_max_cooldown: Duration::from_secs(300),
        }
    }
}

#[derive(Debug)]
pub struct HttpEmbedder {
    transport: Transport,
    /// `http:<model>`: what the vectors file records.
    id: String,
    config: EmbedConfig,
    breaker: Breaker,
}

impl HttpEmbedder {
    pub fn new(config: EmbedConfig) -> Result<Self, String> {
        if config.model.trim().is_empty() {
            return Err("the embedding model's name is empty".into());
        }
        if config.dim == 0 {
            return Err("the embedding dimension must be > 0".into());
        }
        Ok(Self {
            transport: Transport::new(&config.base_url, "embeddings", config.reach.clone())?,
            id: format!("http:{}", config.model),
            breaker: Breaker::new(
                "embedder",
                config.circuit_failures,
                config.circuit_cooldown,
                config.circuit_max_cooldown,
            ),
            config,
        })
    }

    /// The URL every request goes to.
    pub fn endpoint(&self) -> &reqwest::Url {
        self.transport.endpoint()
    }

    pub fn circuit(&self) -> crate::Circuit {
        self.breaker.circuit()
    }

    /// One request's vectors, `retries` and `timeout` as the caller needs.
    async fn request(
        &self,
        texts: &[String],
        retries: u32,
        timeout: Option<Duration>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = json!({
            "model": self.config.model,
            "input": texts,
            "encoding_format": "float",
        });
        let call = || async {
            match self.transport.post(&body, retries, timeout).await {
                Ok(text) => vectors(&text, texts.len(), self.config.dim),
                Err(PostError::Unavailable(why)) => Err(EmbedError::Unavailable(why)),
                // The same request would be refused again.
                Err(PostError::Rejected(why)) => Err(EmbedError::BadAnswer(why)),
            }
        };
        self.breaker
            .call(
                call,
                |e| matches!(e, EmbedError::Unavailable(_)),
                |remaining| {
                    EmbedError::Unavailable(format!(
                        "circuit open after repeated failures; {}",
                        crate::retry_in(remaining)
                    ))
                },
            )
            .await
    }
}

impl Embedder for HttpEmbedder {
    fn model(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.config.dim
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(self.config.batch.max(1)) {
                out.extend(self.request(chunk, u32::MAX, None).await?);
            }
            Ok(out)
        })
    }

    fn embed_query<'a>(&'a self, text: &'a str) -> EmbedFuture<'a> {
        Box::pin(async move {
            self.request(&[text.to_owned()], 0, Some(self.config.query_timeout))
                .await
        })
    }
}

/// The unit vectors of an embeddings answer, in input order, or why it is
/// not `n` vectors of `dim` finite numbers.
fn vectors(text: &str, n: usize, dim: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let bad = |why: String| EmbedError::BadAnswer(format!("{why}: {}", snippet(text)));
    let answer: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
    let data = answer
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no data array".into()))?;
    if data.len() != n {
        return Err(bad(format!("{} vectors for {n} texts", data.len())));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for (position, item) in data.iter().enumerate() {
        // Servers send `index`; without it, the order is the inputs'.
        let at = match item.get("index") {
            None => position,
            Some(i) => i
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < n)
                .ok_or_else(|| bad(format!("index {i} out of range")))?,
        };
        let numbers = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("item {position} has no embedding array")))?;
        if numbers.len() != dim {
            return Err(bad(format!(
                "a vector of {} numbers, the configured dimension is {dim}",
                numbers.len()
            )));
        }
        let mut vector = numbers
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32).filter(|x| x.is_finite()))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| bad(format!("item {position} holds a non-number")))?;
        normalize(&mut vector);
        if out[at].replace(vector).is_some() {
            return Err(bad(format!("index {at} twice")));
        }
    }
    // n items, n distinct indexes below n: every slot is filled.
    Ok(out.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests;
