//! The request boundary: a panic inside a handler (a bug, never an
//! expected path) is answered INTERNAL with a generic message and logged
//! with the method and agent, instead of resetting the client's connection.
//! The store drops the in-memory state of an agent whose lock a panic
//! unwound through, so the agent's next call reloads it from its files.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tonic::Status;

/// Runs a handler's future, turning a panic into INTERNAL.
pub async fn catch_panics<T>(
    method: &'static str,
    agent: &str,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    // Unwind safety: what a panic could leave half-changed is an agent's
    // state, which the store discards (see the module docs).
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            // An id that failed validation can be anything, of any length.
            let agent: String = agent.chars().take(128).collect();
            tracing::error!(
                method,
                agent,
                panic = what,
                "a request panicked; answered INTERNAL"
            );
            metrics::counter!("engram_panics_total", "method" => method).increment(1);
            Err(crate::status::panicked())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_internal_and_a_result_passes_through() {
        let ok = catch_panics("Ingest", "a", async { Ok::<_, Status>(7) }).await;
        assert_eq!(ok.unwrap(), 7);
        let refused = catch_panics("Ingest", "a", async {
            Err::<u8, _>(Status::invalid_argument("no"))
        })
        .await;
        assert_eq!(refused.unwrap_err().code(), tonic::Code::InvalidArgument);
        let panicked = catch_panics("PrepareRequest", "a", async {
            tokio::task::yield_now().await;
            if true {
                panic!("a bug at /srv/engram/agents/a");
            }
            Ok::<u8, Status>(0)
        })
        .await
        .unwrap_err();
        assert_eq!(panicked.code(), tonic::Code::Internal);
        assert!(
            !panicked.message().contains("/srv"),
            "{}",
            panicked.message()
        );
    }
}
