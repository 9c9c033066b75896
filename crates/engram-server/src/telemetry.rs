//! Log setup. Conversation content is never logged at info or above: the
//! service logs ids, counts and timings, content only at trace level.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSection};

/// Dependencies that log their own housekeeping at info (tantivy: every
/// commit, segment and deleted file; hundreds of lines a minute on a busy
/// server): held to warnings unless the level names them.
const CHATTY: &[&str] = &["tantivy"];

/// `level` with the chatty dependencies held to warnings, unless it says
/// otherwise for them.
pub fn directives(level: &str) -> String {
    let mut out = level.trim().to_owned();
    for target in CHATTY {
        let named = out.split(',').any(|d| d.trim().starts_with(target));
        if !named {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(target);
            out.push_str("=warn");
        }
    }
    out
}

/// Installs the global subscriber. `RUST_LOG`, when set, wins over
/// `log.level`.
pub fn init(log: &LogSection) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(directives(&log.level)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if let Err(e) = result {
        eprintln!("logging already initialised: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tantivy_is_held_to_warnings_unless_named() {
        assert_eq!(directives("info"), "info,tantivy=warn");
        assert_eq!(
            directives("debug,engram=trace"),
            "debug,engram=trace,tantivy=warn"
        );
        assert_eq!(directives("info,tantivy=debug"), "info,tantivy=debug");
        assert_eq!(directives(""), "tantivy=warn");
        // What the filter then lets through.
        let filter = EnvFilter::new(directives("info"));
        assert!(filter.to_string().contains("tantivy=warn"), "{filter}");
    }
}
