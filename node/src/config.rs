//! The node's configuration: the sections of `cluster.toml`, their defaults, loading (the TOML
//! file, then `ENGRAM__SECTION__KEY` environment overrides) and validation.
//!
//! `cluster.toml` at the workspace root is the reference: it holds every setting with its
//! default value, and a test checks that it parses, validates and equals [`Config::default`].
//! Unknown keys are rejected by name ([`ConfigError::UnknownKey`]), so a typo never silently
//! falls back to a default.
//!
//! This module only describes and checks settings; it opens no store, binds no socket and
//! reads no secret (the cluster cookie, certificates and keys are named by path here and read
//! by whoever uses them, `crate::secret` and `crate::tls`). Relative paths of files under
//! `[http]` and `[cluster]` are relative to `node.data-dir` ([`Config::file`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use engram_storage::RetryPolicy;
use engram_storage::sqlite::{GroupCommit, SqliteOptions, Synchronous};
use engram_storage::types::ArchiveMode;
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};

mod distillation;
mod error;
mod inference;
mod reranker;
mod security;
mod validate;

pub use distillation::DistillationSection;
pub use inference::InferenceConfig;
pub use reranker::RerankerSection;
pub use security::{ADMIN_KEY_ENV, AuditReads, LookupLimits, SecurityConfig};

pub use error::{ConfigError, Problem};

/// Prefix of environment overrides: `ENGRAM__HTTP__LISTEN` sets `[http] listen`.
pub const ENV_PREFIX: &str = "ENGRAM__";

/// The whole configuration of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Config {
    /// `[node]`: identity and local files.
    pub node: NodeConfig,
    /// `[http]`: the HTTP/JSON gateway.
    pub http: HttpConfig,
    /// `[cluster]`: transport, shards and liveness.
    pub cluster: ClusterConfig,
    /// `[storage]`: the backend and its settings.
    pub storage: StorageConfig,
    /// `[memory]`: the user actors and the memory model.
    pub memory: MemoryConfig,
    /// `[inference]`: the embedding pool.
    pub inference: InferenceConfig,
    /// `[distillation]`: intents from user messages (rules, then the generative model).
    pub distillation: DistillationSection,
    /// `[reranker]`: the English cross-encoder behind searches that ask for it.
    pub reranker: RerankerSection,
    /// `[jobs]`: scheduled maintenance.
    pub jobs: JobsConfig,
    /// `[log]`: logging.
    pub log: LogConfig,
    /// `[security]`: encryption at rest.
    pub security: SecurityConfig,
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id, unique in the cluster: letters, digits, `-` and `_`.
    pub id: String,
    /// Directory of the node's local files; relative to the working directory.
    pub data_dir: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            id: "node-1".to_owned(),
            data_dir: PathBuf::from("data"),
        }
    }
}

/// `[http]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct HttpConfig {
    /// Socket address the gateway listens on (`ip:port`).
    pub listen: String,
    /// Largest request body accepted, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// Requests served at once; more are shed with 503 and Retry-After.
    pub max_in_flight: usize,
    /// How long a graceful shutdown waits for in-flight requests and queued writes.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// How long a connection may take to send a request's whole head (request line and
    /// headers), counted from when it opened or its previous response was sent: a connection
    /// that sends partial headers, or sits idle between requests, this long is closed.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// PEM file of the gateway's certificate chain (the node's certificate first). With
    /// `tls-key-file`, the gateway serves HTTPS only; unset, plain HTTP.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the private key of `tls-cert-file` (mode 0600 or stricter).
    pub tls_key_file: Option<PathBuf>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:8080".to_owned(),
            max_body_bytes: 1024 * 1024,
            max_in_flight: 1024,
            shutdown_grace: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

