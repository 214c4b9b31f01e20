//! `[inference]`: the embedding pool that embeds memories before they are written and
//! queries before they are searched. Its defaults are the pool's own
//! ([`PoolConfig::default`]), so the two cannot disagree.

use std::path::PathBuf;
use std::time::Duration;

use engram_inference::{DeviceChoice, EncoderConfig, ModelKind, PoolConfig};
use engram_storage::vector::VectorConfig;
use serde::{Deserialize, Serialize};

/// `[inference]`: the embedding pool that embeds memories before they are written and
/// queries before they are searched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct InferenceConfig {
    /// Whether the node embeds (false: memories are ranked by words and priors only).
    pub enabled: bool,
    /// The encoder.
    pub model: ModelKind,
    /// Where `.ci/models` installed the models (default `$ENGRAM_CACHE/models`).
    pub model_dir: Option<PathBuf>,
    /// Where forward passes run: `"auto"` (CUDA when present), `"cpu"`, or `{ cuda = N }`.
    pub device: DeviceChoice,
    /// Workers, each with its own copy of the model.
    pub workers: usize,
    /// The most texts in one batch.
    pub max_batch: usize,
    /// How long the oldest queued text may wait for a batch to fill.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// The most texts waiting; more are refused with 503 (retry with the same request id).
    pub queue_capacity: usize,
    /// The share of the queue, in percent, that one tenant may hold (more of its texts are
    /// refused while other tenants are still admitted).
    pub tenant_share_percent: u8,
    /// The most tokens in one forward pass (bounds activation memory).
    pub max_batch_tokens: usize,
    /// A user with at least this many vectors is searched through an HNSW graph; fewer are
    /// searched exactly.
    pub exact_search_below: usize,
}

impl Default for InferenceConfig {
    fn default() -> Self {
        let pool = PoolConfig::default();
        InferenceConfig {
            enabled: true,
            model: pool.encoder.model,
            model_dir: None,
            device: pool.encoder.device,
            workers: pool.workers,
            max_batch: pool.max_batch,
            max_wait: pool.max_wait,
            queue_capacity: pool.queue_capacity,
            tenant_share_percent: pool.tenant_share_percent,
            max_batch_tokens: pool.encoder.max_batch_tokens,
            exact_search_below: VectorConfig::default().exact_threshold,
        }
    }
}

impl InferenceConfig {
    /// The pool's configuration.
    pub fn pool(&self) -> PoolConfig {
        let defaults = EncoderConfig::default();
        PoolConfig {
            encoder: EncoderConfig {
                model_dir: self.model_dir.clone().unwrap_or(defaults.model_dir),
                model: self.model,
                device: self.device,
                max_batch_tokens: self.max_batch_tokens,
            },
            workers: self.workers,
            max_batch: self.max_batch,
            max_wait: self.max_wait,
            queue_capacity: self.queue_capacity,
            tenant_share_percent: self.tenant_share_percent,
        }
    }
}
