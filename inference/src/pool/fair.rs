//! Fairness between the pool's callers (the node passes the tenant as the caller's key): a
//! share of the queue per key at admission, and round-robin between keys when batches are
//! formed.
//!
//! - Admission ([`Shares`]): a key may have at most `share` of the queue's capacity waiting
//!   (at least one text; a key with nothing waiting may always queue one request, as an empty
//!   queue takes any request). One tenant writing as fast as it can therefore fills its share
//!   and is shed there, and the rest of the queue stays open to every other tenant.
//! - Dispatch ([`Lanes`]): one FIFO per key, and batches take one request from each key in
//!   turn (a rotation of the keys that have requests waiting), so a tenant's text waits behind
//!   at most one request of each other key per batch rather than behind another tenant's whole
//!   backlog.
//!
//! This module keeps counts and queues; it runs no model and logs nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::message::Request;
use crate::pool::Priority;

/// Texts waiting per key, shared by the pool's handles (which admit) and its router (which
/// takes texts out of the queue).
#[derive(Debug)]
pub(crate) struct Shares {
    /// The most texts one key may have waiting (at least 1).
    cap: u64,
    waiting: Mutex<HashMap<Arc<str>, u64>>,
}

impl Shares {
    /// Shares of a queue of `capacity` texts, each key allowed `percent` (1 to 100) of it.
    pub(crate) fn new(capacity: usize, percent: u8) -> Shares {
        let cap = capacity as u64 * u64::from(percent.min(100)) / 100;
        Shares {
            cap: cap.max(1),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// The most texts one key may have waiting.
    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }

    /// Reserves `n` texts for `key` when its share allows and `admit` (the queue-wide check,
    /// run under the same lock) agrees; returns the key's waiting texts when refused by the
    /// share, or `Err(None)` when `admit` refused.
    pub(crate) fn reserve(
        &self,
        key: &Arc<str>,
        n: u64,
        admit: impl FnOnce() -> bool,
    ) -> Result<(), Option<u64>> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let mine = waiting.get(key).copied().unwrap_or(0);
        if mine > 0 && mine + n > self.cap {
            return Err(Some(mine));
        }
        if !admit() {
            return Err(None);
        }
        *waiting.entry(Arc::clone(key)).or_insert(0) += n;
        Ok(())
    }

    /// Gives back `n` texts of `key` (they left the queue).
    pub(crate) fn release(&self, key: &str, n: u64) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mine) = waiting.get_mut(key) {
            *mine = mine.saturating_sub(n);
            if *mine == 0 {
                waiting.remove(key);
            }
        }
    }

    /// Keys with texts waiting now.
    pub(crate) fn keys_waiting(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// What [`Lanes`] queues: a request of a caller key, of some size (texts, sequences),
/// admitted at some time.
pub(crate) trait Queued {
    /// The caller key (a tenant).
    fn key(&self) -> &Arc<str>;
    /// Its size, in what a batch is counted in.
    fn size(&self) -> usize;
    /// When it was admitted.
    fn admitted(&self) -> Instant;
}

impl Queued for Request {
    fn key(&self) -> &Arc<str> {
        &self.key
    }

    fn size(&self) -> usize {
        self.texts.len()
    }

    fn admitted(&self) -> Instant {
        self.admitted
    }
}

/// A pool's queue: one FIFO of requests per key, and the rotation in which keys are served
/// (the embedding router's, and the generation pool's).
pub(crate) struct Lanes<R = Request> {
    lanes: HashMap<Arc<str>, VecDeque<R>>,
    /// Keys with requests waiting, the next to serve first; each appears once.
    turn: VecDeque<Arc<str>>,
    /// Texts waiting in all lanes.
    texts: usize,
}

impl<R> Default for Lanes<R> {
    fn default() -> Self {
        Lanes {
            lanes: HashMap::new(),
            turn: VecDeque::new(),
            texts: 0,
        }
    }
}

impl<R: Queued> Lanes<R> {
    /// Queues `request` at the back of its key's lane.
    pub(crate) fn push(&mut self, request: R) {
        self.texts += request.size();
        let key = Arc::clone(request.key());
        let lane = self.lanes.entry(Arc::clone(&key)).or_default();
        if lane.is_empty() {
            self.turn.push_back(key);
        }
        lane.push_back(request);
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }

    /// Texts waiting.
    pub(crate) fn texts(&self) -> usize {
        self.texts
    }

    /// When the request that has waited longest was admitted.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.turn
            .iter()
            .filter_map(|key| self.lanes.get(key)?.front())
            .map(Queued::admitted)
            .min()
    }

    /// Texts of the request served next.
    fn front_texts(&self) -> Option<usize> {
        let key = self.turn.front()?;
        self.lanes.get(key)?.front().map(Queued::size)
    }

    /// Whole requests up to `max_batch` texts (at least one request), one from each key in
    /// turn; a key that got a request goes to the back of the rotation. Stops at the first
    /// request that would overflow the batch, so a large request is not passed over forever.
    pub(crate) fn take_batch(&mut self, max_batch: usize) -> Vec<R> {
        let mut batch = Vec::new();
        let mut texts = 0;
        while let Some(key) = self.turn.front().cloned() {
            let Some(lane) = self.lanes.get_mut(&key) else {
                self.turn.pop_front();
                continue;
            };
            let Some(n) = lane.front().map(Queued::size) else {
                self.turn.pop_front();
                self.lanes.remove(&key);
                continue;
            };
            if !batch.is_empty() && texts + n > max_batch {
                break;
            }
            texts += n;
            batch.extend(lane.pop_front());
            self.turn.pop_front();
            if lane.is_empty() {
                self.lanes.remove(&key);
            } else {
                self.turn.push_back(key);
            }
        }
        self.texts -= texts;
        batch
    }

    /// Every waiting request, lane by lane (for a closing pool to answer).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = R> + '_ {
        self.turn.clear();
        self.texts = 0;
        self.lanes.drain().flat_map(|(_, lane)| lane)
    }
}

