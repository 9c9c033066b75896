//! The endpoint's circuit breaker: after `threshold` outages in a row
//! (the model unreachable, 5xx, 429, timeouts) it stops calling the model
//! for a cool-down, answering [`SummarizeError::CircuitOpen`] at once, so a
//! dead endpoint does not add its timeout to every prompt. After the
//! cool-down one call goes through as a trial (half-open) while the others
//! still wait: an answer closes the circuit, another outage opens it again
//! for twice as long, up to `max_cooldown`.
//!
//! [`Breaker`] is the state machine, for any endpoint; [`CircuitBreaker`]
//! puts a summarizer behind one.
//!
//! Only outages count here. An answer that is unusable or refused says the
//! endpoint is up; it is one agent's failure, which the compactor counts
//! per agent, so one agent's bad luck never stops everyone's compaction.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::{SummarizeError, Summarizer, SummaryFuture, SummaryRequest};

#[derive(Debug)]
struct State {
    consecutive_failures: u32,
    open_until: Option<Instant>,
    /// The cool-down the circuit opens for next.
    cooldown: Duration,
    /// A trial call is under way.
    probing: bool,
}

/// Wraps a summarizer in a [`Breaker`].
#[derive(Debug)]
pub struct CircuitBreaker<S> {
    inner: S,
    breaker: Breaker,
}

/// The circuit as reports and stats show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    Closed {
        consecutive_failures: u32,
    },
    Open {
        remaining: Duration,
    },
    /// The cool-down is over and a trial call decides.
    HalfOpen,
}

/// The state machine, for any endpoint (the summarizer's, the embedder's).
#[derive(Debug)]
pub struct Breaker {
    /// What is called, for the logs: "summarizer", "embedder".
    what: &'static str,
    threshold: u32,
    base_cooldown: Duration,
    max_cooldown: Duration,
    state: Mutex<State>,
}

/// Whether a call may go to the model.
enum Admission {
    Call,
    Trial,
}

/// Ends a trial that never reported (its future was dropped), so the next
/// caller can try: a circuit never stays half-open for good.
struct TrialGuard<'a> {
    state: &'a Mutex<State>,
    armed: bool,
}

impl Drop for TrialGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(self.state).probing = false;
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // The state is a few counters, consistent after every statement.
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Breaker {
    /// Opens after `threshold` outages in a row for `base_cooldown`,
    /// doubling on each failed trial up to `max_cooldown`.
    pub fn new(
        what: &'static str,
        threshold: u32,
        base_cooldown: Duration,
        max_cooldown: Duration,
    ) -> Self {
        Self {
            what,
            threshold: threshold.max(1),
            base_cooldown,
            max_cooldown: max_cooldown.max(base_cooldown),
            state: Mutex::new(State {
                consecutive_failures: 0,
                open_until: None,
                cooldown: base_cooldown,
                probing: false,
            }),
        }
    }

    pub fn circuit(&self) -> Circuit {
        let state = lock(&self.state);
        let now = Instant::now();
        match state.open_until {
            Some(until) if until > now => Circuit::Open {
                remaining: until - now,
            },
            Some(_) => Circuit::HalfOpen,
            None => Circuit::Closed {
                consecutive_failures: state.consecutive_failures,
            },
        }
    }

    /// Runs `call` unless the circuit is open (then `open(remaining)`, with
    /// zero while a trial decides); `outage` tells which errors count.
    pub async fn call<T, E, F: Future<Output = Result<T, E>>>(
        &self,
        call: impl FnOnce() -> F,
        outage: impl FnOnce(&E) -> bool,
        open: impl FnOnce(Duration) -> E,
    ) -> Result<T, E> {
        let trial = match self.admit() {
            Ok(admission) => matches!(admission, Admission::Trial),
            Err(remaining) => return Err(open(remaining)),
        };
        let mut guard = TrialGuard {
            state: &self.state,
            armed: trial,
        };
        let result = call().await;
        guard.armed = false;
        self.record(result.as_ref().err().is_some_and(outage), trial);
        result
    }

    fn admit(&self) -> Result<Admission, Duration> {
        let mut state = lock(&self.state);
        let Some(until) = state.open_until else {
            return Ok(Admission::Call);
        };
        let now = Instant::now();
        if until > now {
            return Err(until - now);
        }
        if state.probing {
            return Err(Duration::ZERO);
        }
        state.probing = true;
        Ok(Admission::Trial)
    }

    fn record(&self, outage: bool, trial: bool) {
        let mut state = lock(&self.state);
        if trial {
            state.probing = false;
        }
        if !outage {
            if state.open_until.is_some() {
                tracing::info!(endpoint = self.what, "circuit closed: the model answered");
            }
            state.consecutive_failures = 0;
            state.open_until = None;
            state.cooldown = self.base_cooldown;
            return;
        }
        state.consecutive_failures += 1;
        if trial {
            state.cooldown = (state.cooldown * 2).min(self.max_cooldown);
        }
        if trial || (state.open_until.is_none() && state.consecutive_failures >= self.threshold) {
            state.open_until = Some(Instant::now() + state.cooldown);
            tracing::warn!(
                endpoint = self.what,
                failures = state.consecutive_failures,
                cooldown_secs = state.cooldown.as_secs_f64(),
                "circuit open: not calling the model until the cool-down ends"
            );
        }
    }
}

