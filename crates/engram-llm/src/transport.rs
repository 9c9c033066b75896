//! One OpenAI-compatible endpoint, called with retries: what the summarizer
//! (`/chat/completions`) and the embedder (`/embeddings`) share.
//!
//! Every request goes to the endpoint derived once, at construction, from
//! the configured base URL. 429 (honouring `Retry-After`) and 5xx answers,
//! timeouts and connection errors are retried with exponential backoff and
//! full jitter, up to `max_retries`; other 4xx answers are not.

use std::time::Duration;

use rand::Rng;
use reqwest::{StatusCode, Url, header};
use serde_json::Value;

/// How an endpoint is reached and how hard it is tried.
#[derive(Debug, Clone)]
pub struct Reach {
    pub api_key: Option<String>,
    /// For the whole request, body included.
    pub timeout: Duration,
    pub max_retries: u32,
    /// First backoff step; it doubles per retry, up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for Reach {
    fn default() -> Self {
        Self {
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// `path` under `base_url` (e.g. `chat/completions` under
/// `https://api.openai.com/v1`), or why `base_url` is not one.
pub fn endpoint(base_url: &str, path: &str) -> Result<Url, String> {
    let mut url =
        Url::parse(base_url.trim()).map_err(|e| format!("{base_url:?} is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "{base_url:?} must be an http:// or https:// URL with a host"
        ));
    }
    let full = format!("{}/{path}", url.path().trim_end_matches('/'));
    url.set_path(&full);
    Ok(url)
}

/// Why no answer came back.
#[derive(Debug, Clone, PartialEq)]
pub enum PostError {
    /// Unreachable, 5xx or 429 on every attempt: a later call may succeed.
    Unavailable(String),
    /// Refused (4xx other than 429): the same request gets the same answer.
    Rejected(String),
}

#[derive(Debug, Clone)]
pub struct Transport {
    client: reqwest::Client,
    endpoint: Url,
    reach: Reach,
}

/// What one attempt came to.
enum Attempt {
    Answer(String),
    /// Worth another try, after at least this long.
    Retry(String, Option<Duration>),
    Rejected(String),
}

impl Transport {
    pub fn new(base_url: &str, path: &str, reach: Reach) -> Result<Self, String> {
        let endpoint = endpoint(base_url, path)?;
        let client = reqwest::Client::builder()
            .timeout(reach.timeout)
            .connect_timeout(reach.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Self {
            client,
            endpoint,
            reach,
        })
    }

    /// The URL every request goes to.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// The answer's body after up to `max_retries` retries, each attempt
    /// within `timeout` (the configured one if `None`).
    pub async fn post(
        &self,
        body: &Value,
        retries: u32,
        timeout: Option<Duration>,
    ) -> Result<String, PostError> {
        let retries = retries.min(self.reach.max_retries);
        let mut last = String::new();
        for attempt in 0..=retries {
            match self.attempt(body, timeout).await {
                Attempt::Answer(text) => return Ok(text),
                Attempt::Rejected(msg) => return Err(PostError::Rejected(msg)),
                Attempt::Retry(msg, after) => {
                    tracing::warn!(endpoint = %self.endpoint, error = %msg, attempt, "model call failed");
                    last = msg;
                    if attempt < retries {
                        tokio::time::sleep(self.backoff(attempt, after)).await;
                    }
                }
            }
        }
        Err(PostError::Unavailable(format!(
            "{last} (after {} attempts)",
            retries + 1
        )))
    }

    /// [`Transport::post`] with every configured retry.
    pub async fn post_retrying(&self, body: &Value) -> Result<String, PostError> {
        self.post(body, self.reach.max_retries, None).await
    }

    async fn attempt(&self, body: &Value, timeout: Option<Duration>) -> Attempt {
        let mut req = self.client.post(self.endpoint.clone()).json(body);
        if let Some(key) = &self.reach.api_key {
            req = req.bearer_auth(key);
        }
        if let Some(timeout) = timeout {
            req = req.timeout(timeout);
        }
        let response = match req.send().await {
            Ok(r) => r,
            Err(e) => return Attempt::Retry(describe(&e, &self.endpoint), None),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let text = match response.text().await {
            Ok(t) => t,
            Err(e) => return Attempt::Retry(describe(&e, &self.endpoint), None),
        };
        let failure = || format!("HTTP {status} from {}: {}", self.endpoint, snippet(&text));
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            Attempt::Retry(failure(), retry_after)
        } else if !status.is_success() {
            Attempt::Rejected(failure())
        } else {
            Attempt::Answer(text)
        }
    }

    /// Full jitter over an exponential step; a server's `Retry-After` is a
    /// floor (capped at `backoff_max`).
    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let step = self
            .reach
            .backoff_base
            .saturating_mul(1 << attempt.min(16))
            .min(self.reach.backoff_max);
        let jitter = step.mul_f64(rand::rng().random::<f64>());
        match retry_after {
            Some(floor) => floor.min(self.reach.backoff_max).max(jitter),
            None => jitter,
        }
    }
}

/// `Retry-After` in seconds (the HTTP-date form is rare from LLM APIs).
fn retry_after(headers: &header::HeaderMap) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

fn describe(e: &reqwest::Error, endpoint: &Url) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "broke off while reading the answer"
    } else {
        "failed"
    };
    format!("request to {endpoint} {kind}: {e}")
}

/// The start of an answer, on one line, for error messages.
pub fn snippet(text: &str) -> String {
    let t: String = text.chars().take(300).collect();
    t.replace('\n', " ")
}