/// The router's queue: interactive requests (a query a read waits for, a topic a write
/// compares) and background ones (the pipeline's passages), each class in [`Lanes`]. The
/// router takes interactive batches before background ones, so a read waits behind at most
/// the batch already running; where a pass costs about the same for one text as for many (a
/// GPU) it fills the room an interactive batch leaves with background requests
/// ([`Queue::fill`]).
#[derive(Default)]
pub(crate) struct Queue {
    interactive: Lanes,
    background: Lanes,
}

impl Queue {
    /// Queues `request` in its class.
    pub(crate) fn push(&mut self, request: Request) {
        match request.priority {
            Priority::Interactive => self.interactive.push(request),
            Priority::Background => self.background.push(request),
        }
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.interactive.is_empty() && self.background.is_empty()
    }

    /// Texts waiting.
    pub(crate) fn texts(&self) -> usize {
        self.interactive.texts() + self.background.texts()
    }

    /// When the request that has waited longest was admitted.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        match (self.interactive.oldest(), self.background.oldest()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether an interactive request is waiting.
    pub(crate) fn has_interactive(&self) -> bool {
        !self.interactive.is_empty()
    }

    /// Whether a background request is waiting.
    pub(crate) fn has_background(&self) -> bool {
        !self.background.is_empty()
    }

    /// A batch of interactive requests only, up to `max_batch` texts.
    pub(crate) fn take_interactive(&mut self, max_batch: usize) -> Vec<Request> {
        self.interactive.take_batch(max_batch)
    }

    /// A batch of background requests only, up to `max_batch` texts.
    pub(crate) fn take_background(&mut self, max_batch: usize) -> Vec<Request> {
        self.background.take_batch(max_batch)
    }

    /// Background requests that fit in `room` texts (none when the next one does not), to
    /// fill an interactive batch.
    pub(crate) fn fill(&mut self, room: usize) -> Vec<Request> {
        if room > 0 && self.background.front_texts().is_some_and(|n| n <= room) {
            self.background.take_batch(room)
        } else {
            Vec::new()
        }
    }

    /// Every waiting request (for a closing pool to answer).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Request> + '_ {
        self.interactive.drain().chain(self.background.drain())
    }

    /// Every waiting background request (a closing pool answers them without running them).
    pub(crate) fn drain_background(&mut self) -> impl Iterator<Item = Request> + '_ {
        self.background.drain()
    }
}

#[cfg(test)]
mod tests;
