//! The summarizer as an OpenAI-compatible chat-completions call.
//!
//! `POST {base_url}/chat/completions` — the configured base URL and nothing
//! else: the endpoint is derived from it once, at construction, and every
//! request goes there. 429 (honouring `Retry-After`) and 5xx answers,
//! timeouts and connection errors are retried with exponential backoff and
//! full jitter, up to `max_retries`; other 4xx answers are not.

use std::time::Duration;

use rand::Rng;
use reqwest::{StatusCode, Url, header};
use serde_json::{Value, json};

use crate::{SummarizeError, Summarizer, Summary, SummaryFuture, SummaryRequest, answer};

/// The `[llm]` settings the client needs.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// E.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// For the whole request, body included.
    pub timeout: Duration,
    pub max_retries: u32,
    /// Ask for `response_format: json_object` (dropped, once, by an
    /// endpoint that rejects it).
    pub json_mode: bool,
    /// First backoff step; it doubles per retry, up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl HttpConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            json_mode: true,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// The chat-completions endpoint of `base_url`, or why it is not one.
pub fn endpoint(base_url: &str) -> Result<Url, String> {
    let mut url =
        Url::parse(base_url.trim()).map_err(|e| format!("{base_url:?} is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "{base_url:?} must be an http:// or https:// URL with a host"
        ));
    }
    let path = format!("{}/chat/completions", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

#[derive(Debug, Clone)]
pub struct HttpSummarizer {
    client: reqwest::Client,
    endpoint: Url,
    config: HttpConfig,
}

/// What one attempt came to.
enum Attempt {
    Answer(String),
    /// Worth another try, after at least this long.
    Retry(String, Option<Duration>),
    Fail(SummarizeError),
}

impl HttpSummarizer {
    pub fn new(config: HttpConfig) -> Result<Self, String> {
        let endpoint = endpoint(&config.base_url)?;
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Self {
            client,
            endpoint,
            config,
        })
    }

    /// The URL every request goes to.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    fn body(&self, request: &SummaryRequest<'_>, json_mode: bool) -> Value {
        let (system, user) = answer::messages(request);
        let mut body = json!({
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": 0,
        });
        if json_mode {
            body["response_format"] = json!({"type": "json_object"});
        }
        body
    }

    async fn attempt(&self, body: &Value) -> Attempt {
        let mut req = self.client.post(self.endpoint.clone()).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
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
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Attempt::Retry(
                format!("HTTP {status} from {}: {}", self.endpoint, snippet(&text)),
                retry_after,
            );
        }
        if !status.is_success() {
            return Attempt::Fail(SummarizeError::Rejected(format!(
                "HTTP {status} from {}: {}",
                self.endpoint,
                snippet(&text)
            )));
        }
        let content = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
            v.pointer("/choices/0/message/content")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        match content {
            Some(c) => Attempt::Answer(c),
            None => Attempt::Fail(SummarizeError::BadAnswer(format!(
                "not a chat completion: {}",
                snippet(&text)
            ))),
        }
    }

    /// The answer's text, after retries.
    pub async fn complete(&self, request: &SummaryRequest<'_>) -> Result<String, SummarizeError> {
        let mut json_mode = self.config.json_mode;
        let mut body = self.body(request, json_mode);
        let mut last = String::new();
        for attempt in 0..=self.config.max_retries {
            if attempt > 0 {
                tracing::debug!(attempt, "retrying the summarizer");
            }
            match self.attempt(&body).await {
                Attempt::Answer(text) => return Ok(text),
                // Some OpenAI-compatible servers do not know response_format.
                Attempt::Fail(SummarizeError::Rejected(msg))
                    if json_mode && msg.contains("response_format") =>
                {
                    json_mode = false;
                    body = self.body(request, false);
                    last = msg;
                }
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry(msg, after) => {
                    tracing::warn!(endpoint = %self.endpoint, error = %msg, attempt, "summarizer call failed");
                    last = msg;
                    if attempt < self.config.max_retries {
                        tokio::time::sleep(self.backoff(attempt, after)).await;
                    }
                }
            }
        }
        Err(SummarizeError::Unavailable(format!(
            "{last} (after {} attempts)",
            self.config.max_retries + 1
        )))
    }

    /// Full jitter over an exponential step; a server's `Retry-After` is a
    /// floor (capped at `backoff_max`).
    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let step = self
            .config
            .backoff_base
            .saturating_mul(1 << attempt.min(16))
            .min(self.config.backoff_max);
        let jitter = step.mul_f64(rand::rng().random::<f64>());
        match retry_after {
            Some(floor) => floor.min(self.config.backoff_max).max(jitter),
            None => jitter,
        }
    }
}

impl Summarizer for HttpSummarizer {
    fn name(&self) -> String {
        format!("http:{}", self.config.model)
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        Box::pin(async move {
            let text = self.complete(&request).await?;
            let summary: Summary = answer::parse(&text)?;
            Ok(summary)
        })
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

fn snippet(text: &str) -> String {
    let t: String = text.chars().take(300).collect();
    t.replace('\n', " ")
}

#[cfg(test)]
mod tests;
