//! What the pool's handle, its router and its workers send one another: one caller's
//! [`Request`], from admission to answer, and the router's messages ([`RouterMsg`]: requests
//! from the handle, its own deadline timer, a worker's report that it is idle, shutdown).
//! Both the queue ([`super::fair`]) and the workers ([`super::worker`]) hold requests, and
//! the workers report to the router, so these types sit below all three.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ractor::RpcReplyPort;

use super::Priority;
use super::stats::Metrics;
use crate::config::TextRole;
use crate::error::Result;

/// One caller's request, from admission to answer.
pub(crate) struct Request {
    /// The caller's fairness key (the node passes the tenant).
    pub(crate) key: Arc<str>,
    pub(crate) texts: Vec<String>,
    pub(crate) role: TextRole,
    /// Interactive requests are batched before background ones.
    pub(crate) priority: Priority,
    pub(crate) admitted: Instant,
    /// Skipped, not embedded, when still queued after this instant (its caller stopped
    /// waiting).
    pub(crate) expires: Option<Instant>,
    pub(crate) reply: RpcReplyPort<Result<Vec<Vec<f32>>>>,
}

impl Request {
    /// Answers the caller (who may have gone away) and records the latency.
    pub(crate) fn answer(self, metrics: &Metrics, result: Result<Vec<Vec<f32>>>) {
        if result.is_err() {
            metrics.failed.fetch_add(1, Ordering::Relaxed);
        }
        metrics.record_latency(self.admitted.elapsed());
        let _ = self.reply.send(result);
    }
}

/// The router's messages.
pub(crate) enum RouterMsg {
    /// An admitted request (already counted in `queued_texts`).
    Embed(Request),
    /// A worker finished its batch.
    Idle(usize),
    /// The oldest request's deadline may have passed.
    Flush,
    /// Dispatch everything now, wait for the workers, then stop; answered once drained.
    Drain(RpcReplyPort<()>),
}

// Local only: never sent to another node (ractor's `cluster` feature needs the impl).
impl ractor::Message for RouterMsg {}
