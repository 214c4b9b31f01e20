//! `[inference]`: the embedding pool that embeds memories after they are written (through
//! the pipeline) and queries before they are searched. Its defaults are the pool's and the
//! pipeline's own ([`PoolConfig::default`], [`PipelineConfig::default`]), so they cannot
//! disagree.

use std::path::PathBuf;
use std::time::Duration;

use engram_actors::pipeline::PipelineConfig;
use engram_inference::{
    BackgroundPriority, DeviceChoice, EncoderConfig, ModelKind, PoolConfig, Precision,
};
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
    /// The linear layers' weights: unset, the model's own default
    /// ([`ModelKind::default_precision`]: `"int8-rows"` for multilingual-e5-small, `"float32"`
    /// for the English encoders); `"float32"`, `"float16"` (CPU only), `"int8"` or
    /// `"int8-rows"` (both multilingual-e5-small on the CPU only).
    pub precision: Option<Precision>,
    /// Pairs of workers on one copy of the weights (one for what requests wait for, one for
    /// background batches); two by default, so two questions are embedded at once.
    pub workers: usize,
    /// The most texts in one batch.
    pub max_batch: usize,
    /// How long the oldest queued text may wait for a batch to fill; a text someone waits for
    /// (a question, a topic phrase) leaves at once while an interactive worker is idle.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// libtorch's threads for each pass of the encoder (0: one per core); see
    /// [`PoolConfig::intra_op_threads`].
    pub intra_op_threads: usize,
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
    /// The scheduling class of the pipeline's batches: `"idle"` (Linux `SCHED_IDLE`: only CPU
    /// time requests leave unused) or `"normal"`.
    pub background_priority: BackgroundPriority,
    /// While the machine is busy, the share of the time, in percent (1 to 100; 100: no
    /// limit), that idle-class background batches may take: each rests after it for the rest.
    pub background_busy_share_percent: u8,
    /// Whether a write leaves its passages to the pipeline (answers after its storage commit;
    /// the vectors follow) rather than waiting for them.
    pub write_behind: bool,
    /// How long a context or search waits for its query's embedding; past it, it ranks by
    /// words and priors and says so. A lone fresh question takes about 8 ms on two cores;
    /// 250 ms covers the queue of 32 clients asking at once (docs/benchmarks.md).
    #[serde(with = "humantime_serde")]
    pub query_deadline: Duration,
    /// Query and topic-phrase embeddings the node caches.
    pub query_cache_entries: usize,
    /// The pipeline that embeds what writes stored.
    pub pipeline: PipelineSection,
}

/// `[inference.pipeline]`: the per-node dispatcher of pending inference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct PipelineSection {
    /// Users with pending entries held in memory at most; storage holds the rest.
    pub max_users_in_memory: usize,
    /// Texts one round embeds at most.
    pub round_texts: usize,
    /// Entries of one user one round takes at most.
    pub entries_per_user: usize,
    /// Rounds running at once.
    pub rounds_in_flight: usize,
    /// How often the work index is scanned in any case (resumes what a dead node left).
    #[serde(with = "humantime_serde")]
    pub scan_interval: Duration,
}

impl Default for PipelineSection {
    fn default() -> Self {
        PipelineSection::from(PipelineConfig::default())
    }
}

impl From<PipelineConfig> for PipelineSection {
    fn from(p: PipelineConfig) -> Self {
        PipelineSection {
            max_users_in_memory: p.max_users_in_memory,
            round_texts: p.round_texts,
            entries_per_user: p.entries_per_user,
            rounds_in_flight: p.rounds_in_flight,
            scan_interval: p.scan_interval,
        }
    }
}

impl PipelineSection {
    /// The dispatcher's settings.
    pub fn config(&self) -> PipelineConfig {
        PipelineConfig {
            max_users_in_memory: self.max_users_in_memory,
            round_texts: self.round_texts,
            entries_per_user: self.entries_per_user,
            rounds_in_flight: self.rounds_in_flight,
            scan_interval: self.scan_interval,
        }
    }
}

impl Default for InferenceConfig {
    fn default() -> Self {
        let pool = PoolConfig::default();
        InferenceConfig {
            enabled: true,
            model: pool.encoder.model,
            model_dir: None,
            device: pool.encoder.device,
            precision: None,
            workers: pool.workers,
            max_batch: pool.max_batch,
            max_wait: pool.max_wait,
            intra_op_threads: pool.intra_op_threads,
            queue_capacity: pool.queue_capacity,
            tenant_share_percent: pool.tenant_share_percent,
            max_batch_tokens: pool.encoder.max_batch_tokens,
            exact_search_below: VectorConfig::default().exact_threshold,
            background_priority: pool.background_priority,
            background_busy_share_percent: pool.background_busy_share_percent,
            write_behind: true,
            query_deadline: Duration::from_millis(250),
            query_cache_entries: engram_actors::embed::DEFAULT_CACHE_ENTRIES,
            pipeline: PipelineSection::default(),
        }
    }
}

impl InferenceConfig {
    /// The precision the encoder runs in: the configured one, else the model's default.
    pub fn precision(&self) -> Precision {
        self.precision
            .unwrap_or_else(|| self.model.default_precision())
    }

    /// The pool's configuration.
    pub fn pool(&self) -> PoolConfig {
        let defaults = EncoderConfig::default();
        PoolConfig {
            encoder: EncoderConfig {
                model_dir: self.model_dir.clone().unwrap_or(defaults.model_dir),
                model: self.model,
                device: self.device,
                max_batch_tokens: self.max_batch_tokens,
                precision: self.precision(),
            },
            workers: self.workers,
            max_batch: self.max_batch,
            max_wait: self.max_wait,
            interactive_max_wait: Duration::ZERO,
            intra_op_threads: self.intra_op_threads,
            queue_capacity: self.queue_capacity,
            tenant_share_percent: self.tenant_share_percent,
            background_priority: self.background_priority,
            background_busy_share_percent: self.background_busy_share_percent,
        }
    }
}
