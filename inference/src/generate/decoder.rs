//! The decoding thread of the generation pool: admission into free places, prompts fed
//! through the shared system-prompt caches, one batched step for every running sequence,
//! answers under their schemas. The requests themselves stay in the worker's
//! [`super::slot::Slot`] until answered, so that a panic here loses none of them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tch::Tensor;
use tokenizers::Tokenizer;

use super::slot::Slot;
use super::{Generation, PREFIXES_KEPT, Shared};
use crate::constrain::Matcher;
use crate::error::{Error, Result};
use crate::pool::rest::{Load, Rest, busy_pause};
use crate::qwen2::{KvCache, Qwen2};
use crate::sample::pick;

/// A running sequence; its request is in the worker's slot under `id`.
struct Sequence {
    id: u64,
    admitted: Instant,
    expires: Option<Instant>,
    max_tokens: usize,
    cache: KvCache,
    matcher: Matcher,
    out: Vec<u8>,
    /// The token to feed next.
    next: i64,
    tokens: usize,
}

/// When a held request was admitted, and when its caller stops waiting.
#[derive(Clone, Copy)]
struct Admitted {
    admitted: Instant,
    expires: Option<Instant>,
}

pub(super) struct Decoder {
    pub(super) shared: Arc<Shared>,
    /// Which worker this is: its slot in [`Shared::slots`].
    pub(super) worker: usize,
    pub(super) model: Qwen2,
    pub(super) tokenizer: Tokenizer,
    pub(super) vocab: Vec<Option<Vec<u8>>>,
    /// Keys and values of system prompts, with when each was last used.
    pub(super) prefixes: HashMap<String, (KvCache, Instant)>,
    /// System prompts whose prefix is computed before the first request.
    pub(super) warm: Vec<String>,
    pub(super) max_batch: usize,
    /// The share of a busy machine's time an idle-class decoder's steps may take
    /// ([`busy_pause`]); `None` at normal priority.
    pub(super) busy_share_percent: Option<u8>,
}

impl Decoder {
    fn slot(&self) -> &Slot {
        &self.shared.slots[self.worker]
    }

    /// Answers held request `id` (if its worker still holds it).
    fn answer(&self, id: u64, result: Result<String>) {
        if let Some(request) = self.slot().take(id) {
            let _ = request.reply.send(result);
        }
    }

    pub(super) fn run(mut self) {
        for system in std::mem::take(&mut self.warm) {
            if self.shared.closed.load(Ordering::Acquire) {
                break;
            }
            if let Err(err) = self.paced(|decoder| decoder.prefix(&system)) {
                tracing::warn!(error = %err, "a system prompt's prefix failed; it is computed at first use");
            }
        }
        let mut running: Vec<Sequence> = Vec::new();
        loop {
            let admitted = match self.admit(running.len()) {
                Some(admitted) => admitted,
                // Closed, and nothing runs.
                None if running.is_empty() => return,
                None => Vec::new(),
            };
            // Each prompt's prefill and each step is a unit a busy machine's rest is measured
            // against: a batch of prompts (the first behind a long system prompt) can take many
            // seconds before its first step.
            for (id, generation, times) in admitted {
                if let Some(seq) = self.paced(|decoder| decoder.start(id, &generation, times)) {
                    running.push(seq);
                }
            }
            if !running.is_empty() {
                running = self.paced(|decoder| decoder.step(running));
                if running.is_empty() {
                    // The batch's KV caches and activations are freed: their holes in glibc's
                    // heaps go back to the system before decoding waits (a few milliseconds
                    // once a batch).
                    crate::allocator::release_free_memory();
                }
            }
            self.shared
                .counters
                .running
                .store(running.len() as u64, Ordering::Relaxed);
        }
    }

    /// Runs `work` (a prefill or a step) and then, in the idle class, rests while the rest of
    /// the machine was busy meanwhile ([`busy_pause`]). Only a decoder that may rest reads the
    /// machine's and its threads' CPU times.
    fn paced<T>(&mut self, work: impl FnOnce(&mut Self) -> T) -> T {
        let Some(share) = self.busy_share_percent else {
            return work(self);
        };
        let (started, before) = (Instant::now(), Load::now());
        let waited = crate::foreground::waited();
        let out = work(self);
        let load = before
            .zip(Load::now())
            .map(|(before, after)| after.since(before));
        // The time it waited for questions is not work: a rest is measured against the rest.
        let worked = started
            .elapsed()
            .saturating_sub(crate::foreground::waited().saturating_sub(waited));
        self.rest(busy_pause(worked, load, share));
        out
    }

