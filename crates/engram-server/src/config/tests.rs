//! Configuration: layers, validation, secrets.

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_parse_and_validate() {
    let c = Config::load_from(None, env(&[])).unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:50051");
    assert_eq!(c.server.max_message_bytes, 4 * 1024 * 1024);
    assert_eq!(c.store.data_dir, PathBuf::from("./memory"));
    assert_eq!(c.store.fsync, FsyncSetting::Always);
    assert!(
        c.llm.base_url.is_empty(),
        "the embedded summarizer by default"
    );
    assert_eq!(c.policy.raw_tail_turns, 4);
}

/// The key is read from the variable `api_key_env` names, once, by the
/// configuration; it never shows in Debug output.
#[test]
fn the_llm_key_comes_from_its_variable_and_stays_hidden() {
    let config = Config::load_from(
        None,
        env(&[
            ("ENGRAM__LLM__API_KEY_ENV", "MY_KEY"),
            ("MY_KEY", "sk-secret"),
        ]),
    )
    .unwrap();
    assert_eq!(config.llm.api_key.0, "sk-secret");
    assert!(!format!("{config:?}").contains("sk-secret"));
    let explicit = Config::load_from(
        None,
        env(&[
            ("ENGRAM__LLM__API_KEY", "sk-file"),
            ("ENGRAM_LLM_API_KEY", "sk-env"),
        ]),
    )
    .unwrap();
    assert_eq!(explicit.llm.api_key.0, "sk-file", "the key itself wins");
}

#[test]
fn file_then_env_override_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("engram.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"0.0.0.0:7000\"\n[store]\ndata_dir = \"/from/file\"\nfsync = \"interval\"\n",
    )
    .unwrap();
    let c = Config::load_from(
        Some(&path),
        env(&[
            ("ENGRAM__STORE__DATA_DIR", "/from/env"),
            ("ENGRAM__LIMITS__MAX_EVENTS_PER_REQUEST", "7"),
            ("UNRELATED", "x"),
        ]),
    )
    .unwrap();
    assert_eq!(c.server.listen, "0.0.0.0:7000");
    assert_eq!(c.store.data_dir, PathBuf::from("/from/env"));
    assert_eq!(c.store.fsync, FsyncSetting::Interval);
    assert_eq!(c.limits.max_events_per_request, 7);
}

#[test]
fn budget_overrides_load_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("engram.toml");
    std::fs::write(
        &path,
        "[budget.models.\"my-finetune\"]\ncontext_tokens = 32768\n[budget.agents.\"Support-Bot\"]\ncompaction_ratio = 0.5\n",
    )
    .unwrap();
    let c = Config::load_from(Some(&path), env(&[])).unwrap();
    assert_eq!(c.budget.models["my-finetune"].context_tokens, Some(32768));
    assert_eq!(
        c.budget.agents["Support-Bot"].compaction_ratio,
        Some(0.5),
        "agent ids keep their case"
    );
    std::fs::write(&path, "[budget.agents.x]\ncompaction_ratio = 3.0\n").unwrap();
    let err = Config::load_from(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("compaction_ratio"), "{err}");
}

#[test]
fn auth_tokens_come_from_the_config_and_the_tokens_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("engram.toml");
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &path,
        "[[auth.tokens]]\nname = \"a\"\ntoken = \"aaaaaaaaaaaaaaaaaaaa\"\nagents = [\"a-*\"]\n",
    )
    .unwrap();
    std::fs::write(
        &tokens,
        "[[tokens]]\nname = \"ops\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\nadmin = true\n",
    )
    .unwrap();
    let c = Config::load_from(
        Some(&path),
        env(&[("ENGRAM__AUTH__TOKENS_FILE", tokens.to_str().unwrap())]),
    )
    .unwrap();
    let names: Vec<_> = c.auth.tokens.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "ops"]);
    std::fs::write(
        &path,
        "[[auth.tokens]]\ntoken = \"short\"\nagents = [\"a\"]\n",
    )
    .unwrap();
    let err = Config::load_from(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("auth.tokens") && err.contains("16"), "{err}");
}

