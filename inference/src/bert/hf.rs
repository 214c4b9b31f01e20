//! HuggingFace BERT checkpoints: `config.json` for the hyper-parameters and `model.safetensors`
//! for the weights (all-MiniLM-L6-v2).
//!
//! Parameter names follow `transformers`' `BertModel` (`embeddings.word_embeddings.weight`,
//! `encoder.layer.N.attention.self.query.weight`, ...), with or without a `bert.` prefix.
//! Only absolute position embeddings and erf GELU are accepted: anything else would be run
//! wrongly, so it is refused at load.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tch::{Device, Kind, Tensor};

use super::{Bert, BertConfig, LayerParam, Param, WeightSource, WordEmbeddings};
use crate::error::{Error, Result};
use crate::linear::Precision;

/// The fields of a HuggingFace `config.json` that the encoder uses.
#[derive(Debug, Deserialize)]
struct HfConfig {
    hidden_size: i64,
    num_hidden_layers: i64,
    num_attention_heads: i64,
    intermediate_size: i64,
    vocab_size: i64,
    max_position_embeddings: i64,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: i64,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default = "default_position_type")]
    position_embedding_type: String,
}

fn default_type_vocab() -> i64 {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".to_owned()
}
fn default_position_type() -> String {
    "absolute".to_owned()
}

/// Reads the hyper-parameters from `config.json`.
pub(crate) fn read_config(path: &Path) -> Result<BertConfig> {
    let text = read_text(path)?;
    let format = |reason: String| Error::Format {
        path: path.to_path_buf(),
        reason,
    };
    let hf: HfConfig = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    if hf.hidden_act != "gelu" {
        return Err(format(format!(
            "activation {:?}, only erf \"gelu\" is supported",
            hf.hidden_act
        )));
    }
    if hf.position_embedding_type != "absolute" {
        return Err(format(format!(
            "position embeddings {:?}, only \"absolute\" are supported",
            hf.position_embedding_type
        )));
    }
    let config = BertConfig {
        hidden: hf.hidden_size,
        layers: hf.num_hidden_layers,
        heads: hf.num_attention_heads,
        intermediate: hf.intermediate_size,
        vocab: hf.vocab_size,
        max_positions: hf.max_position_embeddings,
        type_vocab: hf.type_vocab_size,
        layer_norm_eps: hf.layer_norm_eps,
    };
    match config.problem() {
        Some(problem) => Err(format(problem)),
        None => Ok(config),
    }
}

/// Reads sentence-transformers' `max_seq_length` from `sentence_bert_config.json`.
pub(crate) fn read_max_seq_length(path: &Path) -> Result<Option<usize>> {
    #[derive(Deserialize)]
    struct SentenceConfig {
        max_seq_length: Option<usize>,
    }
    let text = read_text(path)?;
    let config: SentenceConfig = serde_json::from_str(&text).map_err(|e| Error::Format {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(config.max_seq_length)
}

fn read_text(path: &Path) -> Result<String> {
    String::from_utf8(crate::reader::read_model_file(path)?).map_err(|e| Error::Format {
        path: path.to_path_buf(),
        reason: format!("not UTF-8: {e}"),
    })
}

/// Loads `model.safetensors` with the hyper-parameters `config` onto `device`, its linear
/// layers in `precision`.
pub(crate) fn load(
    path: &Path,
    config: BertConfig,
    device: Device,
    precision: Precision,
) -> Result<Bert> {
    if !path.is_file() {
        return Err(Error::ModelMissing {
            path: path.to_path_buf(),
        });
    }
    let tensors = Tensor::read_safetensors(path)?;
    let mut source = SafeTensors {
        path: path.to_path_buf(),
        tensors: tensors.into_iter().collect(),
    };
    Bert::load(config, &mut source, device, precision)
}

/// The tensors of a safetensors file, by name.
struct SafeTensors {
    path: PathBuf,
    tensors: HashMap<String, Tensor>,
}

impl SafeTensors {
    /// Removes the tensor `name` (with or without the `bert.` prefix), checked to have `shape`,
    /// as float32.
    fn take(&mut self, name: &str, shape: &[i64]) -> Result<Tensor> {
        let tensor = match self.tensors.remove(name) {
            Some(tensor) => tensor,
            None => self
                .tensors
                .remove(&format!("bert.{name}"))
                .ok_or_else(|| Error::Format {
                    path: self.path.clone(),
                    reason: format!("no tensor {name:?}"),
                })?,
        };
        if tensor.size() != shape {
            return Err(Error::Format {
                path: self.path.clone(),
                reason: format!(
                    "tensor {name:?} has shape {:?}, expected {shape:?}",
                    tensor.size()
                ),
            });
        }
        Ok(tensor.f_to_kind(Kind::Float)?)
    }
}

impl WeightSource for SafeTensors {
    fn tensor(&mut self, param: Param, config: &BertConfig) -> Result<Tensor> {
        self.take(&tensor_name(param), &param.shape(config))
    }

    fn word_embeddings(&mut self, config: &BertConfig) -> Result<WordEmbeddings> {
        let table = self.take(
            "embeddings.word_embeddings.weight",
            &[config.vocab, config.hidden],
        )?;
        Ok(WordEmbeddings::Dense(table))
    }
}

/// The `transformers` name of a parameter.
pub(crate) fn tensor_name(param: Param) -> String {
    match param {
        Param::Position => "embeddings.position_embeddings.weight".to_owned(),
        Param::TokenType => "embeddings.token_type_embeddings.weight".to_owned(),
        Param::EmbeddingNormWeight => "embeddings.LayerNorm.weight".to_owned(),
        Param::EmbeddingNormBias => "embeddings.LayerNorm.bias".to_owned(),
        Param::Layer(index, layer) => {
            let suffix = match layer {
                LayerParam::QueryWeight => "attention.self.query.weight",
                LayerParam::QueryBias => "attention.self.query.bias",
                LayerParam::KeyWeight => "attention.self.key.weight",
                LayerParam::KeyBias => "attention.self.key.bias",
                LayerParam::ValueWeight => "attention.self.value.weight",
                LayerParam::ValueBias => "attention.self.value.bias",
                LayerParam::AttentionOutWeight => "attention.output.dense.weight",
                LayerParam::AttentionOutBias => "attention.output.dense.bias",
                LayerParam::AttentionNormWeight => "attention.output.LayerNorm.weight",
                LayerParam::AttentionNormBias => "attention.output.LayerNorm.bias",
                LayerParam::FeedForwardInWeight => "intermediate.dense.weight",
                LayerParam::FeedForwardInBias => "intermediate.dense.bias",
                LayerParam::FeedForwardOutWeight => "output.dense.weight",
                LayerParam::FeedForwardOutBias => "output.dense.bias",
                LayerParam::OutputNormWeight => "output.LayerNorm.weight",
                LayerParam::OutputNormBias => "output.LayerNorm.bias",
            };
            format!("encoder.layer.{index}.{suffix}")
        }
    }
}
