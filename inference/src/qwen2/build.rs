//! Building a [`Qwen2`] from named weights, whatever holds them: a GGUF file (the model a node
//! serves) or seeded random values of a configuration's shapes (the device benchmarks). Each
//! weight is read in float32 on the CPU, one tensor at a time (the token table a slice of rows
//! at a time), moved to the device and packed as the precision says before the next is read,
//! so the whole model is never held in float32.

use tch::{Device, Kind, Tensor};

use super::embedding::TokenTable;
use super::source::{GgufSource, Source};
use super::{Layer, Qwen2, Qwen2Config, Rotations, rotate};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::linear::{Linear, Packing, Precision};

/// Builds the decoder of `config` from `source` onto `device`, its linear layers in
/// `precision`. `stop` is asked before each layer: once it says so, the build ends with
/// [`Error::PoolClosed`].
pub(super) fn build(
    config: Qwen2Config,
    source: &dyn Source,
    device: Device,
    precision: Precision,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Qwen2> {
    let c = &config;
    if c.heads == 0 || c.kv_heads == 0 || c.width % c.heads != 0 || c.heads % c.kv_heads != 0 {
        return Err(source.error(format!("inconsistent attention shape {c:?}")));
    }
    let head_dim = c.width / c.heads;
    let load = |name: &str, shape: &[i64]| -> Result<Tensor> {
        Ok(source.tensor(name, shape)?.to_device(device))
    };
    // In int8 (one activation scale a call) the feed-forward's output projection and the
    // vocabulary projection take half-precision floats instead: the SwiGLU products feeding
    // the first have outliers that one int8 scale per call crushes (the reference's top-1
    // token at 8 of 60 prompt positions with it in int8), and the second moved the logits
    // most of the rest (cosine 0.991 alone); as it is, 55 to 56 of 60 and 0.996 to 0.998
    // (`tests/qwen2.rs`).
    let (ordinary, outlier) = (precision.packing(), precision.outlier_packing());
    // In int8 rows every layer's input is rotated (`rotate`): unrotated, the feed-forward's
    // gate and up alone moved the 0.5B's logits to cosine 0.955 of the reference's; rotated
    // (all four inputs), 0.9996 (`tests/qwen2.rs`).
    let rows = precision.packing() == Packing::Int8Rows && device == Device::Cpu;
    let on = |width: i64| rows.then(|| rotate::block(width));
    let head_width = c.heads * (c.width / c.heads.max(1));
    let rotations = Rotations {
        attn: on(c.width),
        o: on(head_width),
        ffn: on(c.width),
        down: on(c.ffn),
    };
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let vocab_shape = [c.vocab, c.width];
    let output_name = source.has("output.weight").then_some("output.weight");
    // Packing is single-threaded in fbgemm: the token table and the vocabulary projection
    // (over a quarter of the weights) pack on their own thread while the layers pack on
    // `threads` at once.
    let (layers, (tokens, output)) = std::thread::scope(|scope| -> Result<_> {
        let table = scope.spawn(move || -> Result<(TokenTable, Linear)> {
            // A file may hold a tied matrix twice, quantised two ways (Qwen2.5's GGUF files
            // keep the token table in 4 or 5 bits and the projection in 6 or 8): in int8 rows
            // one table, from the finer copy, serves both.
            let one_table = match output_name {
                Some(name) if rows => {
                    same_matrix(source, "token_embd.weight", name, vocab_shape)?.then_some(name)
                }
                Some(_) | None => None,
            };
            let table_name = one_table.unwrap_or("token_embd.weight");
            let tokens = TokenTable::build(source, table_name, vocab_shape, precision, device)?;
            let output = match output_name {
                Some(name) if one_table.is_none() => {
                    Linear::new(load(name, &vocab_shape)?, None, outlier, device)?
                }
                // Tied embeddings: the projection reads the token table itself.
                Some(_) | None => tokens.projection(outlier, device)?,
            };
            Ok((tokens, output))
        });
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            if stop() {
                break;
            }
            let t = |suffix: &str, shape: &[i64]| load(&format!("blk.{i}.{suffix}"), shape);
            let (q_out, kv_out) = (c.heads * head_dim, c.kv_heads * head_dim);
            let with_bias = |name: &str, out: i64| -> Result<_> {
                Ok((
                    t(&format!("{name}.weight"), &[out, c.width])?,
                    Some(t(&format!("{name}.bias"), &[out])?),
                    ordinary,
                ))
            };
            let without_bias = |name: &str, shape: [i64; 2], packing| {
                Ok::<_, Error>((t(&format!("{name}.weight"), &shape)?, None, packing))
            };
            let turn = |spec: (Tensor, Option<Tensor>, Packing), block: Option<i64>| match block {
                Some(block) => (rotate::hadamard(&spec.0, block), spec.1, spec.2),
                None => spec,
            };
            let r = rotations;
            let recipes: [Recipe<'_>; 7] = [
                Box::new(|| Ok(turn(with_bias("attn_q", q_out)?, r.attn))),
                Box::new(|| Ok(turn(with_bias("attn_k", kv_out)?, r.attn))),
                Box::new(|| Ok(turn(with_bias("attn_v", kv_out)?, r.attn))),
                Box::new(|| {
                    let o = without_bias("attn_output", [c.width, q_out], ordinary)?;
                    Ok(turn(o, r.o))
                }),
                Box::new(|| {
                    let gate = without_bias("ffn_gate", [c.ffn, c.width], ordinary)?;
                    Ok(turn(gate, r.ffn))
                }),
                Box::new(|| {
                    Ok(turn(
                        without_bias("ffn_up", [c.ffn, c.width], ordinary)?,
                        r.ffn,
                    ))
                }),
                Box::new(|| {
                    let down = without_bias("ffn_down", [c.width, c.ffn], outlier)?;
                    Ok(turn(down, r.down))
                }),
            ];
            let linears = if Linear::packs_in_parallel(&[ordinary, outlier], device) {
                let specs = recipes
                    .into_iter()
                    .map(|recipe| recipe())
                    .collect::<Result<_>>()?;
                Linear::new_each(specs, device, threads)?
            } else {
                // Nothing to pack on other threads: each weight is read in float32 and made
                // a layer before the next is read, so a layer's float32 weights (190 MB for
                // the 1.5B) are never held together.
                recipes
                    .into_iter()
                    .map(|recipe| {
                        let (weight, bias, packing) = recipe()?;
                        Linear::new(weight, bias, packing, device)
                    })
                    .collect::<Result<Vec<_>>>()?
            };
            let [q, k, v, o, gate, up, down]: [Linear; 7] = linears
                .try_into()
                .unwrap_or_else(|_| unreachable!("seven recipes make seven layers"));
            layers.push(Layer {
                rotations,
                attn_norm: t("attn_norm.weight", &[c.width])?,
                q,
                k,
                v,
                o,
                ffn_norm: t("ffn_norm.weight", &[c.width])?,
                gate,
                up,
                down,
            });
        }
        let table = table
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        if layers.len() < c.layers {
            return Err(Error::PoolClosed);
        }
        Ok((layers, table))
    })?;
    let inv_freq = Tensor::arange_start_step(0, head_dim, 2, (Kind::Float, device))
        .divide_scalar(head_dim as f64)
        .multiply_scalar(-c.rope_theta.ln())
        .exp();
    let norm = load("output_norm.weight", &[c.width])?;
    crate::allocator::release_free_memory();
    Ok(Qwen2 {
        tokens,
        layers,
        norm,
        output,
        inv_freq,
        device,
        config,
    })
}

