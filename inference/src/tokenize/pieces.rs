//! A Unigram tokenizer model over a sorted table of its pieces: the same tokens as the
//! `tokenizers` crate's `Unigram`, in a twentieth of the memory.
//!
//! The crate's model finds the pieces that start at a position with a trie whose every node
//! is a hash map: for XLM-R's 250,000 pieces that is about 295 MB resident, most of an
//! encoder's memory. Here the pieces sit in one string, their ids sorted by their bytes, and
//! the pieces that start at a position are found by narrowing a range of that order one byte
//! at a time (about 12 MB for XLM-R). The search for the best segmentation is the crate's
//! (`encode_optimized`, itself SentencePiece's): the same candidates in the same order and
//! the same comparisons, so the same tokens; there is no cache of past words (the crate's
//! keeps up to 10,000 of them, pieces of users' texts, for the process's life).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};
use tokenizers::models::unigram::UnigramTrainer;
use tokenizers::{Model, Token};

/// The score of an unknown character, below the lowest piece's (the crate's `K_UNK_PENALTY`).
const UNKNOWN_PENALTY: f64 = 10.0;

/// A Unigram model's pieces and scores, read from a `tokenizer.json` model of type
/// `"Unigram"`.
#[derive(Debug, Clone)]
pub(crate) struct Pieces {
    /// Every piece, one after another.
    text: String,
    /// Where piece `id` lies in `text`.
    spans: Vec<(u32, u32)>,
    /// The score (log-probability) of piece `id`.
    scores: Vec<f64>,
    /// The ids in the byte order of their pieces; of equal pieces only the last id (the id
    /// the crate's map keeps).
    sorted: Vec<u32>,
    /// The id unknown characters become.
    unk_id: Option<u32>,
    /// The lowest score of any piece.
    min_score: f64,
    /// Whether unknown pieces become their bytes' `<0xNN>` pieces where those exist.
    byte_fallback: bool,
}

/// The model as `tokenizer.json` writes it.
#[derive(Serialize, Deserialize)]
struct UnigramFile {
    #[serde(rename = "type")]
    kind: String,
    unk_id: Option<usize>,
    vocab: Vec<(String, f64)>,
    #[serde(default)]
    byte_fallback: bool,
}

impl Pieces {
    /// The model of `vocab` (pieces and scores by id).
    pub(crate) fn new(
        vocab: Vec<(String, f64)>,
        unk_id: Option<usize>,
        byte_fallback: bool,
    ) -> Result<Pieces, String> {
        if vocab.is_empty() {
            return Err("the vocabulary is empty".to_owned());
        }
        if u32::try_from(vocab.len()).is_err() {
            return Err(format!("{} pieces are too many", vocab.len()));
        }
        let unk_id = match unk_id {
            Some(id) if id >= vocab.len() => {
                return Err(format!("unk_id {id} is beyond {} pieces", vocab.len()));
            }
            Some(id) => Some(id as u32),
            None => None,
        };
        let length: usize = vocab.iter().map(|(piece, _)| piece.len()).sum();
        let end = u32::try_from(length).map_err(|_| "the pieces are too long".to_owned())?;
        let mut text = String::with_capacity(length);
        let mut spans = Vec::with_capacity(vocab.len());
        let mut scores = Vec::with_capacity(vocab.len());
        let mut min_score = f64::INFINITY;
        for (piece, score) in vocab {
            let start = text.len() as u32;
            text.push_str(&piece);
            spans.push((start, text.len() as u32));
            scores.push(score);
            min_score = min_score.min(score);
        }
        debug_assert_eq!(text.len() as u32, end);
        let mut pieces = Pieces {
            text,
            spans,
            scores,
            sorted: Vec::new(),
            unk_id,
            min_score,
            byte_fallback,
        };
        let mut sorted: Vec<u32> = (0..pieces.spans.len() as u32).collect();
        // By bytes, then by id; of a run of equal pieces the last (highest) id stays.
        sorted.sort_by(|&a, &b| pieces.bytes(a).cmp(pieces.bytes(b)).then(a.cmp(&b)));
        let mut kept: Vec<u32> = Vec::with_capacity(sorted.len());
        for id in sorted {
            match kept.last_mut() {
                Some(last) if pieces.bytes(*last) == pieces.bytes(id) => *last = id,
                _ => kept.push(id),
            }
        }
        kept.shrink_to_fit();
        pieces.sorted = kept;
        Ok(pieces)
    }

    /// Piece `id`.
    fn piece(&self, id: u32) -> &str {
        let (start, end) = self.spans[id as usize];
        &self.text[start as usize..end as usize]
    }

