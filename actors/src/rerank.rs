//! The search's reranker: a cross-encoder reads the question with each of the
//! first hybrid candidates and scores them; the two orders are fused by reciprocal rank
//! (`k = 20`, equal weights), which on LoCoMo's checking half beat either order alone
//! (docs/benchmarks.md, "A cross-encoder reranker"). It is opt-in per search
//! (`SearchQuery::rerank`) and runs on a node with `[reranker] enabled`.
//!
//! The model is English (ms-marco-MiniLM-L-12-v2): on Chinese it lowered recall, so a
//! question that is not in the Latin script is not reranked, and the answer says so. On the
//! CPU scoring 30 candidates costs a few hundred milliseconds, so a rerank has a deadline:
//! past it (or when the node's rerank queue, or the tenant's share of it, is full) the hybrid
//! order is returned as it is, with the reason, and counted. The model runs in the
//! inference crate's [`RerankPool`]: a supervisor actor with one worker per device, a fair
//! bounded queue of searches (one lane per tenant), the searches that wait scored together in
//! one batch, and a worker that fails restarted with the searches it held queued again. Jobs
//! still queued at their deadline are skipped there. Nothing here logs texts or scores.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engram_inference::{RerankCounters, RerankLoad, RerankPool, RerankPoolConfig, Reranker};
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// The constant of the reciprocal-rank fusion of the reranker's and the hybrid order.
pub const FUSION_K: f32 = 20.0;

/// How a node reranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RerankSettings {
    /// How many of the first hybrid candidates are scored (the rest keep their order after
    /// them).
    pub candidates: usize,
    /// How long a search waits for its scores (`None`: as long as it takes).
    pub deadline: Option<Duration>,
    /// Reranks queued at most; past it (or past a tenant's half of it) a search is answered
    /// unreranked (`busy`).
    pub queue: usize,
}

impl Default for RerankSettings {
    fn default() -> Self {
        RerankSettings {
            candidates: 30,
            deadline: Some(Duration::from_secs(2)),
            queue: 4,
        }
    }
}

/// Why a search asked to be reranked was not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RerankFallback {
    /// The question is not English (the model is).
    NotEnglish,
    /// The node's rerank queue was full.
    Busy,
    /// The scores did not come within the deadline.
    Deadline,
    /// The node has no reranker, or it failed.
    Unavailable,
}

impl RerankFallback {
    /// The name used in responses and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RerankFallback::NotEnglish => "not-english",
            RerankFallback::Busy => "busy",
            RerankFallback::Deadline => "deadline",
            RerankFallback::Unavailable => "unavailable",
        }
    }
}

/// The reranker's counters.
#[derive(Debug, Default)]
pub struct RerankMetrics {
    /// The pool's: searches queued now, pairs scored, batches, time scoring, restarts.
    pub pool: Arc<RerankCounters>,
    /// Searches reranked.
    pub reranked: AtomicU64,
    /// Searches not reranked: the question was not English.
    pub fallback_not_english: AtomicU64,
    /// ... the queue was full.
    pub fallback_busy: AtomicU64,
    /// ... past the deadline.
    pub fallback_deadline: AtomicU64,
    /// ... the model failed.
    pub fallback_unavailable: AtomicU64,
}

