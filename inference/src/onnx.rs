//! A reader of the weights in an ONNX file: its initialisers (named tensors) and the names and
//! inputs of its nodes, enough to find the weights of a dynamically quantised model and turn
//! them back into float32 tensors. Nothing here runs the graph: the network is written on tch
//! (`bert.rs`), and ONNX only ships its weights.
//!
//! ONNX files are protocol buffers (`onnx.proto`). Only the fields read here are declared;
//! prost skips every other field. The numbers are those of `onnx.proto`:
//! `ModelProto.graph = 7`; `GraphProto.node = 1`, `initializer = 5`; `NodeProto.input = 1`,
//! `output = 2`, `name = 3`, `op_type = 4`; `TensorProto.dims = 1`, `data_type = 2`,
//! `float_data = 4`, `int32_data = 5`, `name = 8`, `raw_data = 9`.
//!
//! Dynamic quantisation (onnxruntime's `quantize_dynamic`) stores a weight `W` as
//! `W_quantized` (int8 or uint8), `W_scale` (float32) and `W_zero_point` (same type as the
//! codes), one scale and zero point per tensor, or per column of a linear layer's `[in, out]`
//! weight: `W = (W_quantized - W_zero_point) * W_scale`.
//! A linear layer's weight loses its name (`onnx::MatMul_1662`); the `MatMulInteger` node that
//! reads it keeps the module's path (`/bert/encoder/layer.0/attention/self/query/MatMul_quant`),
//! so [`OnnxWeights::matmul_weight`] finds it through the node.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use prost::Message;
use tch::{Kind, Tensor};

use crate::error::{Error, Result};

#[derive(Clone, PartialEq, prost::Message)]
struct ModelProto {
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    output: Vec<String>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    op_type: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(float, repeated, tag = "4")]
    float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    int32_data: Vec<i32>,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "vec", tag = "9")]
    raw_data: Vec<u8>,
}

/// `TensorProto.DataType` values this reader converts.
const FLOAT: i32 = 1;
const UINT8: i32 = 2;
const INT8: i32 = 3;

/// The weights of an ONNX file, taken out one by one.
pub(crate) struct OnnxWeights {
    path: PathBuf,
    initializers: HashMap<String, TensorProto>,
    /// The weight (its base name, without `_quantized`) each `MatMulInteger` node reads, by
    /// the node's name.
    matmul: HashMap<String, String>,
}

