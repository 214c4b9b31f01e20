//! The generation pool: the Qwen2 decoder behind a bounded, fair queue, with continuous
//! batching (DESIGN.md section 5, the generative half).
//!
//! Shape: one thread owns the model (about 2 GB of float32 weights: one copy per node). It
//! keeps up to `max_batch` sequences running. Each turn of its loop admits waiting requests
//! into free places (one key, a tenant, at a time in turn: [`crate::pool::fair`]), feeds each
//! new one its prompt (the system prompt's keys and values are computed once per distinct
//! system prompt and shared: [`KvCache::fork`]), then runs one decoding step for every
//! running sequence at once ([`Qwen2::step`]: every weight is read once per step however
//! many sequences share it), so a request that arrives while others decode joins them at the
//! next step instead of waiting for the batch to end. Every answer is decoded under its
//! JSON schema ([`crate::schema`]): it is valid or it is not returned.
//!
//! Admission: at most `queue-capacity` requests wait, each key at most
//! `tenant-share-percent` of them; more are refused with [`Error::Overloaded`]. A request
//! past its deadline is answered [`Error::Expired`], waiting or running. Closing refuses new
//! requests and answers the waiting ones [`Error::PoolClosed`]; running ones finish.
//!
//! Generation is slow on CPU (a few tokens per second per sequence on two cores), so the
//! node calls it only from the background pipeline, never on a request's path; the thread
//! runs in the idle scheduling class by default ([`BackgroundPriority`]).
//!
//! Metrics: tokens generated, requests answered, queue depth, running sequences, the batch
//! size of each step and the time to first token. Logs carry counts, never prompts or
//! answers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};
use tokenizers::Tokenizer;

use crate::config::{DeviceChoice, default_model_dir};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::pool::BackgroundPriority;
use crate::pool::fair::{Lanes, Queued, Shares};
use crate::qwen2::{KvCache, Qwen2, token_bytes};
use crate::schema::{self, Matcher, Schema};

/// Where `.ci/models` installs the default generative model, under the model directory.
pub const DEFAULT_GENERATIVE_MODEL: &str = "qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf";

/// Distinct system prompts whose keys and values are kept (a tenant's intent prompt, the
/// summary prompt).
const PREFIXES_KEPT: usize = 16;

/// Tokens tried in logit order before the whole vocabulary is sorted (almost always one of
/// the first few fits the schema).
const TOP_TRIED: i64 = 64;

/// The generation pool's configuration (the node's `[inference.generation]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct GenerationConfig {
    /// The model directory `.ci/models` fills.
    pub model_dir: PathBuf,
    /// The GGUF file, relative to `model_dir`.
    pub model: PathBuf,
    /// Where the decoder runs.
    pub device: DeviceChoice,
    /// Sequences decoded together at most.
    pub max_batch: usize,
    /// Requests waiting at most; more are refused.
    pub queue_capacity: usize,
    /// The share of the queue (percent) one key may hold.
    pub tenant_share_percent: u8,
    /// The decoding thread's scheduling class.
    pub priority: BackgroundPriority,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            model_dir: default_model_dir(),
            model: PathBuf::from(DEFAULT_GENERATIVE_MODEL),
            device: DeviceChoice::Auto,
            max_batch: 8,
            queue_capacity: 256,
            tenant_share_percent: 50,
            priority: BackgroundPriority::Idle,
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
}

struct Request {
    key: Arc<str>,
    generation: Generation,
    admitted: Instant,
    expires: Option<Instant>,
    reply: tokio::sync::oneshot::Sender<Result<String>>,
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
    counters: Counters,
}

/// A handle to the generation pool; clones share it.
#[derive(Clone)]
pub struct GenerationPool {
    shared: Arc<Shared>,
    model: Arc<str>,
}