/// `[memory]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct MemoryConfig {
    /// A user actor idle this long is stopped (its state is reloaded from storage on next use).
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// How long raw conversation turns are kept; the retention job deletes older ones (and
    /// their summaries), keeping what `archive` says.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// What the archive keeps of a turn the retention job deletes: `off` (nothing, the
    /// default), `digests` (keyed hashes of its texts, no text) or `full-text` (the sealed
    /// turn).
    pub archive: ArchiveMode,
    /// Tenants whose archive keeps something else than `archive` (`tenant = "full-text"`).
    pub tenant_archive: BTreeMap<String, ArchiveMode>,
    /// How long an archived turn is kept, from its creation; then it is purged. At least
    /// `retention`.
    #[serde(with = "humantime_serde")]
    pub archive_retention: Duration,
    /// Token budget of a context when the request names none.
    pub token_budget: usize,
    /// Extra business words for entity extraction (product names, internal metrics).
    pub lexicon: Vec<String>,
    /// Versions kept of each intent type of a user (at least 2); older ones are removed as
    /// new ones are written.
    pub intent_versions: usize,
    /// How long a write's idempotency entry is kept: a retry with the same request id and
    /// key within it replays the acknowledgement; later, entries are pruned.
    #[serde(with = "humantime_serde")]
    pub idempotency_retention: Duration,
    /// Live user actors a node holds at most: beyond, the least recently used one stops (its
    /// state is reloaded on next use); when all were used within the last second, 503.
    pub max_actors: usize,
    /// Memory records the live user actors of a node cache at most, enforced the same way.
    pub max_cached_records: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            idle_timeout: Duration::from_secs(300),
            retention: Duration::from_secs(30 * 24 * 3600),
            archive: ArchiveMode::Off,
            tenant_archive: BTreeMap::new(),
            archive_retention: Duration::from_secs(1826 * 24 * 3600),
            token_budget: 1200,
            lexicon: Vec::new(),
            intent_versions: engram_actors::services::DEFAULT_INTENT_VERSIONS,
            idempotency_retention: Duration::from_secs(24 * 3600),
            max_actors: engram_actors::services::DEFAULT_MAX_ACTORS,
            max_cached_records: engram_actors::services::DEFAULT_MAX_CACHED_RECORDS,
        }
    }
}

/// `[jobs]`: cron schedules (five fields, in `time-zone`) of the maintenance jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct JobsConfig {
    /// The time zone the schedules are read in: an IANA name such as `UTC` or
    /// `Asia/Shanghai` (daylight saving time included).
    pub time_zone: String,
    /// Expiry sweep: memory records past their TTL are expired, then purged.
    pub expiry_sweep: String,
    /// Retention: raw turns older than `memory.retention` are deleted (the archive keeps
    /// what `memory.archive` says); archived turns older than `memory.archive-retention` are
    /// purged.
    pub retention: String,
    /// Session cleanup: working-memory windows idle for 24 hours are closed (hourly, as the
    /// seed's working-memory session loop runs every 60 minutes).
    pub session_cleanup: String,
}

impl Default for JobsConfig {
    fn default() -> Self {
        let daily = "0 4 * * *".to_owned();
        JobsConfig {
            time_zone: "UTC".to_owned(),
            expiry_sweep: daily.clone(),
            retention: daily,
            session_cleanup: "0 * * * *".to_owned(),
        }
    }
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct ClusterConfig {
    /// Socket address of the cluster transport (`ip:port`).
    pub listen: String,
    /// Transport addresses (`host:port`) of nodes to dial at start.
    pub seeds: Vec<String>,
    /// File holding the cluster's shared secret (at least 16 characters, mode 0600 or
    /// stricter). Every node needs it: peers are found through the membership table, so no
    /// node can know it will stay alone. The secret itself never appears in the configuration.
    pub cookie_file: PathBuf,
    /// PEM file of the CA certificate(s) that sign every node's cluster certificate. With
    /// `tls-cert-file` and `tls-key-file`, links between nodes are mutual TLS: each side
    /// presents its certificate and verifies the other's against this CA.
    pub tls_ca_file: Option<PathBuf>,
    /// PEM file of this node's cluster certificate chain, issued by the CA of `tls-ca-file`
    /// for `tls-server-name`, usable for both TLS server and client authentication.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the private key of `tls-cert-file` (mode 0600 or stricter).
    pub tls_key_file: Option<PathBuf>,
    /// The DNS name every node's cluster certificate carries and every dial verifies: one
    /// name for the whole cluster, since peers are dialled by whatever address the
    /// membership table or the seeds give.
    pub tls_server_name: String,
    /// Number of shards, fixed for the life of the cluster.
    pub shards: u32,
    /// How often the node writes its heartbeat.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// Age of the last heartbeat after which a node is presumed dead and its shards may be
    /// taken over.
    #[serde(with = "humantime_serde")]
    pub lease_timeout: Duration,
    /// Age of the last heartbeat after which a node whose every link to this one closed (a
    /// killed process's connections close at once) is presumed dead: the early take-over.
    /// A node stops serving once its own last complete round is older than half of the
    /// smaller of this and `lease-timeout`, before any peer may take its shards.
    #[serde(with = "humantime_serde")]
    pub suspect_confirm: Duration,
    /// How long a request for a shard that is moving waits for its new owner before it is
    /// answered 503 with Retry-After.
    #[serde(with = "humantime_serde")]
    pub handoff_wait: Duration,
    /// How long an inbound link may take from its connection to an authenticated session
    /// (the TLS handshake, when on, then the cluster's own handshake of names and cookie);
    /// a connection that has not finished by then is closed.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            listen: "127.0.0.1:7000".to_owned(),
            seeds: Vec::new(),
            cookie_file: PathBuf::from("cookie"),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_server_name: "engram-cluster".to_owned(),
            shards: 1024,
            heartbeat_interval: Duration::from_millis(250),
            lease_timeout: Duration::from_secs(3),
            suspect_confirm: Duration::from_secs(1),
            handoff_wait: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// Which storage backend the node uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// The embedded SQLite file (the default).
    #[default]
    Sqlite,
    /// FoundationDB; needs a binary built with the `fdb` feature.
    Fdb,
}

/// `[storage]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct StorageConfig {
    /// The backend.
    pub backend: Backend,
    /// Root of every key, so that several deployments can share one store.
    pub root_prefix: String,
    /// `[storage.sqlite]`.
    pub sqlite: SqliteConfig,
    /// `[storage.fdb]`.
    pub fdb: FdbConfig,
    /// `[storage.retry]`.
    pub retry: RetryConfig,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            backend: Backend::Sqlite,
            root_prefix: "engram".to_owned(),
            sqlite: SqliteConfig::default(),
            fdb: FdbConfig::default(),
            retry: RetryConfig::default(),
        }
    }
}

