//! Linear layers, dense or packed: `y = x W^T + b` with float32 weights; or with the weights
//! packed once as symmetric int8 codes (one scale per output row) and the activations
//! quantised per call (libtorch's `quantized::linear_dynamic`, fbgemm on x86); or packed as
//! half-precision floats with float32 activations (`quantized::linear_dynamic_fp16`), for
//! layers whose inputs have outliers that a per-tensor int8 scale cannot hold; or as int8
//! codes with one scale per output channel and the activations quantised row by row
//! ([`Rows`]: each row of the input (a token) gets its own scale and the products are summed
//! in int32, exactly, by libtorch's `_int_mm`), so a row's result never depends on the other
//! rows of its batch.
//!
//! tch does not reach the quantized operators (they are dispatcher operators, not ATen native
//! functions), so `cpp/qlinear.cpp`, compiled by this crate's `build.rs` against the same
//! libtorch, calls them; this module owns its handles. The int8 path runs on the CPU only:
//! on a GPU the layers stay dense.
//!
//! The FFI is this module's reason to exist, so it and its `rows` (which reads and writes
//! tensors' memory directly) are the places in the crate's library that allow `unsafe`;
//! every block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_void};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};
use torch_sys::C_tensor;

use crate::error::{Error, Result};

mod helper;
mod rows;
pub(crate) use helper::help_this_thread;
pub(crate) use rows::{Rows, cpu_slice, cpu_slice_mut};

unsafe extern "C" {
    fn engram_qlinear_pack(
        weight: *const C_tensor,
        bias: *const C_tensor,
        fp16: bool,
    ) -> *mut c_void;
    fn engram_qlinear_forward(
        packed: *const c_void,
        input: *const C_tensor,
        fp16: bool,
    ) -> *mut C_tensor;
    fn engram_qlinear_free(packed: *mut c_void);
    fn engram_qlinear_last_error() -> *const c_char;
}

/// How a model's linear layers hold their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Float32 weights and activations.
    #[default]
    Float32,
    /// Int8 weights packed at load, activations quantised per call, where a model's accuracy
    /// allows it (each model names the layers that stay float32 or take fp16 instead); CPU
    /// only, on a GPU the layers stay float32.
    Int8,
    /// Half-precision weights packed at load, float32 activations: half the memory traffic
    /// of float32 and no quantised activations, so a text's result does not depend on what
    /// else is in its batch; CPU only, on a GPU the layers stay float32.
    Float16,
    /// Int8 weights (one scale per output channel), activations quantised row by row (one
    /// scale per token) and multiplied in exact int32 sums: a quarter of float32's weight
    /// memory, and a row's result does not depend on the rest of its batch; CPU only, on a
    /// GPU the layers stay float32.
    #[serde(rename = "int8-rows")]
    Int8Rows,
}

/// How one layer holds its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Packing {
    /// Float32, as loaded.
    Float32,
    /// Int8 codes, activations quantised per call.
    Int8,
    /// Half-precision floats, float32 activations.
    Float16,
    /// Int8 codes per output channel, activations quantised per row.
    Int8Rows,
}

impl Precision {
    /// Whether the weights are int8 codes (either kind).
    pub fn is_int8(self) -> bool {
        matches!(self, Precision::Int8 | Precision::Int8Rows)
    }

    /// The packing of an ordinary layer in this precision.
    pub(crate) fn packing(self) -> Packing {
        match self {
            Precision::Float32 => Packing::Float32,
            Precision::Int8 => Packing::Int8,
            Precision::Float16 => Packing::Float16,
            Precision::Int8Rows => Packing::Int8Rows,
        }
    }

    /// The packing of a layer whose inputs have outliers (a per-tensor int8 scale would
    /// crush the rest of the activations): half precision instead of int8.
    pub(crate) fn outlier_packing(self) -> Packing {
        match self {
            Precision::Float32 => Packing::Float32,
            Precision::Int8 | Precision::Float16 => Packing::Float16,
            // A scale per row holds what a scale per tensor crushed.
            Precision::Int8Rows => Packing::Int8Rows,
        }
    }
}

