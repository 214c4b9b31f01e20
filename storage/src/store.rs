//! [`Store`]: a cloneable handle on one backend, with the run-with-retry helper.
//!
//! `run` and `read` execute a closure as one transaction off the async workers (on a blocking
//! thread, or the backend's committer), retry it on conflicts and busy errors with jittered
//! exponential backoff, and give up with [`Error::RetriesExhausted`] after a bound. The
//! closure may run several times, so it must not have effects outside the transaction it is
//! given.
//!
//! On a backend with group commit ([`Engine::group_commit`], SQLite's default), each attempt
//! of a `run` transaction is handed to the backend ([`Engine::submit`]), which runs it beside
//! other callers' transactions on its own thread and makes them durable with one commit; the
//! calling task awaits the answer (no blocking thread waits in between), and the retry loop
//! is the same. `run_blocking` and [`Store::begin`]
//! take closures that may borrow and are not `Send`, so they open their own transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::error::{Error, Result};
use crate::kv::{Engine, EngineTxn, Figure, Limits, SharedCommit, Txn, TxnMode, WriteJob};

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
    /// Committed write transactions.
    pub commits: AtomicU64,
    /// Completed read-only transactions.
    pub reads: AtomicU64,
    /// Attempts that failed with a retryable error and were retried.
    pub retries: AtomicU64,
    /// Transactions that gave up after the retry bound.
    pub exhausted: AtomicU64,
    /// Durable commits that carried this store's write transactions. A group commit shared by
    /// several of them counts once, so fewer batches than committed write transactions means
    /// that commits (and their fsyncs) were shared.
    pub batches: AtomicU64,
    /// The last group commit counted in `batches`.
    last_shared: AtomicU64,
}

impl StoreStats {
    /// Counts `commit` in `batches` unless the previous job did. The backend finishes the jobs
    /// of one commit one after another, before those of the next.
    fn count_shared(&self, commit: SharedCommit) {
        if self.last_shared.swap(commit.seq, Ordering::Relaxed) != commit.seq {
            self.batches.fetch_add(1, Ordering::Relaxed);
        }
    }
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

    /// Whether an acknowledged commit survives a power loss, as the backend reports it now
    /// (SQLite: `synchronous = FULL` on its committing connection, and a file).
    pub fn durable_commits(&self) -> Result<bool> {
        self.engine.durable_commits()
    }

    /// Whether clients' writes are to be refused for want of room ([`Error::Full`], 507)
    /// without being tried: the disk filled and has not room enough again. The node's own
    /// writes (heartbeats, leases, audit) go on in the room the backend kept for them.
    pub fn disk_full(&self) -> bool {
        self.engine.disk_full()
    }

    /// Transaction counters.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// The backend's own figures, for metrics.
    pub fn figures(&self) -> Vec<Figure> {
        self.engine.figures()
    }

