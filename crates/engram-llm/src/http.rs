//! The summarizer as an OpenAI-compatible chat-completions call.
//!
//! `POST {base_url}/chat/completions`, through [`Transport`] (its retries
//! and backoff).

use std::time::Duration;

use reqwest::Url;
use serde_json::{Value, json};

use crate::transport::{self, PostError, Reach, Transport, snippet};
use crate::{
    SummarizeError, Summarizer, Summary, SummaryFuture, SummaryRequest, answer, reconcile,
};

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
    transport::endpoint(base_url, "chat/completions")
}

#[derive(Debug, Clone)]
pub struct HttpSummarizer {
    transport: Transport,
    config: HttpConfig,
}

impl HttpSummarizer {
    pub fn new(config: HttpConfig) -> Result<Self, String> {
        let reach = Reach {
            api_key: config.api_key.clone(),
            timeout: config.timeout,
            max_retries: config.max_retries,
            backoff_base: config.backoff_base,
            backoff_max: config.backoff_max,
        };
        Ok(Self {
            transport: Transport::new(&config.base_url, "chat/completions", reach)?,
            config,
        })
    }

    /// The URL every request goes to.
    pub fn endpoint(&self) -> &Url {
        self.transport.endpoint()
    }

    fn body(&self, (system, user): &(String, String), json_mode: bool) -> Value {
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

    /// The answer's text to a summary request, after retries.
    pub async fn complete(&self, request: &SummaryRequest<'_>) -> Result<String, SummarizeError> {
        self.ask(&answer::messages(request)).await
    }

    /// The answer's text to the system and user `messages`, after retries.
    async fn ask(&self, messages: &(String, String)) -> Result<String, SummarizeError> {
        let mut json_mode = self.config.json_mode;
        let text = loop {
            match self
                .transport
                .post_retrying(&self.body(messages, json_mode))
                .await
            {
                Ok(text) => break text,
                // Some OpenAI-compatible servers do not know response_format.
                Err(PostError::Rejected(msg)) if json_mode && msg.contains("response_format") => {
                    json_mode = false;
                }
                Err(PostError::Rejected(msg)) => return Err(SummarizeError::Rejected(msg)),
                Err(PostError::Unavailable(msg)) => return Err(SummarizeError::Unavailable(msg)),
            }
        };
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/choices/0/message/content")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .ok_or_else(|| {
                SummarizeError::BadAnswer(format!("not a chat completion: {}", snippet(&text)))
            })
    }
}

impl Summarizer for HttpSummarizer {
    fn name(&self) -> String {
        format!("http:{}", self.config.model)
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        Box::pin(async move {
            let text = self.complete(&request).await?;
            let summary: Summary = answer::parse(&text, request.known_facts)?;
            Ok(summary)
        })
    }

    fn reconcile<'a>(
        &'a self,
        groups: &'a [Vec<engram_core::memory::SemanticItem>],
    ) -> Option<crate::ReconcileFuture<'a>> {
        Some(Box::pin(async move {
            let text = self.ask(&reconcile::messages(groups)).await?;
            reconcile::parse(&text, groups)
        }))
    }
}

#[cfg(test)]
mod tests;
