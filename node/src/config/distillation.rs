//! `[distillation]`: intents distilled from user messages, rules at once, then the generative
//! model in the background ([`engram_actors::distil`]). Defaults are the actors' and the
//! generation pool's own, so they cannot disagree.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use engram_actors::distillation::DistillationConfig;
use engram_actors::pipeline::PipelineConfig;
use engram_inference::{BackgroundPriority, DeviceChoice, GenerationConfig, Precision};
use serde::{Deserialize, Serialize};

use super::inference::PipelineSection;

/// `[distillation]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct DistillationSection {
    /// Whether user messages are distilled at all (false: intents only as gateways write
    /// them).
    pub enabled: bool,
    /// Whether the generative model runs after the rules, in the background (false: rules
    /// only).
    pub model: bool,
    /// Intent types of a tenant that configures none.
    pub intent_types: Vec<String>,
    /// Intent types per tenant (each list replaces the default for that tenant).
    pub tenant_intent_types: BTreeMap<String, Vec<String>>,
    /// How long a distilled version is served; the sweep removes it after.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// A distilled result of the same type within this long replaces the earlier version.
    #[serde(with = "humantime_serde")]
    pub replace_within: Duration,
    /// How long one model run may take, queue included, before it is retried later.
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    /// Labelled messages shown to the model with each message, the likest of the built-in
    /// library (0: none).
    pub examples: usize,
    /// The generation pool.
    pub generation: GenerationSection,
    /// The pipeline lane that runs the model behind the writes.
    pub pipeline: PipelineSection,
}

/// `[distillation.generation]`: the generation pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct GenerationSection {
    /// The GGUF file, relative to the model directory (`inference.model-dir`).
    pub model_file: PathBuf,
    /// Where the decoder runs: `"auto"`, `"cpu"` or `{ cuda = N }`.
    pub device: DeviceChoice,
    /// The decoder's linear layers: `"float32"`, `"float16"` (on the CPU: half-precision
    /// weights, float32 activations), `"int8"` (on the CPU: int8 codes, and half-precision
    /// floats for the feed-forward's output and the vocabulary projection) or `"int8-rows"`
    /// (the default; on the CPU: int8 codes per output channel, activations quantised per
    /// token after a Hadamard rotation, one int8 token table).
    pub precision: Precision,
    /// Sequences decoded together at most (continuous batching).
    pub max_batch: usize,
    /// Requests waiting at most.
    pub queue_capacity: usize,
    /// The share of the queue, in percent, one tenant may hold.
    pub tenant_share_percent: u8,
    /// The decoding thread's scheduling class: `"idle"` or `"normal"`.
    pub priority: BackgroundPriority,
    /// In the idle class, while the machine is busy, the share of the time, in percent (1 to
    /// 100; 100: no limit), decoding steps may take.
    pub busy_share_percent: u8,
    /// After a failed load, the wait before the model file is read again, doubled after each
    /// failure up to ten minutes (`"0s"`: a failed load leaves the node distilling by rules
    /// until it restarts).
    #[serde(with = "humantime_serde")]
    pub load_retry: Duration,
}

impl Default for GenerationSection {
    fn default() -> Self {
        let g = GenerationConfig::default();
        GenerationSection {
            model_file: g.model,
            device: g.device,
            precision: g.precision,
            max_batch: g.max_batch,
            queue_capacity: g.queue_capacity,
            tenant_share_percent: g.tenant_share_percent,
            priority: g.priority,
            busy_share_percent: g.busy_share_percent,
            load_retry: g.load_retry.unwrap_or_default(),
        }
    }
}

/// The lane's defaults: rounds of a few messages, one at a time (a round's messages are
/// decoded together; the next round reads while none is waiting).
pub fn default_lane() -> PipelineConfig {
    PipelineConfig {
        round_texts: 8,
        entries_per_user: 4,
        rounds_in_flight: 2,
        ..PipelineConfig::default()
    }
}

impl Default for DistillationSection {
    fn default() -> Self {
        let d = DistillationConfig::default();
        DistillationSection {
            enabled: true,
            model: true,
            intent_types: d.intent_types,
            tenant_intent_types: d.tenant_intent_types,
            ttl: d.ttl,
            replace_within: d.replace_within,
            deadline: d.deadline,
            examples: d.examples,
            generation: GenerationSection::default(),
            pipeline: PipelineSection::from(default_lane()),
        }
    }
}

impl DistillationSection {
    /// The actors' settings.
    pub fn config(&self) -> DistillationConfig {
        DistillationConfig {
            intent_types: self.intent_types.clone(),
            tenant_intent_types: self.tenant_intent_types.clone(),
            ttl: self.ttl,
            replace_within: self.replace_within,
            deadline: self.deadline,
            examples: self.examples,
        }
    }

    /// The generation pool's settings, with models under `model_dir`.
    pub fn generation(&self, model_dir: PathBuf) -> GenerationConfig {
        GenerationConfig {
            model_dir,
            model: self.generation.model_file.clone(),
            device: self.generation.device,
            precision: self.generation.precision,
            max_batch: self.generation.max_batch,
            queue_capacity: self.generation.queue_capacity,
            tenant_share_percent: self.generation.tenant_share_percent,
            priority: self.generation.priority,
            busy_share_percent: self.generation.busy_share_percent,
            load_retry: Some(self.generation.load_retry).filter(|wait| !wait.is_zero()),
            // The default intent types' prompt and the summaries': every message and turn's.
            system_prompts: vec![
                engram_inference::distil::intent_prompt(&self.intent_types),
                engram_inference::distil::summary_prompt(),
            ],
        }
    }
}
