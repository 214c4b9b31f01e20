//! Tokenisation with the `tokenizers` crate from a model's local `tokenizer.json`.
//!
//! Texts are encoded with the model's special tokens and truncated to the model's maximum
//! length (specials included); padding is left to the encoder, which pads each forward pass to
//! its longest input. Whatever truncation or padding the `tokenizer.json` itself declares is
//! replaced (all-MiniLM-L6-v2's file says 128 tokens padded to 128, while sentence-transformers
//! runs it at 256 unpadded). Nothing here reads or writes anything but the given file.

mod pieces;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use tch::{Device, Kind, Tensor};
use tokenizers::{
    DecoderWrapper, EncodeInput, Encoding, NormalizerWrapper, PostProcessorWrapper,
    PreTokenizerWrapper, Tokenizer, TokenizerImpl, TruncationDirection, TruncationParams,
    TruncationStrategy,
};

use crate::error::{Error, Result};
use pieces::Pieces;

/// A tokenizer whose Unigram model is [`Pieces`] instead of the crate's.
type PiecesTokenizer = TokenizerImpl<
    Pieces,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// A `tokenizer.json`'s tokenizer: a Unigram model held as sorted [`Pieces`], any other as
/// the crate reads it.
enum Inner {
    Pieces(Box<PiecesTokenizer>),
    Crate(Box<Tokenizer>),
}

/// Calls `$body` with `$t` bound to whichever tokenizer `$inner` holds.
macro_rules! with_inner {
    ($inner:expr, $t:ident => $body:expr) => {
        match $inner {
            Inner::Pieces($t) => $body,
            Inner::Crate($t) => $body,
        }
    };
}

impl Inner {
    /// Reads `bytes`, a `tokenizer.json`.
    fn read(bytes: &[u8]) -> tokenizers::Result<Inner> {
        /// Just the model's type.
        #[derive(Deserialize)]
        struct Kind {
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        #[derive(Deserialize)]
        struct File {
            model: Kind,
        }
        let file: File = serde_json::from_slice(bytes)?;
        if file.model.kind.as_deref() == Some("Unigram") {
            Ok(Inner::Pieces(Box::new(serde_json::from_slice(bytes)?)))
        } else {
            Tokenizer::from_bytes(bytes).map(|t| Inner::Crate(Box::new(t)))
        }
    }

    fn set_up(&mut self, truncation: TruncationParams) -> tokenizers::Result<()> {
        with_inner!(self, t => {
            t.with_truncation(Some(truncation))?;
            t.with_padding(None);
        });
        Ok(())
    }

    /// Encodes `inputs` with special tokens; a failure says it was `action`.
    fn encode_batch<'s, E>(&self, inputs: Vec<E>, action: &'static str) -> Result<Vec<Encoding>>
    where
        E: Into<EncodeInput<'s>> + Send,
    {
        with_inner!(self, t => t.encode_batch(inputs, true))
            .map_err(|source| Error::Tokenizer { action, source })
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        with_inner!(self, t => t.token_to_id(token))
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        with_inner!(self, t => t.id_to_token(id))
    }

    fn vocab_size(&self) -> usize {
        with_inner!(self, t => t.get_vocab_size(true))
    }
}

/// A `tokenizer.json` set up for one model: its maximum length and padding id. Clones share
/// one tokenizer (the workers of a pool read the same one).
#[derive(Clone)]
pub(crate) struct TextTokenizer {
    inner: Arc<Inner>,
    max_len: usize,
    pad_id: u32,
}

