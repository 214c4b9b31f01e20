//! The inference pipeline's handle: embeddings (and distillations) follow the writes instead
//! of blocking them (docs/architecture.md, "Memory model").
//!
//! A write that gives a record a text stores, in its own fenced transaction, a pending entry
//! for the text ([`engram_storage::data::pending`]) and answers; then it tells this node's
//! dispatcher through this handle ([`Pipeline::notify`]). The handle keeps a bounded, fair
//! queue of users with pending entries ([`work`]) and wakes the dispatcher, which runs the
//! rounds ([`crate::dispatch`], above the actors it delivers to). The user actors hold this
//! handle through their services; it imports nothing of the actors, the directory or the
//! dispatcher.
//!
//! Nothing is lost: the entries are in storage. The queue holds only user keys (at most
//! `max-users-in-memory`; beyond, storage holds the rest and a scan finds them).
//!
//! The same handle serves the distillation queue ([`WorkQueue::Distillation`]): one instance
//! per queue, each with its own work index, queue, rounds and metrics.
//!
//! It logs counts, never texts or vectors.

pub(crate) mod work;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use engram_storage::WorkQueue;
use engram_storage::types::Timestamp;
use parking_lot::Mutex;
use ractor::ActorCell;

use self::work::Work;
use crate::placement::UserKey;

/// The pipeline's settings (the node's `[inference.pipeline]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Users the dispatcher holds in memory at most; storage holds the rest.
    pub max_users_in_memory: usize,
    /// Texts one round embeds at most.
    pub round_texts: usize,
    /// Entries of one user one round takes at most (the rest wait for the next round, behind
    /// the other users).
    pub entries_per_user: usize,
    /// Rounds running at once (one embedding while the next is read or written).
    pub rounds_in_flight: usize,
    /// How often the work index is scanned in any case.
    pub scan_interval: Duration,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            max_users_in_memory: 10_000,
            round_texts: 32,
            entries_per_user: 8,
            rounds_in_flight: 2,
            scan_interval: Duration::from_secs(2),
        }
    }
}

/// Counters and gauges of the pipeline, exported as metrics.
#[derive(Debug, Default)]
pub struct PipelineMetrics {
    /// Vectors stored.
    pub stored: AtomicU64,
    /// Vectors dropped: their record was deleted or rewritten while they were computed.
    pub dropped: AtomicU64,
    /// Rounds run.
    pub rounds: AtomicU64,
    /// Rounds (or a tenant's part of one) the pool refused; their entries wait.
    pub refused: AtomicU64,
    /// Rounds that failed (storage); their entries wait.
    pub failed: AtomicU64,
    /// Notifications not held because the queue was full (a scan finds those users).
    pub not_held: AtomicU64,
    /// Scans of the work index.
    pub scans: AtomicU64,
    /// Users queued (a gauge).
    pub queued_users: AtomicU64,
    /// Users in rounds (a gauge).
    pub users_in_rounds: AtomicU64,
    /// Users of this node's shards with pending entries, as of the last scan (a gauge; the
    /// entries themselves are counted on demand, [`Pipeline::pending`]).
    pub pending_users: AtomicU64,
    /// When the oldest pending entry this node knows of was queued, in ms since the epoch
    /// (0: none) (a gauge).
    pub oldest_queued_at: AtomicI64,
}

/// What is pending, counted in storage ([`Pipeline::pending`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Users of this node's shards with pending entries.
    pub users: usize,
    /// Their pending entries.
    pub entries: usize,
    /// When the oldest of them was queued.
    pub oldest: Option<Timestamp>,
}

pub(crate) struct Shared {
    pub(crate) queue: WorkQueue,
    pub(crate) config: PipelineConfig,
    pub(crate) work: Mutex<Work>,
    /// A wake-up is on its way to the dispatcher.
    pub(crate) woken: AtomicBool,
    /// The dispatcher, once started.
    pub(crate) dispatcher: OnceLock<Running>,
    pub(crate) metrics: PipelineMetrics,
}

/// A started dispatcher: its actor, and how to wake it.
pub(crate) struct Running {
    /// The dispatcher's actor.
    pub(crate) cell: ActorCell,
    /// Sends it a wake-up.
    pub(crate) wake: Box<dyn Fn() + Send + Sync>,
}

/// A handle to the node's dispatcher; clones share it. Made before the node's services (which
/// hold it) and started once the directory exists ([`Pipeline::start`], in
/// [`crate::dispatch`]).
#[derive(Clone)]
pub struct Pipeline {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("queue", &self.shared.queue)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// An embedding dispatcher that is not started yet (notifications are held, and scanned
    /// for anyway when it starts).
    pub fn new(config: PipelineConfig) -> Pipeline {
        Pipeline::for_queue(WorkQueue::Embedding, config)
    }

    /// A dispatcher of `queue` that is not started yet.
    pub fn for_queue(queue: WorkQueue, config: PipelineConfig) -> Pipeline {
        Pipeline {
            shared: Arc::new(Shared {
                queue,
                work: Mutex::new(Work::new(config.max_users_in_memory)),
                woken: AtomicBool::new(false),
                config,
                dispatcher: OnceLock::new(),
                metrics: PipelineMetrics::default(),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &PipelineConfig {
        &self.shared.config
    }

    /// The counters and gauges.
    pub fn metrics(&self) -> &PipelineMetrics {
        &self.shared.metrics
    }

    /// Tells the dispatcher that `key` has entries queued since `since` (after the commit).
    pub fn notify(&self, key: &UserKey, since: Timestamp) {
        let held = self.shared.work.lock().push(key.clone(), since);
        if !held {
            self.shared.metrics.not_held.fetch_add(1, Ordering::Relaxed);
        }
        self.wake();
    }

    /// Drops `key` from memory: the user was forgotten (their entries went with them).
    pub fn forgotten(&self, key: &UserKey) {
        self.shared.work.lock().remove(key);
    }

    /// Wakes the dispatcher, once however many notifications come before it wakes.
    pub(crate) fn wake(&self) {
        if let Some(dispatcher) = self.shared.dispatcher.get()
            && !self.shared.woken.swap(true, Ordering::AcqRel)
        {
            (dispatcher.wake)();
        }
    }

    /// Stops the dispatcher (rounds under way finish or are fenced; their entries stay in
    /// storage for the next owner).
    pub fn stop(&self) {
        if let Some(dispatcher) = self.shared.dispatcher.get() {
            dispatcher.cell.stop(None);
        }
    }
}
