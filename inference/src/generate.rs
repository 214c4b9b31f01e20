//! The generation pool: the Qwen2 decoder behind a bounded, fair queue, with continuous
//! batching (docs/architecture.md, "Models", the generative model).
//!
//! Shape: a supervisor actor with one worker actor per device ([`crate::supervise`]: the
//! CPU, or each CUDA device under `auto`), each worker owning one copy of the model on its own
//! thread (the default 1.5B in half precision peaked at 5.6 GB resident in the distillation
//! benchmark), which it loads first, so that a node serves meanwhile
//! ([`GenerationPool::spawn`]). The queue below is shared by the workers; each keeps up to
//! `max_batch` sequences running. If a worker's step panics or its thread dies, the supervisor
//! queues again the requests it held (they stay in its slot outside the thread: [`workers`])
//! and starts a new worker for the device, which loads the model again and decodes them from
//! their prompts. Each turn of a worker's loop admits waiting requests into free places (one key, a
//! tenant, at a time in turn: [`crate::pool::fair`]), feeds each new one its prompt (the
//! system prompt's keys and values are computed once per distinct system prompt and shared:
//! [`KvCache::fork`]), then runs one decoding step for every
//! running sequence at once ([`Qwen2::step`]: every weight is read once per step however
//! many sequences share it), so a request that arrives while others decode joins them at the
//! next step instead of waiting for the batch to end. Every answer is decoded under its
//! JSON schema ([`crate::constrain`]): it is valid or it is not returned.
//!
//! Admission: at most `queue-capacity` requests wait, each key at most
//! `tenant-share-percent` of them; more are refused with [`Error::Overloaded`]. A request
//! past its deadline is answered [`Error::Expired`], waiting or running. Closing refuses new
//! requests and answers the waiting ones [`Error::PoolClosed`], and the running ones too at
//! the next step (their callers keep the work pending in storage); the decoding threads then
//! end, and [`GenerationPool::join`] waits for them and their supervisor, which a process does before it exits
//! (libtorch's static destructors must not run under a decoding step).
//!
//! Generation is slow on CPU (a few tokens per second per sequence on two cores), so the
//! node calls it only from the background pipeline, never on a request's path; the thread
//! runs in the idle scheduling class by default ([`BackgroundPriority`]).
//!
//! Metrics: tokens generated, requests answered, queue depth, running sequences, the batch
//! size of each step and the time to first token. Logs carry counts, never prompts or
//! answers.

mod decoder;
mod load;
mod slot;
mod workers;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tch::Device;

use self::slot::Slot;
use self::workers::Decoding;
use crate::config::{DeviceChoice, default_model_dir};
use crate::constrain::Schema;
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::linear::Precision;
use crate::pool::BackgroundPriority;
use crate::pool::fair::{Lanes, Queued, Shares};
#[cfg(doc)]
use crate::qwen2::Qwen2;
pub use crate::sample::pick;
use crate::supervise::Supervised;

/// Where `.ci/models` installs the default generative model, under the model directory:
/// Qwen2.5-Coder-1.5B-Instruct, the more accurate distiller of the two it installs (91% of
/// the labelled intents against the 0.5B's 80%, at about 2.6 times the 0.5B's time in half
/// precision: docs/benchmarks.md).
pub const DEFAULT_GENERATIVE_MODEL: &str = "qwen2.5-coder-1.5b-instruct/model-q4_k_m.gguf";

/// Distinct system prompts whose keys and values are kept (a tenant's intent prompt, the
/// summary prompt).
const PREFIXES_KEPT: usize = 16;

/// The generation pool's configuration (the node's `[inference.generation]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct GenerationConfig {
    /// The model directory `.ci/models` fills.
    pub model_dir: PathBuf,
    /// The GGUF file, relative to `model_dir`.
    pub model: PathBuf,
    /// Where the decoder runs: one worker per device (under `auto`, each CUDA device, else
    /// the CPU), each with its own copy of the model.
    pub device: DeviceChoice,
    /// How the decoder's linear layers hold their weights (`float16` or `int8`: packed at
    /// load, so that a decoding step reads about a half or a third of float32's bytes; CPU
    /// only).
    pub precision: Precision,
    /// Sequences decoded together at most.
    pub max_batch: usize,
    /// Requests waiting at most; more are refused.
    pub queue_capacity: usize,
    /// The share of the queue (percent) one key may hold.
    pub tenant_share_percent: u8,
    /// The decoding thread's scheduling class.
    pub priority: BackgroundPriority,
    /// In the idle class, while the machine is busy, the share of the time (percent, 1 to
    /// 100; 100: no limit) prefills and decoding steps may take: the thread rests after each
    /// for the rest, as the embedding pool's background worker does
    /// ([`crate::PoolConfig::background_busy_share_percent`]); on the CPU only.
    pub busy_share_percent: u8,
    /// System prompts whose prefix the decoding thread computes as soon as it starts (while a
    /// starting node is quiet), instead of under the first requests' load.
    pub system_prompts: Vec<String>,
    /// After a failed load, how long the decoding thread waits before it reads the file
    /// again, doubled after each failure up to [`LOAD_RETRY_CEILING`] (`None`: a failed load
    /// closes the pool). [`GenerationPool::start`] tries once.
    #[serde(with = "humantime_serde")]
    pub load_retry: Option<Duration>,
}