/// The decoder's hyper-parameters from the `qwen2.*` metadata of `gguf` (the vocabulary from
/// the token table's shape).
pub(super) fn gguf_config(gguf: &Gguf) -> Result<Qwen2Config> {
    let source = GgufSource(gguf);
    let arch = gguf.require_str("general.architecture")?;
    if arch != "qwen2" {
        return Err(source.error(format!("architecture {arch}, expected qwen2")));
    }
    let int = |key: &str| -> Result<i64> {
        let v = gguf.require_u64(key)?;
        i64::try_from(v).map_err(|_| source.error(format!("{key} = {v}")))
    };
    let vocab = gguf
        .tensor("token_embd.weight")
        .and_then(|t| t.dims.get(1).copied())
        .ok_or_else(|| source.error("no tensor token_embd.weight".into()))?;
    Ok(Qwen2Config {
        layers: int("qwen2.block_count")? as usize,
        width: int("qwen2.embedding_length")?,
        heads: int("qwen2.attention.head_count")?,
        kv_heads: int("qwen2.attention.head_count_kv")?,
        ffn: int("qwen2.feed_forward_length")?,
        vocab: vocab as i64,
        eps: gguf.require_f64("qwen2.attention.layer_norm_rms_epsilon")?,
        rope_theta: gguf.require_f64("qwen2.rope.freq_base")?,
        context: int("qwen2.context_length")? as usize,
    })
}

/// How one of a layer's linear weights is read: its float32 weight (rotated where the
/// precision says), its bias and its packing.
type Recipe<'a> = Box<dyn FnOnce() -> Result<(Tensor, Option<Tensor>, Packing)> + 'a>;

/// Rows compared by [`same_matrix`], in four runs spread over the vocabulary.
const SAMPLED_ROWS: i64 = 256;

/// Whether `a` and `b` (both of `shape`) hold one matrix quantised two ways: every sampled
/// row of one within cosine 0.95 of the other's. Two quantisations of Qwen2.5's tied token
/// table agree to 0.996 or better in every row (4-bit against 6-bit, 5-bit against 8-bit);
/// rows of two unrelated matrices are near orthogonal.
fn same_matrix(source: &dyn Source, a: &str, b: &str, shape: [i64; 2]) -> Result<bool> {
    let run = (SAMPLED_ROWS / 4).min(shape[0]);
    for quarter in 0..4 {
        let first = (shape[0] - run) * quarter / 3;
        let (x, y) = (
            source.rows(a, &shape, first, run)?,
            source.rows(b, &shape, first, run)?,
        );
        let cosine = Tensor::cosine_similarity(&x, &y, 1, 1e-12);
        if cosine.min().double_value(&[]) < 0.95 {
            return Ok(false);
        }
    }
    Ok(true)
}
