//! What one decoding worker holds outside its thread: the requests it took from the queue
//! and has not answered (their callers' reply ports and prompts), so that a worker that
//! panics drops none of them ([`super::workers`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use super::Request;

/// What one worker holds: the requests it took from the queue and has not answered.
#[derive(Default)]
pub(super) struct Slot {
    running: Mutex<HashMap<u64, Request>>,
    /// Fault injection: the worker panics at its next step.
    #[cfg_attr(not(any(test, feature = "fault-injection")), allow(dead_code))]
    pub(super) fault: AtomicBool,
}

impl Slot {
    /// Keeps `request` as running under `id`.
    pub(super) fn hold(&self, id: u64, request: Request) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, request);
    }

    /// Takes running request `id` out, to answer it.
    pub(super) fn take(&self, id: u64) -> Option<Request> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
    }

    /// Every request held, in the order they were taken.
    pub(super) fn take_all(&self) -> Vec<Request> {
        let mut held: Vec<(u64, Request)> = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        held.sort_by_key(|(id, _)| *id);
        held.into_iter().map(|(_, request)| request).collect()
    }
}