/// One linear layer.
pub(crate) enum Linear {
    /// `weight` `[out, in]` and an optional `bias` `[out]`, float32.
    Dense {
        weight: Tensor,
        bias: Option<Tensor>,
    },
    /// The packed weight; shared, since forward passes only read it.
    Packed(Arc<Packed>),
    /// Int8 codes per output channel; shared, since forward passes only read them.
    Rows(Arc<Rows>),
}

impl Linear {
    /// The layer of `weight` `[out, in]` and `bias` `[out]` (float32, on `device`), packed
    /// as `packing` says where the weights are on the CPU (float32 elsewhere).
    pub(crate) fn new(
        weight: Tensor,
        bias: Option<Tensor>,
        packing: Packing,
        device: Device,
    ) -> Result<Linear> {
        let fp16 = match packing {
            Packing::Float32 => return Ok(Linear::Dense { weight, bias }),
            _ if device != Device::Cpu => return Ok(Linear::Dense { weight, bias }),
            Packing::Int8Rows => {
                return Ok(Linear::Rows(Arc::new(Rows::new(&weight, bias.as_ref())?)));
            }
            Packing::Int8 => false,
            Packing::Float16 => true,
        };
        Ok(Linear::Packed(Arc::new(Packed::new(
            &weight,
            bias.as_ref(),
            fp16,
        )?)))
    }

    /// Whether [`Linear::new_each`] packs weights of these packings on threads of their own:
    /// fbgemm's int8 and half-precision packing, on the CPU (the others are quick to make).
    pub(crate) fn packs_in_parallel(packings: &[Packing], device: Device) -> bool {
        device == Device::Cpu
            && packings
                .iter()
                .any(|p| matches!(p, Packing::Int8 | Packing::Float16))
    }

    /// The layers of `specs` (weight, bias, packing), each as [`Linear::new`] makes it, in the
    /// order given; packed on up to `threads` threads at once, the largest first (fbgemm packs
    /// a layer on one thread, and a decoder has over a hundred to pack at load).
    pub(crate) fn new_each(
        specs: Vec<(Tensor, Option<Tensor>, Packing)>,
        device: Device,
        threads: usize,
    ) -> Result<Vec<Linear>> {
        let threads = threads.clamp(1, specs.len().max(1));
        let packings: Vec<Packing> = specs.iter().map(|(_, _, p)| *p).collect();
        if threads == 1 || !Linear::packs_in_parallel(&packings, device) {
            return specs
                .into_iter()
                .map(|(weight, bias, packing)| Linear::new(weight, bias, packing, device))
                .collect();
        }
        let count = specs.len();
        let mut jobs: Vec<_> = specs.into_iter().enumerate().collect();
        // Popped from the end: the largest first, so the last job is a small one.
        jobs.sort_by_key(|(_, (weight, _, _))| weight.numel());
        let jobs = Mutex::new(jobs);
        let done = Mutex::new(Vec::with_capacity(count));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    loop {
                        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).pop();
                        let Some((index, (weight, bias, packing))) = job else {
                            break;
                        };
                        let layer = Linear::new(weight, bias, packing, device);
                        done.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((index, layer));
                    }
                });
            }
        });
        let mut done = done.into_inner().unwrap_or_else(PoisonError::into_inner);
        done.sort_by_key(|(index, _)| *index);
        done.into_iter().map(|(_, layer)| layer).collect()
    }

    /// `x W^T + b` for `x` `[..., in]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Linear::Dense { weight, bias } => Ok(x.f_linear(weight, bias.as_ref())?),
            Linear::Packed(packed) => packed.forward(x),
            Linear::Rows(rows) => rows.forward(x),
        }
    }

    /// [`Linear::forward`] for code on tch's infallible API (the decoder): panics where tch's
    /// own `linear` would, on shapes that do not fit.
    pub(crate) fn apply(&self, x: &Tensor) -> Tensor {
        match self.forward(x) {
            Ok(y) => y,
            Err(error) => panic!("linear layer: {error}"),
        }
    }

    /// The int8-rows layer, where this is one.
    pub(crate) fn rows(&self) -> Option<&Arc<Rows>> {
        match self {
            Linear::Rows(rows) => Some(rows),
            Linear::Dense { .. } | Linear::Packed(_) => None,
        }
    }

    /// A second handle on the same weights (no copy).
    pub(crate) fn share(&self) -> Linear {
        match self {
            Linear::Dense { weight, bias } => Linear::Dense {
                weight: weight.shallow_clone(),
                bias: bias.as_ref().map(Tensor::shallow_clone),
            },
            Linear::Packed(packed) => Linear::Packed(Arc::clone(packed)),
            Linear::Rows(rows) => Linear::Rows(Arc::clone(rows)),
        }
    }
}

