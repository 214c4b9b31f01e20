//! Prometheus metrics of the node: HTTP requests (count and latency per method, route and
//! status), plus the actor and storage counters, rendered at `/metrics` in the text format.
//! Labels are known methods (others are `other`), routes (the matched path template, or
//! `unmatched`) and statuses: never user ids, text, or any string a client chose.

mod distillation;
mod inference;
mod reported;

use std::sync::atomic::Ordering;
use std::time::Duration;

use engram_actors::ownership::Ownership;

use self::distillation::render_distillation;
use self::inference::{render_pipeline, render_pool, render_queries, render_rerank};
pub use self::reported::{KeyLookups, LinkCounts};
use self::reported::{render_links, render_lookups};
use engram_actors::directory::Directory;
use engram_actors::front::Users;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// A request in flight; dropping it (however the request ends) counts it out.
#[derive(Debug)]
pub struct InFlight(IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The node's metric families.
pub struct NodeMetrics {
    registry: Registry,
    requests: IntCounterVec,
    in_flight: IntGaugeVec,
    latency: HistogramVec,
    jobs: IntCounterVec,
    job_items: IntCounterVec,
    auth_refused: IntCounterVec,
    audit: IntCounterVec,
    shared: HistogramVec,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

impl NodeMetrics {
    /// Registers the families.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "engram_http_requests_total",
                "HTTP requests by method, route and status",
            ),
            &["method", "route", "status"],
        )
        .expect("valid metric");
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "engram_http_requests_in_flight",
                "HTTP requests being served, by method and route",
            ),
            &["method", "route"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "engram_http_request_seconds",
                "HTTP request latency by method and route",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
            &["method", "route"],
        )
        .expect("valid metric");
        let jobs = IntCounterVec::new(
            Opts::new("engram_job_runs_total", "Maintenance job runs"),
            &["job"],
        )
        .expect("valid metric");
        let job_items = IntCounterVec::new(
            Opts::new(
                "engram_job_items_total",
                "Records expired or purged and turns removed by jobs",
            ),
            &["job"],
        )
        .expect("valid metric");
        let auth_refused = IntCounterVec::new(
            Opts::new(
                "engram_auth_refused_total",
                "Requests refused by authentication or authorisation, by reason \
                 (missing, invalid, lookup_rate, tenant, scope, rate, approval)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let audit = IntCounterVec::new(
            Opts::new(
                "engram_audit_entries_total",
                "Audit entries by outcome of their write (written, failed)",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let shared = HistogramVec::new(
            HistogramOpts::new(
                "engram_shared_lookup_seconds",
                "Lookups of the tenants' shared sets as the gateway saw them, by set \
                 (sql_cache, few_shot) and outcome (hit, miss, fallback); its count is the \
                 number of lookups",
            )
            .buckets(vec![
                0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ]),
            &["set", "outcome"],
        )
        .expect("valid metric");
        // Metric vectors share their state between clones: the registry gets clones.
        registry
            .register(Box::new(requests.clone()))
            .expect("unique metric");
        registry
            .register(Box::new(latency.clone()))
            .expect("unique metric");
        registry
            .register(Box::new(in_flight.clone()))
            .expect("unique metric");
        registry
            .register(Box::new(jobs.clone()))
            .expect("unique metric");
        registry
            .register(Box::new(job_items.clone()))
            .expect("unique metric");
        registry
            .register(Box::new(auth_refused.clone()))
            .expect("unique metric");
        registry
            .register(Box::new(audit.clone()))
            .expect("unique metric");
        registry
            .register(Box::new(shared.clone()))
            .expect("unique metric");
        NodeMetrics {
            registry,
            requests,
            in_flight,
            latency,
            jobs,
            job_items,
            auth_refused,
            audit,
            shared,
        }
    }

    /// Records a lookup of a tenant's shared set (`sql_cache`, `few_shot`) and its outcome
    /// (`hit`, `miss`, `fallback`).
    pub fn shared(&self, set: &str, outcome: &str, elapsed: Duration) {
        self.shared
            .with_label_values(&[set, outcome])
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a request refused by authentication or authorisation.
    pub fn auth_refused(&self, reason: &str) {
        self.auth_refused.with_label_values(&[reason]).inc();
    }

    /// Counts audit entries written (or not).
    pub fn audited(&self, written: bool, entries: u64) {
        let outcome = if written { "written" } else { "failed" };
        self.audit.with_label_values(&[outcome]).inc_by(entries);
    }

    /// Counts a request in flight until the returned guard drops.
    pub fn started(&self, method: &str, route: &str) -> InFlight {
        let gauge = self.in_flight.with_label_values(&[method, route]);
        gauge.inc();
        InFlight(gauge)
    }

    /// Records one HTTP request.
    pub fn request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.requests
            .with_label_values(&[method, route, &status.to_string()])
            .inc();
        self.latency
            .with_label_values(&[method, route])
            .observe(elapsed.as_secs_f64());
    }

    /// Records one run of a job.
    pub fn job_ran(&self, job: &str, items: usize) {
        self.jobs.with_label_values(&[job]).inc();
        self.job_items
            .with_label_values(&[job])
            .inc_by(items as u64);
    }

    /// The text exposition of every metric, including the actor and storage counters.
    pub fn render(&self, directory: &Directory) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .ok();
        let mut text = String::from_utf8(out).unwrap_or_default();
        let actors = &directory.services().metrics;
        let store = directory.services().store.stats();
        let gauges = [
            (
                "engram_user_actors_alive",
                "User actors running on this node",
                directory.alive() as u64,
            ),
            (
                "engram_cached_records",
                "Memory records cached by this node's live user actors",
                actors.cached_records.load(Ordering::Relaxed),
            ),
        ];
        let counters = [
            (
                "engram_user_actors_started_total",
                "User actors started",
                actors.actors_started.load(Ordering::Relaxed),
            ),
            (
                "engram_user_actors_passivated_total",
                "User actors stopped for being idle",
                actors.passivations.load(Ordering::Relaxed),
            ),
            (
                "engram_user_actors_evicted_total",
                "User actors stopped to make room for others (max-actors or max-cached-records)",
                actors.evictions.load(Ordering::Relaxed),
            ),
            (
                "engram_user_admissions_refused_total",
                "Requests refused with 503 because the node was full of recently used actors",
                actors.admissions_refused.load(Ordering::Relaxed),
            ),
            (
                "engram_sensitive_reads_refused_total",
                "Sensitive reads refused or withheld by the breaker",
                actors.sensitive_refusals.load(Ordering::Relaxed),
            ),
            (
                "engram_user_actors_failed_total",
                "User actors that failed",
                actors.failures.load(Ordering::Relaxed),
            ),
            (
                "engram_user_actors_restarted_total",
                "User actors restarted by their supervisor",
                actors.restarts.load(Ordering::Relaxed),
            ),
            (
                "engram_requests_redelivered_total",
                "Requests redelivered to a fresh user actor",
                actors.redeliveries.load(Ordering::Relaxed),
            ),
            (
                "engram_contexts_without_vector_total",
                "Context reads and searches ranked without the query's embedding (deadline, pool overloaded or closed)",
                actors.contexts_without_vector.load(Ordering::Relaxed),
            ),
            (
                "engram_records_without_vector_total",
                "Memory records loaded without a usable embedding",
                actors.records_without_vector.load(Ordering::Relaxed),
            ),
            (
                "engram_anchors_unkeyed_total",
                "Resident ID and passport numbers not anchored: the node has no master keys",
                actors.anchors_unkeyed.load(Ordering::Relaxed),
            ),
            (
                "engram_storage_commits_total",
                "Committed write transactions",
                store.commits.load(Ordering::Relaxed),
            ),
            (
                "engram_storage_commit_batches_total",
                "Durable commits; a group commit carries many write transactions",
                store.batches.load(Ordering::Relaxed),
            ),
            (
                "engram_storage_reads_total",
                "Completed read-only transactions",
                store.reads.load(Ordering::Relaxed),
            ),
            (
                "engram_storage_retries_total",
                "Storage transaction attempts retried",
                store.retries.load(Ordering::Relaxed),
            ),
            (
                "engram_storage_exhausted_total",
                "Storage transactions that gave up",
                store.exhausted.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, value) in gauges {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            ));
        }
        for (name, help, value) in counters {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
            ));
        }
        for figure in directory.services().store.figures() {
            let (name, help, value) = (figure.name, figure.help, figure.value);
            let kind = if figure.counter { "counter" } else { "gauge" };
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        if let Some(embedder) = &directory.services().embedder {
            render_pool(&mut text, &embedder.pool().stats());
            render_queries(&mut text, embedder.metrics());
        }
        if let Some(pipeline) = &directory.services().pipeline {
            render_pipeline(
                &mut text,
                pipeline.metrics(),
                directory.services().clock.now(),
            );
        }
        if let Some(reranker) = &directory.services().reranker {
            render_rerank(&mut text, reranker.metrics());
        }
        if let Some(distillation) = &directory.services().distillation {
            render_distillation(&mut text, distillation, directory.services().clock.now());
        }
        if let Some(ownership) = &directory.services().ownership {
            render_leases(&mut text, ownership);
        }
        text
    }

    /// [`NodeMetrics::render`] plus the authenticator's key `lookups` and, on a node with a
    /// cluster transport, the front door's and the transport's (`links`) counters.
    pub fn render_with(
        &self,
        users: &Users,
        lookups: KeyLookups,
        links: Option<LinkCounts>,
    ) -> String {
        let mut text = self.render(users.directory());
        render_lookups(&mut text, &lookups);
        if let Some(links) = links {
            render_links(&mut text, &users.metrics, &links);
        }
        text
    }
}