    /// Rests `pause` after a prefill or a step while the machine is busy, or less once the pool
    /// closes or the machine is quiet ([`Rest`]); counts what it rested.
    fn rest(&self, pause: Duration) {
        if pause.is_zero() {
            return;
        }
        let mut rest = Rest::new(pause);
        while let Some(slice) = rest.next_slice(self.shared.closed.load(Ordering::Acquire)) {
            std::thread::sleep(slice);
        }
        self.shared
            .counters
            .rested_us
            .fetch_add(rest.rested().as_micros() as u64, Ordering::Relaxed);
    }

    /// Waiting requests for the free places (blocks while nothing runs and nothing waits),
    /// each held in the worker's slot under its id, with its prompt and its times; `None`
    /// once the pool is closed and nothing waits.
    fn admit(&self, running: usize) -> Option<Vec<(u64, Generation, Admitted)>> {
        let shared = &self.shared;
        let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        while running == 0 && queue.is_empty() {
            // Closed (the last handle dropped closes it too).
            if shared.closed.load(Ordering::Acquire) {
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
            if request.holds_share {
                shared.shares.release(&request.key, 1);
            }
            if request.expires.is_some_and(|at| at <= now) {
                shared.counters.expired.fetch_add(1, Ordering::Relaxed);
                let _ = request.reply.send(Err(Error::Expired));
            } else {
                let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
                let generation = request.generation.clone();
                let times = Admitted {
                    admitted: request.admitted,
                    expires: request.expires,
                };
                self.slot().hold(id, request);
                live.push((id, generation, times));
            }
        }
        Some(live)
    }

    /// Feeds held request `id` its prompt and picks its first token.
    fn start(&mut self, id: u64, generation: &Generation, times: Admitted) -> Option<Sequence> {
        let shared = Arc::clone(&self.shared);
        let counters = &shared.counters;
        let prefix = match self.prefix(&generation.system) {
            Ok(prefix) => prefix,
            Err(err) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                self.answer(id, Err(err));
                return None;
            }
        };
        let mut suffix = String::new();
        for (user, answer) in &generation.shots {
            suffix.push_str(&format!(
                "\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>"
            ));
        }
        suffix.push_str(&format!(
            "\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
            generation.user
        ));
        let ids = match self.ids(&suffix) {
            Ok(ids) => ids,
            Err(err) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                self.answer(id, Err(err));
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
        let matcher = generation.schema.matcher();
        let mut seq = Sequence {
            id,
            admitted: times.admitted,
            expires: times.expires,
            max_tokens: generation.max_tokens,
            cache,
            matcher,
            out: Vec::new(),
            next: 0,
            tokens: 0,
        };
        let done = self.advance(&mut seq, &logits.get(0));
        counters.first_tokens.fetch_add(1, Ordering::Relaxed);
        counters
            .first_token_ms
            .fetch_add(seq.admitted.elapsed().as_millis() as u64, Ordering::Relaxed);
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
        if self.shared.closed.load(Ordering::Acquire) {
            // Closing: nobody is to wait for these; their callers keep the work pending.
            for seq in running {
                self.answer(seq.id, Err(Error::PoolClosed));
            }
            return Vec::new();
        }
        let now = Instant::now();
        let (expired, mut running): (Vec<Sequence>, Vec<Sequence>) = running
            .into_iter()
            .partition(|s| s.expires.is_some_and(|at| at <= now));
        for seq in expired {
            counters.expired.fetch_add(1, Ordering::Relaxed);
            self.answer(seq.id, Err(Error::Expired));
        }
        if running.is_empty() {
            return running;
        }
        #[cfg(any(test, feature = "fault-injection"))]
        if self.slot().fault.swap(false, Ordering::AcqRel) {
            panic!("injected fault: a decoding step failed");
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
        seq.matcher.is_complete() || seq.tokens >= seq.max_tokens
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
                self.answer(seq.id, Ok(answer));
            }
            None => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                self.answer(seq.id, Err(Error::Unfinished { tokens: seq.tokens }));
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
