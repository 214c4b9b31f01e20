//! The reranker's pool: cross-encoders behind a supervisor actor with one worker per device
//! ([`crate::supervise`], the generation pool's shape), a bounded fair queue of searches, and
//! on a GPU the searches that wait scored together.
//!
//! Batching: a worker on a GPU that is free takes every search waiting, one caller key at a
//! time in turn ([`crate::pool::fair::Lanes`]), up to [`RerankPoolConfig::max_batch_pairs`]
//! (question, candidate) pairs (a larger search goes alone), and scores all their pairs in
//! one sequence of forward passes, sorted by length across the searches
//! ([`Reranker::score_tokens`]): a search that arrives while a batch is scored waits for that
//! batch only, then goes with every search that came meanwhile. A worker on the CPU takes
//! one search at a time, in the same turn between keys, unless
//! [`RerankPoolConfig::batch_on_cpu`]: there a pass costs what its pairs cost, and more per
//! pair past about 30 (docs/benchmarks.md, "Search": with five searches at once, batching
//! them doubled the median wait), so a batch only makes every search in it wait for the last.
//!
//! Admission: at most `queue_capacity` searches wait (not yet in a worker), each caller key at
//! most `tenant_share_percent` of them; more are refused at once with [`Error::Overloaded`].
//! A search still waiting at its deadline is answered [`Error::Expired`] without being scored.
//! Closing answers the waiting searches [`Error::PoolClosed`]; a batch being scored is
//! answered as usual, then the workers end.
//!
//! Supervision: the searches a worker is scoring stay in its slot, outside its thread. A
//! worker whose batch panics fails; the supervisor puts its searches back in the queue and
//! starts a new worker for the device, on the same weights (the model is not read again),
//! which answers them. A search whose batch failed more than
//! [`crate::supervise::REQUEUES_PER_REQUEST`] times is answered [`Error::WorkerFailed`].
//!
//! Each device's model loads on its worker's thread at the first batch (a node that never
//! reranks never reads it); a load that fails answers every batch of that device with its
//! reason. The supervisor starts at the first search, inside the caller's runtime. Logs
//! carry counts, never texts or scores.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::Reranker;
use crate::error::{Error, Result};
use crate::pool::fair::{Lanes, Queued, Shares};
use crate::supervise::{REQUEUES_PER_REQUEST, Supervised, Work};

/// What loads one device's reranker (called once, on its worker's thread, at its first
/// batch).
pub type RerankLoad = Box<dyn FnOnce() -> Result<Reranker> + Send>;

/// The pool's queue and batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RerankPoolConfig {
    /// Searches waiting at most (not yet in a worker); more are refused.
    pub queue_capacity: usize,
    /// The share of the queue (percent, 1 to 100) one caller key may hold.
    pub tenant_share_percent: u8,
    /// (question, candidate) pairs one batch takes at most (a larger search goes alone).
    pub max_batch_pairs: usize,
    /// Whether a worker on the CPU batches searches too (it takes one at a time otherwise).
    pub batch_on_cpu: bool,
}

impl Default for RerankPoolConfig {
    fn default() -> Self {
        RerankPoolConfig {
            queue_capacity: 4,
            tenant_share_percent: 100,
            max_batch_pairs: 256,
            batch_on_cpu: false,
        }
    }
}

/// The pool's counters.
#[derive(Debug, Default)]
pub struct RerankCounters {
    /// Searches waiting now (a gauge).
    pub queued: AtomicU64,
    /// Searches scored.
    pub scored: AtomicU64,
    /// Pairs scored.
    pub pairs: AtomicU64,
    /// Batches scored, and the searches they carried (their ratio is the mean batch).
    pub batches: AtomicU64,
    /// Searches summed over batches.
    pub batch_searches: AtomicU64,
    /// Microseconds the workers spent scoring.
    pub busy_micros: AtomicU64,
    /// Searches refused at admission.
    pub refused: AtomicU64,
    /// Searches that expired while waiting.
    pub expired: AtomicU64,
    /// Workers restarted after a failure.
    pub restarts: AtomicU64,
}

/// One search waiting to be scored.
struct Job {
    key: Arc<str>,
    query: String,
    passages: Vec<String>,
    admitted: Instant,
    expires: Option<Instant>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<f32>>>,
    /// Whether it counts in its key's share while queued.
    holds_share: bool,
    /// Times it was queued again after its worker failed.
    requeues: u32,
}

impl Queued for Job {
    fn key(&self) -> &Arc<str> {
        &self.key
    }

