//! The inference part of `/metrics`: the embedding pool, the query cache and read
//! fallbacks, and the pipeline.

use std::sync::atomic::{AtomicU64, Ordering};

use engram_inference::{BATCH_BUCKETS, PoolStats};

/// Writes one unlabelled metric with its help and type lines.
pub(super) fn metric(
    text: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    value: impl std::fmt::Display,
) {
    use std::fmt::Write;
    let _ = write!(
        text,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
    );
}

/// The query cache and the read deadline's fallbacks.
pub(super) fn render_queries(text: &mut String, m: &engram_actors::embed::EmbedMetrics) {
    for (name, help, value) in [
        (
            "engram_query_cache_hits_total",
            "Query and topic embeddings found in the node's cache",
            &m.cache_hits,
        ),
        (
            "engram_query_cache_misses_total",
            "Query and topic embeddings computed by the pool",
            &m.cache_misses,
        ),
    ] {
        metric(text, name, "counter", help, value.load(Ordering::Relaxed));
    }
    by_reason(
        text,
        "engram_read_fallbacks_total",
        "Reads ranked by words and priors without their query's vector, by reason",
        &[
            ("deadline", &m.fallback_deadline),
            ("overloaded", &m.fallback_overloaded),
            ("unavailable", &m.fallback_unavailable),
        ],
    );
}

/// Writes one counter labelled by `reason`, a sample per reason.
fn by_reason(text: &mut String, name: &str, help: &str, reasons: &[(&str, &AtomicU64)]) {
    use std::fmt::Write;
    let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} counter\n");
    for (reason, value) in reasons {
        let _ = writeln!(
            text,
            "{name}{{reason=\"{reason}\"}} {}",
            value.load(Ordering::Relaxed)
        );
    }
}

/// The search reranker: searches reranked, pairs scored, time spent, and fallbacks.
pub(super) fn render_rerank(text: &mut String, m: &engram_actors::rerank::RerankMetrics) {
    for (name, help, value) in [
        (
            "engram_rerank_searches_total",
            "Searches reranked by the cross-encoder",
            m.reranked.load(Ordering::Relaxed) as f64,
        ),
        (
            "engram_rerank_pairs_total",
            "Question and candidate pairs the cross-encoder scored",
            m.pool.pairs.load(Ordering::Relaxed) as f64,
        ),
        (
            "engram_rerank_seconds_total",
            "Time the cross-encoder spent scoring",
            m.pool.busy_micros.load(Ordering::Relaxed) as f64 / 1e6,
        ),
    ] {
        metric(text, name, "counter", help, value);
    }
    metric(
        text,
        "engram_rerank_queued",
        "gauge",
        "Reranks waiting for the cross-encoder",
        m.pool.queued.load(Ordering::Relaxed),
    );
    by_reason(
        text,
        "engram_rerank_fallbacks_total",
        "Searches that asked to be reranked and were not, by reason",
        &[
            ("not-english", &m.fallback_not_english),
            ("busy", &m.fallback_busy),
            ("deadline", &m.fallback_deadline),
            ("unavailable", &m.fallback_unavailable),
        ],
    );
}

/// The age of the oldest entry a pipeline lane knows of (0 when none).
pub(super) fn oldest_pending_seconds(
    m: &engram_actors::pipeline::PipelineMetrics,
    now: engram_storage::types::Timestamp,
) -> f64 {
    match m.oldest_queued_at.load(Ordering::Relaxed) {
        0 => 0.0,
        oldest => (now.0 - oldest).max(0) as f64 / 1000.0,
    }
}

