//! The generation pool's workers under supervision ([`crate::supervise`]): one per device,
//! each loading the model on its own thread and decoding from the shared queue.
//!
//! What a worker is decoding is kept outside its thread, in its [`super::slot::Slot`]: the
//! decoding thread holds each running sequence's tokens and caches, and the slot holds the
//! request itself (its caller's reply port, its prompt). A worker that panics therefore drops only
//! what it computed; the supervisor puts the slot's requests back in the queue
//! ([`Shared::requeue`]), and the restarted worker decodes them again from their prompts.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tch::Device;

use super::load::{Loading, load_and_run};
use super::{GenerationConfig, Shared};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::supervise::{REQUEUES_PER_REQUEST, Work};

impl Shared {
    /// Puts worker `index`'s held requests back in the queue, after it failed: each at the
    /// end of its key's lane, holding a share again where its key has room (a request that
    /// was admitted is never refused for the share it gave back when it left the queue). Once
    /// the pool is closed they are answered as a closed pool answers, and a request that has
    /// already failed [`REQUEUES_PER_REQUEST`] workers is answered [`Error::WorkerFailed`].
    pub(super) fn requeue(&self, index: usize) -> usize {
        let Some(slot) = self.slots.get(index) else {
            return 0;
        };
        let held = slot.take_all();
        let mut requeued = 0;
        {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            for mut request in held {
                if self.closed.load(Ordering::Acquire) {
                    let _ = request.reply.send(Err(self.closed_error()));
                    continue;
                }
                request.requeues += 1;
                if request.requeues > REQUEUES_PER_REQUEST {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    let _ = request.reply.send(Err(Error::WorkerFailed));
                    continue;
                }
                request.holds_share = self.shares.reserve(&request.key, 1, || true).is_ok();
                queue.push(request);
                requeued += 1;
            }
        }
        self.wake.notify_all();
        requeued
    }
}

/// The generation pool's work, for its supervisor.
pub(super) struct Decoding {
    pub(super) shared: Arc<Shared>,
    pub(super) config: GenerationConfig,
    /// One worker per device.
    pub(super) devices: Vec<Device>,
    pub(super) model_name: String,
    /// The model file.
    pub(super) path: PathBuf,
    /// The header read at the start and where the first load's outcome goes: the first
    /// worker to start takes them; the others, and restarted workers, read the file again.
    pub(super) first: Mutex<Option<(Gguf, tokio::sync::oneshot::Sender<Result<()>>)>>,
}

impl Work for Decoding {
    fn thread_name(&self, index: usize) -> String {
        format!("engram-generate-{index}")
    }

    fn run(self: Arc<Self>, index: usize) {
        let first = self.first.lock().unwrap_or_else(|p| p.into_inner()).take();
        let (gguf, done) = match first {
            Some((gguf, done)) => (Some(gguf), done),
            // Nobody waits for this load's outcome.
            None => (None, tokio::sync::oneshot::channel().0),
        };
        let loading = Loading {
            config: &self.config,
            device: self.devices[index],
            shared: &self.shared,
            model_name: &self.model_name,
            path: &self.path,
            worker: index,
        };
        load_and_run(&loading, gguf, done);
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
