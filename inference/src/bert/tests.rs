//! Tests of the forward pass on a tiny random model: against a plain-Rust reference written
//! from the BERT equations, under padding, and with a 4-bit word table.

use tch::{Device, Kind, Tensor};

use super::{Bert, BertConfig, LayerParam, Param, WeightSource, WordEmbeddings};
use crate::error::Result;
use crate::linear::Precision;

fn tiny_config() -> BertConfig {
    BertConfig {
        hidden: 16,
        layers: 2,
        heads: 4,
        intermediate: 32,
        vocab: 11,
        max_positions: 12,
        type_vocab: 2,
        layer_norm_eps: 1e-12,
    }
}

/// Random weights (seeded), remembered so that the reference can read them back.
struct RandomSource {
    made: Vec<(Param, Tensor)>,
    word: Option<Tensor>,
}

impl RandomSource {
    fn new(seed: i64) -> Self {
        tch::manual_seed(seed);
        RandomSource {
            made: Vec::new(),
            word: None,
        }
    }

    fn get(&self, param: Param) -> Vec<f32> {
        let (_, tensor) = self.made.iter().find(|(p, _)| *p == param).expect("made");
        Vec::<f32>::try_from(tensor.flatten(0, -1)).expect("float32")
    }
}

impl WeightSource for RandomSource {
    fn tensor(&mut self, param: Param, config: &BertConfig) -> Result<Tensor> {
        let shape = param.shape(config);
        let noise = Tensor::f_randn(shape.as_slice(), (Kind::Float, Device::Cpu))?;
        let tensor = match param {
            Param::EmbeddingNormWeight
            | Param::Layer(_, LayerParam::AttentionNormWeight | LayerParam::OutputNormWeight) => {
                noise.f_mul_scalar(0.1)?.f_add_scalar(1.0)?
            }
            Param::Position | Param::TokenType | Param::EmbeddingNormBias | Param::Layer(..) => {
                noise.f_mul_scalar(0.3)?
            }
        };
        self.made.push((param, tensor.shallow_clone()));
        Ok(tensor)
    }

    fn word_embeddings(&mut self, config: &BertConfig) -> Result<WordEmbeddings> {
        let table = Tensor::f_randn([config.vocab, config.hidden], (Kind::Float, Device::Cpu))?;
        self.word = Some(table.shallow_clone());
        Ok(WordEmbeddings::Dense(table))
    }
}

fn erf(x: f64) -> f64 {
    // Abramowitz and Stegun 7.1.26 (error below 1.5e-7), enough for a 1e-4 comparison.
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (1.0 - poly * (-x * x).exp()).copysign(x)
}

fn layer_norm(x: &mut [f64], weight: &[f32], bias: &[f32], eps: f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    for (i, v) in x.iter_mut().enumerate() {
        *v = (*v - mean) / (var + eps).sqrt() * f64::from(weight[i]) + f64::from(bias[i]);
    }
}

/// `w` `[out, in]` times `x`, plus `b`.
fn linear(x: &[f64], w: &[f32], b: &[f32]) -> Vec<f64> {
    b.iter()
        .enumerate()
        .map(|(o, &bias)| {
            let row = &w[o * x.len()..(o + 1) * x.len()];
            f64::from(bias)
                + row
                    .iter()
                    .zip(x)
                    .map(|(&w, &x)| f64::from(w) * x)
                    .sum::<f64>()
        })
        .collect()
}