impl RerankMetrics {
    fn count(&self, fallback: RerankFallback) {
        let counter = match fallback {
            RerankFallback::NotEnglish => &self.fallback_not_english,
            RerankFallback::Busy => &self.fallback_busy,
            RerankFallback::Deadline => &self.fallback_deadline,
            RerankFallback::Unavailable => &self.fallback_unavailable,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Searches one batch carries at most on a GPU, in candidates: a batch takes the candidates
/// of this many searches (a larger search goes alone).
const BATCH_SEARCHES: usize = 8;

/// The share of the rerank queue (percent) one tenant may hold.
const TENANT_SHARE_PERCENT: u8 = 50;

/// A handle to the node's reranker pool.
#[derive(Clone)]
pub struct RerankService {
    pool: RerankPool,
    settings: RerankSettings,
    metrics: Arc<RerankMetrics>,
}

impl std::fmt::Debug for RerankService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RerankService")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RerankService {
    /// Starts the pool with one worker, whose model `load` gives; it loads it at its first
    /// job (a node that never reranks never reads the model). A model that fails to load
    /// answers every job `unavailable`.
    pub fn start(
        load: impl FnOnce() -> engram_inference::Result<Reranker> + Send + 'static,
        settings: RerankSettings,
    ) -> Result<Self> {
        Ok(RerankService::start_on(vec![Box::new(load)], settings))
    }

    /// Starts the pool with one worker per entry of `loads` (one per device), each loading
    /// its model at its first job.
    pub fn start_on(loads: Vec<RerankLoad>, settings: RerankSettings) -> Self {
        let config = RerankPoolConfig {
            queue_capacity: settings.queue.max(1),
            tenant_share_percent: TENANT_SHARE_PERCENT,
            max_batch_pairs: settings.candidates.max(1) * BATCH_SEARCHES,
            // On the CPU a batch of searches costs what they cost one by one, and each waits
            // for the last (docs/benchmarks.md, "Search").
            batch_on_cpu: false,
        };
        let pool = RerankPool::new(loads, &config);
        let metrics = Arc::new(RerankMetrics {
            pool: Arc::clone(pool.counters()),
            ..RerankMetrics::default()
        });
        RerankService {
            pool,
            settings,
            metrics,
        }
    }

    /// The counters.
    pub fn metrics(&self) -> &RerankMetrics {
        &self.metrics
    }

    /// The settings.
    pub fn settings(&self) -> &RerankSettings {
        &self.settings
    }

    /// Why `query` is not reranked whatever its candidates (counted): it is not English.
    pub fn refuses(&self, query: &str) -> Option<RerankFallback> {
        if is_english(query) {
            return None;
        }
        self.metrics.count(RerankFallback::NotEnglish);
        Some(RerankFallback::NotEnglish)
    }

    /// [`RerankService::rerank_for`] for a caller without a tenant (all such calls share one
    /// lane of the queue).
    pub async fn rerank<T>(
        &self,
        query: &str,
        hits: Vec<(T, f32)>,
        text: impl Fn(&T) -> String,
    ) -> (Vec<(T, f32)>, Option<RerankFallback>) {
        self.rerank_for("", query, hits, text).await
    }

    /// `hits` (best first) with their first [`RerankSettings::candidates`] reordered by the
    /// fusion of the reranker's order and theirs, each given its fused score; or `hits` as
    /// they are and why. `text` is a hit's text; `tenant` is the caller, whose lane and share
    /// of the queue the search takes.
    pub async fn rerank_for<T>(
        &self,
        tenant: &str,
        query: &str,
        mut hits: Vec<(T, f32)>,
        text: impl Fn(&T) -> String,
    ) -> (Vec<(T, f32)>, Option<RerankFallback>) {
        if let Some(refused) = self.refuses(query) {
            return (hits, Some(refused));
        }
        let n = hits.len().min(self.settings.candidates);
        if n == 0 {
            return (hits, None);
        }
        let passages: Vec<String> = hits[..n].iter().map(|(h, _)| text(h)).collect();
        let expires = self.settings.deadline.map(|d| Instant::now() + d);
        let scored = self.pool.score(tenant, query, passages, expires);
        let outcome = match self.settings.deadline {
            Some(deadline) => match tokio::time::timeout(deadline, scored).await {
                Ok(answer) => Ok(answer),
                Err(_) => Err(RerankFallback::Deadline),
            },
            None => Ok(scored.await),
        };
        let outcome = match outcome {
            Ok(Err(engram_inference::Error::Overloaded { .. })) => Err(RerankFallback::Busy),
            Ok(Err(engram_inference::Error::Expired)) => Err(RerankFallback::Deadline),
            Ok(Err(
                engram_inference::Error::PoolClosed | engram_inference::Error::WorkerFailed,
            )) => Err(RerankFallback::Unavailable),
            Ok(answer) => Ok(answer.map_err(|err| err.to_string())),
            Err(fallback) => Err(fallback),
        };
        let scores = match outcome {
            Ok(Ok(scores)) if scores.len() == n => scores,
            Ok(Ok(_)) => Vec::new(),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "the reranker failed; the hybrid order stands");
                Vec::new()
            }
            Err(fallback) => {
                self.metrics.count(fallback);
                return (hits, Some(fallback));
            }
        };
        if scores.len() != n {
            self.metrics.count(RerankFallback::Unavailable);
            return (hits, Some(RerankFallback::Unavailable));
        }
        let rest = hits.split_off(n);
        let mut fused = fuse(hits, &scores);
        fused.extend(rest);
        self.metrics.reranked.fetch_add(1, Ordering::Relaxed);
        (fused, None)
    }
}

