//! A circuit breaker around a summarizer: after `threshold` consecutive
//! failures it stops calling the model for `cooldown`, answering
//! [`SummarizeError::CircuitOpen`] at once, so a dead endpoint does not add
//! its timeout to every prompt. The first call after the cool-down is a
//! trial: success closes the circuit, failure opens it again.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::{SummarizeError, Summarizer, SummaryFuture, SummaryRequest};

#[derive(Debug, Default)]
struct State {
    consecutive_failures: u32,
    open_until: Option<Instant>,
}

#[derive(Debug)]
pub struct CircuitBreaker<S> {
    inner: S,
    threshold: u32,
    cooldown: Duration,
    state: Mutex<State>,
}

/// The circuit as reports and stats show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    Closed { consecutive_failures: u32 },
    Open { remaining: Duration },
}

impl<S: Summarizer> CircuitBreaker<S> {
    pub fn new(inner: S, threshold: u32, cooldown: Duration) -> Self {
        Self {
            inner,
            threshold: threshold.max(1),
            cooldown,
            state: Mutex::default(),
        }
    }

    pub fn circuit(&self) -> Circuit {
        let state = self.state.lock().expect("circuit lock");
        match state.open_until {
            Some(until) if until > Instant::now() => Circuit::Open {
                remaining: until - Instant::now(),
            },
            _ => Circuit::Closed {
                consecutive_failures: state.consecutive_failures,
            },
        }
    }

    fn record(&self, ok: bool) {
        let mut state = self.state.lock().expect("circuit lock");
        if ok {
            *state = State::default();
            return;
        }
        state.consecutive_failures += 1;
        if state.consecutive_failures >= self.threshold {
            state.open_until = Some(Instant::now() + self.cooldown);
            tracing::warn!(
                failures = state.consecutive_failures,
                cooldown_secs = self.cooldown.as_secs(),
                "summarizer circuit open: not calling the model until the cool-down ends"
            );
        }
    }
}

impl<S: Summarizer> Summarizer for CircuitBreaker<S> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn circuit_open(&self) -> bool {
        matches!(self.circuit(), Circuit::Open { .. })
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        Box::pin(async move {
            if let Circuit::Open { remaining } = self.circuit() {
                return Err(SummarizeError::CircuitOpen(remaining));
            }
            let result = self.inner.summarize(request).await;
            self.record(result.is_ok());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::Summary;

    /// Fails while `fail` is set; counts calls.
    #[derive(Debug, Default)]
    struct Flaky {
        fail: std::sync::atomic::AtomicBool,
        calls: AtomicU32,
    }

    impl Summarizer for &Flaky {
        fn name(&self) -> String {
            "flaky".into()
        }

        fn summarize<'a>(&'a self, _: SummaryRequest<'a>) -> SummaryFuture<'a> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let fail = self.fail.load(Ordering::SeqCst);
            Box::pin(async move {
                if fail {
                    Err(SummarizeError::Unavailable("down".into()))
                } else {
                    Ok(Summary {
                        episodic_summary: "ok".into(),
                        tags: vec![],
                        salience: 0.5,
                        semantic_facts: vec![],
                    })
                }
            })
        }
    }

    fn req() -> SummaryRequest<'static> {
        SummaryRequest {
            traces: &[],
            known_facts: &[],
            focus: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_three_failures_and_retries_after_the_cooldown() {
        let flaky = Flaky::default();
        flaky.fail.store(true, Ordering::SeqCst);
        let breaker = CircuitBreaker::new(&flaky, 3, Duration::from_secs(300));
        for _ in 0..3 {
            assert!(matches!(
                breaker.summarize(req()).await,
                Err(SummarizeError::Unavailable(_))
            ));
        }
        assert!(matches!(breaker.circuit(), Circuit::Open { .. }));
        let err = breaker.summarize(req()).await.unwrap_err();
        assert!(matches!(err, SummarizeError::CircuitOpen(_)), "{err}");
        assert!(err.to_string().contains("circuit open"), "{err}");
        assert_eq!(
            flaky.calls.load(Ordering::SeqCst),
            3,
            "the model is not called while open"
        );

        tokio::time::advance(Duration::from_secs(301)).await;
        flaky.fail.store(false, Ordering::SeqCst);
        breaker.summarize(req()).await.unwrap();
        assert_eq!(
            breaker.circuit(),
            Circuit::Closed {
                consecutive_failures: 0
            },
            "success resets"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count() {
        let flaky = Flaky::default();
        let breaker = CircuitBreaker::new(&flaky, 3, Duration::from_secs(300));
        flaky.fail.store(true, Ordering::SeqCst);
        for _ in 0..2 {
            let _ = breaker.summarize(req()).await;
        }
        flaky.fail.store(false, Ordering::SeqCst);
        breaker.summarize(req()).await.unwrap();
        flaky.fail.store(true, Ordering::SeqCst);
        for _ in 0..2 {
            let _ = breaker.summarize(req()).await;
        }
        assert_eq!(
            breaker.circuit(),
            Circuit::Closed {
                consecutive_failures: 2
            }
        );
    }
}
