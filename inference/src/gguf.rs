//! A reader of GGUF files (llama.cpp's model format, version 2 and 3): the header, the
//! metadata (the architecture's hyper-parameters, the tokenizer's vocabulary and merges, the
//! chat template) and the table of tensors, whose data it reads on demand.
//!
//! Layout, all little-endian: `GGUF`, version (u32), tensor count (u64), metadata count
//! (u64); each metadata entry is a key (a string: u64 length and UTF-8 bytes), a value type
//! (u32) and the value (arrays: element type u32, count u64, elements); each tensor is a name,
//! a dimension count (u32), the dimensions (u64 each, innermost first), a ggml type (u32) and
//! an offset (u64) from the start of the data section, which begins at the first multiple of
//! `general.alignment` (default 32) after the table.
//!
//! Only the header is held in memory (a few megabytes: the vocabulary is its largest part);
//! [`Gguf::tensor_bytes`] reads one tensor's data from the file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::reader::Reader;

mod dequant;
mod tokenizer;

pub use self::dequant::dequantize;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// How much of the file is read first to parse the header (doubled until the header fits).
const FIRST_READ: usize = 8 << 20;
/// Bounds that a well-formed file stays far below; past them it is malformed, not huge.
const MAX_ENTRIES: u64 = 1 << 24;
const MAX_DIMS: u32 = 8;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `UINT8`.
    U8(u8),
    /// `INT8`.
    I8(i8),
    /// `UINT16`.
    U16(u16),
    /// `INT16`.
    I16(i16),
    /// `UINT32`.
    U32(u32),
    /// `INT32`.
    I32(i32),
    /// `UINT64`.
    U64(u64),
    /// `INT64`.
    I64(i64),
    /// `FLOAT32`.
    F32(f32),
    /// `FLOAT64`.
    F64(f64),
    /// `BOOL`.
    Bool(bool),
    /// `STRING`.
    String(String),
    /// `ARRAY` (of one element type).
    Array(Vec<Value>),
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::F32(_) | Value::F64(_) | Value::Bool(_) | Value::String(_) | Value::Array(_) => {
                None
            }
        }
    }

    /// The value as a float, when it is a float of either width.
    pub fn as_f64(&self) -> Option<f64> {
        if let Value::F32(v) = *self {
            Some(v.into())
        } else if let Value::F64(v) = *self {
            Some(v)
        } else {
            None
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        if let Value::String(s) = self {
            Some(s)
        } else {
            None
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        if let Value::Array(items) = self {
            Some(items)
        } else {
            None
        }
    }
}

/// A tensor's element encoding (ggml's type numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorType {
    /// 32-bit floats.
    F32,
    /// 16-bit floats.
    F16,
    /// bfloat16.
    Bf16,
    /// Blocks of 32: an f16 scale and 4-bit codes.
    Q4_0,
    /// Blocks of 32: f16 scale and minimum, 4-bit codes.
    Q4_1,
    /// Blocks of 32: an f16 scale, the codes' fifth bits and 4-bit codes.
    Q5_0,
    /// Blocks of 32: f16 scale and minimum, fifth bits, 4-bit codes.
    Q5_1,
    /// Blocks of 32: an f16 scale and 8-bit codes.
    Q8_0,
    /// Super-blocks of 256 with 2-bit codes.
    Q2K,
    /// Super-blocks of 256 with 3-bit codes.
    Q3K,
    /// Super-blocks of 256: eight sub-blocks with 6-bit scales and minimums, 4-bit codes.
    Q4K,
    /// Super-blocks of 256 with 5-bit codes.
    Q5K,
    /// Super-blocks of 256: sixteen sub-blocks with 8-bit scales, 6-bit codes.
    Q6K,
    /// Super-blocks of 256 with 8-bit codes.
    Q8K,
}

