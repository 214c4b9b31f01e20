//! The embedding pool: encoders behind ractor actors, with dynamic batching, a bounded queue
//! that sheds load, and metrics.
//!
//! Shape: one router actor ([`router`]) owns the queue and forms batches; `workers` pairs of
//! worker actors ([`worker`]) share one copy of the weights, in each pair one for batches
//! someone waits for and one for background-only batches, each running one batch at a time
//! on its own thread under `no_grad`. A request someone waits for leaves at once when an
//! interactive worker is idle; otherwise a batch leaves when `max_batch` texts wait or the
//! oldest has waited `max_wait`; it is run as one call into the encoder, which sorts its
//! texts by length so each forward pass pads little. Callers are answered in their own
//! order, each with exactly the vectors a direct [`Encoder::embed`] gives.
//!
//! Why not `ractor::factory`: a factory hands a worker one job per `Worker::handle` call and
//! counts it busy until that call returns, so a worker cannot hold several jobs to batch them
//! without returning early and lying to the factory's queue and load shedding; and a factory
//! worker has no timer message to flush a partial batch after `max_wait`. Batching in the
//! router keeps one queue, one admission count and the deadline in one place.
//!
//! Admission: [`EmbeddingPool::embed_for`] reserves room on an atomic count of queued texts
//! before it sends anything, and answers [`Error::Overloaded`] (503) when the queue is full, so
//! nothing grows without bound. A request larger than the whole capacity is admitted only
//! into an empty queue. Each caller key (the node passes the tenant) may hold at most
//! `tenant-share-percent` of the queue and is served in turn with the others ([`fair`]), so one tenant
//! at its rate limit neither fills the queue for the rest nor makes them wait behind its
//! backlog. Shutdown closes admission, runs what is queued for a caller who waits, answers the
//! queued background requests [`Error::PoolClosed`] without running them, and does not wait
//! for a background batch already running (nobody waits for it; its texts stay pending): that
//! batch stops before its next forward pass. [`EmbeddingPool::join`] then waits until every
//! thread of the pool has ended, which a process does before it exits (libtorch's static
//! destructors must not run under a forward pass).
//!
//! This module does no I/O of its own, and it logs counts, never texts or vectors.

pub(crate) mod fair;
pub(crate) mod lanes;
mod message;
pub(crate) mod rest;
mod router;
mod stats;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorRef};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use self::fair::Shares;
use self::lanes::Threads;
pub use self::lanes::{BackgroundPriority, exit_without_teardown, leave_idle_class};
use self::message::{Request, RouterMsg};
use self::router::{Router, RouterArgs};
use self::stats::Metrics;
pub use self::stats::{BATCH_BUCKETS, PoolStats};
use crate::config::{EncoderConfig, TextRole};
use crate::encoder::Encoder;
use crate::error::{Error, Result};

/// The pool's configuration (the node's `[inference.pool]`-style section; durations are
/// human-readable, as `"5ms"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct PoolConfig {
    /// The model every worker loads.
    pub encoder: EncoderConfig,
    /// Pairs of workers (at least 1), one for what requests wait for (interactive) and one
    /// for background batches, all on one copy of the weights: with two, two questions (or
    /// two batches of them) are embedded at once, on two cores.
    pub workers: usize,
    /// The most texts in one batch (at least 1); a single larger request runs alone.
    pub max_batch: usize,
    /// How long the oldest queued request may wait for a batch to fill.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// How long a request someone waits for may wait for batch-mates while an interactive
    /// worker is idle (default zero: it leaves at once, so a lone question costs its forward
    /// pass only; what arrives while the worker is busy is batched anyway).
    #[serde(with = "humantime_serde")]
    pub interactive_max_wait: Duration,
    /// libtorch's intra-op threads for each worker's passes (0: libtorch's default, one per
    /// core). One by default: a worker's interactive and background lanes each run a pass at
    /// once, and with more OpenMP threads than cores libgomp stops spinning between operators
    /// and puts its threads to sleep, which cost a lone question about 15 ms a pass on two
    /// cores (docs/decisions/0022-fresh-questions-embedded-at-once.md).
    pub intra_op_threads: usize,
    /// The most texts waiting (not yet in a worker); more are shed with
    /// [`Error::Overloaded`].
    pub queue_capacity: usize,
    /// The share of `queue_capacity`, in percent (1 to 100), that one caller key (a tenant)
    /// may hold; more of its texts are shed with [`Error::Overloaded`] while other keys are
    /// still admitted.
    pub tenant_share_percent: u8,
    /// The scheduling class of background-only batches (the pipeline's): `idle` takes only
    /// CPU time that requests leave unused.
    pub background_priority: BackgroundPriority,
    /// While the rest of the machine is busy (during an idle-class batch, other threads took
    /// at least a quarter of the machine's CPU time), the share of the time, in percent (1 to 100;
    /// 100: no limit), that idle-class background batches may take: each rests after it for
    /// the rest of that time ([`rest::busy_pause`]), or until the machine is quiet
    /// ([`rest::Rest`]). The idle class alone still lets them run in every gap a request
    /// leaves, and take the caches with them. Where the encoder runs on the CPU only: a
    /// batch on a GPU takes the device, not the cores, and does not rest.
    pub background_busy_share_percent: u8,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            encoder: EncoderConfig::default(),
            workers: 2,
            max_batch: 32,
            max_wait: Duration::from_millis(5),
            interactive_max_wait: Duration::ZERO,
            intra_op_threads: 1,
            queue_capacity: 1024,
            tenant_share_percent: 50,
            background_priority: BackgroundPriority::Idle,
            background_busy_share_percent: 10,
        }
    }
}

