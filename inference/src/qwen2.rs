//! The Qwen2 decoder on tch, loaded from a GGUF file (or built with seeded random weights of a
//! configuration's shapes, [`Qwen2::random`]): token embeddings, 24 pre-norm layers of
//! grouped-query attention (q/k/v biases, rotary embeddings in the NeoX layout with the file's
//! theta) and a SwiGLU feed-forward, RMSNorm, and the output projection; with a KV cache so
//! that generation feeds one new token per step.
//!
//! Weights are read one at a time, dequantised to float32 and packed as the precision says
//! before the next is read (`build`). In [`Precision::Int8`] the linear layers are packed
//! for the CPU as int8 or (the feed-forward's output and the vocabulary projection)
//! half-precision floats; in [`Precision::Float16`] all of them as half-precision floats. In
//! [`Precision::Int8Rows`] every linear layer keeps int8 codes with a scale per output channel,
//! its inputs rotated (`rotate`) and quantised per row, and the token table is one int8 copy
//! serving the lookup and the tied vocabulary projection (`embedding`; where the file holds
//! the tied matrix twice, quantised two ways, the finer copy): the 1.5B in about a quarter of
//! its float32 size. The float32 forward pass matches Hugging Face's
//! `Qwen2ForCausalLM` on the same file (`inference/tests/qwen2.rs`); the others stay close.

use std::path::Path;

use tch::{Device, Kind, Tensor};

use tokenizers::Tokenizer;

use crate::constrain::Schema;
use crate::error::Result;
use crate::gguf::Gguf;
use crate::linear::{Linear, Precision};

mod build;
mod embedding;
mod random;
mod rotate;
mod source;

use embedding::TokenTable;

/// The hyper-parameters the decoder reads from `qwen2.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen2Config {
    /// Decoder layers.
    pub layers: usize,
    /// Hidden width.
    pub width: i64,
    /// Query heads.
    pub heads: i64,
    /// Key and value heads (grouped-query attention).
    pub kv_heads: i64,
    /// RMSNorm epsilon.
    pub eps: f64,
    /// Rotary embedding base.
    pub rope_theta: f64,
    /// The feed-forward's inner width.
    pub ffn: i64,
    /// Vocabulary entries (rows of the token table).
    pub vocab: i64,
    /// Longest context the model was trained for.
    pub context: usize,
}

struct Layer {
    /// The blocks of the Hadamard rotations of the inputs of the attention's projections, its
    /// output projection, the feed-forward's gate and up, and its down projection, where
    /// their weights were rotated to fit int8 rows ([`rotate`]).
    rotations: Rotations,
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ffn_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// Where a layer's inputs are rotated, by the block of each rotation.
#[derive(Debug, Clone, Copy, Default)]
struct Rotations {
    attn: Option<i64>,
    o: Option<i64>,
    ffn: Option<i64>,
    down: Option<i64>,
}

/// `x` rotated where `block` says so.
fn rotated(x: Tensor, block: Option<i64>) -> Tensor {
    match block {
        Some(block) => rotate::hadamard(&x, block),
        None => x,
    }
}

/// The keys and values of every position fed so far, per layer (`[batch, kv_heads, positions,
/// head_dim]`).
#[derive(Default)]
pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
}

impl KvCache {
    /// Positions held.
    pub fn len(&self) -> i64 {
        self.layers.first().map_or(0, |(k, _)| k.size()[2])
    }

    /// Whether nothing was fed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A cache that starts where this one is, sharing its tensors (feeding either never
    /// changes the other: new positions make new tensors): a prompt prefix computed once
    /// serves every request that starts with it.
    pub fn fork(&self) -> KvCache {
        KvCache {
            layers: self
                .layers
                .iter()
                .map(|(k, v)| (k.shallow_clone(), v.shallow_clone()))
                .collect(),
        }
    }
}

/// A loaded Qwen2 decoder.
pub struct Qwen2 {
    config: Qwen2Config,
    tokens: TokenTable,
    layers: Vec<Layer>,
    norm: Tensor,
    output: Linear,
    inv_freq: Tensor,
    device: Device,
}

impl Qwen2 {
    /// Loads the decoder of the GGUF file at `path` onto `device`, its linear layers in
    /// `precision`.
    pub fn load(path: &Path, device: Device, precision: Precision) -> Result<Qwen2> {
        Qwen2::from_gguf(&Gguf::open(path)?, device, precision, &|| false)
    }

