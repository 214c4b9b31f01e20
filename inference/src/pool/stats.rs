//! The embedding pool's metrics: plain atomics that the router, the workers and the callers
//! update without locks, and a [`PoolStats`] snapshot the node exports (to Prometheus or a
//! status page). This module exports nothing itself and knows no metrics library.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (inclusive) of the batch-size buckets, in texts; the last bucket is open.
pub const BATCH_BUCKETS: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// Latency buckets: bucket `i` counts requests answered in less than `2^i` microseconds (the
/// last one everything slower), so bucket 20 ends near one second.
const LATENCY_BUCKETS: usize = 24;

/// The live counters, shared by every handle, the router and the workers.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Texts admitted and not yet handed to a worker (the queue's depth).
    pub(crate) queued_texts: AtomicU64,
    /// Texts handed to a worker and not yet answered.
    pub(crate) in_flight_texts: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) texts: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) rejected_by_share: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) forward_passes: AtomicU64,
    pub(crate) tokens: AtomicU64,
    /// Texts run by interactive workers.
    pub(crate) interactive_lane_texts: AtomicU64,
    /// Texts run by background workers.
    pub(crate) background_lane_texts: AtomicU64,
    /// Microseconds idle-class background workers rested while the machine was busy.
    pub(crate) background_rest_us: AtomicU64,
    batch_sizes: [AtomicU64; BATCH_BUCKETS.len() + 1],
    latency_us: [AtomicU64; LATENCY_BUCKETS],
    latency_sum_us: AtomicU64,
}

impl Metrics {
    /// Counts one batch handed to a worker.
    pub(crate) fn record_batch(&self, texts: usize) {
        let texts = texts as u64;
        let bucket = BATCH_BUCKETS
            .iter()
            .position(|&bound| texts <= bound)
            .unwrap_or(BATCH_BUCKETS.len());
        self.batch_sizes[bucket].fetch_add(1, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one answered request and its time from admission to answer.
    pub(crate) fn record_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let bucket = (u64::BITS - us.leading_zeros()) as usize;
        self.latency_us[bucket.min(LATENCY_BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// A consistent-enough copy of the counters (each read on its own; they may be a few
    /// updates apart).
    pub(crate) fn snapshot(&self) -> PoolStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let latency: Vec<u64> = self.latency_us.iter().map(load).collect();
        let answered: u64 = latency.iter().sum();
        let quantile = |q: f64| -> Duration {
            if answered == 0 {
                return Duration::ZERO;
            }
            let rank = ((answered as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, count) in latency.iter().enumerate() {
                seen += count;
                if seen >= rank {
                    return Duration::from_micros(1u64 << i);
                }
            }
            Duration::from_micros(1u64 << (LATENCY_BUCKETS - 1))
        };
        PoolStats {
            queued_texts: load(&self.queued_texts),
            in_flight_texts: load(&self.in_flight_texts),
            requests: load(&self.requests),
            texts: load(&self.texts),
            rejected: load(&self.rejected),
            rejected_by_share: load(&self.rejected_by_share),
            expired: load(&self.expired),
            failed: load(&self.failed),
            batches: load(&self.batches),
            forward_passes: load(&self.forward_passes),
            tokens: load(&self.tokens),
            interactive_lane_texts: load(&self.interactive_lane_texts),
            background_lane_texts: load(&self.background_lane_texts),
            background_rest: Duration::from_micros(load(&self.background_rest_us)),
            batch_sizes: std::array::from_fn(|i| load(&self.batch_sizes[i])),
            answered,
            latency_mean: Duration::from_micros(
                load(&self.latency_sum_us)
                    .checked_div(answered)
                    .unwrap_or_default(),
            ),
            latency_p50: quantile(0.5),
            latency_p99: quantile(0.99),
        }
    }
}

/// A snapshot of the pool's metrics. Counters are totals since the pool started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// Texts waiting in the queue now (admitted, not yet given to a worker).
    pub queued_texts: u64,
    /// Texts in batches that workers are running now.
    pub in_flight_texts: u64,
    /// Requests admitted.
    pub requests: u64,
    /// Texts admitted.
    pub texts: u64,
    /// Requests shed because the queue was full ([`crate::Error::Overloaded`]).
    pub rejected: u64,
    /// Of those, requests shed because their key (tenant) held its whole share of the queue.
    pub rejected_by_share: u64,
    /// Requests answered with an error (a failed batch or worker).
    pub failed: u64,
    /// Requests skipped because they were still queued past their expiry
    /// ([`crate::Error::Expired`]; a read whose query deadline had passed).
    pub expired: u64,
    /// Batches handed to workers.
    pub batches: u64,
    /// Forward passes run (a batch larger than the encoder's `max_batch_tokens` takes several).
    pub forward_passes: u64,
    /// Tokens read by the model (prefixes and special tokens included, padding excluded).
    pub tokens: u64,
    /// Texts run by the interactive workers (on normal-priority threads): what reads and
    /// writes wait for, and on a GPU the background texts that filled their batches.
    pub interactive_lane_texts: u64,
    /// Texts run by the background workers (in the idle class by default).
    pub background_lane_texts: u64,
    /// Time idle-class background workers rested between batches because the machine was
    /// busy ([`crate::PoolConfig::background_busy_share_percent`]).
    pub background_rest: Duration,
    /// Batches per size: entry `i` counts batches of at most [`BATCH_BUCKETS`]`[i]` texts
    /// (and more than the previous bound); the last entry counts larger ones.
    pub batch_sizes: [u64; BATCH_BUCKETS.len() + 1],
    /// Requests answered (successfully or not) with a recorded latency.
    pub answered: u64,
    /// Mean time from admission to answer.
    pub latency_mean: Duration,
    /// Median time from admission to answer, rounded up to a power of two microseconds.
    pub latency_p50: Duration,
    /// 99th percentile time from admission to answer, rounded up to a power of two
    /// microseconds.
    pub latency_p99: Duration,
}

#[cfg(test)]
mod tests;