/// The longest wait between two attempts to load the model.
pub const LOAD_RETRY_CEILING: Duration = Duration::from_secs(600);

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            model_dir: default_model_dir(),
            model: PathBuf::from(DEFAULT_GENERATIVE_MODEL),
            device: DeviceChoice::Auto,
            // Int8 rows: the 1.5B in 2.2 GB resident instead of 5.6 GB, 99.5% intent accuracy
            // on the 186-message set with two examples, a message's answer independent of
            // its batch (docs/benchmarks.md); a GPU keeps float32.
            precision: Precision::Int8Rows,
            max_batch: 8,
            queue_capacity: 256,
            tenant_share_percent: 50,
            priority: BackgroundPriority::Idle,
            busy_share_percent: 10,
            system_prompts: Vec::new(),
            load_retry: Some(Duration::from_secs(30)),
        }
    }
}

/// One generation: a system prompt (shared by many requests), the user's message, and the
/// schema the answer must follow.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The system message.
    pub system: String,
    /// The user message.
    pub user: String,
    /// Example turns shown before it, each a user message and the assistant's answer.
    pub shots: Vec<(String, String)>,
    /// The answer's schema.
    pub schema: Arc<Schema>,
    /// Tokens the answer may take at most (a bounded schema closes before).
    pub max_tokens: usize,
}

/// The pool's counters, read by the node's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenerationStats {
    /// Tokens decoded (prompt tokens not counted).
    pub tokens: u64,
    /// Prompt tokens fed (shared system prompts counted once per computation).
    pub prompt_tokens: u64,
    /// Requests answered with a whole answer.
    pub answered: u64,
    /// Requests refused at admission (queue or share full).
    pub refused: u64,
    /// Requests past their deadline.
    pub expired: u64,
    /// Requests that failed (no answer within their token bound, or the model failed).
    pub failed: u64,
    /// Decoding steps run, and the sequences they carried (their ratio is the mean batch).
    pub steps: u64,
    /// Sequences summed over steps.
    pub step_sequences: u64,
    /// Requests waiting now.
    pub queued: u64,
    /// Sequences running now.
    pub running: u64,
    /// Time to first token, summed (ms), and its count (`answered + failed` that got one).
    pub first_token_ms: u64,
    /// First tokens timed.
    pub first_tokens: u64,
    /// Time the idle-class decoding thread rested between steps because the machine was busy
    /// ([`GenerationConfig::busy_share_percent`]).
    pub rested: Duration,
    /// Whether the model is loaded ([`GenerationPool::spawn`] returns before).
    pub loaded: bool,
    /// Loads that failed ([`GenerationConfig::load_retry`]).
    pub load_failures: u64,
    /// Workers restarted after they failed (their requests were queued again).
    pub restarts: u64,
}

#[derive(Default)]
struct Counters {
    tokens: AtomicU64,
    prompt_tokens: AtomicU64,
    answered: AtomicU64,
    refused: AtomicU64,
    expired: AtomicU64,
    failed: AtomicU64,
    steps: AtomicU64,
    step_sequences: AtomicU64,
    running: AtomicU64,
    first_token_ms: AtomicU64,
    first_tokens: AtomicU64,
    rested_us: AtomicU64,
    load_failures: AtomicU64,
    restarts: AtomicU64,
}

struct Request {
    key: Arc<str>,
    generation: Generation,
    admitted: Instant,
    expires: Option<Instant>,
    reply: tokio::sync::oneshot::Sender<Result<String>>,
    /// Whether it counts in its key's share while queued (a request queued again after its
    /// worker failed does only where the share has room).
    holds_share: bool,
    /// Times it was queued again after its worker failed.
    requeues: u32,
}

impl Queued for Request {
    fn key(&self) -> &Arc<str> {
        &self.key
    }

    fn size(&self) -> usize {
        1
    }

    fn admitted(&self) -> Instant {
        self.admitted
    }
}