    /// Loads the decoder of an opened GGUF file (its header and metadata read once, for the
    /// tokenizer too), one weight at a time. `stop` is asked before each layer: once it says
    /// so, the load ends with [`crate::Error::PoolClosed`] as soon as the token table, read
    /// meanwhile on its own thread, is done.
    pub fn from_gguf(
        gguf: &Gguf,
        device: Device,
        precision: Precision,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<Qwen2> {
        let config = build::gguf_config(gguf)?;
        build::build(config, &source::GgufSource(gguf), device, precision, stop)
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &Qwen2Config {
        &self.config
    }

    /// Feeds `tokens` (`[batch, new]`, int64) after what `cache` holds, appends their keys
    /// and values to it, and returns the logits of every new position (`[batch, new, vocab]`).
    pub fn forward(&self, tokens: &Tensor, cache: &mut KvCache) -> Tensor {
        let _guard = tch::no_grad_guard();
        self.output.apply(&self.hidden(tokens, cache))
    }

    /// [`Qwen2::forward`], but only the logits of the last new position (`[batch, vocab]`):
    /// what generation needs, without projecting every prompt position onto the vocabulary.
    pub fn next_logits(&self, tokens: &Tensor, cache: &mut KvCache) -> Tensor {
        let _guard = tch::no_grad_guard();
        let hidden = self.hidden(tokens, cache);
        let last = hidden.size()[1] - 1;
        self.output.apply(&hidden.select(1, last))
    }

    /// The final hidden states (after the last norm) of the new positions.
    fn hidden(&self, tokens: &Tensor, cache: &mut KvCache) -> Tensor {
        let (batch, new) = (tokens.size()[0], tokens.size()[1]);
        let past = cache.len();
        let c = &self.config;
        let (cos, sin) = self.rotary(&Tensor::arange_start(
            past,
            past + new,
            (Kind::Float, self.device),
        ));
        let rope = |x: &Tensor| rotate(x, &cos, &sin);
        // Causal within the new positions; every cached position is visible.
        let mask = Tensor::ones([new, past + new], (Kind::Bool, self.device))
            .tril(past)
            .logical_not();

        let mut x = self.tokens.lookup(tokens).view([batch, new, c.width]);
        let fresh = cache.layers.is_empty();
        for (i, layer) in self.layers.iter().enumerate() {
            self.wait_for_questions();
            let (q, k, v) = self.qkv(layer, &x);
            let (q, k) = (rope(&q), rope(&k));
            let (k, v) = if fresh {
                cache.layers.push((k.shallow_clone(), v.shallow_clone()));
                (k, v)
            } else {
                let (pk, pv) = &cache.layers[i];
                let k = Tensor::cat(&[pk, &k], 2);
                let v = Tensor::cat(&[pv, &v], 2);
                cache.layers[i] = (k.shallow_clone(), v.shallow_clone());
                (k, v)
            };
            let attn = self.attend(&q, &k, &v, Some(&mask));
            x = self.finish_layer(layer, x, &attn);
        }
        rms_norm(&x, &self.norm, c.eps)
    }

    /// The cosines and sines of the rotary embedding at `positions` (`[n]`, float):
    /// `[n, head_dim]` each.
    fn rotary(&self, positions: &Tensor) -> (Tensor, Tensor) {
        let freqs = positions.unsqueeze(1) * self.inv_freq.unsqueeze(0);
        let emb = Tensor::cat(&[&freqs, &freqs], -1);
        (emb.cos(), emb.sin())
    }

    /// The queries, keys and values of `x` (`[batch, new, width]`), by head
    /// (`[batch, heads, new, head_dim]`), before the rotary embedding.
    fn qkv(&self, layer: &Layer, x: &Tensor) -> (Tensor, Tensor, Tensor) {
        let c = &self.config;
        let (batch, new) = (x.size()[0], x.size()[1]);
        let head_dim = c.width / c.heads;
        let h = rotated(rms_norm(x, &layer.attn_norm, c.eps), layer.rotations.attn);
        let heads =
            |w: &Linear, n: i64| w.apply(&h).view([batch, new, n, head_dim]).transpose(1, 2);
        (
            heads(&layer.q, c.heads),
            heads(&layer.k, c.kv_heads),
            heads(&layer.v, c.kv_heads),
        )
    }

    /// Attention of `q` over all of `k` and `v` (grouped: each key head serves `heads /
    /// kv_heads` query heads), masked where `mask` is true; `[batch, new, width]`.
    ///
    /// A key head's query heads are stacked as rows of one product over that head's keys,
    /// rather than the keys repeated for each query head: repeated, each decoding step copied
    /// every cached key and value `heads / kv_heads` times a layer (megabytes each, mapped,
    /// faulted in and unmapped by the allocator every step).
    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let c = &self.config;
        let (batch, new) = (q.size()[0], q.size()[2]);
        let head_dim = c.width / c.heads;
        let group = c.heads / c.kv_heads;
        // `[batch, kv_heads, group * new, head_dim]`: query head `h` serves key head
        // `h / group`, so the heads of one key head are consecutive.
        let q = q.reshape([batch, c.kv_heads, group * new, head_dim]);
        let mut scores = q.matmul(&k.transpose(-2, -1)) / (head_dim as f64).sqrt();
        if let Some(mask) = mask {
            // Row `g * new + n` is position `n` of the group's head `g`.
            scores = scores.masked_fill(&mask.repeat([group, 1]), f64::NEG_INFINITY);
        }
        scores
            .softmax(-1, Kind::Float)
            .matmul(v)
            .view([batch, c.heads, new, head_dim])
            .transpose(1, 2)
            .contiguous()
            .view([batch, new, c.width])
    }

    /// The rest of a layer after attention: the output projection and the feed-forward,
    /// each added to the residual stream `x`.
    fn finish_layer(&self, layer: &Layer, mut x: Tensor, attn: &Tensor) -> Tensor {
        let r = layer.rotations;
        x += layer.o.apply(&rotated(attn.shallow_clone(), r.o));
        let h = rotated(rms_norm(&x, &layer.ffn_norm, self.config.eps), r.ffn);
        let product = layer.gate.apply(&h).silu() * layer.up.apply(&h);
        x + layer.down.apply(&rotated(product, r.down))
    }

    /// One decoding step of several sequences at once (continuous batching): feeds
    /// `tokens[i]` after what `caches[i]` holds, appends its keys and values there, and
    /// returns the next-token logits of every sequence (`[sequences, vocab]`). The caches may
    /// hold different lengths: the projections and the feed-forward run once for the whole
    /// batch (where a step's cost is: every weight is read once however many sequences share
    /// it), the attention per sequence over its own cache.
    pub fn step(&self, tokens: &[i64], caches: &mut [KvCache]) -> Tensor {
        let _guard = tch::no_grad_guard();
        assert_eq!(tokens.len(), caches.len(), "one token per sequence");
        let c = &self.config;
        let batch = tokens.len() as i64;
        let head_dim = c.width / c.heads;
        let positions: Vec<f32> = caches.iter().map(|cache| cache.len() as f32).collect();
        let (cos, sin) = self.rotary(&Tensor::from_slice(&positions).to_device(self.device));
        // `[batch, 1, 1, head_dim]`: broadcast over heads and the one new position.
        let (cos, sin) = (
            cos.view([batch, 1, 1, head_dim]),
            sin.view([batch, 1, 1, head_dim]),
        );
        let rope = |x: &Tensor| rotate(x, &cos, &sin);
        let ids = Tensor::from_slice(tokens).to_device(self.device);
        let mut x = self.tokens.lookup(&ids).view([batch, 1, c.width]);
        for (i, layer) in self.layers.iter().enumerate() {
            self.wait_for_questions();
            let (q, k, v) = self.qkv(layer, &x);
            let (q, k) = (rope(&q), rope(&k));
            let mut outs = Vec::with_capacity(caches.len());
            for (b, cache) in caches.iter_mut().enumerate() {
                let b = b as i64;
                let (qb, kb, vb) = (q.narrow(0, b, 1), k.narrow(0, b, 1), v.narrow(0, b, 1));
                let (kb, vb) = match cache.layers.get(i) {
                    Some((pk, pv)) => (Tensor::cat(&[pk, &kb], 2), Tensor::cat(&[pv, &vb], 2)),
                    None => (kb, vb),
                };
                if cache.layers.len() > i {
                    cache.layers[i] = (kb.shallow_clone(), vb.shallow_clone());
                } else {
                    cache.layers.push((kb.shallow_clone(), vb.shallow_clone()));
                }
                // One new position sees every earlier one: no mask.
                outs.push(self.attend(&qb, &kb, &vb, None));
            }
            x = self.finish_layer(layer, x, &Tensor::cat(&outs, 0));
        }
        self.output
            .apply(&rms_norm(&x, &self.norm, c.eps).select(1, 0))
    }
}

impl Qwen2 {
    /// On the CPU, waits between layers while questions are being embedded
    /// ([`crate::foreground`]).
    fn wait_for_questions(&self) {
        if self.device == Device::Cpu {
            crate::foreground::wait_for_questions();
        }
    }
}

impl Qwen2 {
    /// Greedy decoding: feeds `prompt`, then the most likely next token at each step, until
    /// `stop` (included in the answer) or `max_new` tokens; returns the new tokens.
    pub fn generate_greedy(&self, prompt: &[i64], max_new: usize, stop: i64) -> Vec<i64> {
        let mut cache = KvCache::default();
        let mut answer = Vec::new();
        let mut feed = prompt.to_vec();
        while answer.len() < max_new && !feed.is_empty() {
            let logits = self.next_logits(&Tensor::from_slice(&feed).unsqueeze(0), &mut cache);
            let next = logits.get(0).argmax(-1, false).int64_value(&[]);
            answer.push(next);
            if next == stop {
                break;
            }
            feed = vec![next];
        }
        answer
    }
}

impl Qwen2 {
    /// Greedy decoding constrained by `schema`: at each step the most likely token that keeps
    /// the output a valid prefix of what the schema allows ([`crate::sample::pick`]); stops when the object is whole. `vocab` is
    /// [`token_bytes`] of the model's tokenizer. `None` when `max_new` tokens did not close
    /// the object.
    pub fn generate_json(
        &self,
        prompt: &[i64],
        schema: &Schema,
        vocab: &[Option<Vec<u8>>],
        max_new: usize,
    ) -> Option<String> {
        let mut cache = KvCache::default();
        let mut matcher = schema.matcher();
        let mut out = Vec::new();
        let mut feed = prompt.to_vec();
        for _ in 0..max_new {
            let logits = self.next_logits(&Tensor::from_slice(&feed).unsqueeze(0), &mut cache);
            let (next, tried, bytes) = crate::sample::pick(&matcher, &logits.get(0), vocab)?;
            matcher = tried;
            out.extend_from_slice(bytes);
            if matcher.is_complete() {
                return String::from_utf8(out).ok();
            }
            feed = vec![next as i64];
        }
        None
    }
}

/// The bytes each token id of `tokenizer` stands for (its byte-level BPE string mapped back
/// through GPT-2's byte-to-character table); `None` for special tokens and unused ids.
pub fn token_bytes(tokenizer: &Tokenizer) -> Vec<Option<Vec<u8>>> {
    // GPT-2's table: printable bytes stand for themselves, the others for U+0100 onwards.
    let mut chars = [0_u32; 256];
    let mut next = 256;
    for b in 0..=255_u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
        chars[usize::from(b)] = if printable {
            u32::from(b)
        } else {
            next += 1;
            next - 1
        };
    }
    let byte_of: std::collections::HashMap<char, u8> = (0..=255_u8)
        .filter_map(|b| Some((char::from_u32(chars[usize::from(b)])?, b)))
        .collect();
    let special: std::collections::HashSet<u32> =
        tokenizer.get_added_tokens_decoder().into_keys().collect();
    let vocab = tokenizer.get_vocab(true);
    let size = vocab.values().max().map_or(0, |&m| m as usize + 1);
    let mut table = vec![None; size];
    for (token, id) in vocab {
        if special.contains(&id) {
            continue;
        }
        let bytes: Option<Vec<u8>> = token.chars().map(|c| byte_of.get(&c).copied()).collect();
        table[id as usize] = bytes;
    }
    table
}

/// The chat template of Qwen2.5's instruct models (ChatML) for one system and one user
/// message, ending where the assistant's answer begins: what the file's template renders
/// with `add_generation_prompt` (`inference/tests/qwen2.rs` checks it against
/// `transformers`).
pub fn chat_prompt(system: &str, user: &str) -> String {
    format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )
}

/// The rotary embedding in the NeoX layout (the two halves of each head rotated together).
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[x.dim() - 1] / 2;
    let x1 = x.narrow(-1, 0, half);
    let x2 = x.narrow(-1, half, half);
    let rotated = Tensor::cat(&[&x2.neg(), &x1], -1);
    x * cos + rotated * sin
}

fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
    let scale = (x.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float) + eps).rsqrt();
    x * scale * weight
}