impl TensorType {
    fn from_code(code: u32) -> Option<TensorType> {
        Some(match code {
            0 => TensorType::F32,
            1 => TensorType::F16,
            2 => TensorType::Q4_0,
            3 => TensorType::Q4_1,
            6 => TensorType::Q5_0,
            7 => TensorType::Q5_1,
            8 => TensorType::Q8_0,
            10 => TensorType::Q2K,
            11 => TensorType::Q3K,
            12 => TensorType::Q4K,
            13 => TensorType::Q5K,
            14 => TensorType::Q6K,
            15 => TensorType::Q8K,
            30 => TensorType::Bf16,
            _ => return None,
        })
    }

    /// Elements per block, and the bytes a block takes.
    pub fn block(self) -> (u64, u64) {
        match self {
            TensorType::F32 => (1, 4),
            TensorType::F16 | TensorType::Bf16 => (1, 2),
            TensorType::Q4_0 => (32, 18),
            TensorType::Q4_1 => (32, 20),
            TensorType::Q5_0 => (32, 22),
            TensorType::Q5_1 => (32, 24),
            TensorType::Q8_0 => (32, 34),
            TensorType::Q2K => (256, 84),
            TensorType::Q3K => (256, 110),
            TensorType::Q4K => (256, 144),
            TensorType::Q5K => (256, 176),
            TensorType::Q6K => (256, 210),
            TensorType::Q8K => (256, 292),
        }
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (`token_embd.weight`, `blk.0.attn_q.weight`, ...).
    pub name: String,
    /// Dimensions, innermost (contiguous) first, as ggml orders them.
    pub dims: Vec<u64>,
    /// How its elements are encoded.
    pub kind: TensorType,
    /// Where its data starts, from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// The number of elements.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The bytes its data takes (checked when the file is read: a whole number of blocks).
    pub fn byte_len(&self) -> u64 {
        let (per_block, bytes) = self.kind.block();
        self.elements() / per_block * bytes
    }
}

/// A GGUF file's header, and the file to read tensors from.
#[derive(Debug)]
pub struct Gguf {
    path: PathBuf,
    /// The format version (2 or 3).
    pub version: u32,
    /// The metadata, by key.
    pub metadata: BTreeMap<String, Value>,
    /// The tensor table, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Where the data section starts in the file.
    pub data_offset: u64,
}

impl Gguf {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the header of the GGUF file at `path` and checks that every tensor's data lies
    /// within the file.
    pub fn open(path: &Path) -> Result<Gguf> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                Error::ModelMissing {
                    path: path.to_path_buf(),
                }
            } else {
                io(source)
            }
        })?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut want = FIRST_READ;
        loop {
            let len = usize::try_from(file_len).map_or(want, |n| n.min(want));
            let mut prefix = vec![0_u8; len];
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            file.read_exact(&mut prefix).map_err(io)?;
            match parse(&prefix, path) {
                Ok(gguf) => return gguf.checked(file_len),
                // The header may go on past what was read: read more, up to the whole file.
                Err(_) if (len as u64) < file_len => want = want.saturating_mul(2),
                Err(err) => return Err(err),
            }
        }
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The unsigned integer at `key`, or a format error naming it.
    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| self.error(format!("no unsigned integer {key} in the metadata")))
    }

    /// The float at `key`, or a format error naming it.
    pub fn require_f64(&self, key: &str) -> Result<f64> {
        self.get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| self.error(format!("no float {key} in the metadata")))
    }

    /// The string at `key`, or a format error naming it.
    pub fn require_str(&self, key: &str) -> Result<&str> {
        self.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| self.error(format!("no string {key} in the metadata")))
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Reads the data of `tensor` (an entry of this file's table).
    pub fn tensor_bytes(&self, tensor: &TensorInfo) -> Result<Vec<u8>> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        let len = usize::try_from(tensor.byte_len())
            .map_err(|_| self.error(format!("tensor {} is too large", tensor.name)))?;
        let mut file = File::open(&self.path).map_err(io)?;
        file.seek(SeekFrom::Start(self.data_offset + tensor.offset))
            .map_err(io)?;
        let mut bytes = vec![0_u8; len];
        file.read_exact(&mut bytes).map_err(io)?;
        Ok(bytes)
    }

    /// The values of rows `first..first + count` of `tensor` (a row is its innermost
    /// dimension), dequantised to f32.
    pub fn tensor_rows(&self, tensor: &TensorInfo, first: u64, count: u64) -> Result<Vec<f32>> {
        let (per_block, block_bytes) = tensor.kind.block();
        let row = tensor.dims[0];
        let rows = tensor.elements() / row.max(1);
        if !row.is_multiple_of(per_block) || first.checked_add(count).is_none_or(|end| end > rows) {
            return Err(self.error(format!(
                "rows {first}..{} of tensor {} ({rows} rows of {row})",
                first.saturating_add(count),
                tensor.name
            )));
        }
        let row_bytes = row / per_block * block_bytes;
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = File::open(&self.path).map_err(io)?;
        file.seek(SeekFrom::Start(
            self.data_offset + tensor.offset + first * row_bytes,
        ))
        .map_err(io)?;
        let mut bytes = vec![0_u8; usize::try_from(count * row_bytes).unwrap_or(usize::MAX)];
        file.read_exact(&mut bytes).map_err(io)?;
        let mut values = Vec::new();
        dequantize(tensor.kind, &bytes, &mut values)
            .map_err(|reason| self.error(format!("tensor {}: {reason}", tensor.name)))?;
        Ok(values)
    }

    /// All values of `tensor`, dequantised to f32, in ggml's order (innermost dimension
    /// fastest: row-major for the reversed dimensions).
    pub fn tensor_f32(&self, tensor: &TensorInfo) -> Result<Vec<f32>> {
        self.tensor_rows(tensor, 0, tensor.elements() / tensor.dims[0].max(1))
    }

    /// `tensor` dequantised into a float32 tch tensor on the CPU, its dimensions in PyTorch's
    /// order (outermost first: a `[out, in]` weight for a ggml `[in, out]` one).
    pub fn tensor_tch(&self, tensor: &TensorInfo) -> Result<tch::Tensor> {
        let values = self.tensor_f32(tensor)?;
        let shape = tensor
            .dims
            .iter()
            .rev()
            .map(|&d| i64::try_from(d))
            .collect::<std::result::Result<Vec<i64>, _>>()
            .map_err(|_| self.error(format!("tensor {} is too large", tensor.name)))?;
        Ok(tch::Tensor::from_slice(&values).reshape(shape))
    }

    fn error(&self, reason: String) -> Error {
        Error::Format {
            path: self.path.clone(),
            reason,
        }
    }

    /// The header, once every tensor is known to be whole blocks, aligned, and inside the
    /// file.
    fn checked(self, file_len: u64) -> Result<Gguf> {
        let alignment = self.alignment()?;
        for t in &self.tensors {
            let (per_block, _) = t.kind.block();
            if !t.elements().is_multiple_of(per_block) {
                return Err(self.error(format!(
                    "tensor {} has {} elements, not whole blocks of {per_block}",
                    t.name,
                    t.elements()
                )));
            }
            if !t.offset.is_multiple_of(alignment) {
                return Err(self.error(format!("tensor {} is not aligned", t.name)));
            }
            let end = self
                .data_offset
                .checked_add(t.offset)
                .and_then(|start| start.checked_add(t.byte_len()));
            if end.is_none_or(|end| end > file_len) {
                return Err(self.error(format!("tensor {} runs past the end of the file", t.name)));
            }
        }
        Ok(self)
    }

    fn alignment(&self) -> Result<u64> {
        match self.get("general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(value) => value
                .as_u64()
                .filter(|a| a.is_power_of_two())
                .ok_or_else(|| self.error(format!("general.alignment {value:?}"))),
        }
    }
}