    fn bytes(&self, id: u32) -> &[u8] {
        self.piece(id).as_bytes()
    }

    /// The id of `piece`, if it is one.
    fn id(&self, piece: &str) -> Option<u32> {
        let at = self
            .sorted
            .binary_search_by(|&id| self.bytes(id).cmp(piece.as_bytes()))
            .ok()?;
        Some(self.sorted[at])
    }

    /// Calls `found(length, id)` for each piece that `text` starts with, shortest first.
    fn prefixes(&self, text: &[u8], mut found: impl FnMut(usize, u32)) {
        let (mut lo, mut hi) = (0, self.sorted.len());
        for (at, &byte) in text.iter().enumerate() {
            // Within [lo, hi) every piece starts with text[..at]; those that end there sort
            // first, then the others by their byte at `at`.
            let range = &self.sorted[lo..hi];
            let first = range.partition_point(|&id| self.bytes(id).get(at) < Some(&byte));
            let past = range.partition_point(|&id| self.bytes(id).get(at) <= Some(&byte));
            (lo, hi) = (lo + first, lo + past);
            if lo == hi {
                return;
            }
            let id = self.sorted[lo];
            if self.bytes(id).len() == at + 1 {
                found(at + 1, id);
            }
        }
    }

    /// The best segmentation of `sentence` into pieces, consecutive unknown characters
    /// fused into one string.
    fn encode(&self, sentence: &str) -> tokenizers::Result<Vec<String>> {
        /// The best path ending at a byte position.
        #[derive(Clone, Copy)]
        struct Best {
            id: u32,
            score: f64,
            starts_at: Option<usize>,
        }
        if sentence.is_empty() {
            return Ok(Vec::new());
        }
        let size = sentence.len();
        let unk_score = self.min_score - UNKNOWN_PENALTY;
        let mut best = vec![
            Best {
                id: 0,
                score: 0.0,
                starts_at: None,
            };
            size + 1
        ];
        let mut starts_at = 0;
        while starts_at < size {
            let till_here = best[starts_at].score;
            let char_len = sentence[starts_at..]
                .chars()
                .next()
                .map_or(1, char::len_utf8);
            let mut has_single = false;
            self.prefixes(&sentence.as_bytes()[starts_at..], |length, id| {
                let target = &mut best[starts_at + length];
                let score = self.scores[id as usize] + till_here;
                if target.starts_at.is_none() || score > target.score {
                    *target = Best {
                        id,
                        score,
                        starts_at: Some(starts_at),
                    };
                }
                has_single |= length == char_len;
            });
            if !has_single {
                let unk_id = self.unk_id.ok_or_else(missing_unk)?;
                let target = &mut best[starts_at + char_len];
                let score = unk_score + till_here;
                if target.starts_at.is_none() || score > target.score {
                    *target = Best {
                        id: unk_id,
                        score,
                        starts_at: Some(starts_at),
                    };
                }
            }
            starts_at += char_len;
        }
        let mut results: Vec<String> = Vec::new();
        let mut unknown: Vec<&str> = Vec::new();
        let mut ends_at = size;
        while ends_at > 0 {
            let node = best[ends_at];
            let starts_at = node.starts_at.ok_or_else(missing_unk)?;
            let text = &sentence[starts_at..ends_at];
            if Some(node.id) == self.unk_id {
                unknown.push(text);
            } else {
                if !unknown.is_empty() {
                    unknown.reverse();
                    results.push(unknown.concat());
                    unknown.clear();
                }
                results.push(text.to_owned());
            }
            ends_at = starts_at;
        }
        if !unknown.is_empty() {
            unknown.reverse();
            results.push(unknown.concat());
        }
        results.reverse();
        Ok(results)
    }
}

fn missing_unk() -> tokenizers::Error {
    "an unknown character and no unk_id in the Unigram model".into()
}

impl<'de> Deserialize<'de> for Pieces {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Pieces, D::Error> {
        let file = UnigramFile::deserialize(deserializer)?;
        if file.kind != "Unigram" {
            return Err(serde::de::Error::custom(format!(
                "a {} model, not a Unigram one",
                file.kind
            )));
        }
        Pieces::new(file.vocab, file.unk_id, file.byte_fallback).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Pieces {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        UnigramFile {
            kind: "Unigram".to_owned(),
            unk_id: self.unk_id.map(|id| id as usize),
            vocab: (0..self.spans.len() as u32)
                .map(|id| (self.piece(id).to_owned(), self.scores[id as usize]))
                .collect(),
            byte_fallback: self.byte_fallback,
        }
        .serialize(serializer)
    }
}

impl Model for Pieces {
    type Trainer = UnigramTrainer;