/// `hits` (best first) reordered by the reciprocal-rank fusion of their order and the order
/// of `scores` (one a hit), each given its fused score; ties keep the hits' order.
pub fn fuse<T>(hits: Vec<(T, f32)>, scores: &[f32]) -> Vec<(T, f32)> {
    let mut by_score: Vec<usize> = (0..scores.len()).collect();
    by_score.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut rank = vec![0_usize; scores.len()];
    for (r, &i) in by_score.iter().enumerate() {
        rank[i] = r;
    }
    let fused: Vec<f32> = (0..scores.len())
        .map(|i| 1.0 / (FUSION_K + 1.0 + rank[i] as f32) + 1.0 / (FUSION_K + 1.0 + i as f32))
        .collect();
    let mut order: Vec<usize> = (0..fused.len()).collect();
    order.sort_by(|&a, &b| fused[b].total_cmp(&fused[a]));
    let mut slots: Vec<Option<T>> = hits.into_iter().map(|(h, _)| Some(h)).collect();
    order
        .into_iter()
        .filter_map(|i| Some((slots[i].take()?, fused[i])))
        .collect()
}

/// Whether `text` is written in the Latin script (at least nine letters in ten ASCII), which
/// the English reranker reads; Chinese, Japanese, Korean or Cyrillic text is not.
pub fn is_english(text: &str) -> bool {
    let letters = text.chars().filter(|c| c.is_alphabetic()).count();
    let ascii = text.chars().filter(char::is_ascii_alphabetic).count();
    ascii > 0 && ascii * 10 >= letters * 9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_latin_script_questions_are_english() {
        assert!(is_english("When did Caroline go to the support group?"));
        assert!(is_english("what's my café's name"));
        assert!(!is_english("我上周预约的是几点？"));
        assert!(!is_english("Caroline 上周去了哪里"));
        assert!(!is_english("Где мой заказ?"));
        assert!(!is_english("2023-05-07?"));
    }

    /// The fusion's order: a hit both orders put first stays first; a hit the reranker puts
    /// first from the third place rises above the one the hybrid order put second; the
    /// fused scores fall along the new order.
    #[test]
    fn fusion_weighs_both_orders() {
        let hits = vec![("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6)];
        let fused = fuse(hits, &[5.0, -3.0, 6.0, -9.0]);
        let order: Vec<&str> = fused.iter().map(|(h, _)| *h).collect();
        assert_eq!(order, vec!["a", "c", "b", "d"]);
        assert!(fused.windows(2).all(|w| w[0].1 >= w[1].1));
        // Equal scores keep the hybrid order.
        let tied = fuse(vec![("x", 0.0), ("y", 0.0)], &[1.0, 1.0]);
        assert_eq!(tied.iter().map(|(h, _)| *h).collect::<Vec<_>>(), ["x", "y"]);
    }
}
