//! [`Store`]: a cloneable handle on one backend, with the run-with-retry helper.
//!
//! `run` and `read` execute a closure as one transaction on a blocking thread (never on the
//! async workers), retry it on conflicts and busy errors with jittered exponential backoff,
//! and give up with [`Error::RetriesExhausted`] after a bound. The closure may run several
//! times, so it must not have effects outside the transaction it is given.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::error::{Error, Result};
use crate::kv::{Engine, Limits, Txn, TxnMode};

/// How [`Store::run`] retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Give up after this many attempts.
    pub max_attempts: u32,
    /// Give up once this much time has passed since the first attempt.
    pub max_elapsed: Duration,
    /// Backoff before the second attempt; doubles each time (with full jitter).
    pub initial_backoff: Duration,
    /// Upper bound of one backoff.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 50,
            max_elapsed: Duration::from_secs(30),
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(500),
        }
    }
}

impl RetryPolicy {
    fn backoff(&self, failed_attempts: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1 << failed_attempts.min(20));
        let cap = exp.min(self.max_backoff);
        // Full jitter: uniformly in [cap / 2, cap], so that colliding writers spread out.
        let micros = cap.as_micros() as u64;
        Duration::from_micros(rand::rng().random_range(micros / 2..=micros.max(1)))
    }
}

/// Counters of a store's transactions, for metrics.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Committed transactions.
    pub commits: AtomicU64,
    /// Attempts that failed with a retryable error and were retried.
    pub retries: AtomicU64,
    /// Transactions that gave up after the retry bound.
    pub exhausted: AtomicU64,
}

/// A handle on one storage backend. Cheap to clone; all clones share the backend.
#[derive(Clone)]
pub struct Store {
    engine: Arc<dyn Engine>,
    limits: Limits,
    retry: RetryPolicy,
    stats: Arc<StoreStats>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("engine", &self.engine.name())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Wraps a backend with FoundationDB's default limits and the default retry policy.
    pub fn new(engine: Arc<dyn Engine>) -> Self {
        Store {
            engine,
            limits: Limits::default(),
            retry: RetryPolicy::default(),
            stats: Arc::default(),
        }
    }

    /// Replaces the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Replaces the size limits (tests use small ones).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The backend's name ("sqlite", "fdb").
    pub fn backend(&self) -> &'static str {
        self.engine.name()
    }

    /// Transaction counters.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// Runs `f` as one read-write transaction on a blocking thread, with retries.
    pub async fn run<T, F>(&self, f: F) -> Result<T>
    where
        F: FnMut(&mut Txn) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.spawn(TxnMode::Write, f).await
    }

    /// Runs `f` as one read-only transaction on a blocking thread, with retries.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        F: FnMut(&mut Txn) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.spawn(TxnMode::Read, f).await
    }

    /// [`Store::run`] for callers that are already on a blocking thread.
    pub fn run_blocking<T>(&self, f: impl FnMut(&mut Txn) -> Result<T>) -> Result<T> {
        self.retry_loop(TxnMode::Write, f)
    }

    /// [`Store::read`] for callers that are already on a blocking thread.
    pub fn read_blocking<T>(&self, f: impl FnMut(&mut Txn) -> Result<T>) -> Result<T> {
        self.retry_loop(TxnMode::Read, f)
    }

    /// Opens one transaction attempt without retries; [`Txn::commit`] or drop it.
    /// For tests that interleave transactions by hand; services use [`Store::run`].
    pub fn begin(&self, mode: TxnMode) -> Result<Txn> {
        Ok(Txn::new(self.engine.begin(mode)?, mode, self.limits))
    }

    async fn spawn<T, F>(&self, mode: TxnMode, f: F) -> Result<T>
    where
        F: FnMut(&mut Txn) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.retry_loop(mode, f))
            .await
            .map_err(|e| Error::Task(e.to_string()))?
    }

    fn retry_loop<T>(&self, mode: TxnMode, mut f: impl FnMut(&mut Txn) -> Result<T>) -> Result<T> {
        let start = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.attempt(mode, &mut f) {
                Ok(value) => {
                    self.stats.commits.fetch_add(1, Ordering::Relaxed);
                    return Ok(value);
                }
                Err(err) if err.is_retryable() => {
                    let elapsed = start.elapsed();
                    if attempts >= self.retry.max_attempts || elapsed >= self.retry.max_elapsed {
                        self.stats.exhausted.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(attempts, ?elapsed, error = %err, "transaction gave up");
                        return Err(Error::RetriesExhausted {
                            attempts,
                            elapsed,
                            last: Box::new(err),
                        });
                    }
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(attempts, error = %err, "retrying transaction");
                    std::thread::sleep(self.retry.backoff(attempts - 1));
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn attempt<T>(&self, mode: TxnMode, f: &mut impl FnMut(&mut Txn) -> Result<T>) -> Result<T> {
        let mut txn = self.begin(mode)?;
        let value = f(&mut txn)?;
        txn.commit()?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests;