/// `[storage.sqlite]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct SqliteConfig {
    /// The database file; a relative path is relative to `node.data-dir`.
    pub path: PathBuf,
    /// Durability of commits.
    pub synchronous: SynchronousMode,
    /// How long a writer waits for another process's lock before retrying.
    #[serde(with = "humantime_serde")]
    pub busy_timeout: Duration,
    /// Idle read connections kept open.
    pub read_pool: usize,
    /// Commit the write transactions waiting at once with one fsync (group commit).
    pub group_commit: bool,
    /// WAL pages after which the WAL is checkpointed into the database file (by a thread of its
    /// own with group commit, else by the commit that reaches it).
    pub wal_autocheckpoint: u32,
    /// MiB kept free on the store's filesystem (a file beside the database) for the node's
    /// own writes once the disk fills: heartbeats, leases and audit entries go on, reads are
    /// served, clients' writes are answered 507 until there is room again. 0 keeps none.
    pub reserve_mib: u32,
}

impl Default for SqliteConfig {
    fn default() -> Self {
        SqliteConfig {
            path: PathBuf::from("engram.sqlite"),
            synchronous: SynchronousMode::Full,
            busy_timeout: Duration::from_secs(5),
            read_pool: 8,
            group_commit: true,
            wal_autocheckpoint: SqliteOptions::default().wal_autocheckpoint,
            reserve_mib: u32::try_from(engram_storage::sqlite::DEFAULT_RESERVE >> 20).unwrap_or(16),
        }
    }
}

/// SQLite's `PRAGMA synchronous`, as written in `cluster.toml`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SynchronousMode {
    /// fsync every commit: no acknowledged write is lost, even on power loss.
    #[default]
    Full,
    /// fsync at checkpoints: survives process crashes, not power loss.
    Normal,
    /// Never fsync: benchmarks only.
    Off,
}

impl From<SynchronousMode> for Synchronous {
    fn from(mode: SynchronousMode) -> Self {
        match mode {
            SynchronousMode::Full => Synchronous::Full,
            SynchronousMode::Normal => Synchronous::Normal,
            SynchronousMode::Off => Synchronous::Off,
        }
    }
}

/// `[storage.fdb]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct FdbConfig {
    /// The cluster file; `None` uses FoundationDB's lookup (`FDB_CLUSTER_FILE`, then
    /// `/etc/foundationdb/fdb.cluster`).
    pub cluster_file: Option<PathBuf>,
    /// Per-transaction timeout (FoundationDB ends transactions after 5 s regardless).
    #[serde(with = "humantime_serde")]
    pub transaction_timeout: Duration,
    /// Per-transaction retry limit inside the FoundationDB client.
    pub retry_limit: u32,
}

impl Default for FdbConfig {
    fn default() -> Self {
        FdbConfig {
            cluster_file: None,
            transaction_timeout: Duration::from_secs(5),
            retry_limit: 50,
        }
    }
}

/// `[storage.retry]`: how conflicting or busy transactions are retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct RetryConfig {
    /// Give up after this many attempts.
    pub max_attempts: u32,
    /// Give up once this much time has passed since the first attempt.
    #[serde(with = "humantime_serde")]
    pub max_elapsed: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        let policy = RetryPolicy::default();
        RetryConfig {
            max_attempts: policy.max_attempts,
            max_elapsed: policy.max_elapsed,
        }
    }
}

/// Output format of the logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct LogConfig {
    /// An `EnvFilter` directive (`info`, `engram_node=debug,info`); `RUST_LOG` overrides it.
    pub level: String,
    /// Output format.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