/// A weight packed by libtorch's `quantized::linear_prepack` or `linear_prepack_fp16` (an
/// opaque `c10::IValue`).
pub(crate) struct Packed {
    handle: *mut c_void,
    fp16: bool,
}

// SAFETY: the handle is owned by this value alone and freed once, in `Drop`; the packed
// weight is immutable after packing, and libtorch's `linear_dynamic` only reads it, so
// forward passes on several threads at once are sound (torch itself runs one quantised
// module from many threads).
unsafe impl Send for Packed {}
unsafe impl Sync for Packed {}

impl Packed {
    fn new(weight: &Tensor, bias: Option<&Tensor>, fp16: bool) -> Result<Packed> {
        let weight = weight.f_to_kind(Kind::Float)?;
        let bias = bias.map(|b| b.f_to_kind(Kind::Float)).transpose()?;
        let bias_ptr = bias.as_ref().map_or(std::ptr::null(), Tensor::as_ptr);
        // SAFETY: both pointers are live tch tensors (torch-sys's `at::Tensor*`) for the call;
        // the shim copies what it keeps.
        let handle = unsafe { engram_qlinear_pack(weight.as_ptr(), bias_ptr, fp16) };
        if handle.is_null() {
            return Err(Error::Quantise(last_error()));
        }
        Ok(Packed { handle, fp16 })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // SAFETY: `handle` is a live packed weight (freed only in `Drop`) and `x` a live tensor;
        // a non-null result is a new heap-allocated `at::Tensor` that tch takes ownership of.
        let out = unsafe { engram_qlinear_forward(self.handle, x.as_ptr(), self.fp16) };
        if out.is_null() {
            return Err(Error::Quantise(last_error()));
        }
        // SAFETY: see above: `out` is a fresh tensor handle owned by no one else.
        Ok(unsafe { Tensor::from_ptr(out) })
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        // SAFETY: `handle` came from `engram_qlinear_pack` and is freed exactly once.
        unsafe { engram_qlinear_free(self.handle) }
    }
}