    fn size(&self) -> usize {
        self.passages.len()
    }

    fn admitted(&self) -> Instant {
        self.admitted
    }
}

/// The queue: searches in lanes, and how many.
#[derive(Default)]
struct Waiting {
    lanes: Lanes<Job>,
    jobs: usize,
}

/// A device's model: not loaded yet, loaded (shared with each worker started on it), or
/// failed to load.
enum Model {
    Unloaded(RerankLoad),
    Loading,
    Loaded(Box<Reranker>),
    Failed(String),
}

/// One worker's device: its model, and the searches it is scoring.
struct Slot {
    model: Mutex<Model>,
    held: Mutex<HashMap<u64, Job>>,
    /// Fault injection: the worker panics at its next batch.
    #[cfg_attr(not(any(test, feature = "fault-injection")), allow(dead_code))]
    fault: AtomicBool,
}

struct Shared {
    queue: Mutex<Waiting>,
    wake: Condvar,
    shares: Shares,
    capacity: usize,
    max_batch_pairs: usize,
    batch_on_cpu: bool,
    closed: AtomicBool,
    slots: Vec<Slot>,
    next_id: AtomicU64,
    counters: Arc<RerankCounters>,
}

/// A handle to the reranker's pool; clones share it, and the last one dropped closes it.
#[derive(Clone)]
pub struct RerankPool {
    shared: Arc<Shared>,
    supervised: Arc<tokio::sync::OnceCell<Option<Supervised>>>,
    _closer: Arc<Closer>,
}

impl std::fmt::Debug for RerankPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RerankPool")
            .field("workers", &self.shared.slots.len())
            .finish_non_exhaustive()
    }
}

/// Closes the pool when the last handle is dropped, which ends its workers.
struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl RerankPool {
    /// A pool with one worker per entry of `loads` (a device each); nothing loads and no
    /// thread starts before the first search.
    pub fn new(loads: Vec<RerankLoad>, config: &RerankPoolConfig) -> RerankPool {
        let capacity = config.queue_capacity.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Waiting::default()),
            wake: Condvar::new(),
            shares: Shares::new(capacity, config.tenant_share_percent),
            capacity,
            max_batch_pairs: config.max_batch_pairs.max(1),
            batch_on_cpu: config.batch_on_cpu,
            closed: AtomicBool::new(false),
            slots: loads
                .into_iter()
                .map(|load| Slot {
                    model: Mutex::new(Model::Unloaded(load)),
                    held: Mutex::new(HashMap::new()),
                    fault: AtomicBool::new(false),
                })
                .collect(),
            next_id: AtomicU64::new(0),
            counters: Arc::new(RerankCounters::default()),
        });
        RerankPool {
            _closer: Arc::new(Closer(Arc::clone(&shared))),
            shared,
            supervised: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<RerankCounters> {
        &self.shared.counters
    }

    /// The supervisor, started at the first call.
    async fn supervised(&self) -> Option<&Supervised> {
        let work = Arc::new(Scoring {
            shared: Arc::clone(&self.shared),
        });
        let workers = self.shared.slots.len();
        self.supervised
            .get_or_init(|| async move {
                match Supervised::start(work, workers).await {
                    Ok(supervised) => Some(supervised),
                    Err(err) => {
                        tracing::error!(error = %err, "the reranker's workers did not start");
                        None
                    }
                }
            })
            .await
            .as_ref()
    }

    /// The scores of `passages` for `query` (one each, in order), for caller `key` (the
    /// tenant), unless still waiting at `expires`.
    pub async fn score(
        &self,
        key: &str,
        query: &str,
        passages: Vec<String>,
        expires: Option<Instant>,
    ) -> Result<Vec<f32>> {
        let shared = &self.shared;
        if shared.slots.is_empty() || shared.closed.load(Ordering::Acquire) {
            return Err(Error::PoolClosed);
        }
        if self.supervised().await.is_none() {
            return Err(Error::PoolStart {
                reason: "the reranker's workers did not start".into(),
            });
        }
        let key: Arc<str> = key.into();
        let (reply, answer) = tokio::sync::oneshot::channel();
        {
            let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            if shared.closed.load(Ordering::Acquire) {
                return Err(Error::PoolClosed);
            }
            let queued = queue.jobs;
            if shared
                .shares
                .reserve(&key, 1, || queued < shared.capacity)
                .is_err()
            {
                shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                return Err(Error::Overloaded {
                    queued,
                    capacity: shared.capacity,
                });
            }
            queue.jobs += 1;
            queue.lanes.push(Job {
                key,
                query: query.to_owned(),
                passages,
                admitted: Instant::now(),
                expires,
                reply,
                holds_share: true,
                requeues: 0,
            });
            shared.counters.queued.fetch_add(1, Ordering::Relaxed);
        }
        shared.wake.notify_one();
        answer.await.unwrap_or(Err(Error::WorkerFailed))
    }

    /// Refuses new searches and answers the waiting ones [`Error::PoolClosed`]; the workers
    /// end after their batch.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Closes the pool and waits until its workers' threads have ended.
    pub async fn join(&self) {
        self.close();
        if let Some(Some(supervised)) = self.supervised.get() {
            supervised.join().await;
        }
    }

    /// Fault injection, for the tests of restarts: worker `index` panics at its next batch.
    #[cfg(any(test, feature = "fault-injection"))]
    pub async fn fail_worker(&self, index: usize) -> Result<()> {
        match self.supervised().await {
            Some(supervised) => supervised.fail(index).await,
            None => Err(Error::PoolClosed),
        }
    }
}

