//! Where a decoder's weights come from: a GGUF file's tensors, dequantised as they are read,
//! or (`random`) seeded values; each weight float32 on the CPU, by its GGUF name.

use tch::Tensor;

use crate::error::{Error, Result};
use crate::gguf::Gguf;

/// Where a decoder's weights come from, by their GGUF names (`token_embd.weight`,
/// `blk.{i}.attn_q.weight`, ...).
pub(super) trait Source: Sync {
    /// The float32 CPU tensor `name`, which must have `shape` (PyTorch's order: `[out, in]`).
    fn tensor(&self, name: &str, shape: &[i64]) -> Result<Tensor>;

    /// Rows `first..first + count` of the 2-D tensor `name` of `shape`, float32 on the CPU.
    fn rows(&self, name: &str, shape: &[i64], first: i64, count: i64) -> Result<Tensor>;

    /// Whether the source holds `name` (the output projection is absent where the model ties
    /// it to the token embeddings).
    fn has(&self, name: &str) -> bool;

    /// An error about `name`, saying where the weights came from.
    fn error(&self, reason: String) -> Error;
}

/// The weights of an opened GGUF file, dequantised from its blocks as they are read.
pub(super) struct GgufSource<'a>(pub(super) &'a Gguf);

impl GgufSource<'_> {
    fn info(&self, name: &str, shape: &[i64]) -> Result<&crate::gguf::TensorInfo> {
        let info = self
            .0
            .tensor(name)
            .ok_or_else(|| self.error(format!("no tensor {name}")))?;
        // ggml lists dimensions innermost first.
        let dims: Vec<i64> = info.dims.iter().rev().map(|&d| d as i64).collect();
        if dims != shape {
            return Err(self.error(format!("tensor {name} is {dims:?}, expected {shape:?}")));
        }
        Ok(info)
    }
}

impl Source for GgufSource<'_> {
    fn tensor(&self, name: &str, shape: &[i64]) -> Result<Tensor> {
        let info = self.info(name, shape)?;
        self.0.tensor_tch(info)
    }

    fn rows(&self, name: &str, shape: &[i64], first: i64, count: i64) -> Result<Tensor> {
        let info = self.info(name, shape)?;
        let values = self.0.tensor_rows(info, first as u64, count as u64)?;
        Ok(Tensor::from_slice(&values).view([count, shape[1]]))
    }

    fn has(&self, name: &str) -> bool {
        self.0.tensor(name).is_some()
    }

    fn error(&self, reason: String) -> Error {
        Error::Format {
            path: self.0.path().to_path_buf(),
            reason,
        }
    }
}
