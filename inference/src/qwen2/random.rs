//! A decoder of a configuration's real shapes with seeded random weights, no file needed: what
//! the device benchmarks measure speed on (`inference/benches/decode_device.rs`), and what
//! compares two devices or two precisions on the same weights.
//!
//! Each value is a hash of the seed, the weight's name and its index (SplitMix64's mixer on a
//! counter), so a weight is the same whichever device it goes to and however it is read (whole
//! or by rows), and nothing depends on libtorch's global generator (shared by every thread of
//! a process). Weights are uniform with the standard deviation of Hugging Face's initialiser
//! (0.02), norms near 1, biases small: activations stay in the range a trained model's have.

use tch::{Device, Tensor};

use super::build::build;
use super::source::Source;
use super::{Qwen2, Qwen2Config};
use crate::error::{Error, Result};
use crate::linear::Precision;

impl Qwen2Config {
    /// Qwen2.5-0.5B's shape (24 layers, width 896, 14 query and 2 key heads, feed-forward
    /// 4,864, 151,936 tokens).
    pub fn qwen2_5_0_5b() -> Qwen2Config {
        Qwen2Config {
            layers: 24,
            width: 896,
            heads: 14,
            kv_heads: 2,
            ffn: 4864,
            vocab: 151_936,
            eps: 1e-6,
            rope_theta: 1_000_000.0,
            context: 32_768,
        }
    }

    /// Qwen2.5-1.5B's shape (28 layers, width 1,536, 12 query and 2 key heads, feed-forward
    /// 8,960, 151,936 tokens): the node's default distiller.
    pub fn qwen2_5_1_5b() -> Qwen2Config {
        Qwen2Config {
            layers: 28,
            width: 1536,
            heads: 12,
            kv_heads: 2,
            ffn: 8960,
            ..Qwen2Config::qwen2_5_0_5b()
        }
    }

    /// A small shape of the same structure (2 layers, width 64, 4 query and 2 key heads,
    /// 512 tokens): for tests and for comparing devices quickly.
    pub fn small() -> Qwen2Config {
        Qwen2Config {
            layers: 2,
            width: 64,
            heads: 4,
            kv_heads: 2,
            ffn: 128,
            vocab: 512,
            ..Qwen2Config::qwen2_5_0_5b()
        }
    }
}

impl Qwen2 {
    /// The decoder of `config`'s shapes with random weights drawn from `seed`, built on
    /// `device` with its linear layers in `precision`: the same seed gives the same weights on
    /// every device.
    pub fn random(
        config: Qwen2Config,
        seed: u64,
        device: Device,
        precision: Precision,
    ) -> Result<Qwen2> {
        build(config, &RandomSource { seed }, device, precision, &|| false)
    }
}

/// Seeded random weights, by name.
struct RandomSource {
    seed: u64,
}

/// SplitMix64's finaliser: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl RandomSource {
    /// The stream of the weight `name`: the seed and the name's FNV-1a hash, mixed.
    fn stream(&self, name: &str) -> u64 {
        let fnv = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        mix(self.seed ^ mix(fnv))
    }

    /// `(centre, half-width)` of the uniform values of `name`.
    fn range(name: &str) -> (f32, f32) {
        if name.ends_with("norm.weight") {
            (1.0, 0.1)
        } else if name.ends_with(".bias") {
            (0.0, 0.1)
        } else {
            // Standard deviation 0.02: a uniform value's is its half-width over sqrt(3).
            (0.0, 0.02 * 3.0_f32.sqrt())
        }
    }

    /// Values `first..first + count` of the weight `name`, in row-major order.
    fn values(&self, name: &str, first: u64, count: usize) -> Vec<f32> {
        let stream = self.stream(name);
        let (centre, half) = Self::range(name);
        let value = |i: u64| {
            let bits = mix(stream.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
            // 24 random bits: a uniform value in [-1, 1).
            let unit = (bits >> 40) as f32 / (1_u32 << 23) as f32 - 1.0;
            centre + half * unit
        };
        let mut out = vec![0.0_f32; count];
        // The big weights fill on every core (the 1.5B's are 1.5 billion values).
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let chunk = count.div_ceil(threads).max(1 << 16);
        std::thread::scope(|scope| {
            for (c, part) in out.chunks_mut(chunk).enumerate() {
                let start = first + (c * chunk) as u64;
                scope.spawn(move || {
                    for (j, slot) in part.iter_mut().enumerate() {
                        *slot = value(start + j as u64);
                    }
                });
            }
        });
        out
    }
}

impl Source for RandomSource {
    fn tensor(&self, name: &str, shape: &[i64]) -> Result<Tensor> {
        let count: i64 = shape.iter().product();
        Ok(Tensor::from_slice(&self.values(name, 0, count as usize)).view(shape))
    }

    fn rows(&self, name: &str, shape: &[i64], first: i64, count: i64) -> Result<Tensor> {
        let width = shape[1];
        let values = self.values(name, (first * width) as u64, (count * width) as usize);
        Ok(Tensor::from_slice(&values).view([count, width]))
    }

    fn has(&self, name: &str) -> bool {
        // Tied embeddings, as Qwen2.5's small models have them.
        name != "output.weight"
    }

    fn error(&self, reason: String) -> Error {
        Error::PoolStart {
            reason: format!("random decoder weights: {reason}"),
        }
    }
}