/// The lease protocol's metrics: shards held, and counters of leases taken and taken over
/// (early ones too), hand-offs, losses, fenced writes, failed rounds and refused requests.
fn render_leases(text: &mut String, ownership: &Ownership) {
    use std::fmt::Write;
    let m = &ownership.metrics;
    let _ = write!(
        text,
        "# HELP engram_shards_held Shards this node serves\n# TYPE engram_shards_held gauge\nengram_shards_held {}\n",
        ownership.held()
    );
    let _ = write!(
        text,
        "# HELP engram_fenced_writes_in_flight Fenced write transactions under way (past their ownership check)\n# TYPE engram_fenced_writes_in_flight gauge\nengram_fenced_writes_in_flight {}\n",
        m.writes_in_flight.load(Ordering::Relaxed)
    );
    for (name, help, value) in [
        ("shards_taken", "Shard leases taken (a new epoch)", &m.taken),
        (
            "shards_taken_over",
            "Shard leases taken from a node presumed dead (its lease still named it)",
            &m.taken_over,
        ),
        (
            "shards_taken_over_early",
            "Shard leases taken over early: the node's links had closed and its heartbeat was \
             older than cluster.suspect-confirm",
            &m.taken_over_early,
        ),
        (
            "shards_handed_off",
            "Shards handed off cleanly",
            &m.handed_off,
        ),
        (
            "shards_lost",
            "Shards dropped after another node took them",
            &m.lost,
        ),
        (
            "fenced_writes",
            "Write transactions aborted by the shard fence",
            &m.fenced_writes,
        ),
        (
            "lease_rounds_failed",
            "Lease rounds (heartbeat, take-over) that failed",
            &m.failed_rounds,
        ),
        (
            "requests_not_owner",
            "Requests refused: the shard is not served here",
            &m.refused,
        ),
    ] {
        let _ = write!(
            text,
            "# HELP engram_{name}_total {help}\n# TYPE engram_{name}_total counter\nengram_{name}_total {}\n",
            value.load(Ordering::Relaxed)
        );
    }
}

/// The embedding pool's metrics: queue depth, counters, batch sizes (a histogram) and
/// latency from admission to answer (a summary of p50 and p99).
impl Default for NodeMetrics {
    fn default() -> Self {
        NodeMetrics::new()
    }
}