impl Shared {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waiting: Vec<Job> = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.jobs = 0;
            queue.lanes.drain().collect()
        };
        for job in waiting {
            self.counters.queued.fetch_sub(1, Ordering::Relaxed);
            if job.holds_share {
                self.shares.release(&job.key, 1);
            }
            let _ = job.reply.send(Err(Error::PoolClosed));
        }
        self.wake.notify_all();
    }

    /// The next batch of at most `max_pairs` pairs (one search at least), held in worker
    /// `index`'s slot under ids (blocks while nothing waits); `None` once the pool is closed.
    fn take(&self, index: usize, max_pairs: usize) -> Option<Vec<(u64, String, Vec<String>)>> {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            if !queue.lanes.is_empty() {
                break;
            }
            queue = self.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
        let taken = queue.lanes.take_batch(max_pairs);
        queue.jobs -= taken.len();
        drop(queue);
        let now = Instant::now();
        let mut batch = Vec::with_capacity(taken.len());
        let mut held = self.slots[index]
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for job in taken {
            self.counters.queued.fetch_sub(1, Ordering::Relaxed);
            if job.holds_share {
                self.shares.release(&job.key, 1);
            }
            if job.expires.is_some_and(|at| at <= now) {
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
                let _ = job.reply.send(Err(Error::Expired));
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            // The slot keeps the search whole, to queue it again if this worker fails.
            batch.push((id, job.query.clone(), job.passages.clone()));
            held.insert(id, job);
        }
        Some(batch)
    }

    /// Answers held search `id` of worker `index`.
    fn answer(&self, index: usize, id: u64, result: Result<Vec<f32>>) {
        let job = self.slots[index]
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if let Some(job) = job {
            let _ = job.reply.send(result);
        }
    }

    /// Worker `index`'s model, loaded at its first batch; the error of a load that failed.
    fn model(&self, index: usize) -> std::result::Result<Reranker, String> {
        let slot = &self.slots[index];
        let load = {
            let mut model = slot.model.lock().unwrap_or_else(|p| p.into_inner());
            match std::mem::replace(&mut *model, Model::Loading) {
                Model::Unloaded(load) => load,
                Model::Loaded(reranker) => {
                    let shared = reranker.share();
                    *model = Model::Loaded(reranker);
                    return Ok(shared);
                }
                Model::Failed(reason) => {
                    *model = Model::Failed(reason.clone());
                    return Err(reason);
                }
                // Only this worker loads its device's model; a worker restarted while its
                // predecessor loaded finds the load gone with it.
                Model::Loading => {
                    let reason = "the reranker's load did not finish".to_owned();
                    *model = Model::Failed(reason.clone());
                    return Err(reason);
                }
            }
        };
        // The load runs outside the lock (it may take seconds).
        let loaded = load().map_err(|err| {
            tracing::error!(error = %err, "the reranker did not load; searches keep the hybrid order");
            format!("the reranker did not load: {err}")
        });
        let mut model = slot.model.lock().unwrap_or_else(|p| p.into_inner());
        match loaded {
            Ok(reranker) => {
                let shared = reranker.share();
                *model = Model::Loaded(Box::new(reranker));
                Ok(shared)
            }
            Err(reason) => {
                *model = Model::Failed(reason.clone());
                Err(reason)
            }
        }
    }

    /// Puts worker `index`'s held searches back in the queue after it failed (see
    /// [`crate::generate`]'s workers for the rules).
    fn requeue(&self, index: usize) -> usize {
        let mut held: Vec<(u64, Job)> = self.slots[index]
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        held.sort_by_key(|(id, _)| *id);
        let mut requeued = 0;
        {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            for (_, mut job) in held {
                if self.closed.load(Ordering::Acquire) {
                    let _ = job.reply.send(Err(Error::PoolClosed));
                    continue;
                }
                job.requeues += 1;
                if job.requeues > REQUEUES_PER_REQUEST {
                    let _ = job.reply.send(Err(Error::WorkerFailed));
                    continue;
                }
                job.holds_share = self.shares.reserve(&job.key, 1, || true).is_ok();
                queue.jobs += 1;
                queue.lanes.push(job);
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
                requeued += 1;
            }
        }
        self.wake.notify_all();
        requeued
    }
}