struct Shared {
    queue: Mutex<Lanes<Request>>,
    wake: Condvar,
    shares: Shares,
    capacity: usize,
    closed: AtomicBool,
    /// Whether the decoding thread has loaded the model.
    loaded: AtomicBool,
    /// Why the model did not load, until a later attempt loads it (without retries the
    /// pool is then closed).
    failure: Mutex<Option<String>>,
    counters: Counters,
    /// Each worker's held requests ([`slot::Slot`]).
    slots: Vec<Slot>,
    /// The id of the next request a worker takes.
    next_id: AtomicU64,
}

impl Shared {
    /// What a request to the closed pool is answered.
    fn closed_error(&self) -> Error {
        match &*self.failure.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(reason) => Error::PoolStart {
                reason: reason.clone(),
            },
            None => Error::PoolClosed,
        }
    }

    /// Why the last load failed, while the model is not loaded.
    fn load_failure(&self) -> Option<Error> {
        if self.loaded.load(Ordering::Acquire) {
            return None;
        }
        let failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.as_ref().map(|reason| Error::PoolStart {
            reason: reason.clone(),
        })
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.answer_waiting(|| self.closed_error());
        self.wake.notify_all();
    }

    /// Answers every waiting request with `error()`, taking them out of the queue.
    fn answer_waiting(&self, error: impl Fn() -> Error) {
        let waiting: Vec<Request> = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.drain().collect()
        };
        for request in waiting {
            self.shares.release(&request.key, 1);
            let _ = request.reply.send(Err(error()));
        }
    }
}

/// A handle to the generation pool; clones share it, and the last one dropped closes it.
#[derive(Clone)]
pub struct GenerationPool {
    shared: Arc<Shared>,
    model: Arc<str>,
    /// The supervisor and its workers (started on the runtime: [`GenerationPool::spawn`]
    /// returns before).
    supervised: Arc<Supervision>,
    _closer: Arc<Closer>,
}

/// The pool's supervisor, starting or started.
struct Supervision {
    starting: Mutex<Option<tokio::task::JoinHandle<Option<Supervised>>>>,
    started: tokio::sync::Mutex<Option<Supervised>>,
}

impl Supervision {
    /// The started supervisor (`None` if it did not start).
    async fn get(&self) -> tokio::sync::MutexGuard<'_, Option<Supervised>> {
        let mut started = self.started.lock().await;
        let starting = self
            .starting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(starting) = starting {
            *started = starting.await.ok().flatten();
        }
        started
    }
}

