//! The user actors' view of the node's embedding pool: passages (what is stored) and queries
//! (what is searched for) in, vectors out, with the pool's errors mapped to the actors' own.
//!
//! Embeddings are always computed outside a write transaction, never inside it. With the
//! pipeline ([`crate::pipeline`]) a write embeds nothing but the short topic phrases the
//! conflict rule compares; its passages are embedded after the commit, in the background
//! class of the pool. Every call names the user's tenant, the pool's fairness key: a tenant
//! holds at most its share of the queue and takes its turn in batches with the others.
//!
//! Every text is embedded as a gateway sees it ([`pii::for_gateway`]): ID, card, passport and
//! mobile numbers masked.
//!
//! Queries and topic phrases go through a node-wide cache (bounded LRU keyed by the role and
//! the SHA-256 of the tenant and the text; the model is the embedder's own) and in the pool's
//! interactive class. Keyed by the tenant, its hit or miss never tells one tenant whether
//! another asked a text (an answer's latency would: a hit skips the encoder). A query is given [`Embedder::query_deadline`]: past it the read goes on without the
//! vector ([`QueryVector::Fallback`]). A query still queued in the pool at its deadline is
//! skipped there (nobody waits for it, and under overload the queue would otherwise fill with
//! such queries and refuse fresh ones); one already being embedded still fills the cache for
//! the next read of the same text.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engram_inference::{EmbeddingPool, ModelKind, Priority, TextRole};
use lru::LruCache;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::pii;

/// Query and topic embeddings a node caches, by default.
pub const DEFAULT_CACHE_ENTRIES: usize = 10_000;

pub use crate::model::fallback::Fallback;

/// A query's embedding, or why the read goes on without it.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryVector {
    /// Embedded (or found in the cache).
    Embedded(Arc<[f32]>),
    /// Ranked by words and priors instead.
    Fallback(Fallback),
}

/// Counters of the cache and the query deadline.
#[derive(Debug, Default)]
pub struct EmbedMetrics {
    /// Query or topic embeddings found in the cache.
    pub cache_hits: AtomicU64,
    /// Query or topic embeddings computed (not in the cache).
    pub cache_misses: AtomicU64,
    /// Reads ranked without their query's vector: past the deadline.
    pub fallback_deadline: AtomicU64,
    /// ... refused by the pool.
    pub fallback_overloaded: AtomicU64,
    /// ... the pool closed or failed.
    pub fallback_unavailable: AtomicU64,
}

type CacheKey = (bool, [u8; 32]);

/// A handle to the node's embedding pool, the model it runs and the node's cache.
#[derive(Clone)]
pub struct Embedder {
    pool: EmbeddingPool,
    model: ModelKind,
    cache: Arc<Mutex<LruCache<CacheKey, Arc<[f32]>>>>,
    query_deadline: Option<Duration>,
    metrics: Arc<EmbedMetrics>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model", &self.model)
            .field("query_deadline", &self.query_deadline)
            .finish_non_exhaustive()
    }
}

/// The cache's key of `text` embedded in `role` for `tenant`: the tenant's length first, so
/// no tenant and text run into another's.
fn cache_key(tenant: &str, role: TextRole, text: &str) -> CacheKey {
    let digest = Sha256::new()
        .chain_update((tenant.len() as u64).to_le_bytes())
        .chain_update(tenant.as_bytes())
        .chain_update(text.as_bytes())
        .finalize();
    (role == TextRole::Query, digest.into())
}

impl Embedder {
    /// Wraps a running pool of `model` encoders, with a cache of
    /// [`DEFAULT_CACHE_ENTRIES`] and no query deadline (a read waits for its vector).
    pub fn new(pool: EmbeddingPool, model: ModelKind) -> Self {
        Embedder {
            pool,
            model,
            cache: Arc::new(Mutex::new(LruCache::new(
                NonZeroUsize::new(DEFAULT_CACHE_ENTRIES).expect("non-zero"),
            ))),
            query_deadline: None,
            metrics: Arc::new(EmbedMetrics::default()),
        }
    }