impl<S: Summarizer> CircuitBreaker<S> {
    /// Opens after `threshold` outages in a row for `base_cooldown`,
    /// doubling on each failed trial up to `max_cooldown`.
    pub fn new(inner: S, threshold: u32, base_cooldown: Duration, max_cooldown: Duration) -> Self {
        Self {
            inner,
            breaker: Breaker::new("summarizer", threshold, base_cooldown, max_cooldown),
        }
    }

    pub fn circuit(&self) -> Circuit {
        self.breaker.circuit()
    }
}

impl<S: Summarizer> Summarizer for CircuitBreaker<S> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn circuit_open(&self) -> bool {
        !matches!(self.circuit(), Circuit::Closed { .. })
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        Box::pin(self.breaker.call(
            move || self.inner.summarize(request),
            |e| matches!(e, SummarizeError::Unavailable(_)),
            SummarizeError::CircuitOpen,
        ))
    }

    fn reconcile<'a>(
        &'a self,
        groups: &'a [Vec<engram_core::memory::SemanticItem>],
    ) -> Option<crate::ReconcileFuture<'a>> {
        // A summarizer that cannot judge is never called (a future does
        // nothing until polled: the breaker decides first).
        let call = self.inner.reconcile(groups)?;
        Some(Box::pin(self.breaker.call(
            move || call,
            |e| matches!(e, SummarizeError::Unavailable(_)),
            SummarizeError::CircuitOpen,
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

    use tokio::sync::Semaphore;

    use super::*;
    use crate::Summary;

    const OK: u8 = 0;
    const DOWN: u8 = 1;
    const BAD: u8 = 2;

    /// Answers as `mode` says; counts calls; with `gate` set, each call
    /// waits for a permit.
    #[derive(Debug, Default)]
    struct Flaky {
        mode: AtomicU8,
        calls: AtomicU32,
        gate: Option<Semaphore>,
    }

    impl Summarizer for &Flaky {
        fn name(&self) -> String {
            "flaky".into()
        }

        fn summarize<'a>(&'a self, _: SummaryRequest<'a>) -> SummaryFuture<'a> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if let Some(gate) = &self.gate {
                    gate.acquire().await.unwrap().forget();
                }
                match self.mode.load(Ordering::SeqCst) {
                    DOWN => Err(SummarizeError::Unavailable("down".into())),
                    BAD => Err(SummarizeError::BadAnswer("garbage".into())),
                    _ => Ok(Summary {
                        episodic_summary: "ok".into(),
                        tags: vec![],
                        salience: 0.5,
                        semantic_facts: vec![],
                        ..Default::default()
                    }),
                }
            })
        }
    }

    fn req() -> SummaryRequest<'static> {
        SummaryRequest {
            traces: &[],
            known_facts: &[],
            focus: None,
            working_memory: None,
        }
    }

    fn breaker(flaky: &Flaky) -> CircuitBreaker<&Flaky> {
        CircuitBreaker::new(flaky, 3, Duration::from_secs(5), Duration::from_secs(30))
    }

    fn open_for(breaker: &CircuitBreaker<&Flaky>) -> Duration {
        match breaker.circuit() {
            Circuit::Open { remaining } => remaining,
            other => panic!("not open: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn outages_open_it_failed_trials_double_the_cooldown_an_answer_closes_it() {
        let flaky = Flaky::default();
        flaky.mode.store(DOWN, Ordering::SeqCst);
        let breaker = breaker(&flaky);
        for _ in 0..3 {
            assert!(matches!(
                breaker.summarize(req()).await,
                Err(SummarizeError::Unavailable(_))
            ));
        }
        assert_eq!(open_for(&breaker), Duration::from_secs(5));
        let err = breaker.summarize(req()).await.unwrap_err();
        assert!(matches!(err, SummarizeError::CircuitOpen(_)), "{err}");
        assert!(err.to_string().contains("retrying in 5s"), "{err}");
        assert_eq!(
            flaky.calls.load(Ordering::SeqCst),
            3,
            "not called while open"
        );

        // Each failed trial doubles the cool-down, up to the maximum.
        for expected in [10, 20, 30, 30] {
            tokio::time::advance(open_for(&breaker)).await;
            assert_eq!(breaker.circuit(), Circuit::HalfOpen);
            assert!(matches!(
                breaker.summarize(req()).await,
                Err(SummarizeError::Unavailable(_))
            ));
            assert_eq!(open_for(&breaker), Duration::from_secs(expected));
        }
        assert_eq!(flaky.calls.load(Ordering::SeqCst), 7, "one call per trial");

        tokio::time::advance(Duration::from_secs(30)).await;
        flaky.mode.store(OK, Ordering::SeqCst);
        breaker.summarize(req()).await.unwrap();
        assert_eq!(
            breaker.circuit(),
            Circuit::Closed {
                consecutive_failures: 0
            }
        );
        // Closed again, the next outage starts from the base cool-down.
        flaky.mode.store(DOWN, Ordering::SeqCst);
        for _ in 0..3 {
            let _ = breaker.summarize(req()).await;
        }
        assert_eq!(open_for(&breaker), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn one_trial_at_a_time_and_a_dropped_trial_frees_the_next() {
        let flaky = Flaky {
            gate: Some(Semaphore::new(3)),
            ..Flaky::default()
        };
        flaky.mode.store(DOWN, Ordering::SeqCst);
        let breaker = breaker(&flaky);
        for _ in 0..3 {
            let _ = breaker.summarize(req()).await;
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        // The trial waits at the gate; meanwhile others are refused.
        let mut trial = breaker.summarize(req());
        assert!(
            futures_poll_once(&mut trial).await.is_none(),
            "the trial waits"
        );
        let err = breaker.summarize(req()).await.unwrap_err();
        assert!(
            err.to_string().contains("a trial call is under way"),
            "{err}"
        );
        assert_eq!(flaky.calls.load(Ordering::SeqCst), 4);
        // The trial's caller goes away: the next call is the trial.
        drop(trial);
        flaky.gate.as_ref().unwrap().add_permits(1);
        flaky.mode.store(OK, Ordering::SeqCst);
        breaker.summarize(req()).await.unwrap();
        assert_eq!(flaky.calls.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn unusable_answers_are_not_outages_and_an_answer_resets_the_count() {
        let flaky = Flaky::default();
        let breaker = breaker(&flaky);
        flaky.mode.store(BAD, Ordering::SeqCst);
        for _ in 0..5 {
            let _ = breaker.summarize(req()).await;
        }
        assert_eq!(
            breaker.circuit(),
            Circuit::Closed {
                consecutive_failures: 0
            },
            "the endpoint answered every time"
        );
        flaky.mode.store(DOWN, Ordering::SeqCst);
        for _ in 0..2 {
            let _ = breaker.summarize(req()).await;
        }
        flaky.mode.store(OK, Ordering::SeqCst);
        breaker.summarize(req()).await.unwrap();
        flaky.mode.store(DOWN, Ordering::SeqCst);
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

    /// Polls `fut` once: its output if it finished.
    async fn futures_poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut *fut).poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