    fn tokenize(&self, sentence: &str) -> tokenizers::Result<Vec<Token>> {
        let mut offset = 0;
        let mut tokens = Vec::new();
        for string in self.encode(sentence)? {
            let len = string.len();
            let offsets = (offset, offset + len);
            offset += len;
            if let Some(id) = self.id(&string) {
                tokens.push(Token::new(id, string, offsets));
                continue;
            }
            if self.byte_fallback {
                let bytes: Option<Vec<Token>> = string
                    .bytes()
                    .map(|byte| {
                        let piece = format!("<0x{byte:02X}>");
                        self.id(&piece).map(|id| Token::new(id, piece, offsets))
                    })
                    .collect();
                if let Some(bytes) = bytes {
                    tokens.extend(bytes);
                    continue;
                }
            }
            let unk_id = self.unk_id.ok_or_else(missing_unk)?;
            tokens.push(Token::new(unk_id, string, offsets));
        }
        Ok(tokens)
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.id(token)
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        ((id as usize) < self.spans.len()).then(|| self.piece(id).to_owned())
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        self.sorted
            .iter()
            .map(|&id| (self.piece(id).to_owned(), id))
            .collect()
    }

    fn get_vocab_size(&self) -> usize {
        self.spans.len()
    }

    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        let name = prefix.map_or_else(
            || "unigram.json".to_owned(),
            |p| format!("{p}-unigram.json"),
        );
        let path = folder.join(name);
        std::fs::write(&path, serde_json::to_string(self)?)?;
        Ok(vec![path])
    }

    fn get_trainer(&self) -> UnigramTrainer {
        UnigramTrainer::default()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tokenizers::models::unigram::Unigram;

    use super::*;

    fn vocab() -> Vec<(String, f64)> {
        [
            ("<unk>", 0.0),
            ("a", -1.0),
            ("b", -1.5),
            ("c", -1.2),
            ("d", -2.0),
            ("cd", -1.0),
            ("ab", -0.5),
            ("abc", -0.4),
            ("abcd", -0.1),
            ("é", -3.0),
            ("中", -2.5),
            ("中文", -2.0),
            ("▁", -1.1),
            ("▁a", -0.9),
            ("b", -1.4),
            ("dé", -2.2),
        ]
        .into_iter()
        .map(|(piece, score)| (piece.to_owned(), score))
        .collect()
    }

    fn ids(tokens: Vec<Token>) -> Vec<(u32, String, (usize, usize))> {
        tokens
            .into_iter()
            .map(|t| (t.id, t.value, t.offsets))
            .collect()
    }

    #[test]
    fn pieces_segment_as_the_crates_example_does() {
        let pieces = Pieces::new(vocab(), Some(0), false).unwrap();
        assert_eq!(
            pieces.encode("abcdacdxx").unwrap(),
            vec!["abcd", "a", "cd", "xx"]
        );
    }

    #[test]
    fn equal_pieces_answer_the_last_id_as_the_crate_does() {
        let pieces = Pieces::new(vocab(), Some(0), false).unwrap();
        let crate_model = Unigram::from(vocab(), Some(0), false).unwrap();
        assert_eq!(pieces.token_to_id("b"), Some(14));
        assert_eq!(pieces.token_to_id("b"), crate_model.token_to_id("b"));
        assert_eq!(pieces.id_to_token(2).as_deref(), Some("b"));
        assert_eq!(pieces.token_to_id("bc"), None);
        assert_eq!(pieces.get_vocab(), crate_model.get_vocab());
    }

    #[test]
    fn a_vocabulary_without_pieces_or_with_a_bad_unk_id_is_refused() {
        assert!(Pieces::new(Vec::new(), None, false).is_err());
        assert!(Pieces::new(vocab(), Some(99), false).is_err());
        let unknown = Pieces::new(vec![("a".to_owned(), 0.0)], None, false).unwrap();
        assert!(unknown.tokenize("ab").is_err());
    }

    proptest! {
        #[test]
        fn pieces_tokenise_every_string_as_the_crates_unigram_does(
            text in "[abcdxé中文▁ ]{0,24}",
        ) {
            let pieces = Pieces::new(vocab(), Some(0), false).unwrap();
            let crate_model = Unigram::from(vocab(), Some(0), false).unwrap();
            prop_assert_eq!(
                ids(pieces.tokenize(&text).unwrap()),
                ids(crate_model.tokenize(&text).unwrap())
            );
        }
    }
}
