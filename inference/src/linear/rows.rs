//! The int8-rows layer: int8 weights with a scale per output channel, activations quantised
//! row by row in loops over the tensors' memory, products summed exactly by libtorch's
//! `_int_mm`.
#![allow(unsafe_code)]

use tch::{Device, Kind, Tensor};

use super::helper;
use crate::error::{Error, Result};

/// A weight as int8 codes with one scale per output channel, multiplied with activations
/// quantised row by row. A weight `w[o][i]` is `codes[o][i] * scales[o]`, the code the
/// weight divided by its row's largest magnitude over 127, rounded; an input row `x` is
/// quantised the same way with its own scale, the codes are multiplied and summed in int32
/// (`_int_mm`, oneDNN's int8 kernels on x86: exact, so no order of summation and no other
/// row changes a result), and the sum is scaled back. On this machine's cores a layer of
/// 1536 by 8960 takes a third of float32's time for one row, and half for sixteen.
pub(crate) struct Rows {
    /// `[in, out]`, a transposed view of the `[out, in]` codes (the layout `_int_mm` reads
    /// fastest).
    codes: Tensor,
    /// One scale per output channel.
    scales: Vec<f32>,
    /// One bias per output channel.
    bias: Option<Vec<f32>>,
    /// Where the layer is wide enough to split its output columns between two threads: the
    /// first column of the second half, and views of `codes`' two halves.
    halves: Option<(usize, Tensor, Tensor)>,
}

// SAFETY: the codes are never written after `Rows::new` and libtorch's operators only read
// them, so forward passes on several threads at once are sound.
unsafe impl Send for Rows {}
unsafe impl Sync for Rows {}

impl Rows {
    /// The codes and scales of `weight` `[out, in]`.
    pub(crate) fn new(weight: &Tensor, bias: Option<&Tensor>) -> Result<Rows> {
        let (codes, scales) = Rows::quantise(weight)?;
        Rows::from_codes(&codes, &scales, bias)
    }

    /// The int8 codes `[out, in]` (contiguous) and scales `[out]` of `weight` `[out, in]`, as
    /// a layer holds them: for a table that other code reads too (a decoder's token table,
    /// looked up by row and projected onto).
    pub(crate) fn quantise(weight: &Tensor) -> Result<(Tensor, Tensor)> {
        let weight = weight.f_to_kind(Kind::Float)?;
        let scales = weight
            .f_abs()?
            .f_amax([1i64].as_slice(), true)?
            .f_clamp_min(f64::from(f32::MIN_POSITIVE))?
            .f_div_scalar(127.0)?;
        let codes = weight
            .f_div(&scales)?
            .f_round()?
            .f_clamp(-127.0, 127.0)?
            .f_to_kind(Kind::Int8)?
            .f_contiguous()?;
        Ok((codes, scales.f_flatten(0, -1)?))
    }

    /// The layer of `codes` `[out, in]` (contiguous int8) and `scales` `[out]`, as
    /// [`Rows::quantise`] makes them; it shares the codes' memory (no copy) and copies the
    /// scales.
    pub(crate) fn from_codes(
        codes: &Tensor,
        scales: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Rows> {
        let floats = |t: &Tensor| -> Result<Vec<f32>> {
            Ok(Vec::<f32>::try_from(
                t.f_to_kind(Kind::Float)?.f_flatten(0, -1)?.f_contiguous()?,
            )?)
        };
        let (out, _) = codes.size2()?;
        let scales = floats(scales)?;
        let bias = bias.map(floats).transpose()?;
        let lengths = [Some(scales.len()), bias.as_ref().map(Vec::len)];
        if let Some(len) = lengths.into_iter().flatten().find(|&len| len as i64 != out) {
            return Err(Error::Quantise(format!(
                "{len} scales or biases for {out} output channels"
            )));
        }
        let codes = codes.f_tr()?;
        // Halves of whole 16-column blocks (a vector register of int32 sums).
        let half = (out / 2) / 16 * 16;
        let halves = if half > 0 {
            Some((
                usize::try_from(half).unwrap_or(0),
                codes.f_narrow(1, 0, half)?,
                codes.f_narrow(1, half, out - half)?,
            ))
        } else {
            None
        };
        Ok(Rows {
            codes,
            scales,
            bias,
            halves,
        })
    }

    /// The layer's `(out, in)`.
    pub(crate) fn shape(&self) -> (i64, i64) {
        let size = self.codes.size();
        (size[1], size[0])
    }

    /// `x W^T + b` for `x` `[..., in]`, float32.
    ///
    /// Quantising the rows and scaling the sums back are loops over the tensors' memory: as
    /// libtorch operators they were ten calls a layer, whose dispatch cost more than the
    /// product itself for a question of sixteen tokens.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut shape = x.size();
        let (out, input) = self.shape();
        let rows = x
            .f_reshape([-1, input])?
            .f_to_kind(Kind::Float)?
            .f_contiguous()?;
        let count = rows.size()[0];
        let mut y = Tensor::f_empty([count, out], (Kind::Float, Device::Cpu))?;
        self.forward_rows(
            cpu_slice::<f32>(&rows, Kind::Float)?,
            cpu_slice_mut::<f32>(&mut y, Kind::Float)?,
        )?;
        if let Some(last) = shape.last_mut() {
            *last = out;
        }
        Ok(y.f_reshape(shape)?)
    }

