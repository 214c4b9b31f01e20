//! An int8-rows encoder's transformer layers on the CPU as loops over each activation's
//! memory: libtorch computes the int8 products (`_int_mm`) and the GELU, and the attention,
//! the residual sums and the layer norms are loops here.
//!
//! For a question of sixteen tokens the operators around the products (views, permutes,
//! copies, attention, adds, norms: about forty libtorch calls a layer, each dispatched and
//! allocating) cost more than the products themselves; here a layer is five libtorch calls.
//! Every row (token) is computed from its own text's rows only, as in the operators' pass,
//! so a text's vector still does not depend on its batch.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use super::Layer;
use crate::error::{Error, Result};
use crate::linear::{Rows, cpu_slice, cpu_slice_mut};

/// A layer norm's weight and bias, read once from their tensors.
#[derive(Clone)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Norm {
    fn new((weight, bias): &(Tensor, Tensor)) -> Result<Option<Norm>> {
        if weight.device() != Device::Cpu {
            return Ok(None);
        }
        let floats = |t: &Tensor| -> Result<Vec<f32>> {
            Ok(Vec::<f32>::try_from(
                t.f_to_kind(Kind::Float)?.f_flatten(0, -1)?,
            )?)
        };
        Ok(Some(Norm {
            weight: floats(weight)?,
            bias: floats(bias)?,
        }))
    }
}

/// One transformer layer whose four linear layers are int8 rows on the CPU.
#[derive(Clone)]
pub(super) struct LoopLayer {
    qkv: Arc<Rows>,
    out: Arc<Rows>,
    attention_norm: Norm,
    ff_in: Arc<Rows>,
    ff_out: Arc<Rows>,
    output_norm: Norm,
}

impl LoopLayer {
    /// The loop form of `layer`, or `None` where one of its linear layers is not int8 rows
    /// (float32, packed, or on a GPU).
    pub(super) fn new(layer: &Layer) -> Result<Option<LoopLayer>> {
        let rows = [&layer.qkv, &layer.out, &layer.ff_in, &layer.ff_out].map(|l| l.rows());
        let [Some(qkv), Some(out), Some(ff_in), Some(ff_out)] = rows else {
            return Ok(None);
        };
        let (Some(attention_norm), Some(output_norm)) = (
            Norm::new(&layer.attention_norm)?,
            Norm::new(&layer.output_norm)?,
        ) else {
            return Ok(None);
        };
        Ok(Some(LoopLayer {
            qkv: Arc::clone(qkv),
            out: Arc::clone(out),
            attention_norm,
            ff_in: Arc::clone(ff_in),
            ff_out: Arc::clone(ff_out),
            output_norm,
        }))
    }
}

/// The hidden states `[batch, len, hidden]` after `layers`, from the embeddings' `x`
/// `[batch, len, hidden]` (float32, CPU) and `mask` `[batch, len]` (non-zero for a real
/// token): what the operators' loop in [`super::Bert::hidden_states`] computes.
pub(super) fn layers(
    layers: &[LoopLayer],
    x: &Tensor,
    mask: &Tensor,
    heads: i64,
    eps: f64,
) -> Result<Tensor> {
    let (batch, len, hidden) = x.size3()?;
    let shape = Shape {
        batch: usize::try_from(batch).unwrap_or(0),
        len: usize::try_from(len).unwrap_or(0),
        heads: usize::try_from(heads).unwrap_or(0),
        hidden: usize::try_from(hidden).unwrap_or(0),
    };
    if shape.heads == 0 || !shape.hidden.is_multiple_of(shape.heads) {
        return Err(Error::Quantise(format!(
            "{heads} attention heads do not divide {hidden} hidden units"
        )));
    }
    let keep: Vec<bool> = Vec::<i64>::try_from(mask.f_flatten(0, -1)?.f_to_kind(Kind::Int64)?)?
        .into_iter()
        .map(|m| m != 0)
        .collect();
    let mut x = Vec::<f32>::try_from(x.f_to_kind(Kind::Float)?.f_flatten(0, -1)?)?;
    let tokens = shape.batch * shape.len;
    if keep.len() != tokens || x.len() != tokens * shape.hidden {
        return Err(Error::Quantise(format!(
            "a mask of {} and hidden states of {} for {batch} texts of {len} tokens",
            keep.len(),
            x.len()
        )));
    }
    let eps = eps as f32;
    let mut qkv = vec![0f32; tokens * 3 * shape.hidden];
    let mut context = vec![0f32; tokens * shape.hidden];
    let mut projected = vec![0f32; tokens * shape.hidden];
    for layer in layers {
        layer.qkv.forward_rows(&x, &mut qkv)?;
        attend(&qkv, &keep, shape, &mut context);
        layer.out.forward_rows(&context, &mut projected)?;
        add_and_norm(&mut x, &projected, &layer.attention_norm, eps);
        let (intermediate, _) = layer.ff_in.shape();
        let mut inner = Tensor::f_empty([tokens as i64, intermediate], (Kind::Float, Device::Cpu))?;
        layer
            .ff_in
            .forward_rows(&x, cpu_slice_mut::<f32>(&mut inner, Kind::Float)?)?;
        let _ = inner.f_gelu_("none")?;
        layer
            .ff_out
            .forward_rows(cpu_slice::<f32>(&inner, Kind::Float)?, &mut projected)?;
        add_and_norm(&mut x, &projected, &layer.output_norm, eps);
    }
    Ok(Tensor::f_from_slice(&x)?.f_view([batch, len, hidden])?)
}

/// The sizes of a batch's activations.
#[derive(Clone, Copy)]
struct Shape {
    batch: usize,
    len: usize,
    heads: usize,
    hidden: usize,
}