    /// The same embedder with a cache of `entries` query and topic embeddings (at least 1).
    pub fn with_cache(mut self, entries: usize) -> Self {
        self.cache = Arc::new(Mutex::new(LruCache::new(
            NonZeroUsize::new(entries.max(1)).expect("at least 1"),
        )));
        self
    }

    /// The same embedder with a deadline for query embeddings (`None`: wait).
    pub fn with_query_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.query_deadline = deadline;
        self
    }

    /// The pool (for its metrics and shutdown).
    pub fn pool(&self) -> &EmbeddingPool {
        &self.pool
    }

    /// The cache's and the deadline's counters.
    pub fn metrics(&self) -> &EmbedMetrics {
        &self.metrics
    }

    /// How long a read waits for its query's embedding (`None`: as long as it takes).
    pub fn query_deadline(&self) -> Option<Duration> {
        self.query_deadline
    }

    /// The model's name, stored with every embedding.
    pub fn model_name(&self) -> &'static str {
        self.model.name()
    }

    /// The cosine above which two topic phrases are the same topic.
    pub fn topic_threshold(&self) -> f32 {
        self.model.same_topic_threshold()
    }

    /// Embeddings of stored texts of a user of `tenant`, in order, in the interactive class
    /// (a write waits for them).
    pub async fn passages(&self, tenant: &str, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        self.embed(
            tenant,
            texts,
            TextRole::Passage,
            Priority::Interactive,
            None,
        )
        .await
    }

    /// Embeddings of stored texts of `tenant`, in order, in the background class (the
    /// pipeline's: nobody waits).
    pub async fn background(&self, tenant: &str, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        self.embed(tenant, texts, TextRole::Passage, Priority::Background, None)
            .await
    }

    /// Passage embeddings of short texts (topic phrases), in order, through the cache: shared
    /// with it, so the actors that hold them hold no copy.
    pub async fn cached_passages(&self, tenant: &str, texts: &[String]) -> Result<Vec<Arc<[f32]>>> {
        self.cached(tenant, texts, TextRole::Passage).await
    }

    /// Query embeddings of questions compared with questions (the tenant's shared sets: a
    /// symmetric task, so both sides are embedded as queries), in order, through the cache and
    /// without a deadline (a write, or a lookup that waits for its vector).
    pub async fn questions(&self, tenant: &str, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let vectors = self.cached(tenant, texts, TextRole::Query).await?;
        Ok(vectors.iter().map(|v| v.to_vec()).collect())
    }

    async fn cached(
        &self,
        tenant: &str,
        texts: &[String],
        role: TextRole,
    ) -> Result<Vec<Arc<[f32]>>> {
        let keys: Vec<CacheKey> = texts.iter().map(|t| cache_key(tenant, role, t)).collect();
        let mut found: Vec<Option<Arc<[f32]>>> = {
            let mut cache = self.cache.lock();
            keys.iter().map(|k| cache.get(k).cloned()).collect()
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| found[i].is_none()).collect();
        self.count_lookups(texts.len() - missing.len(), missing.len());
        if !missing.is_empty() {
            let batch = missing.iter().map(|&i| texts[i].clone()).collect();
            let vectors = self
                .embed(tenant, batch, role, Priority::Interactive, None)
                .await?;
            let mut cache = self.cache.lock();
            for (i, vector) in missing.into_iter().zip(vectors) {
                let vector: Arc<[f32]> = vector.into();
                cache.put(keys[i], Arc::clone(&vector));
                found[i] = Some(vector);
            }
        }
        Ok(found
            .into_iter()
            .map(|v| v.unwrap_or_else(|| Arc::from(Vec::new())))
            .collect())
    }

    /// The embedding of a search query of a user of `tenant`, from the cache or the pool,
    /// within the query deadline.
    pub async fn query(&self, tenant: &str, text: &str) -> QueryVector {
        let key = cache_key(tenant, TextRole::Query, text);
        if let Some(vector) = self.cache.lock().get(&key).cloned() {
            self.count_lookups(1, 0);
            return QueryVector::Embedded(vector);
        }
        self.count_lookups(0, 1);
        let this = self.clone();
        let (tenant, text) = (tenant.to_owned(), text.to_owned());
        // Still queued at the deadline, the query is skipped: nobody waits for it any more.
        let expires = self
            .query_deadline
            .map(|deadline| Instant::now() + deadline);
        // A task of its own, so an embedding already running when the deadline passes still
        // fills the cache.
        let task = tokio::spawn(async move {
            let mut vectors = this
                .embed(
                    &tenant,
                    vec![text],
                    TextRole::Query,
                    Priority::Interactive,
                    expires,
                )
                .await?;
            let vector: Arc<[f32]> = vectors.pop().unwrap_or_default().into();
            this.cache.lock().put(key, Arc::clone(&vector));
            Ok::<_, Error>(vector)
        });
        let outcome = match self.query_deadline {
            Some(deadline) => tokio::time::timeout(deadline, task).await.ok(),
            None => Some(task.await),
        };
        let fallback = match outcome {
            Some(Ok(Ok(vector))) => return QueryVector::Embedded(vector),
            None => Fallback::Deadline,
            Some(Ok(Err(Error::Overloaded(_)))) => Fallback::Overloaded,
            Some(Ok(Err(_))) if expires.is_some_and(|at| Instant::now() >= at) => {
                Fallback::Deadline
            }
            Some(Ok(Err(_)) | Err(_)) => Fallback::Unavailable,
        };
        let counter = match fallback {
            Fallback::Deadline => &self.metrics.fallback_deadline,
            Fallback::Overloaded => &self.metrics.fallback_overloaded,
            Fallback::Unavailable => &self.metrics.fallback_unavailable,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        QueryVector::Fallback(fallback)
    }

    /// Whether the cache holds the embedding of a search query of a user of `tenant` (a
    /// look that neither counts nor refreshes it).
    pub fn holds_query(&self, tenant: &str, text: &str) -> bool {
        self.cache
            .lock()
            .contains(&cache_key(tenant, TextRole::Query, text))
    }

    /// Forgets every cached embedding (a user was forgotten: their queries may be cached).
    pub fn clear_cache(&self) {
        self.cache.lock().clear();
    }

    fn count_lookups(&self, hits: usize, misses: usize) {
        self.metrics
            .cache_hits
            .fetch_add(hits as u64, Ordering::Relaxed);
        self.metrics
            .cache_misses
            .fetch_add(misses as u64, Ordering::Relaxed);
    }

    async fn embed(
        &self,
        tenant: &str,
        texts: Vec<String>,
        role: TextRole,
        priority: Priority,
        expires: Option<Instant>,
    ) -> Result<Vec<Vec<f32>>> {
        let n = texts.len();
        // A vector is computed from the text as a gateway sees it: no identifier's hidden
        // digits reach a vector (a search by vector could tell a right guess from a wrong one).
        let texts = texts.iter().map(|t| pii::for_gateway(t)).collect();
        use engram_inference::Error as E;
        let vectors = match expires {
            Some(at) => {
                self.pool
                    .embed_before(tenant, texts, role, priority, at)
                    .await
            }
            None => self.pool.embed_with(tenant, texts, role, priority).await,
        }
        .map_err(|err| match err {
            E::Overloaded { .. } => Error::Overloaded(err.to_string()),
            E::PoolClosed | E::Expired => Error::Unavailable(err.to_string()),
            E::ModelMissing { .. }
            | E::Io { .. }
            | E::Format { .. }
            | E::Tokenizer { .. }
            | E::Torch(_)
            | E::Quantise(_)
            | E::DeviceUnavailable { .. }
            | E::WorkerFailed
            | E::BatchFailed(_)
            | E::Unfinished { .. }
            | E::PoolStart { .. } => Error::Internal(format!("embedding failed: {err}")),
        })?;
        if vectors.len() == n {
            Ok(vectors)
        } else {
            Err(Error::Internal(format!(
                "the embedding pool returned {} vectors for {n} texts",
                vectors.len()
            )))
        }
    }
}