#[test]
fn unknown_keys_and_bad_values_name_the_key() {
    let cases = [
        (("ENGRAM__SERVER__LISTN", "x"), "listn"),
        (("ENGRAM__STOR__DATA_DIR", "x"), "stor"),
        (("ENGRAM__SERVER__LISTEN", "nowhere"), "server.listen"),
        (("ENGRAM__STORE__FSYNC", "sometimes"), "fsync"),
        (
            ("ENGRAM__LIMITS__MAX_TRACE_BYTES", "lots"),
            "max_trace_bytes",
        ),
        (
            ("ENGRAM__SERVER__MAX_MESSAGE_BYTES", "10"),
            "server.max_message_bytes",
        ),
        (("ENGRAM__LOG__LEVEL", "[[["), "log.level"),
        (("ENGRAM__LLM__BASE_URL", "ftp://x"), "llm.base_url"),
        (
            ("ENGRAM__LLM__BASE_URL", "http://127.0.0.1:8080/v1"),
            "llm.model",
        ),
        (
            ("ENGRAM__SERVER__METRICS_LISTEN", "everywhere"),
            "server.metrics_listen",
        ),
        (("ENGRAM__SERVER__TLS_CERT", "/x.pem"), "server.tls_cert"),
        (
            ("ENGRAM__SERVER__TLS_CLIENT_CA", "/ca.pem"),
            "server.tls_client_ca",
        ),
        (
            ("ENGRAM__AUTH__TOKENS_FILE", "/nonexistent.toml"),
            "auth.tokens_file",
        ),
        (
            ("ENGRAM__LLM__CIRCUIT_MAX_COOLDOWN_SECS", "1"),
            "llm.circuit_max_cooldown_secs",
        ),
        (("ENGRAM__LLM__AGENT_FAILURES", "0"), "llm.agent_failures"),
    ];
    for ((k, v), expected) in cases {
        let err = Config::load_from(None, env(&[(k, v)]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(expected),
            "{k}={v}: {err:?} should name {expected}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[store]\nfsnyc = \"always\"\n").unwrap();
    let err = Config::load_from(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("fsnyc"), "{err}");
    let err = Config::load_from(Some(&dir.path().join("missing.toml")), env(&[])).unwrap_err();
    assert!(err.to_string().contains("missing.toml"), "{err}");
}

#[test]
fn an_http_embedder_needs_its_endpoint_model_and_dimensions() {
    let http = [
        ("ENGRAM__EMBED__PROVIDER", "http"),
        ("ENGRAM__EMBED__BASE_URL", "http://127.0.0.1:11434/v1"),
        ("ENGRAM__EMBED__MODEL", "nomic-embed-text"),
        ("ENGRAM__EMBED__DIMENSIONS", "768"),
        ("ENGRAM_EMBED_API_KEY", "sk-embed"),
    ];
    let c = Config::load_from(None, env(&http)).unwrap();
    assert_eq!(c.embed.provider, EmbedProvider::Http);
    assert_eq!(c.embed.dimensions, 768);
    assert_eq!(c.embed.api_key.0, "sk-embed");
    assert!(!format!("{c:?}").contains("sk-embed"));
    for (key, value, named) in [
        ("ENGRAM__EMBED__BASE_URL", "", "embed.base_url"),
        ("ENGRAM__EMBED__BASE_URL", "ftp://x", "embed.base_url"),
        ("ENGRAM__EMBED__MODEL", " ", "embed.model"),
        ("ENGRAM__EMBED__DIMENSIONS", "0", "embed.dimensions"),
        ("ENGRAM__EMBED__DIMENSIONS", "100000", "embed.dimensions"),
        ("ENGRAM__EMBED__BATCH_SIZE", "0", "embed.batch_size"),
        ("ENGRAM__EMBED__QUERY_TIMEOUT_MS", "0", "query_timeout_ms"),
        (
            "ENGRAM__EMBED__CIRCUIT_MAX_COOLDOWN_SECS",
            "1",
            "embed.circuit_max_cooldown_secs",
        ),
    ] {
        let mut vars = env(&http);
        vars.push((key.into(), value.into()));
        let err = Config::load_from(None, vars).unwrap_err().to_string();
        assert!(
            err.contains(named),
            "{key}={value}: {err:?} should name {named}"
        );
    }
    // The http settings mean nothing to the local model.
    let local = Config::load_from(None, env(&[("ENGRAM__EMBED__DIMENSIONS", "0")])).unwrap();
    assert_eq!(local.embed.provider, EmbedProvider::Local);
}

/// Config errors name the allowed values, the variable or file the bad key
/// came from, and the setting probably meant.
#[test]
fn config_errors_speak_the_users_terms() {
    let err = |file: Option<&std::path::Path>, k: &str, v: &str| {
        Config::load_from(file, env(&[(k, v)]))
            .unwrap_err()
            .to_string()
    };
    let fsync = err(None, "ENGRAM__STORE__FSYNC", "sometimes");
    assert!(
        fsync.contains(
            "store.fsync = \"sometimes\" is not a choice; use one of: always, interval, never"
        ),
        "{fsync}"
    );
    assert!(!fsync.contains("variant constructor"), "{fsync}");
    let strategy = err(None, "ENGRAM__POLICY__STRATEGY", "forget");
    assert!(
        strategy.contains("policy.strategy = \"forget\" is not a choice; use one of: summarize, trim, compact_tool_results, none"),
        "{strategy}"
    );
    let var = err(None, "ENGRAM__EMBED__MODELDIR", "x");
    assert!(
        var.contains("ENGRAM__EMBED__MODELDIR sets embed.modeldir, which is not a setting; did you mean ENGRAM__EMBED__MODEL_DIR?"),
        "{var}"
    );
    let section = err(None, "ENGRAM__STOR__DATA_DIR", "x");
    assert!(
        section.contains("ENGRAM__STOR__DATA_DIR sets stor, which is not a setting; did you mean ENGRAM__STORE__DATA_DIR?"),
        "{section}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("engram.toml");
    std::fs::write(&file, "[store]\nfsink = \"always\"\n").unwrap();
    let in_file = err(Some(&file), "X", "y");
    assert!(
        in_file.contains(&format!(
            "{}: store.fsink is not a setting; did you mean store.fsync?",
            file.display()
        )),
        "{in_file}"
    );
    // The table of choices is the enums' own.
    for (name, values) in super::explain::ENUMS {
        for value in *values {
            let key = match *name {
                "FsyncSetting" => "ENGRAM__STORE__FSYNC",
                "BackendSetting" => "ENGRAM__STORE__BACKEND",
                "LogFormat" => "ENGRAM__LOG__FORMAT",
                "Strategy" => "ENGRAM__POLICY__STRATEGY",
                _ => "ENGRAM__EMBED__PROVIDER",
            };
            if let Err(e) = Config::load_from(None, env(&[(key, value)])) {
                assert!(
                    !e.to_string().contains("not a choice"),
                    "{name} {value}: {e}"
                );
            }
        }
    }
}

#[test]
fn the_blocks_share_is_a_share() {
    let c = Config::load_from(None, env(&[])).unwrap();
    assert_eq!(c.blocks.max_share, 0.25);
    let c = Config::load_from(None, env(&[("ENGRAM__BLOCKS__MAX_SHARE", "0.5")])).unwrap();
    assert_eq!(c.blocks.max_share, 0.5);
    for bad in ["0", "1.5", "-0.1", "NaN"] {
        let err = Config::load_from(None, env(&[("ENGRAM__BLOCKS__MAX_SHARE", bad)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("blocks.max_share"), "{bad}: {err}");
    }
}

/// The HTTP listener and MCP: off by default, a list of hosts from one
/// variable, a plain-HTTP listener kept on loopback when TLS is asked for.
#[test]
fn the_http_listener_and_mcp_settings() {
    let c = Config::load_from(None, env(&[])).unwrap();
    assert_eq!(c.http_addr().unwrap(), None);
    assert!(c.mcp.enabled);
    assert_eq!(c.mcp.allowed_hosts, ["localhost", "127.0.0.1", "::1"]);
    let c = Config::load_from(
        None,
        env(&[
            ("ENGRAM__HTTP__LISTEN", "127.0.0.1:8080"),
            ("ENGRAM__MCP__ALLOWED_HOSTS", "engram.example.com,localhost"),
            ("ENGRAM__MCP__AGENT_ID", "desk-1"),
        ]),
    )
    .unwrap();
    assert_eq!(
        c.http_addr().unwrap(),
        Some("127.0.0.1:8080".parse().unwrap())
    );
    assert_eq!(c.mcp.allowed_hosts, ["engram.example.com", "localhost"]);
    assert_eq!(c.mcp.agent_id, "desk-1");
    let tls = |listen: &str| {
        Config::load_from(
            None,
            env(&[
                ("ENGRAM__HTTP__LISTEN", listen),
                ("ENGRAM__SERVER__TLS_CERT", "server.pem"),
                ("ENGRAM__SERVER__TLS_KEY", "server.key"),
            ]),
        )
    };
    assert!(tls("127.0.0.1:8080").is_ok());
    let open = tls("0.0.0.0:8080").unwrap_err().to_string();
    assert!(open.contains("http.listen"), "{open}");
}

/// The strategy is set globally, per model prefix and per agent, like the
/// budget's overrides; the environment sets the global one.
#[test]
fn the_compaction_strategy_is_set_globally_per_model_and_per_agent() {
    use engram_core::compaction::Strategy;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("engram.toml");
    std::fs::write(
        &file,
        "[policy]\nkeep_last_turns = 5\n[policy.models.\"gpt-4o-mini\"]\nstrategy = \"trim\"\n[policy.agents.\"bot\"]\nstrategy = \"none\"\nkeep_last_turns = 2\n",
    )
    .unwrap();
    let c = Config::load_from(
        Some(&file),
        env(&[("ENGRAM__POLICY__STRATEGY", "compact_tool_results")]),
    )
    .unwrap();
    let s = engram_engine::strategy::Strategies::new(&c.policy);
    let of = |agent, model| {
        let chosen = s.of(agent, model, None);
        (chosen.strategy, chosen.keep_last_turns)
    };
    assert_eq!(of("a", "gpt-4o"), (Strategy::CompactToolResults, 5));
    assert_eq!(of("a", "gpt-4o-mini"), (Strategy::Trim, 5));
    assert_eq!(of("bot", "gpt-4o-mini"), (Strategy::None, 2));
    let defaults = Config::load_from(None, env(&[])).unwrap();
    assert_eq!(defaults.policy.strategy, Strategy::Summarize);
    assert_eq!(defaults.policy.keep_last_turns, 8);
}

/// `[search] speaker_prior` and `question_prior` reach both stores'
/// ranking; out of 0–1 either is refused naming its key.
#[test]
fn the_priors_are_shares_and_reach_both_stores() {
    let defaults = Config::load_from(None, env(&[])).unwrap();
    assert_eq!(defaults.store_config().ranking.other_speakers, 0.5);
    assert_eq!(defaults.store_config().ranking.question_prior, 0.5);
    let off = Config::load_from(
        None,
        env(&[
            ("ENGRAM__SEARCH__SPEAKER_PRIOR", "1"),
            ("ENGRAM__SEARCH__QUESTION_PRIOR", "1"),
        ]),
    )
    .unwrap();
    assert_eq!(off.store_config().ranking.other_speakers, 1.0);
    assert_eq!(off.postgres_config().ranking.other_speakers, 1.0);
    assert_eq!(off.store_config().ranking.question_prior, 1.0);
    assert_eq!(off.postgres_config().ranking.question_prior, 1.0);
    for key in ["SPEAKER_PRIOR", "QUESTION_PRIOR"] {
        let bad = Config::load_from(None, env(&[(&format!("ENGRAM__SEARCH__{key}"), "1.5")]))
            .unwrap_err()
            .to_string();
        let want = format!("search.{}", key.to_lowercase());
        assert!(bad.contains(&want), "{bad}");
    }
}

/// `[search] expansion_words`, `expansion_weight` and `sitting_weight`
/// reach both stores' ranking; a weight below 0 (or not a number) or a
/// flood of words is refused naming the key.
#[test]
fn the_expansion_and_sitting_settings_reach_both_stores() {
    let defaults = Config::load_from(None, env(&[])).unwrap();
    assert_eq!(defaults.store_config().ranking.expansion_words, 10);
    assert_eq!(defaults.store_config().ranking.expansion_weight, 0.5);
    let off = Config::load_from(None, env(&[("ENGRAM__SEARCH__EXPANSION_WORDS", "0")])).unwrap();
    assert_eq!(off.store_config().ranking.expansion_words, 0);
    assert_eq!(off.postgres_config().ranking.expansion_words, 0);
    assert_eq!(defaults.store_config().ranking.sitting_weight, 0.3);
    let off = Config::load_from(None, env(&[("ENGRAM__SEARCH__SITTING_WEIGHT", "0")])).unwrap();
    assert_eq!(off.store_config().ranking.sitting_weight, 0.0);
    assert_eq!(off.postgres_config().ranking.sitting_weight, 0.0);
    for (key, value, named) in [
        (
            "ENGRAM__SEARCH__EXPANSION_WEIGHT",
            "-1",
            "search.expansion_weight",
        ),
        (
            "ENGRAM__SEARCH__EXPANSION_WORDS",
            "100000",
            "search.expansion_words",
        ),
        (
            "ENGRAM__SEARCH__SITTING_WEIGHT",
            "-0.1",
            "search.sitting_weight",
        ),
        (
            "ENGRAM__SEARCH__SITTING_WEIGHT",
            "NaN",
            "search.sitting_weight",
        ),
    ] {
        let bad = Config::load_from(None, env(&[(key, value)]))
            .unwrap_err()
            .to_string();
        assert!(bad.contains(named), "{bad}");
    }
}
