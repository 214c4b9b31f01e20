//! The tokenizer of a GGUF model rebuilt from its metadata with the `tokenizers` crate: the
//! byte-level BPE of GPT-2's family (`tokenizer.ggml.model = "gpt2"`) with Qwen2's
//! pre-tokenizer (`tokenizer.ggml.pre = "qwen2"`), as Hugging Face's `tokenizer.json` for
//! Qwen2.5 describes it: NFC normalisation, the Qwen2 split pattern, byte-level mapping, BPE
//! over the file's vocabulary and merges, and the control tokens (`<|im_start|>`, ...) as
//! special tokens that are never split.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::{Gguf, Value};
use crate::error::Result;

/// Qwen2's pre-tokenizer pattern (from its `tokenizer.json`).
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types (llama.cpp's `llama_token_type`): control and user-defined tokens are
/// added tokens, matched whole before BPE.
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

impl Gguf {
    /// The model's tokenizer, rebuilt from `tokenizer.ggml.*`.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        let model = self.require_str("tokenizer.ggml.model")?;
        let pre = self.require_str("tokenizer.ggml.pre")?;
        if model != "gpt2" || pre != "qwen2" {
            return Err(self.error(format!(
                "tokenizer {model} with pre-tokenizer {pre}: only gpt2 with qwen2 is built"
            )));
        }
        let strings = |key: &str| -> Result<Vec<&str>> {
            self.get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| self.error(format!("no array {key} in the metadata")))?
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| self.error(format!("{key} holds a non-string")))
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| self.error(format!("merge {m:?} is not two tokens")))
            })
            .collect::<Result<Vec<_>>>()?;
        // Token types, normal (1) where the file has none.
        let types: Vec<i64> = self
            .get("tokenizer.ggml.token_type")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .map(|v| {
                        if let Value::I32(t) = *v {
                            i64::from(t)
                        } else {
                            1
                        }
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![1; tokens.len()]);
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| ((*t).to_owned(), id as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|err| self.error(format!("building the BPE model: {err}")))?;
        let mut tokenizer = Tokenizer::new(bpe);
        let split = Split::new(
            SplitPattern::Regex(QWEN2_PATTERN.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|err| self.error(format!("the qwen2 split pattern: {err}")))?;
        tokenizer
            .with_normalizer(Some(NFC))
            .with_pre_tokenizer(Some(Sequence::new(vec![
                split.into(),
                ByteLevel::new(false, false, false).into(),
            ])))
            .with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, t)| matches!(**t, CONTROL | USER_DEFINED))
            .map(|(token, _)| AddedToken::from((*token).to_owned(), true))
            .collect();
        tokenizer.add_special_tokens(&special);
        Ok(tokenizer)
    }

    /// The token id of the end-of-sequence token (`tokenizer.ggml.eos_token_id`).
    pub fn eos_token(&self) -> Result<u32> {
        let id = self.require_u64("tokenizer.ggml.eos_token_id")?;
        u32::try_from(id).map_err(|_| self.error(format!("eos token id {id}")))
    }
}
