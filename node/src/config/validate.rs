//! [`Config::validate`] (settings that cannot work: the node refuses to start) and
//! [`Config::advice`] (settings that work but are probably not what the operator wants: the
//! node logs a warning and starts).
//!
//! Validation reads nothing outside the configuration: it does not resolve host names, look
//! at files or bind sockets.

use std::net::SocketAddr;
use std::time::Duration;

use engram_storage::crypto::Cipher;
use humantime_serde::re::humantime::format_duration;

use super::{Backend, Config, ConfigError, Problem};

mod inference;

/// Shards each node should hold at least (docs/architecture.md, "Leases and fencing").
const MIN_SHARDS_PER_NODE: u32 = 10;

/// FoundationDB ends every transaction after this long.
const FDB_MAX_TRANSACTION: Duration = Duration::from_secs(5);

/// What [`Config::validate`] found wrong so far, every section's checks adding to it.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, key: impl Into<std::borrow::Cow<'static, str>>, message: String) {
        self.0.push(Problem {
            key: key.into(),
            message,
        });
    }
}

impl Config {
    /// Checks that the settings can work, alone and together, and says in words what is
    /// wrong with each one that cannot, section by section (every problem at once).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        self.check_node(&mut p);
        self.check_addresses(&mut p);
        self.check_cluster(&mut p);
        self.check_storage(&mut p);
        self.check_http(&mut p);
        self.check_memory(&mut p);
        self.check_inference(&mut p);
        self.check_distillation(&mut p);
        self.check_reranker(&mut p);
        self.check_jobs(&mut p);
        self.check_security(&mut p);
        self.check_log(&mut p);
        if p.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(p.0))
        }
    }

    /// `[node]`: an id that is a plain name, a data directory.
    fn check_node(&self, p: &mut Problems) {
        let id = &self.node.id;
        if id.is_empty() {
            p.add("node.id", "must not be empty".to_owned());
        } else if let Some(c) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            p.add(
                "node.id",
                format!("{id:?} contains {c:?}; use only letters, digits, `-` and `_`"),
            );
        }
        if self.node.data_dir.as_os_str().is_empty() {
            p.add("node.data-dir", "must not be empty".to_owned());
        }
    }

    /// The addresses and secrets of `[http]` and `[cluster]`: listen addresses of their own, seeds
    /// as host and port, the cookie file, TLS.
    fn check_addresses(&self, p: &mut Problems) {
        let http = parse_listen(&self.http.listen);
        if let Err(message) = &http {
            p.add("http.listen", message.clone());
        }
        let cluster = parse_listen(&self.cluster.listen);
        if let Err(message) = &cluster {
            p.add("cluster.listen", message.clone());
        }
        if let (Ok(http), Ok(cluster)) = (http, cluster)
            && http == cluster
            && http.port() != 0
        {
            p.add(
                "cluster.listen",
                format!("is the same address as http.listen ({http}); give each its own port"),
            );
        }
        for seed in &self.cluster.seeds {
            if let Err(message) = check_seed(seed) {
                p.add("cluster.seeds", message);
            }
        }

        if self.cluster.cookie_file.as_os_str().is_empty() {
            p.add(
                "cluster.cookie-file",
                "must name the file holding the cluster's shared secret".to_owned(),
            );
        }
        for (key, message) in self.tls_problems() {
            p.add(key, message);
        }
    }

    /// The timings of `[cluster]`: shards, heartbeats, the lease timeout and the early take-over
    /// after suspicion, the hand-off wait.
    fn check_cluster(&self, p: &mut Problems) {
        if self.cluster.shards == 0 {
            p.add("cluster.shards", "must be at least 1".to_owned());
        }
        let handshake = self.cluster.handshake_timeout;
        if handshake < Duration::from_millis(100) || handshake > Duration::from_secs(600) {
            p.add(
                "cluster.handshake-timeout",
                "must be between 100ms and 10m".to_owned(),
            );
        }
        let heartbeat = self.cluster.heartbeat_interval;
        let lease = self.cluster.lease_timeout;
        if heartbeat.is_zero() {
            p.add(
                "cluster.heartbeat-interval",
                "must be longer than 0s".to_owned(),
            );
        }
        if lease <= heartbeat.saturating_mul(2) {
            p.add(
                "cluster.lease-timeout",
                format!(
                    "must be more than twice cluster.heartbeat-interval, so that one late \
                     heartbeat does not cost a live node its shards (lease-timeout is {}, \
                     heartbeat-interval is {})",
                    format_duration(lease),
                    format_duration(heartbeat),
                ),
            );
        }
        let confirm = self.cluster.suspect_confirm;
        if confirm <= heartbeat.saturating_mul(2) {
            p.add(
                "cluster.suspect-confirm",
                format!(
                    "must be more than twice cluster.heartbeat-interval: a node whose links \
                     closed is taken over once its heartbeat is this old, so a live one must \
                     heartbeat well within it, and every node stops serving half of it after \
                     its last round, so that must be longer than a heartbeat interval \
                     (suspect-confirm is {}, heartbeat-interval is {})",
                    format_duration(confirm),
                    format_duration(heartbeat),
                ),
            );
        }
        if confirm > lease {
            p.add(
                "cluster.suspect-confirm",
                format!(
                    "must be at most cluster.lease-timeout: it is the earlier take-over of a \
                     node whose links closed; set it to lease-timeout to take every node over \
                     only after lease-timeout (suspect-confirm is {}, lease-timeout is {})",
                    format_duration(confirm),
                    format_duration(lease),
                ),
            );
        }

        if self.cluster.handoff_wait > Duration::from_secs(60) {
            p.add("cluster.handoff-wait", "must be at most 60s".to_owned());
        }
    }

    /// `[storage]`: a backend this build has, a root prefix, paths, timeouts and retries.
    fn check_storage(&self, p: &mut Problems) {
        match self.storage.backend {
            Backend::Sqlite => {}
            Backend::Fdb => {
                if !cfg!(feature = "fdb") {
                    p.add(
                        "storage.backend",
                        "is \"fdb\" but this engram-node was built without FoundationDB support; \
                         rebuild it with `--features fdb` or set backend = \"sqlite\""
                            .to_owned(),
                    );
                }
            }
        }
        if self.storage.root_prefix.is_empty() {
            p.add("storage.root-prefix", "must not be empty".to_owned());
        }
        if self.storage.sqlite.path.as_os_str().is_empty() {
            p.add("storage.sqlite.path", "must not be empty".to_owned());
        }
        if self.storage.fdb.transaction_timeout.is_zero() {
            p.add(
                "storage.fdb.transaction-timeout",
                "must be longer than 0s".to_owned(),
            );
        }
        if self.storage.retry.max_attempts == 0 {
            p.add(
                "storage.retry.max-attempts",
                "must be at least 1".to_owned(),
            );
        }
        if self.storage.retry.max_elapsed.is_zero() {
            p.add(
                "storage.retry.max-elapsed",
                "must be longer than 0s".to_owned(),
            );
        }
    }

    /// `[http]`: body and in-flight limits.
    fn check_http(&self, p: &mut Problems) {
        if self.http.max_body_bytes < 1024 {
            p.add("http.max-body-bytes", "must be at least 1024".to_owned());
        }
        if self.http.max_in_flight == 0 {
            p.add("http.max-in-flight", "must be at least 1".to_owned());
        }
        let header = self.http.header_read_timeout;
        if header < Duration::from_millis(100) || header > Duration::from_secs(600) {
            p.add(
                "http.header-read-timeout",
                "must be between 100ms and 10m".to_owned(),
            );
        }
    }

    /// `[memory]`: idle timeout, retention and archive, budgets and the bounds of what a node
    /// holds.
    fn check_memory(&self, p: &mut Problems) {
        if self.memory.idle_timeout < Duration::from_millis(100) {
            p.add("memory.idle-timeout", "must be at least 100ms".to_owned());
        }
        if self.memory.retention < Duration::from_secs(24 * 3600) {
            p.add("memory.retention", "must be at least 1 day".to_owned());
        }
        if self.memory.archive_retention < self.memory.retention {
            p.add(
                "memory.archive-retention",
                format!(
                    "must be at least memory.retention ({}); set memory.archive = \"off\" to keep no archive",
                    format_duration(self.memory.retention)
                ),
            );
        }
        for tenant in self.memory.tenant_archive.keys() {
            if tenant.is_empty() {
                p.add("memory.tenant-archive", "a tenant name is empty".to_owned());
            }
        }
        if !(100..=32_000).contains(&self.memory.token_budget) {
            p.add(
                "memory.token-budget",
                "must be between 100 and 32000".to_owned(),
            );
        }
        if !(2..=10_000).contains(&self.memory.intent_versions) {
            p.add(
                "memory.intent-versions",
                "must be between 2 and 10000".to_owned(),
            );
        }
        if self.memory.idempotency_retention < std::time::Duration::from_secs(60) {
            p.add(
                "memory.idempotency-retention",
                "must be at least 1 minute (retries must find their entry)".to_owned(),
            );
        }
        if self.memory.max_actors == 0 {
            p.add("memory.max-actors", "must be at least 1".to_owned());
        }
        if self.memory.max_cached_records == 0 {
            p.add("memory.max-cached-records", "must be at least 1".to_owned());
        }
    }

    /// `[jobs]`: the time zone and the cron schedules.
    fn check_jobs(&self, p: &mut Problems) {
        if let Err(err) = crate::schedule::parse_time_zone(&self.jobs.time_zone) {
            p.add("jobs.time-zone", err);
        }
        for (key, schedule) in [
            ("jobs.expiry-sweep", &self.jobs.expiry_sweep),
            ("jobs.retention", &self.jobs.retention),
            ("jobs.session-cleanup", &self.jobs.session_cleanup),
        ] {
            if let Err(err) = crate::schedule::parse_schedule(schedule) {
                p.add(key, format!("{schedule:?} is not a cron schedule: {err}"));
            }
        }
    }

    /// `[security]`: a cipher needs master keys.
    fn check_security(&self, p: &mut Problems) {
        if self.security.master_key_file.is_none() && self.security.cipher != Cipher::default() {
            p.add(
                "security.cipher",
                format!(
                    "{} seals nothing without security.master-key-file; set the key file too",
                    self.security.cipher.name()
                ),
            );
        }
    }

    /// `[log]`: a filter `tracing` understands.
    fn check_log(&self, p: &mut Problems) {
        if let Err(err) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            p.add(
                "log.level",
                format!("{:?} is not a log filter: {err}", self.log.level),
            );
        }
    }

    /// What is wrong with the TLS settings: half-set pairs and triples, empty paths, a server
    /// name that is no name.
    fn tls_problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let http = [
            ("http.tls-cert-file", &self.http.tls_cert_file),
            ("http.tls-key-file", &self.http.tls_key_file),
        ];
        let cluster = [
            ("cluster.tls-ca-file", &self.cluster.tls_ca_file),
            ("cluster.tls-cert-file", &self.cluster.tls_cert_file),
            ("cluster.tls-key-file", &self.cluster.tls_key_file),
        ];
        for group in [&http[..], &cluster[..]] {
            let set: Vec<&str> = group
                .iter()
                .filter(|(_, path)| path.is_some())
                .map(|(key, _)| *key)
                .collect();
            for (key, path) in group {
                match path {
                    Some(path) if path.as_os_str().is_empty() => {
                        problems.push((*key, "must not be empty".to_owned()));
                    }
                    Some(_) => {}
                    None if !set.is_empty() => problems.push((
                        *key,
                        format!(
                            "is not set but {} is; set all of them or none",
                            set.join(" and ")
                        ),
                    )),
                    None => {}
                }
            }
        }
        let name = &self.cluster.tls_server_name;
        if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
            problems.push((
                "cluster.tls-server-name",
                format!("{name:?} is not a DNS name or an IP address"),
            ));
        }
        problems
    }

    /// Settings that work but are probably unintended, one sentence each. The node logs them
    /// as warnings and starts anyway.
    pub fn advice(&self) -> Vec<String> {
        let mut advice = Vec::new();
        // The seeds are a lower bound of the cluster's size.
        let nodes = u32::try_from(self.cluster.seeds.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let shards = self.cluster.shards;
        if shards > 0 && shards < nodes.saturating_mul(MIN_SHARDS_PER_NODE) {
            advice.push(format!(
                "cluster.shards = {shards} leaves fewer than {MIN_SHARDS_PER_NODE} shards per node \
                 for a cluster of {nodes} node(s); the shard count is fixed for the life of the \
                 cluster, so size it for the largest cluster you expect"
            ));
        }
        if !self.http_tls() && !is_loopback(&self.http.listen) {
            advice.push(format!(
                "http.listen = {:?} is reachable from other machines but the gateway serves plain \
                 HTTP; set http.tls-cert-file and http.tls-key-file",
                self.http.listen
            ));
        }
        if !self.cluster_tls() && !is_loopback(&self.cluster.listen) {
            advice.push(format!(
                "cluster.listen = {:?} is reachable from other machines but links between nodes \
                 are plain TCP (forwarded requests cross the network in clear); set \
                 cluster.tls-ca-file, cluster.tls-cert-file and cluster.tls-key-file",
                self.cluster.listen
            ));
        }
        match self.storage.backend {
            Backend::Fdb if self.storage.fdb.transaction_timeout > FDB_MAX_TRANSACTION => {
                advice.push(format!(
                    "storage.fdb.transaction-timeout = {} has no effect beyond the 5s \
                     FoundationDB allows a transaction",
                    format_duration(self.storage.fdb.transaction_timeout),
                ));
            }
            Backend::Fdb | Backend::Sqlite => {}
        }
        advice
    }
}

/// Parses a listen address, explaining a failure.
fn parse_listen(addr: &str) -> Result<SocketAddr, String> {
    addr.parse().map_err(|_| {
        format!("{addr:?} is not a socket address; write ip:port, e.g. \"127.0.0.1:7000\" or \"[::1]:7000\"")
    })
}

/// Whether `listen` is a loopback address (one that does not parse is validate's to report).
fn is_loopback(listen: &str) -> bool {
    listen
        .parse::<SocketAddr>()
        .map_or(true, |addr| addr.ip().is_loopback())
}

/// Checks that a seed is `host:port` (hosts are resolved when the node dials them).
fn check_seed(seed: &str) -> Result<(), String> {
    if seed.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    match seed.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty()
                && !host.contains(':')
                && port.parse::<u16>().is_ok_and(|p| p != 0) =>
        {
            Ok(())
        }
        Some(_) | None => Err(format!(
            "{seed:?} is not host:port with a port from 1 to 65535, e.g. \"10.0.0.2:7000\" or \"node-2:7000\""
        )),
    }
}
