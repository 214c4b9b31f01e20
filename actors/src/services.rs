//! The node-wide handles every user actor shares: storage, the clock, the entity extractor,
//! settings and counters. Passed explicitly (no process-global state), so a test can run
//! several nodes' worth of actors in one process.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use engram_storage::types::ArchiveMode;
use engram_storage::{Keyspace, Store};

use crate::clock::SharedClock;
use crate::distillation::Distillation;
use crate::embed::Embedder;
use crate::model::entities::EntityExtractor;
use crate::model::index::IndexParams;
use crate::model::policy::DAY_MS;
use crate::ownership::Ownership;
use crate::pipeline::Pipeline;
use crate::placement::{LogPepper, UserKey};

/// Versions kept of each intent type of a user, by default.
pub const DEFAULT_INTENT_VERSIONS: usize = 100;

/// Live user actors a node holds at most, by default (about 30 KB each, plus their records).
pub const DEFAULT_MAX_ACTORS: usize = 20_000;
/// Memory records a node's user actors cache at most, by default (a record with its
/// 384-dimension embedding and index entries takes a few KB).
pub const DEFAULT_MAX_CACHED_RECORDS: u64 = 1_000_000;

/// Settings of the user actors.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// A user actor idle this long is stopped; its state is reloaded from storage on next use.
    pub idle_timeout: Duration,
    /// How long raw turns are kept in their sessions, in milliseconds; the retention job
    /// deletes older ones, keeping what the tenant's archive mode says.
    pub retention_ms: i64,
    /// What the archive keeps of a turn retention deletes, unless the tenant says otherwise:
    /// nothing (the default), digests or the full text.
    pub archive: ArchiveMode,
    /// Tenants whose archive mode differs from `archive`.
    pub tenant_archive: HashMap<String, ArchiveMode>,
    /// How long an archived turn is kept (from its creation) before it is purged, in
    /// milliseconds; at least `retention_ms`.
    pub archive_retention_ms: i64,
    /// Number of shards (users are grouped under one supervisor per shard).
    pub shards: u32,
    /// Restarts of one user's actor allowed within `restart_window` before the supervisor
    /// leaves it stopped (the next request starts it again).
    pub max_restarts: u32,
    /// The window of `max_restarts`.
    pub restart_window: Duration,
    /// Tuning of each user's memory index.
    pub index: IndexParams,
    /// The circuit breaker of sensitive reads.
    pub breaker: crate::breaker::Policy,
    /// Versions kept of each intent type of a user (at least 2); older ones are removed as
    /// new ones are written.
    pub intent_versions: usize,
    /// How long a write's idempotency entry (its stored acknowledgement, replayed to a retry
    /// with the same request id and key) is kept, in milliseconds.
    pub idempotency_retention_ms: i64,
    /// Live user actors a node holds at most; beyond, the least recently used is evicted.
    pub max_actors: usize,
    /// Memory records a node's live user actors cache at most; beyond, the least recently
    /// used actor is evicted.
    pub max_cached_records: u64,
    /// The secret of the pseudonyms logs name users by.
    pub log_pepper: LogPepper,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            idle_timeout: Duration::from_secs(300),
            retention_ms: 30 * DAY_MS,
            archive: ArchiveMode::Off,
            tenant_archive: HashMap::new(),
            archive_retention_ms: 1826 * DAY_MS,
            shards: 1024,
            max_restarts: 3,
            restart_window: Duration::from_secs(10),
            index: IndexParams::default(),
            breaker: crate::breaker::Policy::default(),
            intent_versions: DEFAULT_INTENT_VERSIONS,
            idempotency_retention_ms: DAY_MS,
            max_actors: DEFAULT_MAX_ACTORS,
            max_cached_records: DEFAULT_MAX_CACHED_RECORDS,
            log_pepper: LogPepper::default(),
        }
    }
}

impl Settings {
    /// What the archive keeps of `tenant`'s turns past retention.
    pub fn archive_mode(&self, tenant: &str) -> ArchiveMode {
        self.tenant_archive
            .get(tenant)
            .copied()
            .unwrap_or(self.archive)
    }
}

/// Counters of the actor layer, exported as metrics by the node.
#[derive(Debug, Default)]
pub struct Metrics {
    /// User actors started (first use or after passivation).
    pub actors_started: AtomicU64,
    /// User actors stopped for being idle.
    pub passivations: AtomicU64,
    /// User actors that failed.
    pub failures: AtomicU64,
    /// User actors restarted by their supervisor.
    pub restarts: AtomicU64,
    /// Requests retried because the user's actor stopped while they were queued.
    pub redeliveries: AtomicU64,
    /// Context reads and searches answered without the query's embedding (past the query
    /// deadline, or the pool overloaded or closed: ranked by words and priors alone).
    pub contexts_without_vector: AtomicU64,
    /// Memory records loaded without a usable embedding (none stored, or another model's).
    pub records_without_vector: AtomicU64,
    /// User actors stopped to make room for others (the node held `max-actors` users, or
    /// `max-cached-records` records).
    pub evictions: AtomicU64,
    /// Requests refused because the node was full and no user actor could be evicted.
    pub admissions_refused: AtomicU64,
    /// Memory records cached by the node's live user actors (a gauge).
    pub cached_records: AtomicU64,
    /// Sensitive reads refused by the breaker (contexts withheld instead are counted too).
    pub sensitive_refusals: AtomicU64,
    /// Resident ID and passport numbers not anchored because the node has no key service
    /// (identity anchors need keyed hashes; see `engram_storage::data::anchor`).
    pub anchors_unkeyed: AtomicU64,
}

/// What every user actor of a node shares.
#[derive(Clone)]
pub struct Services {
    /// The store.
    pub store: Store,
    /// The key layout.
    pub keyspace: Keyspace,
    /// The injected clock.
    pub clock: SharedClock,
    /// The entity extractor (jieba with the business lexicon).
    pub extractor: Arc<EntityExtractor>,
    /// The embedding pool, if the node embeds (`None`: ranking by words and priors only).
    pub embedder: Option<Embedder>,
    /// The inference pipeline, when embeddings follow the writes (`None` with an embedder:
    /// a write waits for its embeddings and stores them in its own transaction).
    pub pipeline: Option<Pipeline>,
    /// Intent distillation (`None`: intents only as the gateway writes them).
    pub distillation: Option<Distillation>,
    /// The search's English reranker (`None`: searches keep the hybrid order; one that asks
    /// for a rerank is told `unavailable`).
    pub reranker: Option<crate::rerank::RerankService>,
    /// The shards this node serves under leases; every write is fenced by its shard's
    /// epoch. `None` only for a process that is the sole user of its store (in-process tests
    /// and embedded use): it serves every shard and writes unfenced. A node always has one.
    pub ownership: Option<Arc<Ownership>>,
    /// Settings.
    pub settings: Settings,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

impl Services {
    /// Whether writes leave their passages to the pipeline (an embedder and a pipeline).
    pub fn writes_behind(&self) -> bool {
        self.embedder.is_some() && self.pipeline.is_some()
    }

    /// The pseudonym logs name `key`'s user by ([`UserKey::log_id`]).
    pub fn log_id(&self, key: &UserKey) -> String {
        key.log_id(&self.settings.log_pepper)
    }
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("store", &self.store)
            .field("embedder", &self.embedder)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
