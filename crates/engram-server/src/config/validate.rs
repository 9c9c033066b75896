//! The checks of every section but `[store.postgres]` (`postgres.rs`) and
//! `[embed]`: the first failure names its key.

use std::path::PathBuf;

use super::{Config, ConfigError, FsyncSetting, invalid};

/// Expansion words a question may take at most: each is a term of its word
/// query, and `max_terms` bounds those too.
const MAX_EXPANSION_WORDS: usize = 64;

impl Config {
    /// Every section's checks; the first failure names its key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_server()?;
        self.validate_store()?;
        self.validate_postgres()?;
        self.validate_limits()?;
        self.validate_llm()?;
        self.embed.validate()?;
        self.validate_budget()?;
        if !(self.recall.min_score.is_finite() && self.recall.min_score >= 0.0) {
            return Err(invalid("recall.min_score", "must be a number >= 0"));
        }
        if !(0.0..=1.0).contains(&self.recall.relative_floor) {
            return Err(invalid(
                "recall.relative_floor",
                "must be a number from 0 to 1",
            ));
        }
        for (key, prior, off) in [
            (
                "search.speaker_prior",
                self.search.speaker_prior,
                "no preference for a named participant",
            ),
            (
                "search.question_prior",
                self.search.question_prior,
                "no preference against messages that mostly ask",
            ),
        ] {
            if !(prior.is_finite() && (0.0..=1.0).contains(&prior)) {
                return Err(invalid(
                    key,
                    &format!("must be a share from 0 to 1 (1: {off})"),
                ));
            }
        }
        let weight = self.search.expansion_weight;
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(invalid(
                "search.expansion_weight",
                "must be a number >= 0 (a share of the question's own words' weight)",
            ));
        }
        let weight = self.search.sitting_weight;
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(invalid(
                "search.sitting_weight",
                "must be a number >= 0 (0: sittings not scored)",
            ));
        }
        if self.search.expansion_words > MAX_EXPANSION_WORDS {
            return Err(invalid(
                "search.expansion_words",
                &format!("must be at most {MAX_EXPANSION_WORDS} (0: no expansion)"),
            ));
        }
        let share = self.blocks.max_share;
        if !(share.is_finite() && share > 0.0 && share <= 1.0) {
            return Err(invalid(
                "blocks.max_share",
                "must be a share of the input budget: more than 0, at most 1",
            ));
        }
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| invalid("log.level", &e.to_string()))?;
        Ok(())
    }

    /// `[server]` and `[auth]`: addresses, TLS files in pairs, tokens, the message limit.
    fn validate_server(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        self.metrics_addr()?;
        self.http_addr()?;
        let s = &self.server;
        let set = |p: &PathBuf| !p.as_os_str().is_empty();
        if set(&s.tls_cert) != set(&s.tls_key) {
            return Err(invalid(
                "server.tls_cert",
                "tls_cert and tls_key are set together or not at all",
            ));
        }
        if set(&s.tls_client_ca) && !set(&s.tls_cert) {
            return Err(invalid(
                "server.tls_client_ca",
                "needs server.tls_cert and server.tls_key",
            ));
        }
        crate::auth::Authenticator::new(&self.auth.tokens)
            .map_err(|e| invalid("auth.tokens", &e))?;
        if self.server.max_message_bytes < 1024 {
            return Err(invalid("server.max_message_bytes", "must be at least 1024"));
        }
        Ok(())
    }

    /// `[store]`: the data directory and the durability settings.
    fn validate_store(&self) -> Result<(), ConfigError> {
        if self.store.data_dir.as_os_str().is_empty() {
            return Err(invalid("store.data_dir", "must not be empty"));
        }
        if self.store.fsync == FsyncSetting::Interval && self.store.fsync_interval_ms == 0 {
            return Err(invalid(
                "store.fsync_interval_ms",
                "must be > 0 with fsync = \"interval\"",
            ));
        }
        if self.store.checkpoint_bytes < 1024 * 1024 {
            return Err(invalid(
                "store.checkpoint_bytes",
                "must be at least 1048576",
            ));
        }
        Ok(())
    }

    /// `[limits]`.
    fn validate_limits(&self) -> Result<(), ConfigError> {
        if self.limits.max_events_per_request == 0 {
            return Err(invalid("limits.max_events_per_request", "must be > 0"));
        }
        if self.limits.max_trace_bytes < 256 {
            return Err(invalid("limits.max_trace_bytes", "must be at least 256"));
        }
        Ok(())
    }

    /// `[llm]`: the endpoint, when set, and the circuit breaker.
    fn validate_llm(&self) -> Result<(), ConfigError> {
        if !self.llm.base_url.trim().is_empty() {
            engram_llm::http::endpoint(&self.llm.base_url)
                .map_err(|e| invalid("llm.base_url", &e))?;
            if self.llm.model.trim().is_empty() {
                return Err(invalid("llm.model", "must be set when llm.base_url is"));
            }
        }
        if self.llm.context_tokens < 1024 {
            return Err(invalid("llm.context_tokens", "must be at least 1024"));
        }
        if self.llm.timeout_secs == 0 {
            return Err(invalid("llm.timeout_secs", "must be > 0"));
        }
        if self.llm.circuit_failures == 0 {
            return Err(invalid("llm.circuit_failures", "must be > 0"));
        }
        if self.llm.agent_failures == 0 {
            return Err(invalid("llm.agent_failures", "must be > 0"));
        }
        if self.llm.circuit_max_cooldown_secs < self.llm.circuit_cooldown_secs {
            return Err(invalid(
                "llm.circuit_max_cooldown_secs",
                "must be at least llm.circuit_cooldown_secs",
            ));
        }
        Ok(())
    }

    /// `[budget]` and its overrides by model and agent.
    fn validate_budget(&self) -> Result<(), ConfigError> {
        let b = &self.budget;
        if !(b.compaction_ratio > 0.0 && b.compaction_ratio <= 1.0) {
            return Err(invalid("budget.compaction_ratio", "must be in (0, 1]"));
        }
        let precompact = |r: f64| (0.0..1.0).contains(&r);
        if !precompact(b.precompact_ratio) {
            return Err(invalid("budget.precompact_ratio", "must be in [0, 1)"));
        }
        if b.default_context_tokens < 1024 {
            return Err(invalid(
                "budget.default_context_tokens",
                "must be at least 1024",
            ));
        }
        for o in b.models.values().chain(b.agents.values()) {
            if o.compaction_ratio.is_some_and(|r| !(r > 0.0 && r <= 1.0)) {
                return Err(invalid(
                    "budget.models/agents.*.compaction_ratio",
                    "must be in (0, 1]",
                ));
            }
            if o.precompact_ratio.is_some_and(|r| !precompact(r)) {
                return Err(invalid(
                    "budget.models/agents.*.precompact_ratio",
                    "must be in [0, 1)",
                ));
            }
            if o.context_tokens.is_some_and(|c| c < 1024) {
                return Err(invalid(
                    "budget.models/agents.*.context_tokens",
                    "must be at least 1024",
                ));
            }
        }
        Ok(())
    }
}