impl Config {
    /// The user actors' settings this configuration makes. Where the actors crate has a
    /// default, the configuration's default is read from it (a test checks that
    /// `Config::default()` makes `Settings::default()`).
    pub fn actor_settings(&self) -> engram_actors::services::Settings {
        let mut index = engram_actors::model::index::IndexParams::default();
        index.retriever.vectors.exact_threshold = self.inference.exact_search_below;
        engram_actors::services::Settings {
            idle_timeout: self.memory.idle_timeout,
            retention_ms: i64::try_from(self.memory.retention.as_millis()).unwrap_or(i64::MAX),
            archive: self.memory.archive,
            tenant_archive: self
                .memory
                .tenant_archive
                .iter()
                .map(|(tenant, mode)| (tenant.clone(), *mode))
                .collect(),
            archive_retention_ms: i64::try_from(self.memory.archive_retention.as_millis())
                .unwrap_or(i64::MAX),
            shards: self.cluster.shards,
            index,
            breaker: self.security.breaker(),
            intent_versions: self.memory.intent_versions,
            idempotency_retention_ms: i64::try_from(self.memory.idempotency_retention.as_millis())
                .unwrap_or(i64::MAX),
            max_actors: self.memory.max_actors,
            max_cached_records: self.memory.max_cached_records,
            ..engram_actors::services::Settings::default()
        }
    }

    /// Loads the file at `path`, then applies `ENGRAM__SECTION__KEY` environment overrides.
    /// Does not validate; call [`Config::validate`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        if !path.is_file() {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                reason: "no such file".to_owned(),
            });
        }
        Config::extract(&Config::figment(path))
    }

    /// The providers [`Config::load`] reads, lowest precedence first.
    ///
    /// `Toml::file_exact` rather than `Toml::file`: the latter searches parent directories, and
    /// a node must not pick up a stray `cluster.toml` from above its working directory.
    pub fn figment(path: &Path) -> Figment {
        // Environment names cannot hold `-`: `ENGRAM__STORAGE__ROOT_PREFIX` means
        // `storage.root-prefix`. `split` runs first, so `__` is already `.` when `_` becomes `-`.
        let env = Env::prefixed(ENV_PREFIX)
            .split("__")
            .map(|key| key.as_str().replace('_', "-").into());
        Figment::from(Toml::file_exact(path)).merge(env)
    }

    /// Extracts a configuration from `figment`, naming any unknown key.
    pub fn extract(figment: &Figment) -> Result<Config, ConfigError> {
        figment
            .extract()
            .map_err(|err| ConfigError::from_figment(&err))
    }

    /// The SQLite file: `storage.sqlite.path`, relative paths resolved against `node.data-dir`.
    pub fn sqlite_path(&self) -> PathBuf {
        self.node.data_dir.join(&self.storage.sqlite.path)
    }

    /// A file named under `[http]` or `[cluster]` (cookie, certificates, keys), a relative
    /// path resolved against `node.data-dir`.
    pub fn file(&self, path: &Path) -> PathBuf {
        self.node.data_dir.join(path)
    }

    /// Whether the gateway serves HTTPS.
    pub fn http_tls(&self) -> bool {
        self.http.tls_cert_file.is_some() || self.http.tls_key_file.is_some()
    }

    /// Whether links between nodes are TLS.
    pub fn cluster_tls(&self) -> bool {
        let cluster = &self.cluster;
        cluster.tls_ca_file.is_some()
            || cluster.tls_cert_file.is_some()
            || cluster.tls_key_file.is_some()
    }
}

impl SqliteConfig {
    /// The storage crate's group-commit settings.
    pub fn group_commit(&self) -> GroupCommit {
        if self.group_commit {
            GroupCommit::default()
        } else {
            GroupCommit::off()
        }
    }

    /// The storage crate's options for these settings.
    pub fn options(&self) -> SqliteOptions {
        SqliteOptions {
            synchronous: self.synchronous.into(),
            busy_timeout: self.busy_timeout,
            read_pool: self.read_pool,
            wal_autocheckpoint: self.wal_autocheckpoint,
            reserve: u64::from(self.reserve_mib) << 20,
        }
    }
}

#[cfg(feature = "fdb")]
impl FdbConfig {
    /// The storage crate's options for these settings.
    pub fn options(&self) -> engram_storage::fdb::FdbOptions {
        engram_storage::fdb::FdbOptions {
            cluster_file: self.cluster_file.clone(),
            timeout: self.transaction_timeout,
            retry_limit: self.retry_limit,
        }
    }
}

impl RetryConfig {
    /// The storage crate's retry policy: these bounds, the crate's default backoff.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            max_elapsed: self.max_elapsed,
            ..RetryPolicy::default()
        }
    }
}

#[cfg(test)]
mod tests;
