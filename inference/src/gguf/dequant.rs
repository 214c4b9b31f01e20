//! Dequantisation of ggml's block types into f32, as llama.cpp's reference `dequantize_row_*`
//! functions compute them (ggml-quants.c), block by block and in the same element order.
//!
//! Covered: F32, F16, BF16, Q8_0, Q5_0, Q4_0, Q4_K and Q6_K (what the pinned Qwen2.5 GGUF
//! uses, and the two simplest relatives). Other types are an error naming the type.

use half::{bf16, f16};

use super::TensorType;

fn half(bytes: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// Appends the values of `bytes` (whole blocks of `kind`) to `out`.
pub fn dequantize(kind: TensorType, bytes: &[u8], out: &mut Vec<f32>) -> Result<(), String> {
    let (per_block, block_bytes) = kind.block();
    let block_bytes = block_bytes as usize;
    if !bytes.len().is_multiple_of(block_bytes) {
        return Err(format!(
            "{} bytes of {kind:?} are not whole blocks of {block_bytes}",
            bytes.len()
        ));
    }
    out.reserve(bytes.len() / block_bytes * per_block as usize);
    let blocks = bytes.chunks_exact(block_bytes);
    match kind {
        TensorType::F32 => {
            out.extend(blocks.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        }
        TensorType::F16 => out.extend(blocks.map(|b| half(b, 0))),
        TensorType::Bf16 => {
            out.extend(blocks.map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()));
        }
        TensorType::Q8_0 => {
            for b in blocks {
                let d = half(b, 0);
                out.extend(b[2..34].iter().map(|&q| d * f32::from(q as i8)));
            }
        }
        TensorType::Q4_0 => {
            for b in blocks {
                let d = half(b, 0);
                let qs = &b[2..18];
                out.extend(qs.iter().map(|&q| d * (f32::from(q & 0x0f) - 8.0)));
                out.extend(qs.iter().map(|&q| d * (f32::from(q >> 4) - 8.0)));
            }
        }
        TensorType::Q5_0 => {
            for b in blocks {
                let d = half(b, 0);
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                let qs = &b[6..22];
                let low = qs.iter().enumerate().map(|(j, &q)| {
                    let high = ((qh >> j) << 4) & 0x10;
                    d * ((u32::from(q & 0x0f) | high) as f32 - 16.0)
                });
                out.extend(low);
                let upper = qs.iter().enumerate().map(|(j, &q)| {
                    let high = (qh >> (j + 12)) & 0x10;
                    d * ((u32::from(q >> 4) | high) as f32 - 16.0)
                });
                out.extend(upper);
            }
        }
        TensorType::Q4K => {
            for b in blocks {
                let d = half(b, 0);
                let min = half(b, 2);
                let scales = &b[4..16];
                let qs = &b[16..144];
                for (chunk, q) in qs.chunks_exact(32).enumerate() {
                    let (sc1, m1) = scale_min_k4(2 * chunk, scales);
                    let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
                    let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
                    let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
                    out.extend(q.iter().map(|&v| d1 * f32::from(v & 0x0f) - m1));
                    out.extend(q.iter().map(|&v| d2 * f32::from(v >> 4) - m2));
                }
            }
        }
        TensorType::Q6K => {
            for b in blocks {
                let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
                let d = half(b, 208);
                for half_block in 0..2 {
                    let ql = &ql[64 * half_block..];
                    let qh = &qh[32 * half_block..];
                    let sc = &scales[8 * half_block..];
                    let mut y = [0_f32; 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let code = |low: u8, shift: u8| {
                            f32::from(((low | (((qh[l] >> shift) & 3) << 4)) as i8) - 32)
                        };
                        let scale = |i: usize| d * f32::from(sc[is + i] as i8);
                        y[l] = scale(0) * code(ql[l] & 0x0f, 0);
                        y[l + 32] = scale(2) * code(ql[l + 32] & 0x0f, 2);
                        y[l + 64] = scale(4) * code(ql[l] >> 4, 4);
                        y[l + 96] = scale(6) * code(ql[l + 32] >> 4, 6);
                    }
                    out.extend(y);
                }
            }
        }
        TensorType::Q4_1
        | TensorType::Q5_1
        | TensorType::Q2K
        | TensorType::Q3K
        | TensorType::Q5K
        | TensorType::Q8K => return Err(format!("dequantising {kind:?} is not supported")),
    }
    Ok(())
}

/// The 6-bit scale and minimum of sub-block `j` of a Q4_K or Q5_K super-block
/// (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}