/// The inference pipeline: what is pending, how old, and what became of results.
pub(super) fn render_pipeline(
    text: &mut String,
    m: &engram_actors::pipeline::PipelineMetrics,
    now: engram_storage::types::Timestamp,
) {
    let age = oldest_pending_seconds(m, now);
    metric(
        text,
        "engram_pipeline_oldest_pending_seconds",
        "gauge",
        "Age of the oldest pending embedding this node knows of",
        age,
    );
    for (name, kind, help, value) in [
        (
            "engram_pipeline_pending_users",
            "gauge",
            "Users of this node's shards with pending embeddings, as of the last scan (GET /v1/cluster/pipeline counts the embeddings)",
            &m.pending_users,
        ),
        (
            "engram_pipeline_queued_users",
            "gauge",
            "Users with pending embeddings held in the dispatcher's memory",
            &m.queued_users,
        ),
        (
            "engram_pipeline_users_in_rounds",
            "gauge",
            "Users whose embeddings are being computed",
            &m.users_in_rounds,
        ),
        (
            "engram_pipeline_results_total",
            "counter",
            "Embeddings stored by the pipeline",
            &m.stored,
        ),
        (
            "engram_pipeline_dropped_total",
            "counter",
            "Embeddings dropped: the record was deleted or rewritten meanwhile",
            &m.dropped,
        ),
        (
            "engram_pipeline_rounds_total",
            "counter",
            "Rounds of the pipeline",
            &m.rounds,
        ),
        (
            "engram_pipeline_refused_total",
            "counter",
            "Round parts the embedding pool refused (their entries wait)",
            &m.refused,
        ),
        (
            "engram_pipeline_failed_total",
            "counter",
            "Round parts that failed in storage (their entries wait)",
            &m.failed,
        ),
        (
            "engram_pipeline_not_held_total",
            "counter",
            "Users not held in memory (the queue was full; storage holds them)",
            &m.not_held,
        ),
        (
            "engram_pipeline_scans_total",
            "counter",
            "Scans of the work index",
            &m.scans,
        ),
    ] {
        metric(text, name, kind, help, value.load(Ordering::Relaxed));
    }
}

pub(super) fn render_pool(text: &mut String, stats: &PoolStats) {
    use std::fmt::Write;
    metric(
        text,
        "engram_embedding_queue_texts",
        "gauge",
        "Texts waiting for a batch",
        stats.queued_texts,
    );
    metric(
        text,
        "engram_embedding_in_flight_texts",
        "gauge",
        "Texts in batches being embedded",
        stats.in_flight_texts,
    );
    for (name, help, value) in [
        ("requests", "Embedding requests admitted", stats.requests),
        ("texts", "Texts admitted", stats.texts),
        (
            "rejected",
            "Requests shed because the queue was full",
            stats.rejected,
        ),
        (
            "rejected_by_share",
            "Requests shed because their tenant held its whole share of the queue",
            stats.rejected_by_share,
        ),
        ("failed", "Requests answered with an error", stats.failed),
        (
            "expired",
            "Requests skipped because their caller's deadline passed while they were queued",
            stats.expired,
        ),
        ("forward_passes", "Forward passes run", stats.forward_passes),
        ("tokens", "Tokens read by the model", stats.tokens),
        (
            "interactive_lane_texts",
            "Texts run by the interactive workers (normal priority)",
            stats.interactive_lane_texts,
        ),
        (
            "background_lane_texts",
            "Texts run by the background workers",
            stats.background_lane_texts,
        ),
    ] {
        metric(
            text,
            &format!("engram_embedding_{name}_total"),
            "counter",
            help,
            value,
        );
    }
    metric(
        text,
        "engram_embedding_background_rest_seconds_total",
        "counter",
        "Time idle-class background workers rested between batches because the machine was busy",
        stats.background_rest.as_secs_f64(),
    );
    let name = "engram_embedding_batch_size";
    let _ = write!(
        text,
        "# HELP {name} Texts per batch handed to a worker\n# TYPE {name} histogram\n"
    );
    let mut cumulative = 0;
    for (bound, count) in BATCH_BUCKETS.iter().zip(&stats.batch_sizes) {
        cumulative += count;
        let _ = writeln!(text, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} {}", stats.batches);
    let batched = stats.texts.saturating_sub(stats.queued_texts);
    let _ = writeln!(text, "{name}_sum {batched}\n{name}_count {}", stats.batches);
    let name = "engram_embedding_latency_seconds";
    let _ = write!(
        text,
        "# HELP {name} Time from admission to answer (quantiles rounded up to a power of two microseconds)\n# TYPE {name} summary\n"
    );
    for (q, d) in [("0.5", stats.latency_p50), ("0.99", stats.latency_p99)] {
        let _ = writeln!(text, "{name}{{quantile=\"{q}\"}} {}", d.as_secs_f64());
    }
    let sum = stats.latency_mean.as_secs_f64() * stats.answered as f64;
    let _ = writeln!(text, "{name}_sum {sum}\n{name}_count {}", stats.answered);
}
