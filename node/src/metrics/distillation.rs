//! The distillation part of `/metrics`: what the gate did, the generation pool (tokens,
//! queue, batch sizes, time to first token) and the distillation lane's backlog.

use std::sync::atomic::Ordering;

use engram_actors::distillation::Distillation;
use engram_storage::types::Timestamp;

use super::inference::{metric, oldest_pending_seconds};

pub(super) fn render_distillation(text: &mut String, d: &Distillation, now: Timestamp) {
    let m = &d.metrics;
    for (name, help, value) in [
        (
            "engram_distillation_rule_hits_total",
            "Messages the rules found an intent in",
            &m.rule_hits,
        ),
        (
            "engram_distillation_model_answers_total",
            "Answers of the generative model",
            &m.model_answers,
        ),
        (
            "engram_distillation_written_total",
            "Intent versions the gate wrote",
            &m.written,
        ),
        (
            "engram_distillation_replaced_total",
            "Versions that replaced one of the same type within the replace window",
            &m.replaced,
        ),
        (
            "engram_distillation_retried_total",
            "Results sent back for a second model run (a required field missing)",
            &m.retried,
        ),
        (
            "engram_distillation_dropped_incomplete_total",
            "Results dropped for a missing required field after the retry",
            &m.dropped_incomplete,
        ),
        (
            "engram_distillation_no_intent_total",
            "Model answers of no (new) intent",
            &m.no_intent,
        ),
        (
            "engram_distillation_flagged_total",
            "Versions flagged for compliance review (personal data)",
            &m.flagged,
        ),
        (
            "engram_distillation_renewals_deactivated_total",
            "Renewals deactivated by a cancellation",
            &m.renewals_deactivated,
        ),
        (
            "engram_distillation_failed_total",
            "Model runs without a whole answer (the message is dropped)",
            &m.failed,
        ),
        (
            "engram_distillation_deferred_total",
            "Model runs refused or expired (the message waits for a later round)",
            &m.deferred,
        ),
        (
            "engram_distillation_summaries_total",
            "Turn summaries the model wrote",
            &m.summaries,
        ),
    ] {
        metric(text, name, "counter", help, value.load(Ordering::Relaxed));
    }
    if let Some(pool) = &d.generator {
        let s = pool.stats();
        let mean = |sum: u64, n: u64| if n == 0 { 0.0 } else { sum as f64 / n as f64 };
        for (name, kind, help, value) in [
            (
                "engram_generation_tokens_total",
                "counter",
                "Tokens the generation pool decoded",
                s.tokens as f64,
            ),
            (
                "engram_generation_prompt_tokens_total",
                "counter",
                "Prompt tokens fed (shared system prompts once per computation)",
                s.prompt_tokens as f64,
            ),
            (
                "engram_generation_answered_total",
                "counter",
                "Generations answered whole",
                s.answered as f64,
            ),
            (
                "engram_generation_refused_total",
                "counter",
                "Generations refused at admission",
                s.refused as f64,
            ),
            (
                "engram_generation_expired_total",
                "counter",
                "Generations past their deadline",
                s.expired as f64,
            ),
            (
                "engram_generation_failed_total",
                "counter",
                "Generations without a whole answer",
                s.failed as f64,
            ),
            (
                "engram_generation_steps_total",
                "counter",
                "Decoding steps (each for every running sequence)",
                s.steps as f64,
            ),
            (
                "engram_generation_model_loaded",
                "gauge",
                "1 once the generative model is loaded (the node serves before)",
                f64::from(u8::from(s.loaded)),
            ),
            (
                "engram_generation_model_load_failures_total",
                "counter",
                "Loads of the generative model that failed (each is retried later)",
                s.load_failures as f64,
            ),
            (
                "engram_generation_queue_depth",
                "gauge",
                "Generations waiting",
                s.queued as f64,
            ),
            (
                "engram_generation_running",
                "gauge",
                "Sequences decoding now",
                s.running as f64,
            ),
            (
                "engram_generation_mean_batch",
                "gauge",
                "Mean sequences per decoding step since start",
                mean(s.step_sequences, s.steps),
            ),
            (
                "engram_generation_mean_first_token_seconds",
                "gauge",
                "Mean time to first token since start, queue included",
                mean(s.first_token_ms, s.first_tokens) / 1000.0,
            ),
            (
                "engram_generation_rest_seconds_total",
                "counter",
                "Time the idle-class decoding thread rested between steps because the machine was busy",
                s.rested.as_secs_f64(),
            ),
        ] {
            metric(text, name, kind, help, value);
        }
    }
    if let Some(lane) = &d.pipeline {
        let m = lane.metrics();
        let age = oldest_pending_seconds(m, now);
        metric(
            text,
            "engram_distillation_oldest_pending_seconds",
            "gauge",
            "Age of the oldest message awaiting the model this node knows of",
            age,
        );
        for (name, kind, help, value) in [
            (
                "engram_distillation_pending_users",
                "gauge",
                "Users of this node's shards with messages awaiting the model, as of the last scan",
                &m.pending_users,
            ),
            (
                "engram_distillation_rounds_total",
                "counter",
                "Rounds of the distillation lane",
                &m.rounds,
            ),
            (
                "engram_distillation_results_total",
                "counter",
                "Versions the lane's rounds wrote",
                &m.stored,
            ),
        ] {
            metric(text, name, kind, help, value.load(Ordering::Relaxed));
        }
    }
}
