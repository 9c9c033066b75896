//! Log setup. Conversation content is never logged at info or above: the
//! service logs ids, counts and timings, content only at trace level.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSection};

/// Installs the global subscriber. `RUST_LOG`, when set, wins over
/// `log.level`.
pub fn init(log: &LogSection) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
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