/// Which requests a batch takes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Someone waits: a read's query, a write's topic phrase. Batched first.
    Interactive,
    /// Nobody waits: the pipeline's passages. Batched on their own, for the background
    /// worker; on a GPU also in the room interactive batches leave.
    Background,
}

/// A handle to a running embedding pool; clones share the pool.
#[derive(Clone)]
pub struct EmbeddingPool {
    inner: Arc<Inner>,
}

struct Inner {
    router: ActorRef<RouterMsg>,
    handle: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    metrics: Arc<Metrics>,
    shares: Arc<Shares>,
    closed: Arc<AtomicBool>,
    threads: Threads,
    capacity: usize,
    dim: usize,
}

impl EmbeddingPool {
    /// Loads the encoder (on a blocking thread) and starts the router and `config.workers`
    /// pairs of workers on its weights.
    pub async fn start(config: PoolConfig) -> Result<EmbeddingPool> {
        let encoder_config = config.encoder.clone();
        let encoder = tokio::task::spawn_blocking(move || Encoder::load(&encoder_config))
            .await
            .map_err(|err| Error::PoolStart {
                reason: format!("encoder load panicked: {err}"),
            })??;
        let mut encoders: Vec<Encoder> = (1..config.workers.max(1))
            .map(|_| encoder.share())
            .collect();
        encoders.insert(0, encoder);
        let dim = encoders.first().map_or(0, Encoder::dim);
        let metrics = Arc::new(Metrics::default());
        let shares = Arc::new(Shares::new(
            config.queue_capacity,
            config.tenant_share_percent,
        ));
        let closed = Arc::new(AtomicBool::new(false));
        let threads = Threads::default();
        let args = RouterArgs {
            encoders,
            background: config.background_priority,
            busy_share_percent: config.background_busy_share_percent,
            max_batch: config.max_batch,
            max_wait: config.max_wait,
            interactive_max_wait: config.interactive_max_wait,
            intra_op_threads: (config.intra_op_threads > 0).then_some(config.intra_op_threads),
            metrics: Arc::clone(&metrics),
            shares: Arc::clone(&shares),
            closed: Arc::clone(&closed),
            threads: threads.clone(),
        };
        let (router, handle) =
            Actor::spawn(None, Router, args)
                .await
                .map_err(|err| Error::PoolStart {
                    reason: err.to_string(),
                })?;
        tracing::info!(
            workers = config.workers.max(1),
            max_batch = config.max_batch,
            max_wait_ms = config.max_wait.as_millis(),
            queue_capacity = config.queue_capacity,
            tenant_cap = shares.cap(),
            "embedding pool started"
        );
        Ok(EmbeddingPool {
            inner: Arc::new(Inner {
                router,
                handle: tokio::sync::Mutex::new(Some(handle)),
                metrics,
                shares,
                closed,
                threads,
                capacity: config.queue_capacity,
                dim,
            }),
        })
    }

    /// The embeddings' dimension.
    pub fn dim(&self) -> usize {
        self.inner.dim
    }

    /// One L2-normalised embedding per text, in order, as [`Encoder::embed`] gives them, for
    /// a caller without a fairness key (all such calls share one key).
    pub async fn embed(&self, texts: Vec<String>, role: TextRole) -> Result<Vec<Vec<f32>>> {
        self.embed_for("", texts, role).await
    }

    /// One L2-normalised embedding per text, in order, as [`Encoder::embed`] gives them, for
    /// the caller `key` (the tenant: its share of the queue and its turn in batches). Fails
    /// fast with [`Error::Overloaded`] when the queue, or `key`'s share of it, is full and
    /// with [`Error::PoolClosed`] once shutdown has begun.
    pub async fn embed_for(
        &self,
        key: &str,
        texts: Vec<String>,
        role: TextRole,
    ) -> Result<Vec<Vec<f32>>> {
        self.embed_with(key, texts, role, Priority::Interactive)
            .await
    }

