//! The search's reranker: a cross-encoder reads the question with each of the
//! first hybrid candidates and scores them; the two orders are fused by reciprocal rank
//! (`k = 20`, equal weights), which on LoCoMo's checking half beat either order alone
//! (docs/benchmarks.md, "A cross-encoder reranker"). It is opt-in per search
//! (`SearchQuery::rerank`) and runs on a node with `[reranker] enabled`.
//!
//! The model is English (ms-marco-MiniLM-L-12-v2): on Chinese it lowered recall, so a
//! question that is not in the Latin script is not reranked, and the answer says so. On the
//! CPU scoring 30 candidates costs a few hundred milliseconds, so a rerank has a deadline:
//! past it (or when the node's rerank queue is full) the hybrid order is returned as it is,
//! with the reason, and counted. One worker thread owns the model; jobs still queued at
//! their deadline are skipped there. Nothing here logs texts or scores.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use engram_inference::Reranker;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::error::{Error, Result};

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
    /// Reranks queued at most; past it a search is answered unreranked (`busy`).
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
    /// Reranks queued now, not yet taken by the worker (a gauge).
    pub queued: AtomicU64,
    /// Searches reranked.
    pub reranked: AtomicU64,
    /// (question, candidate) pairs scored.
    pub pairs: AtomicU64,
    /// Microseconds the worker spent scoring.
    pub busy_micros: AtomicU64,
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

/// One question and its candidates' texts, scored by the worker.
struct Job {
    query: String,
    passages: Vec<String>,
    expires: Option<Instant>,
    reply: oneshot::Sender<std::result::Result<Vec<f32>, String>>,
}

/// A handle to the node's reranker worker.
#[derive(Clone)]
pub struct RerankService {
    jobs: SyncSender<Job>,
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
    /// Starts the worker thread that owns the reranker `load` gives; it loads it at its first
    /// job (a node that never reranks never reads the model) and ends when the last handle
    /// is dropped. A model that fails to load answers every job `unavailable`.
    pub fn start(
        load: impl FnOnce() -> engram_inference::Result<Reranker> + Send + 'static,
        settings: RerankSettings,
    ) -> Result<Self> {
        let (jobs, queue) = mpsc::sync_channel::<Job>(settings.queue.max(1));
        let metrics = Arc::new(RerankMetrics::default());
        let counters = Arc::clone(&metrics);
        std::thread::Builder::new()
            .name("engram-rerank".into())
            .spawn(move || {
                let mut load = Some(load);
                let mut model: Option<std::result::Result<Reranker, String>> = None;
                while let Ok(job) = queue.recv() {
                    counters.queued.fetch_sub(1, Ordering::Relaxed);
                    if job.expires.is_some_and(|at| Instant::now() >= at) {
                        // Nobody waits for it any more.
                        continue;
                    }
                    let reranker = model.get_or_insert_with(|| {
                        let load = load.take().expect("loaded once");
                        load().map_err(|err| {
                            tracing::error!(error = %err, "the reranker did not load; searches keep the hybrid order");
                            format!("the reranker did not load: {err}")
                        })
                    });
                    let reranker = match reranker {
                        Ok(reranker) => reranker,
                        Err(err) => {
                            let _ = job.reply.send(Err(err.clone()));
                            continue;
                        }
                    };
                    let started = Instant::now();
                    let passages: Vec<&str> = job.passages.iter().map(String::as_str).collect();
                    let scores = reranker
                        .score(&job.query, &passages)
                        .map_err(|err| err.to_string());
                    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                    counters.busy_micros.fetch_add(micros, Ordering::Relaxed);
                    counters
                        .pairs
                        .fetch_add(passages.len() as u64, Ordering::Relaxed);
                    let _ = job.reply.send(scores);
                }
            })
            .map_err(|err| Error::Internal(format!("starting the reranker thread: {err}")))?;
        Ok(RerankService {
            jobs,
            settings,
            metrics,
        })
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

    /// `hits` (best first) with their first [`RerankSettings::candidates`] reordered by the
    /// fusion of the reranker's order and theirs, each given its fused score; or `hits` as
    /// they are and why. `text` is a hit's text.
    pub async fn rerank<T>(
        &self,
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
        let (reply, answer) = oneshot::channel();
        let job = Job {
            query: query.to_owned(),
            passages: hits[..n].iter().map(|(h, _)| text(h)).collect(),
            expires: self.settings.deadline.map(|d| Instant::now() + d),
            reply,
        };
        // Counted before it is sent: the worker counts it out when it takes it.
        self.metrics.queued.fetch_add(1, Ordering::Relaxed);
        let fallback = match self.jobs.try_send(job) {
            Err(TrySendError::Full(_)) => Some(RerankFallback::Busy),
            Err(TrySendError::Disconnected(_)) => Some(RerankFallback::Unavailable),
            Ok(()) => None,
        };
        if fallback.is_some() {
            self.metrics.queued.fetch_sub(1, Ordering::Relaxed);
        }
        let outcome = match (fallback, self.settings.deadline) {
            (Some(fallback), _) => Err(fallback),
            (None, Some(deadline)) => match tokio::time::timeout(deadline, answer).await {
                Ok(answer) => answer.map_err(|_| RerankFallback::Deadline),
                Err(_) => Err(RerankFallback::Deadline),
            },
            (None, None) => answer.await.map_err(|_| RerankFallback::Unavailable),
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