impl std::fmt::Debug for GenerationPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationPool")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl GenerationPool {
    /// Loads the model (on a blocking thread) and starts the decoding thread.
    pub async fn start(config: GenerationConfig) -> Result<GenerationPool> {
        let path = config.model_dir.join(&config.model);
        if !path.exists() {
            return Err(Error::ModelMissing { path });
        }
        let device = match config.device {
            DeviceChoice::Auto => Device::cuda_if_available(),
            DeviceChoice::Cpu => Device::Cpu,
            DeviceChoice::Cuda(index) => {
                let available = crate::cuda_devices();
                if index >= available {
                    return Err(Error::DeviceUnavailable { index, available });
                }
                Device::Cuda(index)
            }
        };
        let load_path = path.clone();
        let (model, tokenizer) = tokio::task::spawn_blocking(move || -> Result<_> {
            let tokenizer = Gguf::open(&load_path)?.tokenizer()?;
            Ok((Qwen2::load(&load_path, device)?, tokenizer))
        })
        .await
        .map_err(|e| Error::PoolStart {
            reason: format!("loading the generative model panicked: {e}"),
        })??;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Lanes::default()),
            wake: Condvar::new(),
            shares: Shares::new(config.queue_capacity.max(1), config.tenant_share_percent),
            capacity: config.queue_capacity.max(1),
            closed: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let vocab = token_bytes(&tokenizer);
        let decoder = Decoder {
            shared: Arc::clone(&shared),
            model,
            tokenizer,
            vocab,
            prefixes: HashMap::new(),
            max_batch: config.max_batch.max(1),
        };
        let idle = config.priority == BackgroundPriority::Idle;
        std::thread::Builder::new()
            .name("engram-generate".into())
            .spawn(move || {
                if idle {
                    crate::pool::lanes::lower_priority();
                }
                decoder.run();
            })
            .map_err(|e| Error::PoolStart {
                reason: format!("the decoding thread did not start: {e}"),
            })?;
        let model = config.model.display().to_string();
        tracing::info!(model = %model, ?device, "generation pool started");
        Ok(GenerationPool {
            shared,
            model: model.into(),
        })
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
            return Err(Error::PoolClosed);
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        {
            let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
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
        }
    }

    /// Refuses new requests and answers the waiting ones [`Error::PoolClosed`]; the running
    /// ones finish, then the decoding thread ends.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        let waiting: Vec<Request> = {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.drain().collect()
        };
        for request in waiting {
            self.shared.shares.release(&request.key, 1);
            let _ = request.reply.send(Err(Error::PoolClosed));
        }
        self.shared.wake.notify_all();
    }
}

/// A running sequence.
struct Sequence {
    request: Request,
    cache: KvCache,
    matcher: Matcher,
    out: Vec<u8>,
    /// The token to feed next.
    next: i64,
    tokens: usize,
}

struct Decoder {
    shared: Arc<Shared>,
    model: Qwen2,
    tokenizer: Tokenizer,
    vocab: Vec<Option<Vec<u8>>>,
    /// Keys and values of system prompts, with when each was last used.
    prefixes: HashMap<String, (KvCache, Instant)>,
    max_batch: usize,
}

impl Decoder {
    fn run(mut self) {
        let mut running: Vec<Sequence> = Vec::new();
        loop {
            let admitted = match self.admit(running.len()) {
                Some(admitted) => admitted,
                // Closed, and nothing runs.
                None if running.is_empty() => return,
                None => Vec::new(),
            };
            for request in admitted {
                if let Some(seq) = self.start(request) {
                    running.push(seq);
                }
            }
            running = self.step(running);
            self.shared
                .counters
                .running
                .store(running.len() as u64, Ordering::Relaxed);
        }
    }

    /// Waiting requests for the free places (blocks while nothing runs and nothing waits);
    /// `None` once the pool is closed and nothing waits.
    fn admit(&self, running: usize) -> Option<Vec<Request>> {
        let shared = &self.shared;
        let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        while running == 0 && queue.is_empty() {
            // Closed, or every handle dropped (only this thread holds the pool).
            if shared.closed.load(Ordering::Acquire) || Arc::strong_count(shared) == 1 {
                return None;
            }
            queue = shared
                .wake
                .wait_timeout(queue, Duration::from_millis(500))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let free = self.max_batch.saturating_sub(running);
        let taken = if free == 0 {
            Vec::new()
        } else {
            queue.take_batch(free)
        };
        drop(queue);
        let now = Instant::now();
        let mut live = Vec::with_capacity(taken.len());
        for request in taken {
            shared.shares.release(&request.key, 1);
            if request.expires.is_some_and(|at| at <= now) {
                shared.counters.expired.fetch_add(1, Ordering::Relaxed);
                let _ = request.reply.send(Err(Error::Expired));
            } else {
                live.push(request);
            }
        }
        Some(live)
    }

    /// Feeds a new request its prompt and picks its first token.
    fn start(&mut self, request: Request) -> Option<Sequence> {
        let shared = Arc::clone(&self.shared);
        let counters = &shared.counters;
        let prefix = match self.prefix(&request.generation.system) {
            Ok(prefix) => prefix,
            Err(err) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                let _ = request.reply.send(Err(err));
                return None;
            }
        };
        let suffix = format!(
            "\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
            request.generation.user
        );
        let ids = match self.ids(&suffix) {
            Ok(ids) => ids,
            Err(err) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                let _ = request.reply.send(Err(err));
                return None;
            }
        };
        counters
            .prompt_tokens
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        let mut cache = prefix;
        let logits = self
            .model
            .next_logits(&Tensor::from_slice(&ids).unsqueeze(0), &mut cache);
        let matcher = request.generation.schema.matcher();
        let mut seq = Sequence {
            request,
            cache,
            matcher,
            out: Vec::new(),
            next: 0,
            tokens: 0,
        };
        let done = self.advance(&mut seq, &logits.get(0));
        counters.first_tokens.fetch_add(1, Ordering::Relaxed);
        counters.first_token_ms.fetch_add(
            seq.request.admitted.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
        if done {
            self.finish(seq);
            None
        } else {
            Some(seq)
        }
    }