    /// `x W^T + b` for the rows of `x` (`[rows, in]`, row after row) into `y` (`[rows, out]`):
    /// [`Rows::forward`] for callers that hold their activations in plain memory.
    pub(crate) fn forward_rows(&self, x: &[f32], y: &mut [f32]) -> Result<()> {
        let (out, input) = self.shape();
        let (in_width, width) = (
            usize::try_from(input).unwrap_or(0),
            usize::try_from(out).unwrap_or(0),
        );
        let count = x.len().checked_div(in_width).unwrap_or(0);
        if count * in_width != x.len() || y.len() != count * width {
            return Err(Error::Quantise(format!(
                "{} inputs and {} outputs do not make whole rows of {input} and {out}",
                x.len(),
                y.len()
            )));
        }
        let mut codes = Tensor::f_empty([count as i64, input], (Kind::Int8, Device::Cpu))?;
        let mut row_scales = vec![0f32; count];
        quantise_rows(
            x,
            cpu_slice_mut::<i8>(&mut codes, Kind::Int8)?,
            &mut row_scales,
        );
        if let Some((half, first, second)) = self.halves.as_ref().filter(|_| helper::helped()) {
            let (theirs, second) = (codes.shallow_clone(), second.shallow_clone());
            let (mine, theirs) = helper::split(
                || -> Result<Tensor> { Ok(codes.f_internal_int_mm(first)?.f_contiguous()?) },
                Box::new(move || Ok(theirs.f_internal_int_mm(&second)?.f_contiguous()?)),
            );
            let bias = self.bias.as_deref().map(|b| b.split_at(*half));
            scale_back(
                cpu_slice::<i32>(&mine?, Kind::Int)?,
                &row_scales,
                &self.scales[..*half],
                bias.map(|(b, _)| b),
                y,
                width,
            );
            scale_back(
                cpu_slice::<i32>(&theirs?, Kind::Int)?,
                &row_scales,
                &self.scales[*half..],
                bias.map(|(_, b)| b),
                &mut y[*half..],
                width,
            );
            return Ok(());
        }
        let sums = codes.f_internal_int_mm(&self.codes)?.f_contiguous()?;
        scale_back(
            cpu_slice::<i32>(&sums, Kind::Int)?,
            &row_scales,
            &self.scales,
            self.bias.as_deref(),
            y,
            width,
        );
        Ok(())
    }
}

/// The elements of `tensor`, a contiguous CPU tensor of `kind` holding `T`s.
pub(crate) fn cpu_slice<T>(tensor: &Tensor, kind: Kind) -> Result<&[T]> {
    check_plain(tensor, kind)?;
    let len = tensor.numel();
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: `check_plain` made sure the tensor is contiguous, on the CPU and of `kind`,
    // whose elements are `T`s, so its data is `len` initialised `T`s; the borrow of `tensor`
    // keeps its storage alive, and nothing writes it while the slice lives (the caller owns
    // the tensor or only reads it).
    Ok(unsafe { std::slice::from_raw_parts(tensor.data_ptr().cast::<T>(), len) })
}

