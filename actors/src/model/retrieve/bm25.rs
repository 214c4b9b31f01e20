//! The BM25 index of one user's documents: a term dictionary, postings with term frequencies,
//! document frequencies and lengths, kept current on every add and remove so that scoring a
//! query reads only the postings of its terms.
//!
//! Documents are addressed by slot (the retriever's position for them); the index knows
//! nothing of ids, vectors or priors.

use std::collections::HashMap;

/// Term statistics and postings.
#[derive(Debug, Default)]
pub(super) struct Bm25Index {
    terms: HashMap<String, u32>,
    /// Per term: (slot, term frequency) of every live document holding it.
    postings: Vec<Vec<(u32, u32)>>,
    /// Per slot: length in words and the terms it holds (empty once removed).
    docs: Vec<(u32, Vec<u32>)>,
    live: usize,
    total_len: u64,
}

impl Bm25Index {
    /// Adds the document at `slot` (the next free slot) with its words.
    pub(super) fn add<'w>(&mut self, slot: usize, words: impl IntoIterator<Item = &'w str>) {
        let mut counts: HashMap<u32, u32> = HashMap::new();
        let mut len = 0u32;
        for word in words {
            len = len.saturating_add(1);
            let term = match self.terms.get(word) {
                Some(&term) => term,
                None => {
                    let term = u32::try_from(self.terms.len()).unwrap_or(u32::MAX);
                    self.terms.insert(word.to_owned(), term);
                    term
                }
            };
            if term as usize == self.postings.len() {
                self.postings.push(Vec::new());
            }
            *counts.entry(term).or_insert(0) += 1;
        }
        let slot32 = u32::try_from(slot).unwrap_or(u32::MAX);
        let mut held: Vec<u32> = Vec::with_capacity(counts.len());
        for (term, tf) in counts {
            self.postings[term as usize].push((slot32, tf));
            held.push(term);
        }
        if self.docs.len() <= slot {
            self.docs.resize_with(slot + 1, Default::default);
        }
        self.docs[slot] = (len, held);
        self.live += 1;
        self.total_len += u64::from(len);
    }

    /// Removes the document at `slot` from the statistics.
    pub(super) fn remove(&mut self, slot: usize) {
        let Some((len, held)) = self.docs.get_mut(slot).map(std::mem::take) else {
            return;
        };
        let slot32 = u32::try_from(slot).unwrap_or(u32::MAX);
        for term in held {
            self.postings[term as usize].retain(|&(s, _)| s != slot32);
        }
        self.live = self.live.saturating_sub(1);
        self.total_len = self.total_len.saturating_sub(u64::from(len));
    }

    /// BM25 scores (Lucene's non-negative IDF) of the allowed documents that hold at least one
    /// of `words`. A word repeated in the query counts once per repetition.
    pub(super) fn score(
        &self,
        words: &[String],
        k1: f32,
        b: f32,
        allowed: &[bool],
    ) -> Vec<(usize, f32)> {
        if self.live == 0 {
            return Vec::new();
        }
        let n = self.live as f32;
        let avg_len = (self.total_len as f32 / n).max(1.0);
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for word in words {
            let Some(&term) = self.terms.get(word) else {
                continue;
            };
            let postings = &self.postings[term as usize];
            if postings.is_empty() {
                continue;
            }
            let df = postings.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(slot, tf) in postings {
                if !allowed.get(slot as usize).copied().unwrap_or(false) {
                    continue;
                }
                let len = self.docs[slot as usize].0 as f32;
                let tf = tf as f32;
                let norm = tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * len / avg_len));
                *scores.entry(slot).or_insert(0.0) += idf * norm;
            }
        }
        scores
            .into_iter()
            .map(|(slot, s)| (slot as usize, s))
            .collect()
    }
}

/// A light English stemmer (plural, `-ing`, `-ed`, `-ly`, a final `e`) so that "paintings" meets
/// "painting" and "painted". Words with non-ASCII letters (Chinese) are left alone.
pub fn stem(word: &mut String) {
    if !word.is_ascii() || word.len() <= 3 {
        return;
    }
    let cut = |w: &mut String, suffix: &str, min_stem: usize| -> bool {
        if w.len() >= suffix.len() + min_stem && w.ends_with(suffix) {
            w.truncate(w.len() - suffix.len());
            true
        } else {
            false
        }
    };
    if word.ends_with("ies") && word.len() > 4 {
        word.truncate(word.len() - 3);
        word.push('y');
    } else if !word.ends_with("ss") && !word.ends_with("us") && !word.ends_with("is") {
        cut(word, "s", 3);
    }
    if cut(word, "ing", 3) || cut(word, "ed", 3) {
        // "running" -> "runn" -> "run"; "hoped" keeps "hop" (close enough for recall).
        let bytes = word.as_bytes();
        let n = bytes.len();
        if n >= 2 && bytes[n - 1] == bytes[n - 2] && !matches!(bytes[n - 1], b'l' | b's' | b'z') {
            word.truncate(n - 1);
        }
    } else {
        cut(word, "ly", 4);
    }
    // "love", "loved" and "loving" all end as "lov".
    if word.len() > 3 && word.ends_with('e') && !word.ends_with("ee") {
        word.pop();
    }
}