/// Closes the pool when the last handle is dropped, which ends its workers.
struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl std::fmt::Debug for GenerationPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationPool")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl GenerationPool {
    /// Starts the pool and returns once its model is loaded (or with the load's error).
    pub async fn start(config: GenerationConfig) -> Result<GenerationPool> {
        let config = GenerationConfig {
            load_retry: None,
            ..config
        };
        let (pool, loaded) = GenerationPool::launch(config)?;
        match loaded.await {
            Ok(Ok(())) => Ok(pool),
            Ok(Err(err)) => Err(err),
            Err(_) => Err(Error::PoolStart {
                reason: "the decoding thread ended before the model was loaded".into(),
            }),
        }
    }

    /// Starts the pool and returns at once, the model loading on the decoding thread (seconds
    /// to tens of seconds on a CPU, for the packing of its layers): requests wait in the queue
    /// meanwhile ([`GenerationPool::is_loaded`]). After a load that fails, every request is
    /// answered [`Error::PoolStart`] with its reason, until a later attempt loads the model
    /// ([`GenerationConfig::load_retry`]; without one the pool closes). A node starts its pool
    /// this way, so that it serves (and distils by rules) while the decoder loads. What can be
    /// checked at once is: a missing file, a file that is no GGUF, a device that is not there.
    pub fn spawn(config: GenerationConfig) -> Result<GenerationPool> {
        Ok(GenerationPool::launch(config)?.0)
    }

    /// The pool, and the load's outcome to come.
    fn launch(
        config: GenerationConfig,
    ) -> Result<(GenerationPool, tokio::sync::oneshot::Receiver<Result<()>>)> {
        let path = config.model_dir.join(&config.model);
        if !path.exists() {
            return Err(Error::ModelMissing { path });
        }
        let devices: Vec<Device> = crate::supervise::devices(config.device)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::PoolStart {
            reason: "the generation pool starts inside a tokio runtime".into(),
        })?;
        // The header and the metadata only (a few MB): a file that is no GGUF fails here. The
        // decoding threads read the tokenizer and the tensors from it.
        let gguf = Gguf::open(&path)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Lanes::default()),
            wake: Condvar::new(),
            shares: Shares::new(config.queue_capacity.max(1), config.tenant_share_percent),
            capacity: config.queue_capacity.max(1),
            closed: AtomicBool::new(false),
            loaded: AtomicBool::new(false),
            failure: Mutex::new(None),
            counters: Counters::default(),
            slots: devices.iter().map(|_| Slot::default()).collect(),
            next_id: AtomicU64::new(0),
        });
        let model = config.model.display().to_string();
        let (done, loaded) = tokio::sync::oneshot::channel();
        let workers = devices.len();
        tracing::info!(model = %model, ?devices, "generation pool started; the model loads");
        let work = Arc::new(Decoding {
            shared: Arc::clone(&shared),
            config,
            devices,
            model_name: model.clone(),
            path,
            first: Mutex::new(Some((gguf, done))),
        });
        let starting = {
            let shared = Arc::clone(&shared);
            runtime.spawn(async move {
                match Supervised::start(work, workers).await {
                    Ok(supervised) => Some(supervised),
                    Err(err) => {
                        tracing::error!(error = %err, "the generation pool's workers did not start");
                        *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(err.to_string());
                        shared.close();
                        None
                    }
                }
            })
        };
        let pool = GenerationPool {
            _closer: Arc::new(Closer(Arc::clone(&shared))),
            shared,
            model: model.into(),
            supervised: Arc::new(Supervision {
                starting: Mutex::new(Some(starting)),
                started: tokio::sync::Mutex::new(None),
            }),
        };
        Ok((pool, loaded))
    }

    /// Whether the model is loaded (requests are decoded, not only queued).
    pub fn is_loaded(&self) -> bool {
        self.shared.loaded.load(Ordering::Acquire)
    }

    /// The model's name (its file, relative to the model directory).
    pub fn model_name(&self) -> &str {
        &self.model
    }

    /// Generates `generation` for caller `key` (a tenant), answered by `expires` if given:
    /// the answer, valid under its schema.
    pub async fn generate(
        &self,
        key: &str,
        generation: Generation,
        expires: Option<Instant>,
    ) -> Result<String> {
        let shared = &self.shared;
        let key: Arc<str> = key.into();
        let counters = &shared.counters;
        if shared.closed.load(Ordering::Acquire) {
            return Err(shared.closed_error());
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        {
            let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            // Closed since the check above: the close has drained the queue (it drains under
            // this lock, after marking the pool closed), and a failed load left no thread to
            // answer what is queued now.
            if shared.closed.load(Ordering::Acquire) {
                return Err(shared.closed_error());
            }
            // The load failed: the thread answers what waits when it records the failure,
            // under this lock, and retries later.
            if let Some(failure) = shared.load_failure() {
                return Err(failure);
            }
            let queued = queue.texts();
            let admitted = shared.shares.reserve(&key, 1, || queued < shared.capacity);
            if admitted.is_err() {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                return Err(Error::Overloaded {
                    queued,
                    capacity: shared.capacity,
                });
            }
            queue.push(Request {
                key,
                generation,
                admitted: Instant::now(),
                expires,
                reply,
                holds_share: true,
                requeues: 0,
            });
        }
        shared.wake.notify_one();
        answer.await.map_err(|_| Error::WorkerFailed)?
    }

    /// The counters.
    pub fn stats(&self) -> GenerationStats {
        let c = &self.shared.counters;
        let queued = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .texts() as u64;
        GenerationStats {
            tokens: c.tokens.load(Ordering::Relaxed),
            prompt_tokens: c.prompt_tokens.load(Ordering::Relaxed),
            answered: c.answered.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            steps: c.steps.load(Ordering::Relaxed),
            step_sequences: c.step_sequences.load(Ordering::Relaxed),
            queued,
            running: c.running.load(Ordering::Relaxed),
            first_token_ms: c.first_token_ms.load(Ordering::Relaxed),
            first_tokens: c.first_tokens.load(Ordering::Relaxed),
            rested: Duration::from_micros(c.rested_us.load(Ordering::Relaxed)),
            loaded: self.is_loaded(),
            load_failures: c.load_failures.load(Ordering::Relaxed),
            restarts: c.restarts.load(Ordering::Relaxed),
        }
    }

    /// Refuses new requests and answers the waiting ones [`Error::PoolClosed`]; the running
    /// ones get it at the next step, then the decoding thread ends.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Closes the pool and waits until its decoding threads have ended (the end of the step
    /// each is in) and their supervisor has stopped.
    pub async fn join(&self) {
        self.close();
        if let Some(supervised) = &*self.supervised.get().await {
            supervised.join().await;
        }
    }

    /// Fault injection, for the tests of restarts: worker `index` (one per device, in order)
    /// panics at its next decoding step, as a failed step would.
    #[cfg(any(test, feature = "fault-injection"))]
    pub async fn fail_worker(&self, index: usize) -> Result<()> {
        match &*self.supervised.get().await {
            Some(supervised) => supervised.fail(index).await,
            None => Err(Error::PoolClosed),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod restart_tests;
