//! `[reranker]`: the English cross-encoder behind searches that ask `"rerank": true`
//! ([`engram_actors::rerank`]). Defaults are the actors' and the model's own, so they cannot
//! disagree.

use std::path::PathBuf;
use std::time::Duration;

use engram_actors::rerank::RerankSettings;
use engram_inference::{DeviceChoice, Precision, RerankerConfig};
use serde::{Deserialize, Serialize};

/// `[reranker]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct RerankerSection {
    /// Whether the node reranks searches that ask for it (false: they are answered in the
    /// hybrid order, `rerank_fallback: "unavailable"`). The model loads at the first such
    /// search.
    pub enabled: bool,
    /// How many of the first candidates are scored.
    pub candidates: usize,
    /// How long a search waits for its scores, queue and first load included; past it the
    /// hybrid order is returned (`"deadline"`).
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    /// Reranks queued at most, a tenant at most half of them; past it searches are answered
    /// unreranked (`"busy"`).
    pub queue: usize,
    /// Where the model runs: `"auto"` (one worker on each CUDA device, else the CPU),
    /// `"cpu"` or `{ cuda = N }`.
    pub device: DeviceChoice,
    /// Its linear layers on the CPU: `"int8-rows"` (the default), `"float32"`, `"float16"` or
    /// `"int8"`.
    pub precision: Precision,
}

impl Default for RerankerSection {
    fn default() -> Self {
        let settings = RerankSettings::default();
        let model = RerankerConfig::default();
        RerankerSection {
            enabled: true,
            candidates: settings.candidates,
            deadline: settings.deadline.unwrap_or(Duration::from_secs(2)),
            queue: settings.queue,
            device: model.device,
            precision: model.precision,
        }
    }
}

impl RerankerSection {
    /// The actors' settings.
    pub fn settings(&self) -> RerankSettings {
        RerankSettings {
            candidates: self.candidates,
            deadline: Some(self.deadline),
            queue: self.queue,
        }
    }

    /// The model's configuration, its files under `model_dir`.
    pub fn model(&self, model_dir: PathBuf) -> RerankerConfig {
        RerankerConfig {
            model_dir,
            device: self.device,
            precision: self.precision,
            ..RerankerConfig::default()
        }
    }
}