impl OnnxWeights {
    /// Reads `path` (the whole file: the weights are all it holds).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let bytes = crate::reader::read_model_file(path)?;
        let format = |reason: String| Error::Format {
            path: path.to_path_buf(),
            reason,
        };
        let model = ModelProto::decode(bytes.as_slice())
            .map_err(|e| format(format!("not an ONNX model: {e}")))?;
        let graph = model
            .graph
            .ok_or_else(|| format("the model has no graph".to_owned()))?;
        let matmul = graph
            .node
            .into_iter()
            .filter(|node| node.op_type == "MatMulInteger")
            .filter_map(|node| {
                let weight = node.input.get(1)?.strip_suffix("_quantized")?.to_owned();
                Some((node.name, weight))
            })
            .collect();
        let initializers = graph
            .initializer
            .into_iter()
            .map(|tensor| (tensor.name.clone(), tensor))
            .collect();
        Ok(OnnxWeights {
            path: path.to_path_buf(),
            initializers,
            matmul,
        })
    }

    fn error(&self, reason: String) -> Error {
        Error::Format {
            path: self.path.clone(),
            reason,
        }
    }

    /// The base name of the weight that the `MatMulInteger` node `node` reads.
    pub(crate) fn matmul_weight(&self, node: &str) -> Result<String> {
        self.matmul
            .get(node)
            .cloned()
            .ok_or_else(|| self.error(format!("no MatMulInteger node {node:?}")))
    }

    /// The weight `name` as float32 of shape `shape`: stored as float32 under `name`, or
    /// quantised as `name_quantized`, `name_scale` and `name_zero_point` and dequantised.
    /// Each tensor is taken out once.
    pub(crate) fn take(&mut self, name: &str, shape: &[i64]) -> Result<Tensor> {
        let tensor = match self.initializers.remove(name) {
            Some(tensor) => self.to_float(&tensor)?,
            None => {
                let (codes, zero, scale) = self.take_quantised(name)?;
                codes.f_to_kind(Kind::Float)?.f_sub(&zero)?.f_mul(&scale)?
            }
        };
        self.check_shape(name, &tensor, shape)?;
        Ok(tensor)
    }

    /// The weight `name` of shape `shape` as [`Table8::Quantised`] where it is stored
    /// quantised (its 8-bit codes kept as they are: a quarter of float32's memory, the same
    /// values when dequantised), else as float32.
    pub(crate) fn take_table(&mut self, name: &str, shape: &[i64]) -> Result<Table8> {
        if self.initializers.contains_key(name) {
            return Ok(Table8::Float(self.take(name, shape)?));
        }
        let (codes, zero, scale) = self.take_quantised(name)?;
        self.check_shape(name, &codes, shape)?;
        Ok(Table8::Quantised { codes, zero, scale })
    }

    fn check_shape(&self, name: &str, tensor: &Tensor, shape: &[i64]) -> Result<()> {
        if tensor.size() != shape {
            return Err(self.error(format!(
                "tensor {name:?} has shape {:?}, expected {shape:?}",
                tensor.size()
            )));
        }
        Ok(())
    }

    /// The codes (int8 or uint8, as stored), zero point and scale (float32, one per tensor
    /// or per column) of the quantised weight `name`.
    fn take_quantised(&mut self, name: &str) -> Result<(Tensor, Tensor, Tensor)> {
        let codes = self.remove(&format!("{name}_quantized"))?;
        let scale = self.remove(&format!("{name}_scale"))?;
        let zero = self.remove(&format!("{name}_zero_point"))?;
        // One scale and zero point per tensor, or one per column (the last axis, as
        // `MatMulInteger` reads a weight's zero points), which broadcasting applies.
        let columns = codes.dims.last().copied();
        let per =
            |dims: &[i64]| dims.is_empty() || (dims.len() == 1 && dims.last().copied() == columns);
        if !per(&scale.dims) || !per(&zero.dims) {
            return Err(self.error(format!(
                "{name}'s scale {:?} and zero point {:?} are neither one per tensor nor \
                 one per column of {:?}",
                scale.dims, zero.dims, codes.dims
            )));
        }
        if zero.data_type != codes.data_type {
            return Err(self.error(format!(
                "{name}'s zero point is of type {}, its codes of type {}",
                zero.data_type, codes.data_type
            )));
        }
        let scale = self.to_float(&scale)?;
        let zero = self.to_float(&zero)?;
        Ok((self.to_codes(&codes)?, zero, scale))
    }

    /// The 8-bit codes of `tensor` as a tensor of their own type (int8 or uint8).
    fn to_codes(&self, tensor: &TensorProto) -> Result<Tensor> {
        let raw = &tensor.raw_data;
        let codes = match tensor.data_type {
            UINT8 if !raw.is_empty() => Tensor::f_from_slice(raw.as_slice())?,
            INT8 if !raw.is_empty() => {
                let signed: Vec<i8> = raw.iter().map(|&v| i8::from_le_bytes([v])).collect();
                Tensor::f_from_slice(&signed)?
            }
            // Codes kept one a value in `int32_data`, or of another type: as float32 values.
            _ => return self.to_float(tensor),
        };
        let count: i64 = tensor.dims.iter().product();
        if codes.numel() as i64 != count {
            return Err(self.error(format!(
                "tensor {:?} holds {} values, its dims {:?} need {count}",
                tensor.name,
                codes.numel(),
                tensor.dims
            )));
        }
        Ok(codes.f_view(tensor.dims.as_slice())?)
    }

    fn remove(&mut self, name: &str) -> Result<TensorProto> {
        self.initializers
            .remove(name)
            .ok_or_else(|| self.error(format!("no tensor {name:?}")))
    }

    /// A float32 tensor of `tensor`'s shape and values (codes keep their integer values).
    fn to_float(&self, tensor: &TensorProto) -> Result<Tensor> {
        let count: i64 = tensor.dims.iter().product();
        let count = usize::try_from(count)
            .map_err(|_| self.error(format!("tensor {:?} has negative dims", tensor.name)))?;
        let raw = &tensor.raw_data;
        let values: Vec<f32> = match tensor.data_type {
            FLOAT if raw.is_empty() => tensor.float_data.clone(),
            FLOAT => raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            // Without raw data, ONNX keeps 8-bit values in `int32_data`, one a value.
            UINT8 | INT8 if raw.is_empty() => tensor.int32_data.iter().map(|&v| v as f32).collect(),
            UINT8 => raw.iter().map(|&v| f32::from(v)).collect(),
            INT8 => raw
                .iter()
                .map(|&v| f32::from(i8::from_le_bytes([v])))
                .collect(),
            other => {
                return Err(self.error(format!(
                    "tensor {:?} has data type {other}; float32, uint8 and int8 are read",
                    tensor.name
                )));
            }
        };
        if values.len() != count {
            return Err(self.error(format!(
                "tensor {:?} holds {} values, its dims {:?} need {count}",
                tensor.name,
                values.len(),
                tensor.dims
            )));
        }
        let tensor = Tensor::f_from_slice(&values)?.f_view(tensor.dims.as_slice())?;
        debug_assert_eq!(tensor.kind(), Kind::Float);
        Ok(tensor)
    }
}