/// The elements of `tensor`, a contiguous CPU tensor of `kind` holding `T`s that the caller
/// made and that nothing else refers to, to be written.
pub(crate) fn cpu_slice_mut<T>(tensor: &mut Tensor, kind: Kind) -> Result<&mut [T]> {
    check_plain(tensor, kind)?;
    let len = tensor.numel();
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as in `cpu_slice`; the callers pass tensors they have just allocated with
    // `empty` and shared with nobody, so this is the only reference to their data (any bit
    // pattern is a valid `i8` or `f32`, so reading them before writing is sound too).
    Ok(unsafe { std::slice::from_raw_parts_mut(tensor.data_ptr().cast::<T>(), len) })
}

fn check_plain(tensor: &Tensor, kind: Kind) -> Result<()> {
    if tensor.device() != Device::Cpu || tensor.kind() != kind || !tensor.is_contiguous() {
        return Err(Error::Quantise(format!(
            "int8 rows take contiguous {kind:?} CPU tensors, not {:?} on {:?}",
            tensor.kind(),
            tensor.device()
        )));
    }
    Ok(())
}

crate::avx2::avx2_or_baseline! {
    /// Quantises each row of `values` (`scales.len()` rows) to int8 `codes` with its own scale:
    /// the row's largest magnitude over 127, the code the value over the scale rounded half to
    /// even (as libtorch's `round`).
    pub(super) fn quantise_rows(values: &[f32], codes: &mut [i8], scales: &mut [f32]) {
        let width = values.len() / scales.len().max(1);
        if width == 0 {
            return;
        }
        let rows = values
            .chunks_exact(width)
            .zip(codes.chunks_exact_mut(width));
        for ((row, row_codes), scale) in rows.zip(scales.iter_mut()) {
            *scale = largest_magnitude(row).max(f32::MIN_POSITIVE) / 127.0;
            for (code, &value) in row_codes.iter_mut().zip(row) {
                *code = round_code(value / *scale);
            }
        }
    }
}

/// The largest `|v|` of `row`, in eight lanes so the compiler vectorises it.
#[inline(always)]
fn largest_magnitude(row: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            let magnitude = value.abs();
            *lane = if magnitude > *lane { magnitude } else { *lane };
        }
    }
    let tail = chunks.remainder().iter().map(|v| v.abs());
    lanes.into_iter().chain(tail).fold(0.0, f32::max)
}

/// `q` clamped to [-127, 127] and rounded half to even: adding 1.5 * 2^23 leaves no fraction
/// bits, so the hardware's round-to-nearest-even does the rounding, and the sum's low mantissa
/// bits are then the code (integer operations only, so the loop vectorises).
#[inline(always)]
pub(super) fn round_code(q: f32) -> i8 {
    const SHIFT: f32 = 12_582_912.0;
    let q = q.clamp(-127.0, 127.0);
    ((q + SHIFT).to_bits().wrapping_sub(SHIFT.to_bits()) as i32) as i8
}

crate::avx2::avx2_or_baseline! {
    /// `y[r][o] = sums[r][o] * row_scales[r] * scales[o] + bias[o]` for the `scales.len()`
    /// columns of `sums`, each row `r` of them written at `y[r * stride..]`.
    fn scale_back(
        sums: &[i32],
        row_scales: &[f32],
        scales: &[f32],
        bias: Option<&[f32]>,
        y: &mut [f32],
        stride: usize,
    ) {
        let width = scales.len();
        if width == 0 || stride < width {
            return;
        }
        let rows = sums.chunks_exact(width).zip(y.chunks_mut(stride));
        for ((row_sums, row_y), &row_scale) in rows.zip(row_scales) {
            let row_y = &mut row_y[..width];
            for ((value, &sum), &scale) in row_y.iter_mut().zip(row_sums).zip(scales) {
                *value = sum as f32 * row_scale * scale;
            }
            if let Some(bias) = bias {
                for (value, &b) in row_y.iter_mut().zip(bias) {
                    *value += b;
                }
            }
        }
    }
}