/// The embedding of one unpadded sequence, straight from the BERT equations.
fn reference(source: &RandomSource, config: &BertConfig, ids: &[i64]) -> Vec<f64> {
    let h = config.hidden as usize;
    let word =
        Vec::<f32>::try_from(source.word.as_ref().expect("word").flatten(0, -1)).expect("f32");
    let (pos, typ) = (source.get(Param::Position), source.get(Param::TokenType));
    let (ln_w, ln_b) = (
        source.get(Param::EmbeddingNormWeight),
        source.get(Param::EmbeddingNormBias),
    );
    let mut x: Vec<Vec<f64>> = ids
        .iter()
        .enumerate()
        .map(|(t, &id)| {
            let mut row: Vec<f64> = (0..h)
                .map(|i| f64::from(word[id as usize * h + i] + pos[t * h + i] + typ[i]))
                .collect();
            layer_norm(&mut row, &ln_w, &ln_b, config.layer_norm_eps);
            row
        })
        .collect();
    let (heads, hd) = (config.heads as usize, h / config.heads as usize);
    for l in 0..config.layers {
        let p = |param| source.get(Param::Layer(l, param));
        let q: Vec<_> = x
            .iter()
            .map(|r| linear(r, &p(LayerParam::QueryWeight), &p(LayerParam::QueryBias)))
            .collect();
        let k: Vec<_> = x
            .iter()
            .map(|r| linear(r, &p(LayerParam::KeyWeight), &p(LayerParam::KeyBias)))
            .collect();
        let v: Vec<_> = x
            .iter()
            .map(|r| linear(r, &p(LayerParam::ValueWeight), &p(LayerParam::ValueBias)))
            .collect();
        for t in 0..x.len() {
            let mut context = vec![0.0; h];
            for head in 0..heads {
                let span = head * hd..(head + 1) * hd;
                let scores: Vec<f64> = (0..x.len())
                    .map(|s| {
                        let dot: f64 = q[t][span.clone()]
                            .iter()
                            .zip(&k[s][span.clone()])
                            .map(|(a, b)| a * b)
                            .sum();
                        dot / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = exps.iter().sum();
                for (s, e) in exps.iter().enumerate() {
                    for i in span.clone() {
                        context[i] += e / total * v[s][i];
                    }
                }
            }
            let attn = linear(
                &context,
                &p(LayerParam::AttentionOutWeight),
                &p(LayerParam::AttentionOutBias),
            );
            let mut row: Vec<f64> = x[t].iter().zip(&attn).map(|(a, b)| a + b).collect();
            layer_norm(
                &mut row,
                &p(LayerParam::AttentionNormWeight),
                &p(LayerParam::AttentionNormBias),
                config.layer_norm_eps,
            );
            let mid: Vec<f64> = linear(
                &row,
                &p(LayerParam::FeedForwardInWeight),
                &p(LayerParam::FeedForwardInBias),
            )
            .into_iter()
            .map(|z| 0.5 * z * (1.0 + erf(z / std::f64::consts::SQRT_2)))
            .collect();
            let ff = linear(
                &mid,
                &p(LayerParam::FeedForwardOutWeight),
                &p(LayerParam::FeedForwardOutBias),
            );
            row.iter_mut().zip(&ff).for_each(|(a, b)| *a += b);
            layer_norm(
                &mut row,
                &p(LayerParam::OutputNormWeight),
                &p(LayerParam::OutputNormBias),
                config.layer_norm_eps,
            );
            x[t] = row;
        }
    }
    let mut mean: Vec<f64> = (0..h)
        .map(|i| x.iter().map(|r| r[i]).sum::<f64>() / x.len() as f64)
        .collect();
    let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
    mean.iter_mut().for_each(|v| *v /= norm);
    mean
}

/// Embeds `rows` as one right-padded batch (pad id 0).
fn embed(bert: &Bert, rows: &[&[i64]]) -> Vec<Vec<f32>> {
    let len = rows.iter().map(|r| r.len()).max().unwrap_or(1);
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for row in rows {
        ids.extend(
            row.iter()
                .copied()
                .chain(std::iter::repeat_n(0, len - row.len())),
        );
        mask.extend((0..len).map(|t| i64::from(t < row.len())));
    }
    let shape = [rows.len() as i64, len as i64];
    let out = bert
        .embed(
            &Tensor::from_slice(&ids).view(shape),
            &Tensor::from_slice(&mask).view(shape),
        )
        .expect("forward");
    Vec::<Vec<f32>>::try_from(&out).expect("float32 [batch, hidden]")
}

#[test]
fn forward_matches_the_bert_equations_with_and_without_padding() {
    let config = tiny_config();
    let mut source = RandomSource::new(7);
    let bert =
        Bert::load(config.clone(), &mut source, Device::Cpu, Precision::Float32).expect("load");
    let short: &[i64] = &[1, 5, 2];
    let long: &[i64] = &[1, 7, 3, 9, 10, 4, 2];
    let alone = embed(&bert, &[short]);
    let padded = embed(&bert, &[long, short]);
    for (got, ids) in [(&alone[0], short), (&padded[1], short), (&padded[0], long)] {
        let want = reference(&source, &config, ids);
        assert_eq!(got.len() as i64, config.hidden, "one value per hidden unit");
        assert_eq!(want.len(), got.len());
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-4, "largest difference {err} for {ids:?}");
        let norm: f32 = got.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
    }
}

#[test]
fn a_q4_word_table_looks_up_as_its_dequantised_values() {
    let codes: Vec<i8> = (0..3 * 64).map(|i| ((i * 7) % 16) as i8 - 8).collect();
    // Each block of 32 codes packed as the file does: byte j holds code j (low nibble) and
    // code j + 16 (high nibble), each plus 8.
    let nibbles: Vec<u8> = codes
        .chunks_exact(32)
        .flat_map(|block| {
            (0..16).map(move |j| (block[j] + 8) as u8 | ((block[j + 16] + 8) as u8) << 4)
        })
        .collect();
    let scales = [0.5_f32, -0.25, 2.0, 1.0, 0.125, 3.0];
    let q4 = WordEmbeddings::Q4 {
        nibbles: Tensor::from_slice(&nibbles).view([3, 32]),
        scales: Tensor::from_slice(&scales).view([3, 2]),
    };
    let ids = Tensor::from_slice(&[2_i64, 0]).view([1, 2]);
    let rows = q4.lookup(&ids, 64).expect("lookup").view([2, 64]);
    let rows = Vec::<Vec<f32>>::try_from(&rows).expect("f32");
    assert_eq!(rows.len(), 2, "one row per id");
    for (row, id) in rows.iter().zip([2_usize, 0]) {
        assert_eq!(row.len(), 64);
        for (i, value) in row.iter().enumerate() {
            assert_eq!(
                *value,
                f32::from(codes[id * 64 + i]) * scales[id * 2 + i / 32]
            );
        }
    }
}

#[test]
fn an_8_bit_word_table_looks_up_as_its_dequantised_values() {
    let codes: Vec<u8> = (0..3 * 4).map(|i| (i * 37 % 256) as u8).collect();
    let zero = Tensor::from_slice(&[128.0_f32]);
    let scale = Tensor::from_slice(&[0.01_f32, 0.02, 0.5, -1.0]);
    let table = WordEmbeddings::Codes8 {
        codes: Tensor::from_slice(&codes).view([3, 4]),
        zero: zero.shallow_clone(),
        scale: scale.shallow_clone(),
    };
    let ids = Tensor::from_slice(&[1_i64, 2, 0]).view([1, 3]);
    let rows = table.lookup(&ids, 4).expect("lookup").view([3, 4]);
    // What the load gave before: the whole table dequantised, then rows selected.
    let whole = (Tensor::from_slice(&codes).view([3, 4]).to_kind(Kind::Float) - &zero) * &scale;
    let expected = whole.index_select(0, &Tensor::from_slice(&[1_i64, 2, 0]));
    assert_eq!(
        Vec::<Vec<f32>>::try_from(&rows).expect("f32"),
        Vec::<Vec<f32>>::try_from(&expected).expect("f32")
    );
}

#[test]
fn int8_rows_layers_as_loops_compute_what_the_operators_compute_and_ignore_the_batch() {
    let config = tiny_config();
    let mut source = RandomSource::new(11);
    let bert = Bert::load(config, &mut source, Device::Cpu, Precision::Int8Rows).expect("load");
    assert!(bert.loops.is_some(), "int8 rows on the CPU run as loops");
    let mut operators = bert.share();
    operators.loops = None;
    let short: &[i64] = &[1, 5, 2];
    let long: &[i64] = &[1, 7, 3, 9, 10, 4, 2];
    let types = Tensor::from_slice(&[0_i64, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0]).view([2, 7]);
    let ids = Tensor::from_slice(&[1_i64, 7, 3, 9, 10, 4, 2, 1, 5, 2, 0, 0, 0, 0]).view([2, 7]);
    let mask = Tensor::from_slice(&[1_i64, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]).view([2, 7]);
    let states = |bert: &Bert| {
        let x = tch::no_grad(|| bert.hidden_states(&ids, &mask, Some(&types))).expect("forward");
        Vec::<Vec<Vec<f32>>>::try_from(&x).expect("[batch, len, hidden]")
    };
    let (looped, operated) = (states(&bert), states(&operators));
    for (text, real) in [(0, long.len()), (1, short.len())] {
        for token in 0..real {
            let (got, want) = (&looped[text][token], &operated[text][token]);
            let err = got
                .iter()
                .zip(want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0, f32::max);
            assert!(
                err < 1e-4,
                "text {text} token {token}: largest difference {err}"
            );
        }
    }
    // A text's vector is the same bits alone and beside a longer text.
    let alone = embed(&bert, &[short]);
    let padded = embed(&bert, &[long, short]);
    assert_eq!(
        alone[0], padded[1],
        "a text's vector does not depend on its batch"
    );
    let want = embed(&operators, &[short]);
    let cosine: f32 = alone[0].iter().zip(&want[0]).map(|(a, b)| a * b).sum();
    assert!(
        cosine > 0.99999,
        "cosine {cosine} against the operators' pass"
    );
}