    /// [`EmbeddingPool::embed_for`] at `priority`: background requests are batched for the
    /// background worker (on a GPU also in the room interactive batches leave), and admitted
    /// under the same capacity and shares.
    pub async fn embed_with(
        &self,
        key: &str,
        texts: Vec<String>,
        role: TextRole,
        priority: Priority,
    ) -> Result<Vec<Vec<f32>>> {
        self.submit(key, texts, role, priority, None).await
    }

    /// [`EmbeddingPool::embed_with`] for a caller that stops waiting at `expires` (a read's
    /// query deadline): a request still queued then is skipped, not embedded, and answered
    /// [`Error::Expired`], so that the queue holds only texts someone still waits for. One
    /// already in a batch when it expires is embedded and answered as usual.
    pub async fn embed_before(
        &self,
        key: &str,
        texts: Vec<String>,
        role: TextRole,
        priority: Priority,
        expires: Instant,
    ) -> Result<Vec<Vec<f32>>> {
        self.submit(key, texts, role, priority, Some(expires)).await
    }

    async fn submit(
        &self,
        key: &str,
        texts: Vec<String>,
        role: TextRole,
        priority: Priority,
        expires: Option<Instant>,
    ) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::PoolClosed);
        }
        let n = texts.len() as u64;
        let capacity = inner.capacity as u64;
        let key: Arc<str> = Arc::from(key);
        let mut queued_then = 0;
        let admitted = inner.shares.reserve(&key, n, || {
            let admitted = inner.metrics.queued_texts.fetch_update(
                Ordering::AcqRel,
                Ordering::Acquire,
                |queued| (queued == 0 || queued + n <= capacity).then_some(queued + n),
            );
            admitted.map_err(|queued| queued_then = queued).is_ok()
        });
        match admitted {
            Ok(()) => {}
            Err(by_share) => {
                inner.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                let (queued, capacity) = match by_share {
                    Some(mine) => {
                        inner
                            .metrics
                            .rejected_by_share
                            .fetch_add(1, Ordering::Relaxed);
                        (mine, inner.shares.cap())
                    }
                    None => (queued_then, capacity),
                };
                return Err(Error::Overloaded {
                    queued: usize::try_from(queued).unwrap_or(usize::MAX),
                    capacity: usize::try_from(capacity).unwrap_or(usize::MAX),
                });
            }
        }
        inner.metrics.requests.fetch_add(1, Ordering::Relaxed);
        inner.metrics.texts.fetch_add(n, Ordering::Relaxed);
        let (tx, rx) = ractor::concurrency::oneshot();
        let request = Request {
            key: Arc::clone(&key),
            texts,
            role,
            priority,
            admitted: Instant::now(),
            expires,
            reply: tx.into(),
        };
        if inner.router.cast(RouterMsg::Embed(request)).is_err() {
            inner.shares.release(&key, n);
            inner.metrics.queued_texts.fetch_sub(n, Ordering::Relaxed);
            return Err(Error::PoolClosed);
        }
        // A dropped reply port means the pool stopped without answering.
        rx.await.unwrap_or(Err(Error::PoolClosed))
    }

    /// Caller keys (tenants) with texts waiting now.
    pub fn keys_waiting(&self) -> usize {
        self.inner.shares.keys_waiting()
    }

    /// A snapshot of the pool's metrics.
    pub fn stats(&self) -> PoolStats {
        self.inner.metrics.snapshot()
    }

    /// Stops admitting requests (new calls get [`Error::PoolClosed`]), answers every request
    /// already admitted (queued background requests with [`Error::PoolClosed`], without
    /// running them), then stops the actors and waits for them. Every clone of the handle
    /// sees the pool closed; calling it again is harmless.
    pub async fn shutdown(self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        let (tx, rx) = ractor::concurrency::oneshot();
        if inner.router.cast(RouterMsg::Drain(tx.into())).is_ok() {
            let _ = rx.await;
        }
        if let Some(handle) = inner.handle.lock().await.take() {
            let _ = handle.await;
        }
        tracing::info!("embedding pool stopped");
    }

    /// Waits until every thread of the pool has ended: after [`EmbeddingPool::shutdown`], that
    /// is the end of a background batch's current forward pass. Call it before the process
    /// exits (bounded by a timeout: a background thread in the idle class may get little CPU
    /// on a busy machine, see [`leave_idle_class`]).
    pub async fn join(&self) {
        self.inner.threads.join().await;
    }
}