/// A table read from an ONNX file: float32, or the 8-bit codes with the zero point and scale
/// that dequantise them (`(code - zero) * scale`).
pub(crate) enum Table8 {
    /// As stored, float32.
    Float(Tensor),
    /// Stored quantised.
    Quantised {
        /// int8 or uint8 codes.
        codes: Tensor,
        /// One zero point per tensor or per column, float32.
        zero: Tensor,
        /// One scale per tensor or per column, float32.
        scale: Tensor,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of one graph with the given nodes and initialisers, encoded.
    fn encoded(node: Vec<NodeProto>, initializer: Vec<TensorProto>) -> Vec<u8> {
        ModelProto {
            graph: Some(GraphProto { node, initializer }),
        }
        .encode_to_vec()
    }

    fn raw(name: &str, data_type: i32, dims: &[i64], raw_data: Vec<u8>) -> TensorProto {
        TensorProto {
            dims: dims.to_vec(),
            data_type,
            name: name.to_owned(),
            raw_data,
            ..TensorProto::default()
        }
    }

    fn open(bytes: &[u8]) -> Result<OnnxWeights> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("model.onnx");
        std::fs::write(&path, bytes).expect("writing the model");
        OnnxWeights::open(&path)
    }

    fn values(tensor: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(tensor.flatten(0, -1)).expect("float32 values")
    }

    /// A quantised weight is dequantised as `(code - zero point) * scale`, for int8 and uint8
    /// codes, and keeps its stored `[in, out]` shape.
    #[test]
    fn dequantises_per_tensor_codes() {
        let initializer = vec![
            raw("w_quantized", INT8, &[2, 2], vec![0xff, 0x00, 0x02, 0x80]),
            raw("w_scale", FLOAT, &[], 0.5_f32.to_le_bytes().to_vec()),
            raw("w_zero_point", INT8, &[], vec![0x01]),
            raw("e_quantized", UINT8, &[3], vec![0, 128, 255]),
            raw("e_scale", FLOAT, &[], 2.0_f32.to_le_bytes().to_vec()),
            TensorProto {
                name: "e_zero_point".to_owned(),
                data_type: UINT8,
                int32_data: vec![128],
                ..TensorProto::default()
            },
        ];
        let mut weights = open(&encoded(Vec::new(), initializer)).expect("a model");
        let w = weights.take("w", &[2, 2]).expect("w");
        assert_eq!(values(&w), vec![-1.0, -0.5, 0.5, -64.5]);
        let e = weights.take("e", &[3]).expect("e");
        assert_eq!(values(&e), vec![-256.0, 0.0, 254.0]);
        // Taken once: a second take is an error, not the same tensor again.
        assert!(weights.take("w", &[2, 2]).is_err());
    }