/// Parses a header from the first bytes of a file.
fn parse(bytes: &[u8], path: &Path) -> Result<Gguf> {
    let mut r = Reader::new(bytes, path);
    if r.take(4, "magic")? != MAGIC {
        return Err(r.error("not a GGUF file (no GGUF magic)".into()));
    }
    let version = r.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(r.error(format!("GGUF version {version}, expected 2 or 3")));
    }
    let tensor_count = bounded(&mut r, "tensor count")?;
    let metadata_count = bounded(&mut r, "metadata count")?;
    let mut metadata = BTreeMap::new();
    for _ in 0..metadata_count {
        let key = string(&mut r, "metadata key")?;
        let kind = r.u32("metadata value type")?;
        let value = value(&mut r, kind, &key)?;
        metadata.insert(key, value);
    }
    let mut tensors = Vec::with_capacity(usize::try_from(tensor_count.min(4096)).unwrap_or(0));
    for _ in 0..tensor_count {
        let name = string(&mut r, "tensor name")?;
        let n_dims = r.u32("tensor dimensions")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(r.error(format!("tensor {name} has {n_dims} dimensions")));
        }
        let dims = (0..n_dims)
            .map(|_| r.u64("tensor dimension"))
            .collect::<Result<Vec<_>>>()?;
        if dims
            .iter()
            .try_fold(1_u64, |n, &d| n.checked_mul(d))
            .is_none()
        {
            return Err(r.error(format!("tensor {name} has too many elements")));
        }
        let code = r.u32("tensor type")?;
        let kind = TensorType::from_code(code)
            .ok_or_else(|| r.error(format!("tensor {name} has ggml type {code}, not supported")))?;
        let offset = r.u64("tensor offset")?;
        tensors.push(TensorInfo {
            name,
            dims,
            kind,
            offset,
        });
    }
    let alignment = match metadata.get("general.alignment").and_then(Value::as_u64) {
        Some(a) if a.is_power_of_two() => a,
        _ => DEFAULT_ALIGNMENT,
    };
    let data_offset = (r.position() as u64).div_ceil(alignment) * alignment;
    Ok(Gguf {
        path: path.to_path_buf(),
        version,
        metadata,
        tensors,
        data_offset,
    })
}