impl TextTokenizer {
    /// Loads `path`, truncating to `max_len` tokens (special tokens included); `pad_token` is
    /// the token that pads batches (its id must exist in the vocabulary).
    pub(crate) fn from_file(path: &Path, max_len: usize, pad_token: &str) -> Result<Self> {
        if !path.is_file() {
            return Err(Error::ModelMissing {
                path: path.to_path_buf(),
            });
        }
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut inner = Inner::read(&bytes).map_err(|source| Error::Tokenizer {
            action: "loading tokenizer.json",
            source,
        })?;
        drop(bytes);
        inner
            .set_up(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            })
            .map_err(|source| Error::Tokenizer {
                action: "setting truncation",
                source,
            })?;
        let pad_id = inner.token_to_id(pad_token).ok_or_else(|| Error::Format {
            path: path.to_path_buf(),
            reason: format!("no padding token {pad_token:?} in the vocabulary"),
        })?;
        Ok(TextTokenizer {
            inner: Arc::new(inner),
            max_len,
            pad_id,
        })
    }

    /// Checks that this tokenizer, read from `path`, has the `vocab` tokens of the model it
    /// feeds, before that model's weights are read.
    pub(crate) fn expect_vocab(&self, path: &Path, vocab: i64) -> Result<()> {
        if i64::try_from(self.vocab_size()).ok() == Some(vocab) {
            return Ok(());
        }
        Err(Error::Format {
            path: path.to_path_buf(),
            reason: format!(
                "{} tokens, the model's vocabulary has {vocab}",
                self.vocab_size()
            ),
        })
    }

    /// The most tokens one text becomes, special tokens included.
    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    /// The id that pads batches.
    pub(crate) fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The vocabulary size, added tokens included.
    pub(crate) fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// The token a vocabulary id stands for.
    pub(crate) fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Token ids and token types of each pair `(first, second)`, read as one input
    /// (`[CLS] first [SEP] second [SEP]`, types 0 then 1), truncated to the maximum length,
    /// the longer text first.
    pub(crate) fn encode_pairs(
        &self,
        first: &str,
        seconds: &[&str],
    ) -> Result<Vec<(Vec<u32>, Vec<u32>)>> {
        let inputs: Vec<(String, String)> = seconds
            .iter()
            .map(|second| (first.to_owned(), (*second).to_owned()))
            .collect();
        let encodings = self.inner.encode_batch(inputs, "encoding text pairs")?;
        Ok(encodings
            .into_iter()
            .map(|encoding| {
                (
                    encoding.get_ids().to_vec(),
                    encoding.get_type_ids().to_vec(),
                )
            })
            .collect())
    }

    /// Token ids of each text, with `prefix` put before it, special tokens added and truncated
    /// to the maximum length.
    pub(crate) fn encode<S: AsRef<str>>(&self, texts: &[S], prefix: &str) -> Result<Vec<Vec<u32>>> {
        let inputs: Vec<String> = texts
            .iter()
            .map(|text| format!("{prefix}{}", text.as_ref()))
            .collect();
        let encodings = self.inner.encode_batch(inputs, "encoding texts")?;
        Ok(encodings
            .into_iter()
            .map(|encoding| encoding.get_ids().to_vec())
            .collect())
    }
}

/// A padded batch of token ids ready for a forward pass.
pub(crate) struct PaddedBatch {
    /// `[batch, len]` token ids (int64), padded on the right.
    pub(crate) ids: Tensor,
    /// `[batch, len]` 1 for a real token, 0 for padding (int64).
    pub(crate) mask: Tensor,
}

impl PaddedBatch {
    /// Pads `rows` to their longest with `pad_id` and builds the tensors on `device`.
    pub(crate) fn new(rows: &[&[u32]], pad_id: u32, device: Device) -> Result<Self> {
        let ids = padded(rows, pad_id, device)?;
        let ones: Vec<Vec<u32>> = rows.iter().map(|row| vec![1; row.len()]).collect();
        let ones: Vec<&[u32]> = ones.iter().map(Vec::as_slice).collect();
        let mask = padded(&ones, 0, device)?;
        Ok(PaddedBatch { ids, mask })
    }
}

/// `[rows, longest]` int64 on `device`: each row padded on the right with `pad` (an empty
/// batch or empty rows still give one column).
pub(crate) fn padded(rows: &[&[u32]], pad: u32, device: Device) -> Result<Tensor> {
    let len = rows.iter().map(|row| row.len()).max().unwrap_or(0).max(1);
    let mut values = Vec::with_capacity(rows.len() * len);
    for row in rows {
        values.extend(row.iter().map(|&id| i64::from(id)));
        values.extend(std::iter::repeat_n(i64::from(pad), len - row.len()));
    }
    let shape = [i64::try_from(rows.len()).unwrap_or(i64::MAX), len as i64];
    let tensor = Tensor::f_from_slice(&values)?
        .f_view(shape)?
        .f_to_device(device)?;
    debug_assert_eq!(tensor.kind(), Kind::Int64);
    Ok(tensor)
}