/// The shim's message for this thread's last failure.
fn last_error() -> String {
    // SAFETY: the shim returns a NUL-terminated string valid until its next call on this
    // thread; it is copied at once.
    unsafe { CStr::from_ptr(engram_qlinear_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::rows::{quantise_rows, round_code};
    use super::*;

    /// Standard normal values of the test's own generator: libtorch's is one per process, and
    /// the crate's other tests draw from it at the same time, so `tch::manual_seed` alone does
    /// not fix what a test gets (an int8 layer's agreement depends on its values).
    fn gaussian(shape: &[i64], seed: u64) -> Tensor {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let n: i64 = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| {
                // Box-Muller: u in (0, 1], so its logarithm is finite.
                let u = 1.0 - rng.random::<f64>();
                let v = rng.random::<f64>();
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect();
        Tensor::from_slice(&values).reshape(shape)
    }

    fn cosine(a: &Tensor, b: &Tensor) -> f64 {
        let a = a.flatten(0, -1);
        let b = b.flatten(0, -1);
        (a.dot(&b) / (a.norm() * b.norm())).double_value(&[])
    }

    /// Each packed layer computes the dense layer's product up to its rounding, keeps the
    /// leading dimensions of its input, adds the bias, and can be shared across threads.
    #[test]
    fn packed_layers_agree_with_the_dense_one() {
        for packing in [Packing::Int8, Packing::Float16] {
            packed_layer_agrees_with_the_dense_one(packing);
        }
    }

    fn packed_layer_agrees_with_the_dense_one(packing: Packing) {
        let weight = gaussian(&[96, 64], 7) * 0.05;
        let bias = gaussian(&[96], 8);
        let x = gaussian(&[3, 5, 64], 9);
        let dense = Linear::new(
            weight.shallow_clone(),
            Some(bias.shallow_clone()),
            Packing::Float32,
            Device::Cpu,
        )
        .unwrap();
        let packed = Linear::new(weight, Some(bias), packing, Device::Cpu).unwrap();
        assert!(matches!(packed, Linear::Packed(_)));
        let expected = dense.forward(&x).unwrap();
        let got = packed.forward(&x).unwrap();
        assert_eq!(got.size(), vec![3, 5, 96]);
        let similarity = cosine(&expected, &got);
        assert!(similarity > 0.999, "{packing:?}: cosine {similarity}");

        let shared = packed.share();
        let x2 = x.shallow_clone();
        let from_thread = std::thread::spawn(move || shared.forward(&x2).unwrap())
            .join()
            .unwrap();
        assert!(cosine(&got, &from_thread) > 0.999_999);
    }

    /// Packed on several threads, the layers come back in the order given, each with its
    /// own packing and the product of the layer packed alone.
    #[test]
    fn layers_packed_on_several_threads_keep_their_order() {
        tch::manual_seed(9);
        let packings = [
            Packing::Float16,
            Packing::Int8,
            Packing::Float32,
            Packing::Float16,
            Packing::Int8,
        ];
        let weights: Vec<Tensor> = (0..packings.len() as i64)
            .map(|i| Tensor::randn([16 * (i + 1), 64], (Kind::Float, Device::Cpu)) * 0.05)
            .collect();
        let specs = weights
            .iter()
            .zip(packings)
            .map(|(w, p)| (w.shallow_clone(), None, p))
            .collect();
        let layers = Linear::new_each(specs, Device::Cpu, 3).unwrap();
        assert_eq!(layers.len(), packings.len());
        let x = Tensor::randn([2, 64], (Kind::Float, Device::Cpu));
        for ((layer, weight), packing) in layers.iter().zip(&weights).zip(packings) {
            assert_eq!(
                matches!(layer, Linear::Packed(_)),
                packing != Packing::Float32
            );
            let alone = Linear::new(weight.shallow_clone(), None, packing, Device::Cpu).unwrap();
            let (got, want) = (layer.forward(&x).unwrap(), alone.forward(&x).unwrap());
            assert_eq!(got.size(), want.size());
            assert!(cosine(&got, &want) > 0.999_999, "{packing:?}");
        }
    }

    /// Without a bias the layer is `x W^T` alone. (Rows as wide as a model's: in a row of
    /// 16 Gaussian weights most codes are near the extremes, where full-range activations can
    /// saturate fbgemm's AVX2 sums; see `cpp/qlinear.cpp`.)
    #[test]
    fn int8_layer_without_bias() {
        let weight = gaussian(&[32, 384], 10);
        let x = gaussian(&[4, 384], 11);
        let expected = x.linear::<Tensor>(&weight, None);
        let int8 = Linear::new(weight, None, Packing::Int8, Device::Cpu).unwrap();
        assert!(cosine(&expected, &int8.forward(&x).unwrap()) > 0.999);
    }

    /// A failure inside libtorch is an error carrying its message, not an abort.
    #[test]
    fn a_shape_mismatch_is_an_error() {
        let weight = Tensor::randn([8, 16], (Kind::Float, Device::Cpu));
        let int8 = Linear::new(weight, None, Packing::Int8, Device::Cpu).unwrap();
        let wrong = Tensor::randn([2, 15], (Kind::Float, Device::Cpu));
        match int8.forward(&wrong) {
            Err(Error::Quantise(message)) => assert!(!message.is_empty(), "no message"),
            other => panic!("expected libtorch's error, got {other:?}"),
        }
    }

    /// The same product as libtorch's own operators compute it (per-row scales, codes
    /// rounded half to even, exact int32 sums), for a layer with a bias and without, for
    /// inputs of any leading shape, and close to the float32 layer.
    #[test]
    fn int8_rows_compute_what_libtorch_operators_compute() {
        let weight = gaussian(&[48, 384], 21) * 0.05;
        let bias = gaussian(&[48], 22);
        let x = gaussian(&[2, 3, 384], 23) * 3.0;
        for bias in [Some(bias), None] {
            let layer = Rows::new(&weight, bias.as_ref()).unwrap();
            let got = layer.forward(&x).unwrap();
            assert_eq!(got.size(), [2, 3, 48]);
            let (codes, scales) = Rows::quantise(&weight).unwrap();
            let rows = x.reshape([-1, 384]);
            let row_scales = rows.abs().amax([1i64].as_slice(), true) / 127.0;
            let row_codes = (&rows / &row_scales).round().to_kind(Kind::Int8);
            let mut want =
                row_codes.internal_int_mm(&codes.tr()).to_kind(Kind::Float) * &row_scales * &scales;
            if let Some(bias) = &bias {
                want += bias;
            }
            let want = want.reshape([2, 3, 48]);
            let gap = (&got - &want).abs().max().double_value(&[]);
            assert!(gap < 1e-4, "largest difference {gap}");
            let dense = x.linear(&weight, bias.as_ref());
            assert!(cosine(&got, &dense) > 0.999);
        }
    }

    /// A row's result is the same bits alone or among other rows of any size.
    #[test]
    fn an_int8_row_does_not_depend_on_its_batch() {
        let layer = Rows::new(
            &(gaussian(&[64, 256], 31) * 0.1),
            Some(&gaussian(&[64], 32)),
        )
        .unwrap();
        let batch = gaussian(&[5, 256], 33);
        let loud = batch.narrow(0, 1, 1) * 100.0;
        let mixed = Tensor::cat(&[batch.narrow(0, 0, 1), loud, batch.narrow(0, 2, 3)], 0);
        let alone = layer.forward(&batch.narrow(0, 0, 1)).unwrap();
        for together in [
            layer.forward(&batch).unwrap(),
            layer.forward(&mixed).unwrap(),
        ] {
            assert!(together.narrow(0, 0, 1).equal(&alone));
        }
    }

    /// A layer whose second half of columns the helper thread computes gives the same bits
    /// as one thread alone, with several helped threads sharing the one helper (each half
    /// taken by the helper or taken back).
    #[test]
    fn a_layer_helped_by_a_second_core_computes_the_same_bits() {
        let layer = Arc::new(
            Rows::new(
                &(gaussian(&[200, 96], 41) * 0.1),
                Some(&gaussian(&[200], 42)),
            )
            .unwrap(),
        );
        let inputs = gaussian(&[7, 96], 43);
        let want = Vec::<f32>::try_from(layer.forward(&inputs).unwrap().flatten(0, -1)).unwrap();
        let x = Vec::<f32>::try_from(inputs.flatten(0, -1)).unwrap();
        let before = helper::helped_halves();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (layer, x) = (Arc::clone(&layer), x.clone());
                std::thread::spawn(move || {
                    help_this_thread();
                    assert!(helper::helped() || available_cores() == 1);
                    (0..300)
                        .map(|_| {
                            let mut y = vec![0f32; 7 * 200];
                            layer.forward_rows(&x, &mut y).unwrap();
                            y
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for thread in threads {
            for y in thread.join().unwrap() {
                assert_eq!(y, want, "helped and alone differ");
            }
        }
        if available_cores() > 1 {
            assert!(
                helper::helped_halves() > before,
                "the helper took no half in 900 products"
            );
        }
    }

    fn available_cores() -> usize {
        std::thread::available_parallelism().map_or(1, usize::from)
    }

    /// Codes round half to even, as libtorch's `round`, and never leave [-127, 127].
    #[test]
    fn codes_round_half_to_even_within_range() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (126.5, 126),
            (127.4, 127),
            (300.0, 127),
            (-300.0, -127),
            (3.49, 3),
        ];
        for (q, code) in cases {
            assert_eq!(round_code(q), code, "{q}");
        }
        let mut codes = [0i8; 4];
        let mut scales = [0f32; 1];
        quantise_rows(&[0.0, -2.0, 1.0, 0.5], &mut codes, &mut scales);
        assert_eq!(codes, [0, -127, 64, 32]);
        assert_eq!(scales, [2.0 / 127.0]);
    }
}
