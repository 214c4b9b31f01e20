//! The distillation service of a node: the tenant intent types, the gate's settings, the
//! generation pool, and the pipeline lane that runs the model behind the writes
//! ([`crate::pipeline`] on [`WorkQueue::Distillation`]).
//!
//! A write with a user message runs the rules at once ([`engram_inference::distil::rules`]),
//! writes what they find through the gate ([`crate::user::intents`]) in its own transaction,
//! and, when the model is on, queues the message there too; the pipeline's distillation
//! rounds run the model on queued messages in the background and write its results through
//! the same gate, in transactions fenced by the user's shard.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use engram_inference::GenerationPool;
use engram_inference::distil::DEFAULT_INTENT_TYPES;
use engram_inference::distil::shots::ShotLibrary;
use engram_storage::WorkQueue;

use crate::pipeline::{Pipeline, PipelineConfig};

/// The gate's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateRules {
    /// How long a version is served (ms).
    pub ttl_ms: i64,
    /// A result of the same type within this long replaces the earlier version (ms).
    pub replace_within_ms: i64,
    /// Versions kept per type.
    pub max_versions: usize,
}

/// The distillation settings (the node's `[distillation]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistillationConfig {
    /// Intent types of a tenant that configures none.
    pub intent_types: Vec<String>,
    /// Intent types per tenant (each list replaces the default for that tenant).
    pub tenant_intent_types: BTreeMap<String, Vec<String>>,
    /// How long a distilled version is served.
    pub ttl: Duration,
    /// A result of the same type within this long replaces the earlier version.
    pub replace_within: Duration,
    /// How long one model run may take, queue included, before it is given up (and tried in
    /// a later round).
    pub deadline: Duration,
    /// Labelled messages shown to the model with each message, the likest of the built-in
    /// library ([`engram_inference::distil::shots`]; 0: none).
    pub examples: usize,
}

impl Default for DistillationConfig {
    fn default() -> Self {
        DistillationConfig {
            intent_types: DEFAULT_INTENT_TYPES
                .iter()
                .map(|t| (*t).to_owned())
                .collect(),
            tenant_intent_types: BTreeMap::new(),
            ttl: Duration::from_secs(30 * 24 * 3600),
            replace_within: Duration::from_secs(600),
            deadline: Duration::from_secs(600),
            examples: engram_inference::distil::shots::DEFAULT_SHOTS,
        }
    }
}

/// Counters of distillation, exported as metrics.
#[derive(Debug, Default)]
pub struct DistillationMetrics {
    /// Messages the rules found an intent in.
    pub rule_hits: AtomicU64,
    /// Model answers received.
    pub model_answers: AtomicU64,
    /// Versions the gate wrote.
    pub written: AtomicU64,
    /// Of those, versions that replaced one within the window.
    pub replaced: AtomicU64,
    /// Results sent back for a second model run (a required field missing).
    pub retried: AtomicU64,
    /// Results dropped for a missing required field after the retry.
    pub dropped_incomplete: AtomicU64,
    /// Model answers of no intent (or of one the rules had already written).
    pub no_intent: AtomicU64,
    /// Versions flagged for compliance (personal data).
    pub flagged: AtomicU64,
    /// Renewals deactivated by a cancellation.
    pub renewals_deactivated: AtomicU64,
    /// Model runs that failed (no whole answer); the message is dropped.
    pub failed: AtomicU64,
    /// Model runs refused or expired; the message waits for a later round.
    pub deferred: AtomicU64,
    /// Turn summaries the model wrote.
    pub summaries: AtomicU64,
}

impl DistillationMetrics {
    /// Counts a version the gate wrote.
    pub fn count_written(&self, ack: &crate::request::user::IntentAck) {
        use std::sync::atomic::Ordering::Relaxed;
        self.written.fetch_add(1, Relaxed);
        for (yes, counter) in [
            (ack.replaced.is_some(), &self.replaced),
            (ack.flagged, &self.flagged),
            (
                ack.renewal_deactivated.is_some(),
                &self.renewals_deactivated,
            ),
        ] {
            if yes {
                counter.fetch_add(1, Relaxed);
            }
        }
    }
}

/// A node's distillation; clones share it.
#[derive(Debug, Clone)]
pub struct Distillation {
    /// Settings.
    pub config: Arc<DistillationConfig>,
    /// The generative model (`None`: rules only).
    pub generator: Option<GenerationPool>,
    /// The lane that runs the model behind the writes (with `generator`).
    pub pipeline: Option<Pipeline>,
    /// The labelled messages the model is shown examples from (with `generator`, when
    /// [`DistillationConfig::examples`] is not 0).
    pub library: Option<Arc<ShotLibrary>>,
    /// Counters.
    pub metrics: Arc<DistillationMetrics>,
}

impl Distillation {
    /// Rules only: nothing is queued for a model.
    pub fn rules_only(config: DistillationConfig) -> Distillation {
        Distillation {
            config: Arc::new(config),
            generator: None,
            pipeline: None,
            library: None,
            metrics: Arc::default(),
        }
    }

    /// Rules, then `generator` in the background through a pipeline lane with `pipeline`'s
    /// settings (started with the node's directory: [`Pipeline::start`]).
    pub fn with_model(
        config: DistillationConfig,
        generator: GenerationPool,
        pipeline: PipelineConfig,
    ) -> Distillation {
        let library = (config.examples > 0).then(|| Arc::new(ShotLibrary::builtin(None)));
        Distillation {
            config: Arc::new(config),
            generator: Some(generator),
            pipeline: Some(Pipeline::for_queue(WorkQueue::Distillation, pipeline)),
            library,
            metrics: Arc::default(),
        }
    }

    /// Whether messages are queued for the model.
    pub fn model_on(&self) -> bool {
        self.generator.is_some() && self.pipeline.is_some()
    }

    /// The intent types of `tenant`.
    pub fn types(&self, tenant: &str) -> &[String] {
        self.config
            .tenant_intent_types
            .get(tenant)
            .unwrap_or(&self.config.intent_types)
    }

    /// The gate's settings, with `max_versions` kept per type.
    pub fn gate_rules(&self, max_versions: usize) -> GateRules {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        GateRules {
            ttl_ms: ms(self.config.ttl),
            replace_within_ms: ms(self.config.replace_within),
            max_versions,
        }
    }
}