    /// One decoding step of every running sequence; returns those still running.
    fn step(&mut self, running: Vec<Sequence>) -> Vec<Sequence> {
        if running.is_empty() {
            return running;
        }
        let counters = &self.shared.counters;
        let now = Instant::now();
        let (expired, mut running): (Vec<Sequence>, Vec<Sequence>) = running
            .into_iter()
            .partition(|s| s.request.expires.is_some_and(|at| at <= now));
        for seq in expired {
            counters.expired.fetch_add(1, Ordering::Relaxed);
            let _ = seq.request.reply.send(Err(Error::Expired));
        }
        if running.is_empty() {
            return running;
        }
        let tokens: Vec<i64> = running.iter().map(|s| s.next).collect();
        let mut caches: Vec<KvCache> = running
            .iter_mut()
            .map(|s| std::mem::take(&mut s.cache))
            .collect();
        let logits = self.model.step(&tokens, &mut caches);
        counters.steps.fetch_add(1, Ordering::Relaxed);
        counters
            .step_sequences
            .fetch_add(running.len() as u64, Ordering::Relaxed);
        let mut still = Vec::with_capacity(running.len());
        for (i, (mut seq, cache)) in running.into_iter().zip(caches).enumerate() {
            seq.cache = cache;
            if self.advance(&mut seq, &logits.get(i as i64)) {
                self.finish(seq);
            } else {
                still.push(seq);
            }
        }
        still
    }

    /// Picks the sequence's next token from `logits` under its schema; true when the
    /// sequence is done (whole, out of tokens, or stuck).
    fn advance(&self, seq: &mut Sequence, logits: &Tensor) -> bool {
        let picked = pick(&seq.matcher, logits, &self.vocab);
        let Some((id, matcher, bytes)) = picked else {
            return true;
        };
        self.shared.counters.tokens.fetch_add(1, Ordering::Relaxed);
        seq.matcher = matcher;
        seq.out.extend_from_slice(bytes);
        seq.next = id as i64;
        seq.tokens += 1;
        seq.matcher.is_complete() || seq.tokens >= seq.request.generation.max_tokens
    }

    fn finish(&self, seq: Sequence) {
        let counters = &self.shared.counters;
        let answer = if seq.matcher.is_complete() {
            String::from_utf8(seq.out).ok()
        } else {
            None
        };
        match answer {
            Some(answer) => {
                counters.answered.fetch_add(1, Ordering::Relaxed);
                let _ = seq.request.reply.send(Ok(answer));
            }
            None => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                let _ = seq
                    .request
                    .reply
                    .send(Err(Error::Unfinished { tokens: seq.tokens }));
            }
        }
    }

    fn ids(&self, text: &str) -> Result<Vec<i64>> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|source| Error::Tokenizer {
                action: "encoding a prompt",
                source,
            })?;
        Ok(encoding.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    /// The keys and values of `system`'s part of the prompt (through its `<|im_end|>`),
    /// computed once and forked for each request.
    fn prefix(&mut self, system: &str) -> Result<KvCache> {
        if let Some((cache, used)) = self.prefixes.get_mut(system) {
            *used = Instant::now();
            return Ok(cache.fork());
        }
        let ids = self.ids(&format!("<|im_start|>system\n{system}<|im_end|>"))?;
        self.shared
            .counters
            .prompt_tokens
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        let mut cache = KvCache::default();
        let _ = self
            .model
            .next_logits(&Tensor::from_slice(&ids).unsqueeze(0), &mut cache);
        if self.prefixes.len() >= PREFIXES_KEPT
            && let Some(oldest) = self
                .prefixes
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
        {
            self.prefixes.remove(&oldest);
        }
        let forked = cache.fork();
        self.prefixes
            .insert(system.to_owned(), (cache, Instant::now()));
        Ok(forked)
    }
}

/// The most likely token of `logits` (`[vocab]`) that keeps `matcher`'s output a valid
/// prefix: the top few first, the whole vocabulary in order only when none of them fits.
pub fn pick<'v>(
    matcher: &Matcher,
    logits: &Tensor,
    vocab: &'v [Option<Vec<u8>>],
) -> Option<(usize, Matcher, &'v [u8])> {
    let ids = |t: Tensor| -> Vec<usize> {
        Vec::<i64>::try_from(t)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|id| usize::try_from(id).ok())
            .collect()
    };
    let k = TOP_TRIED.min(logits.size()[0]);
    let (_, top) = logits.topk(k, -1, true, true);
    schema::pick(matcher, ids(top), vocab)
        .or_else(|| schema::pick(matcher, ids(logits.argsort(-1, true)), vocab))
}