    /// Per-column codes (a linear layer's `[in, out]` weight, one scale and zero point per
    /// output) are dequantised column by column; any other per-channel layout is refused.
    #[test]
    fn dequantises_per_column_codes() {
        let scales: Vec<u8> = [0.5_f32, 2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let initializer = vec![
            raw("w_quantized", INT8, &[2, 2], vec![0x03, 0x03, 0x05, 0x01]),
            raw("w_scale", FLOAT, &[2], scales.clone()),
            raw("w_zero_point", INT8, &[2], vec![0x01, 0xff]),
            raw("r_quantized", INT8, &[2, 3], vec![0; 6]),
            raw("r_scale", FLOAT, &[2], scales),
            raw("r_zero_point", INT8, &[2], vec![0, 0]),
        ];
        let mut weights = open(&encoded(Vec::new(), initializer)).expect("a model");
        let w = weights.take("w", &[2, 2]).expect("w");
        // Column 0: (3 - 1) * 0.5, (5 - 1) * 0.5; column 1: (3 + 1) * 2, (1 + 1) * 2.
        assert_eq!(values(&w), vec![1.0, 8.0, 2.0, 4.0]);
        let err = weights.take("r", &[2, 3]).expect_err("one scale a row");
        assert!(err.to_string().contains("one per column"), "{err}");
    }

    /// Float weights are read from raw bytes or from `float_data`; a wrong shape is refused
    /// with the tensor's name.
    #[test]
    fn reads_float_weights_and_checks_shapes() {
        let bytes: Vec<u8> = [1.0_f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let initializer = vec![
            raw("a", FLOAT, &[2], bytes),
            TensorProto {
                name: "b".to_owned(),
                data_type: FLOAT,
                dims: vec![1, 2],
                float_data: vec![3.0, 4.0],
                ..TensorProto::default()
            },
        ];
        let mut weights = open(&encoded(Vec::new(), initializer)).expect("a model");
        assert_eq!(
            values(&weights.take("a", &[2]).expect("a")),
            vec![1.0, -2.0]
        );
        let err = weights.take("b", &[2]).expect_err("a wrong shape");
        assert!(err.to_string().contains("\"b\" has shape [1, 2]"), "{err}");
        let err = weights.take("c", &[1]).expect_err("a missing tensor");
        assert!(
            err.to_string().contains("no tensor \"c_quantized\""),
            "{err}"
        );
    }

    /// A linear layer's weight is found through the `MatMulInteger` node that reads it.
    #[test]
    fn finds_weights_through_their_nodes() {
        let node = NodeProto {
            input: vec!["x".to_owned(), "onnx::MatMul_7_quantized".to_owned()],
            output: vec!["y".to_owned()],
            name: "/bert/encoder/layer.0/attention/self/query/MatMul_quant".to_owned(),
            op_type: "MatMulInteger".to_owned(),
        };
        let weights = open(&encoded(vec![node], Vec::new())).expect("a model");
        assert_eq!(
            weights
                .matmul_weight("/bert/encoder/layer.0/attention/self/query/MatMul_quant")
                .expect("the node"),
            "onnx::MatMul_7"
        );
        assert!(weights.matmul_weight("/bert/pooler/dense/MatMul").is_err());
    }

    /// A file that is not a protocol buffer, or has no graph, is a format error.
    #[test]
    fn refuses_what_is_not_a_model() {
        let err = open(b"\xff\xff\xff\xff not onnx").err().expect("garbage");
        assert!(matches!(err, Error::Format { .. }), "{err}");
        let err = open(&ModelProto { graph: None }.encode_to_vec())
            .err()
            .expect("no graph");
        assert!(err.to_string().contains("no graph"), "{err}");
    }
}