crate::avx2::avx2_or_baseline! {
    /// Scaled dot-product attention of every token over the real tokens of its own text, head by
    /// head: `qkv` holds each token's query, key and value (`[tokens, 3, heads, head]`), and
    /// `context` gets each token's heads side by side (`[tokens, heads, head]`); a padding
    /// token's context is zero (nothing reads its row: pooling and a classifier's first token
    /// skip it).
    fn attend(qkv: &[f32], keep: &[bool], shape: Shape, context: &mut [f32]) {
        let Shape {
            batch,
            len,
            heads,
            hidden,
        } = shape;
        let head = hidden / heads;
        let scale = 1.0 / (head as f32).sqrt();
        // One head's keys and values of one text's real tokens, side by side.
        let mut keys = Vec::with_capacity(len * head);
        let mut values = Vec::with_capacity(len * head);
        let mut weights = Vec::with_capacity(len);
        context.fill(0.0);
        for text in 0..batch {
            let tokens = text * len..(text + 1) * len;
            let real: Vec<usize> = tokens.filter(|&t| keep[t]).collect();
            for h in 0..heads {
                let part = |token: usize, which: usize| {
                    let start = token * 3 * hidden + which * hidden + h * head;
                    &qkv[start..start + head]
                };
                keys.clear();
                values.clear();
                for &token in &real {
                    keys.extend_from_slice(part(token, 1));
                    values.extend_from_slice(part(token, 2));
                }
                for &query in &real {
                    let q = part(query, 0);
                    weights.clear();
                    weights.extend(keys.chunks_exact(head).map(|k| dot(q, k) * scale));
                    let largest = weights.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut total = 0.0;
                    for weight in &mut weights {
                        *weight = (*weight - largest).exp();
                        total += *weight;
                    }
                    let out = &mut context[query * hidden + h * head..][..head];
                    for (&weight, v) in weights.iter().zip(values.chunks_exact(head)) {
                        let share = weight / total;
                        for (o, &v) in out.iter_mut().zip(v) {
                            *o += share * v;
                        }
                    }
                }
            }
        }
    }
}

/// `a · b`, in eight lanes so the compiler vectorises it.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (chunks_a, chunks_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for ((lane, &x), &y) in lanes.iter_mut().zip(ca).zip(cb) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

crate::avx2::avx2_or_baseline! {
    /// `x = norm(x + y)`, row by row: the sum's mean and (biased) variance, then the norm's weight
    /// and bias.
    fn add_and_norm(x: &mut [f32], y: &[f32], norm: &Norm, eps: f32) {
        let width = norm.weight.len();
        if width == 0 {
            return;
        }
        for (row, add) in x.chunks_exact_mut(width).zip(y.chunks_exact(width)) {
            for (v, &a) in row.iter_mut().zip(add) {
                *v += a;
            }
            let mean = lane_sum(row) / width as f32;
            let variance = lane_squares(row, mean) / width as f32;
            let inverse = 1.0 / (variance + eps).sqrt();
            for ((v, &w), &b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
                *v = (*v - mean) * inverse * w + b;
            }
        }
    }
}

/// The sum of `values`, in eight lanes.
#[inline(always)]
fn lane_sum(values: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = values.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += v;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The sum of `(v - mean)^2` over `values`, in eight lanes.
#[inline(always)]
fn lane_squares(values: &[f32], mean: f32) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = values.chunks_exact(8);
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|v| (v - mean) * (v - mean))
        .sum();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += (v - mean) * (v - mean);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_keeps_padding_out_and_weighs_by_softmax() {
        // One head of width 2, two texts of two positions; the second text's second position
        // is padding.
        let shape = Shape {
            batch: 2,
            len: 2,
            heads: 1,
            hidden: 2,
        };
        #[rustfmt::skip]
        let qkv = [
            // q        k         v
            1.0, 0.0,   1.0, 0.0,  1.0, 2.0,
            0.0, 1.0,   0.0, 1.0,  3.0, 4.0,
            1.0, 1.0,   1.0, 1.0,  5.0, 6.0,
            9.0, 9.0,   9.0, 9.0,  100.0, 100.0,
        ];
        let keep = [true, true, true, false];
        let mut context = [0f32; 8];
        attend(&qkv, &keep, shape, &mut context);
        // Token 0: scores (1, 0) / sqrt(2): weights softmax, values mixed.
        let s = 1.0f32 / 2f32.sqrt();
        let (a, b) = (s.exp(), 1.0f32);
        let w = [a / (a + b), b / (a + b)];
        let want0 = [w[0] * 1.0 + w[1] * 3.0, w[0] * 2.0 + w[1] * 4.0];
        assert!((context[0] - want0[0]).abs() < 1e-6 && (context[1] - want0[1]).abs() < 1e-6);
        // The second text's real token sees only itself; its padding gets no context.
        assert_eq!(&context[4..6], &[5.0, 6.0]);
        assert_eq!(&context[6..8], &[0.0, 0.0]);
    }

    #[test]
    fn add_and_norm_normalises_the_sum() {
        let norm = Norm {
            weight: vec![2.0; 4],
            bias: vec![1.0; 4],
        };
        let mut x = [1.0, 2.0, 3.0, 4.0];
        add_and_norm(&mut x, &[1.0, 0.0, -1.0, 4.0], &norm, 1e-12);
        // The sum is (2, 2, 2, 8): mean 3.5, variance 6.75.
        let sd = 6.75f32.sqrt();
        for (got, v) in x.iter().zip([2.0f32, 2.0, 2.0, 8.0]) {
            assert!((got - ((v - 3.5) / sd * 2.0 + 1.0)).abs() < 1e-5, "{x:?}");
        }
    }
}
