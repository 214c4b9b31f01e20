//! The checks of the inference sections: `[inference]`, `[distillation]` and their pipeline
//! lanes, and `[reranker]`.

use std::time::Duration;

use super::Problems;
use crate::config::Config;
use crate::config::inference::PipelineSection;

impl Config {
    /// `[reranker]`: a candidate count a search may ask for, a queue, a deadline.
    pub(super) fn check_reranker(&self, p: &mut Problems) {
        let r = &self.reranker;
        if !(1..=100).contains(&r.candidates) {
            p.add(
                "reranker.candidates",
                "must be between 1 and 100".to_owned(),
            );
        }
        if !(1..=1024).contains(&r.queue) {
            p.add("reranker.queue", "must be between 1 and 1024".to_owned());
        }
        if r.deadline.is_zero() {
            p.add("reranker.deadline", "must be longer than 0s".to_owned());
        }
    }

    /// `[inference]`: workers, batching, the queue and each tenant's share of it, search.
    pub(super) fn check_inference(&self, p: &mut Problems) {
        let inference = &self.inference;
        if inference.precision().is_int8() && !inference.model.takes_int8() {
            p.add(
                "inference.precision",
                "int8 is available for multilingual-e5-small only".to_owned(),
            );
        }
        if inference.workers == 0 || inference.workers > 64 {
            p.add("inference.workers", "must be between 1 and 64".to_owned());
        }
        if inference.max_batch == 0 || inference.max_batch > 1024 {
            p.add(
                "inference.max-batch",
                "must be between 1 and 1024".to_owned(),
            );
        }
        if inference.queue_capacity < inference.max_batch {
            p.add(
                "inference.queue-capacity",
                "must be at least inference.max-batch".to_owned(),
            );
        }
        if inference.tenant_share_percent == 0 || inference.tenant_share_percent > 100 {
            p.add(
                "inference.tenant-share-percent",
                "must be between 1 and 100".to_owned(),
            );
        }
        if !(1..=100).contains(&inference.background_busy_share_percent) {
            p.add(
                "inference.background-busy-share-percent",
                "must be between 1 and 100".to_owned(),
            );
        }
        if inference.max_wait > Duration::from_secs(1) {
            p.add("inference.max-wait", "must be at most 1s".to_owned());
        }
        if inference.max_batch_tokens < 512 {
            p.add(
                "inference.max-batch-tokens",
                "must be at least 512 (one full-length text)".to_owned(),
            );
        }
        if inference.exact_search_below == 0 {
            p.add(
                "inference.exact-search-below",
                "must be at least 1".to_owned(),
            );
        }
        if inference.query_deadline.is_zero() || inference.query_deadline > Duration::from_secs(60)
        {
            p.add(
                "inference.query-deadline",
                "must be more than 0s and at most 60s".to_owned(),
            );
        }
        if inference.query_cache_entries == 0 {
            p.add(
                "inference.query-cache-entries",
                "must be at least 1".to_owned(),
            );
        }
        check_pipeline(p, "inference.pipeline", &inference.pipeline);
    }

    /// `[distillation]`: types, durations, the generation pool and its lane.
    pub(super) fn check_distillation(&self, p: &mut Problems) {
        let d = &self.distillation;
        let types = std::iter::once(("distillation.intent-types".to_owned(), &d.intent_types))
            .chain(d.tenant_intent_types.iter().map(|(tenant, types)| {
                (format!("distillation.tenant-intent-types.{tenant}"), types)
            }));
        for (key, types) in types {
            if types.is_empty() {
                p.add(key.clone(), "must name at least one intent type".to_owned());
            }
            for t in types {
                if let Err(err) = engram_actors::user::check_id("intent type", t) {
                    p.add(key.clone(), err.to_string());
                } else if t == engram_inference::distil::NO_INTENT {
                    p.add(
                        key.clone(),
                        format!("{t:?} is reserved for messages without an intent"),
                    );
                }
            }
        }
        if d.ttl < Duration::from_secs(60) {
            p.add("distillation.ttl", "must be at least 1m".to_owned());
        }
        if d.replace_within > d.ttl {
            p.add(
                "distillation.replace-within",
                "must be at most distillation.ttl".to_owned(),
            );
        }
        if d.deadline < Duration::from_secs(1) || d.deadline > Duration::from_secs(3600) {
            p.add(
                "distillation.deadline",
                "must be between 1s and 1h".to_owned(),
            );
        }
        let g = &d.generation;
        for (name, value, max) in [
            ("distillation.generation.max-batch", g.max_batch, 64),
            (
                "distillation.generation.queue-capacity",
                g.queue_capacity,
                1_000_000,
            ),
        ] {
            if value == 0 || value > max {
                p.add(name, format!("must be between 1 and {max}"));
            }
        }
        for (name, value) in [
            (
                "distillation.generation.tenant-share-percent",
                g.tenant_share_percent,
            ),
            (
                "distillation.generation.busy-share-percent",
                g.busy_share_percent,
            ),
        ] {
            if !(1..=100).contains(&value) {
                p.add(name, "must be between 1 and 100".to_owned());
            }
        }
        check_pipeline(p, "distillation.pipeline", &d.pipeline);
    }
}

/// The settings of a pipeline lane, under `prefix`.
fn check_pipeline(p: &mut Problems, prefix: &str, pipeline: &PipelineSection) {
    for (name, value, max) in [
        (
            "max-users-in-memory",
            pipeline.max_users_in_memory,
            10_000_000,
        ),
        ("round-texts", pipeline.round_texts, 4096),
        ("entries-per-user", pipeline.entries_per_user, 4096),
        ("rounds-in-flight", pipeline.rounds_in_flight, 64),
    ] {
        if value == 0 || value > max {
            p.add(
                format!("{prefix}.{name}"),
                format!("must be between 1 and {max}"),
            );
        }
    }
    if pipeline.scan_interval < Duration::from_millis(100) {
        p.add(
            format!("{prefix}.scan-interval"),
            "must be at least 100ms".to_owned(),
        );
    }
}