    /// Runs `f` as one read-write transaction on a blocking thread, with retries. On a backend
    /// with group commit, an attempt that arrives while others commit runs on the backend's
    /// writer thread beside other callers' transactions (seeing the writes of those before it
    /// in the same commit), and the answer comes once the commit holding its writes is durable.
    pub async fn run<T, F>(&self, f: F) -> Result<T>
    where
        F: FnMut(&mut Txn) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.spawn(TxnMode::Write, f).await
    }

    /// [`Engine::erase_history`] on a blocking thread: after it returns, what committed
    /// transactions cleared is gone from every file of the backend's.
    pub async fn erase_history(&self) -> Result<()> {
        let engine = Arc::clone(&self.engine);
        tokio::task::spawn_blocking(move || engine.erase_history())
            .await
            .map_err(|e| Error::Task(e.to_string()))?
    }

    /// Runs `f` as one read-only transaction on a blocking thread, with retries.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        F: FnMut(&mut Txn) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.spawn(TxnMode::Read, f).await
    }

    /// [`Store::run`] for callers that are already on a blocking thread. `f` may borrow and
    /// need not be `Send`, so it runs on this thread in a transaction of its own: it never
    /// shares a group commit.
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
        if mode == TxnMode::Write && self.engine.group_commit() {
            // The backend's committer runs the job: no blocking thread waits in between.
            return self.grouped_loop(f).await;
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.retry_loop(mode, f))
            .await
            .map_err(|e| Error::Task(e.to_string()))?
    }

    fn retry_loop<T>(&self, mode: TxnMode, mut f: impl FnMut(&mut Txn) -> Result<T>) -> Result<T> {
        let mut attempts = Attempts::new(self);
        loop {
            attempts.count += 1;
            match self.attempt(mode, &mut f) {
                Ok(value) => {
                    if mode == TxnMode::Write {
                        self.stats.commits.fetch_add(1, Ordering::Relaxed);
                        self.stats.batches.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.stats.reads.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(value);
                }
                Err(err) => std::thread::sleep(attempts.failed(err)?),
            }
        }
    }

    fn attempt<T>(&self, mode: TxnMode, f: &mut impl FnMut(&mut Txn) -> Result<T>) -> Result<T> {
        let mut txn = self.begin(mode)?;
        let value = f(&mut txn)?;
        txn.commit()?;
        Ok(value)
    }

    /// The retry loop of a write transaction on a backend with group commit: each attempt is
    /// queued for the backend's committer ([`Engine::submit`]), and this task waits until it
    /// is durable or has failed. A caller that goes away leaves a queued attempt to commit or
    /// fail on its own, and is not retried.
    async fn grouped_loop<T, F>(&self, mut f: F) -> Result<T>
    where
        F: FnMut(&mut Txn) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let mut attempts = Attempts::new(self);
        loop {
            attempts.count += 1;
            let (reply, answer) = tokio::sync::oneshot::channel();
            self.engine.submit(Box::new(GroupJob {
                f,
                value: None,
                limits: self.limits,
                stats: Arc::clone(&self.stats),
                reply,
            }));
            let (back, outcome) = answer.await.map_err(|_| {
                Error::Task("the backend dropped a write transaction without an answer".into())
            })?;
            f = back;
            match outcome {
                Ok(value) => {
                    self.stats.commits.fetch_add(1, Ordering::Relaxed);
                    return Ok(value);
                }
                Err(err) => tokio::time::sleep(attempts.failed(err)?).await,
            }
        }
    }
}

/// The attempts of one transaction so far, and the decision after a failed one.
struct Attempts<'a> {
    store: &'a Store,
    start: Instant,
    count: u32,
}

impl<'a> Attempts<'a> {
    fn new(store: &'a Store) -> Self {
        Attempts {
            store,
            start: Instant::now(),
            count: 0,
        }
    }

    /// After a failed attempt: the backoff to wait before trying again, or the error the
    /// transaction ends with.
    fn failed(&mut self, err: Error) -> Result<Duration> {
        // The write that filled the disk (often the node's own: an audit entry, a heartbeat)
        // is tried again in the room the backend releases for it.
        if matches!(err, Error::Full(_)) && self.store.engine.disk_filled() {
            return Ok(Duration::ZERO);
        }
        if !err.is_retryable() {
            return Err(err);
        }
        let (retry, stats) = (&self.store.retry, &self.store.stats);
        let (attempts, elapsed) = (self.count, self.start.elapsed());
        if attempts >= retry.max_attempts || elapsed >= retry.max_elapsed {
            stats.exhausted.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(attempts, ?elapsed, error = %err, "transaction gave up");
            return Err(Error::RetriesExhausted {
                attempts,
                elapsed,
                last: Box::new(err),
            });
        }
        stats.retries.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(attempts, error = %err, "retrying transaction");
        Ok(retry.backoff(attempts - 1))
    }
}

/// One attempt of a [`Store::run`] closure, submitted to a backend with group commit. It gives
/// the closure back with the outcome, so that the retry loop can run it again.
struct GroupJob<F, T> {
    f: F,
    value: Option<T>,
    limits: Limits,
    stats: Arc<StoreStats>,
    reply: tokio::sync::oneshot::Sender<(F, Result<T>)>,
}

impl<F, T> WriteJob for GroupJob<F, T>
where
    F: FnMut(&mut Txn) -> Result<T> + Send,
    T: Send,
{
    fn run(&mut self, txn: Box<dyn EngineTxn>) -> Result<usize> {
        let mut txn = Txn::new(txn, TxnMode::Write, self.limits);
        self.value = Some((self.f)(&mut txn)?);
        Ok(txn.size())
    }

    fn finish(self: Box<Self>, outcome: Result<SharedCommit>) {
        let GroupJob {
            f,
            value,
            stats,
            reply,
            ..
        } = *self;
        let result = outcome.and_then(|commit| {
            stats.count_shared(commit);
            value.ok_or_else(|| {
                Error::Task("a group commit acknowledged a job that never ran".into())
            })
        });
        // The caller may have gone (its task was cancelled); the transaction stands regardless.
        let _ = reply.send((f, result));
    }
}

#[cfg(test)]
mod tests;