/// The pool's work, for its supervisor.
struct Scoring {
    shared: Arc<Shared>,
}

impl Work for Scoring {
    fn thread_name(&self, index: usize) -> String {
        format!("engram-rerank-{index}")
    }

    fn run(self: Arc<Self>, index: usize) {
        let shared = &self.shared;
        let mut model: Option<std::result::Result<Reranker, String>> = None;
        loop {
            // One search until the model is loaded and known to be on a GPU (or batching on
            // the CPU is asked for).
            let batches = match &model {
                Some(Ok(reranker)) => !reranker.on_cpu() || shared.batch_on_cpu,
                Some(Err(_)) | None => false,
            };
            let max_pairs = if batches { shared.max_batch_pairs } else { 1 };
            let Some(batch) = shared.take(index, max_pairs) else {
                break;
            };
            if batch.is_empty() {
                continue;
            }
            let reranker = match model.get_or_insert_with(|| shared.model(index)) {
                Ok(reranker) => reranker,
                Err(reason) => {
                    for (id, ..) in batch {
                        shared.answer(
                            index,
                            id,
                            Err(Error::PoolStart {
                                reason: reason.clone(),
                            }),
                        );
                    }
                    continue;
                }
            };
            #[cfg(any(test, feature = "fault-injection"))]
            if shared.slots[index].fault.swap(false, Ordering::AcqRel) {
                panic!("injected fault: a rerank batch failed");
            }
            score_batch(shared, index, reranker, &batch);
        }
    }

    fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    fn requeue(&self, index: usize) -> usize {
        self.shared.requeue(index)
    }

    fn restarted(&self) {
        self.shared
            .counters
            .restarts
            .fetch_add(1, Ordering::Relaxed);
    }

    #[cfg(any(test, feature = "fault-injection"))]
    fn inject_fault(&self, index: usize) {
        if let Some(slot) = self.shared.slots.get(index) {
            slot.fault.store(true, Ordering::Release);
        }
    }
}

/// Scores every pair of the batch's searches in one sequence of forward passes and answers
/// each search with its own scores.
fn score_batch(
    shared: &Shared,
    index: usize,
    reranker: &Reranker,
    batch: &[(u64, String, Vec<String>)],
) {
    let started = Instant::now();
    let mut pairs = Vec::new();
    let mut counts = Vec::with_capacity(batch.len());
    let mut ids = Vec::with_capacity(batch.len());
    for (id, query, passages) in batch {
        let texts: Vec<&str> = passages.iter().map(String::as_str).collect();
        match reranker.tokenize(query, &texts) {
            Ok(tokenized) => {
                counts.push(tokenized.len());
                ids.push(*id);
                pairs.extend(tokenized);
            }
            Err(err) => shared.answer(index, *id, Err(err)),
        }
    }
    let scored = reranker.score_tokens(&pairs);
    let counters = &shared.counters;
    counters.busy_micros.fetch_add(
        u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    counters.batches.fetch_add(1, Ordering::Relaxed);
    counters
        .batch_searches
        .fetch_add(ids.len() as u64, Ordering::Relaxed);
    match scored {
        Ok(scores) => {
            counters
                .pairs
                .fetch_add(pairs.len() as u64, Ordering::Relaxed);
            let mut scores = scores.into_iter();
            for (id, count) in ids.into_iter().zip(counts) {
                counters.scored.fetch_add(1, Ordering::Relaxed);
                shared.answer(index, id, Ok(scores.by_ref().take(count).collect()));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, searches = ids.len(), "a rerank batch failed");
            let err = Arc::new(err);
            for id in ids {
                shared.answer(index, id, Err(Error::BatchFailed(Arc::clone(&err))));
            }
        }
    }
}

#[cfg(test)]
mod tests;