fn bounded(r: &mut Reader<'_>, what: &str) -> Result<u64> {
    let n = r.u64(what)?;
    if n > MAX_ENTRIES {
        return Err(r.error(format!("{what} {n} is implausible")));
    }
    Ok(n)
}

fn string(r: &mut Reader<'_>, what: &str) -> Result<String> {
    let len = r.u64(what)?;
    let len = usize::try_from(len).map_err(|_| r.error(format!("{what} of {len} bytes")))?;
    let bytes = r.take(len, what)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| r.error(format!("{what} is not UTF-8")))
}

fn value(r: &mut Reader<'_>, kind: u32, key: &str) -> Result<Value> {
    Ok(match kind {
        0 => Value::U8(r.u8(key)?),
        1 => Value::I8(r.u8(key)? as i8),
        2 => Value::U16(r.u16(key)?),
        3 => Value::I16(r.u16(key)? as i16),
        4 => Value::U32(r.u32(key)?),
        5 => Value::I32(r.i32(key)?),
        6 => Value::F32(r.f32(key)?),
        7 => match r.u8(key)? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            other => return Err(r.error(format!("{key}: boolean {other}"))),
        },
        8 => Value::String(string(r, key)?),
        9 => {
            let element = r.u32(key)?;
            if element == 9 {
                return Err(r.error(format!("{key}: an array of arrays")));
            }
            let n = bounded(r, key)?;
            let items = (0..n)
                .map(|_| value(r, element, key))
                .collect::<Result<Vec<_>>>()?;
            Value::Array(items)
        }
        10 => Value::U64(r.u64(key)?),
        11 => Value::I64(r.u64(key)? as i64),
        12 => Value::F64(r.f64(key)?),
        other => return Err(r.error(format!("{key}: metadata value type {other}"))),
    })
}

#[cfg(test)]
pub(crate) mod tests;
