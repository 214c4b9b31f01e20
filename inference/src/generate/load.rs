//! The decoding thread's start: the model's load, and its retries after a failure.
//!
//! A load can fail for a reason that passes: memory short while another process peaks, a
//! model file being rewritten by `.ci/models`. So the thread records the failure (answering
//! what waits with its reason, counting it), waits `load_retry`, doubled after each failure
//! up to [`LOAD_RETRY_CEILING`], and reads the file again from its path; a node keeps serving
//! (and distilling by rules) meanwhile, its model messages waiting in storage. Without
//! `load_retry` the first failure closes the pool, as [`GenerationPool::start`] wants it.
//!
//! [`GenerationPool::start`]: super::GenerationPool::start

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tch::Device;
use tokenizers::Tokenizer;

use super::decoder::Decoder;
use super::{GenerationConfig, LOAD_RETRY_CEILING, Shared};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::pool::BackgroundPriority;
use crate::qwen2::{Qwen2, token_bytes};

/// What the decoding thread loads, for which pool.
pub(super) struct Loading<'a> {
    pub(super) config: &'a GenerationConfig,
    pub(super) device: Device,
    pub(super) shared: &'a Arc<Shared>,
    /// The model's name, for the logs.
    pub(super) model_name: &'a str,
    /// The model file, read again after a failure or by a restarted worker.
    pub(super) path: &'a std::path::Path,
    /// The worker this thread is ([`super::workers`]).
    pub(super) worker: usize,
}

/// The decoding thread: loads the model (at the thread's normal priority: the packing's
/// helper threads inherit it, and in the idle class a busy machine would starve the load),
/// says so through `done`, then decodes until the pool closes. `gguf` is the header already
/// read, if any.
pub(super) fn load_and_run(
    loading: &Loading<'_>,
    gguf: Option<Gguf>,
    done: tokio::sync::oneshot::Sender<Result<()>>,
) {
    let Loading {
        config,
        device,
        shared,
        model_name,
        worker,
        ..
    } = *loading;
    let started = Instant::now();
    let Some((model, tokenizer)) = load_until_loaded(loading, gguf, done) else {
        return;
    };
    tracing::info!(
        model = %model_name,
        seconds = started.elapsed().as_secs_f64(),
        "generative model loaded"
    );
    let vocab = token_bytes(&tokenizer);
    let decoder = Decoder {
        shared: Arc::clone(shared),
        worker,
        model,
        tokenizer,
        vocab,
        prefixes: HashMap::new(),
        warm: config.system_prompts.clone(),
        max_batch: config.max_batch.max(1),
        busy_share_percent: crate::pool::rest::rests(config.priority, device == Device::Cpu)
            .then_some(config.busy_share_percent),
    };
    if config.priority == BackgroundPriority::Idle {
        crate::pool::lanes::lower_priority();
    }
    decoder.run();
}

/// Loads the model, again after each failure while `config.load_retry` allows; `None` once
/// the pool is closed (by the failure without retries, or by its owner meanwhile). The first
/// outcome goes to `done`.
fn load_until_loaded(
    loading: &Loading<'_>,
    gguf: Option<Gguf>,
    done: tokio::sync::oneshot::Sender<Result<()>>,
) -> Option<(Qwen2, Tokenizer)> {
    let Loading {
        config,
        device,
        shared,
        model_name,
        path,
        ..
    } = *loading;
    let mut done = Some(done);
    let mut gguf = gguf;
    let mut wait = config.load_retry;
    loop {
        // The header read at the start first; the file again from its path after a failure.
        let opened = match gguf.take() {
            Some(gguf) => Ok(gguf),
            None => Gguf::open(path),
        };
        match opened.and_then(|gguf| load(&gguf, device, config, shared)) {
            Ok(loaded) => {
                shared.loaded.store(true, Ordering::Release);
                *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
                if let Some(done) = done.take() {
                    let _ = done.send(Ok(()));
                }
                return Some(loaded);
            }
            // Closed while loading: not a failure.
            Err(_) if shared.closed.load(Ordering::Acquire) => {
                if let Some(done) = done.take() {
                    let _ = done.send(Err(Error::PoolClosed));
                }
                return None;
            }
            Err(err) => {
                let failures = shared
                    .counters
                    .load_failures
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                let reason = format!("the generative model did not load: {err}");
                match wait {
                    Some(retry) => tracing::error!(
                        model = %model_name,
                        error = %err,
                        failures,
                        retry_in_seconds = retry.as_secs_f64(),
                        "the generative model did not load; it is read again later"
                    ),
                    None => tracing::error!(
                        model = %model_name,
                        error = %err,
                        "the generative model did not load; the pool is closed"
                    ),
                }
                *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
                if let Some(done) = done.take() {
                    let _ = done.send(Err(err));
                }
                let Some(retry) = wait else {
                    shared.close();
                    return None;
                };
                // New requests are answered the failure at admission (`load_failure`).
                shared.answer_waiting(|| shared.load_failure().unwrap_or(Error::PoolClosed));
                if !rest(shared, retry) {
                    return None;
                }
                wait = Some((retry * 2).min(LOAD_RETRY_CEILING));
            }
        }
    }
}

/// One attempt: the tokenizer and the decoder from the file (a panic is a failure), given up
/// between two layers once the pool is closed (a node stopping while its model loads).
fn load(
    gguf: &Gguf,
    device: Device,
    config: &GenerationConfig,
    shared: &Shared,
) -> Result<(Qwen2, Tokenizer)> {
    let closed = || shared.closed.load(Ordering::Acquire);
    std::panic::catch_unwind(|| -> Result<_> {
        let tokenizer = gguf.tokenizer()?;
        let model = Qwen2::from_gguf(gguf, device, config.precision, &closed)?;
        Ok((model, tokenizer))
    })
    .unwrap_or_else(|_| {
        Err(Error::PoolStart {
            reason: "loading the generative model panicked".into(),
        })
    })
}

/// Waits `wait` before the next attempt; false once the pool is closed or every handle to it
/// dropped.
fn rest(shared: &Arc<Shared>, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if shared.closed.load(Ordering::Acquire) || Arc::strong_count(shared) == 1 {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        // Woken by a close; the slice bounds the look at the handles.
        let slice = (until - now).min(Duration::from_millis(500));
        queue = shared
            .wake
            .wait_timeout(queue, slice)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}
