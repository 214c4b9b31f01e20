//! The token table: one row per vocabulary entry, read by the input lookup and, where the
//! model ties them (Qwen2.5's small models do), by the vocabulary projection too, from one
//! copy. In float32 the table is the loaded tensor; in int8 rows it is int8 codes with one
//! scale per row (a token), quantised a slice of rows at a time as it is read, so the float32
//! table (0.9 GB for the 1.5B) is never whole in memory.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use super::source::Source;
use crate::error::Result;
use crate::linear::{Linear, Packing, Precision, Rows};

/// Rows quantised at once while the table is read (8,192 rows of the 1.5B: 50 MB of float32).
const ROWS_AT_ONCE: i64 = 8192;

/// The token table.
pub(super) enum TokenTable {
    /// `[vocab, width]` float32.
    Float(Tensor),
    /// `codes` `[vocab, width]` int8 and `scales` `[vocab]` float32: row `t` is
    /// `codes[t] * scales[t]`.
    Int8Rows { codes: Tensor, scales: Tensor },
}

impl TokenTable {
    /// The table `name` of `shape` from `source`, on `device`: as int8 rows where `precision`
    /// keeps its layers so, float32 otherwise.
    pub(super) fn build(
        source: &dyn Source,
        name: &str,
        shape: [i64; 2],
        precision: Precision,
        device: Device,
    ) -> Result<TokenTable> {
        // On a GPU the layers stay float32, and so does the table.
        let rows = precision.packing() == Packing::Int8Rows && device == Device::Cpu;
        if !rows {
            return Ok(TokenTable::Float(
                source.tensor(name, &shape)?.to_device(device),
            ));
        }
        let [rows, width] = shape;
        let codes = Tensor::empty([rows, width], (Kind::Int8, device));
        let scales = Tensor::empty([rows], (Kind::Float, device));
        let mut first = 0;
        while first < rows {
            let count = ROWS_AT_ONCE.min(rows - first);
            let part = source.rows(name, &shape, first, count)?.to_device(device);
            let (part_codes, part_scales) = Rows::quantise(&part)?;
            codes.narrow(0, first, count).copy_(&part_codes);
            scales.narrow(0, first, count).copy_(&part_scales);
            first += count;
        }
        Ok(TokenTable::Int8Rows { codes, scales })
    }

    /// The rows of `ids` (int64, any shape), float32: `[..ids, width]`.
    pub(super) fn lookup(&self, ids: &Tensor) -> Tensor {
        let flat = ids.flatten(0, -1);
        let mut shape = ids.size();
        let rows = match self {
            TokenTable::Float(table) => {
                shape.push(table.size()[1]);
                table.index_select(0, &flat)
            }
            TokenTable::Int8Rows { codes, scales } => {
                shape.push(codes.size()[1]);
                codes.index_select(0, &flat).to_kind(Kind::Float)
                    * scales.index_select(0, &flat).unsqueeze(1)
            }
        };
        rows.view(shape.as_slice())
    }

    /// The vocabulary projection reading this table (tied embeddings): in int8 rows the same
    /// codes and scales, otherwise the float32 table packed as `packing` says (float32 shares
    /// the tensor).
    pub(super) fn projection(&self, packing: Packing, device: Device) -> Result<Linear> {
        match self {
            TokenTable::Float(table) => Linear::new(table.shallow_clone(), None, packing, device),
            TokenTable::Int8Rows { codes, scales } => Ok(Linear::Rows(Arc::new(Rows::from_codes(
                codes, scales, None,
            )?))),
        }
    }
}
