//! Vector arithmetic and brute-force search over L2-normalised vectors.
//!
//! Holds the input checks ([`normalise`]), the dot product every search path uses, and the
//! exact top-k scan. It knows nothing of HNSW, keys or locking; the caller passes the slots.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::VectorError;

/// Checks `vector` against `dimension` and returns it scaled to unit length.
///
/// The norm is computed in `f64`, so large finite components cannot overflow it.
pub(crate) fn normalise(vector: &[f32], dimension: usize) -> Result<Vec<f32>, VectorError> {
    if vector.len() != dimension {
        return Err(VectorError::DimensionMismatch {
            expected: dimension,
            got: vector.len(),
        });
    }
    if let Some(index) = vector.iter().position(|x| !x.is_finite()) {
        return Err(VectorError::NonFinite { index });
    }
    let norm = vector
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return Err(VectorError::ZeroVector);
    }
    #[allow(clippy::cast_possible_truncation)] // a unit vector's components fit in f32
    let out: Vec<f32> = vector
        .iter()
        .map(|&x| (f64::from(x) / norm) as f32)
        .collect();
    Ok(out)
}

/// The dot product, with eight accumulators so that the compiler vectorises it.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let chunks_a = a.chunks_exact(8);
    let chunks_b = b.chunks_exact(8);
    let tail: f32 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for i in 0..8 {
            acc[i] += ca[i] * cb[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// One search result while ranking: greater means better (higher score, then smaller key).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit<'a> {
    /// Cosine similarity with the query.
    pub score: f32,
    /// The memory id.
    pub key: &'a str,
}

impl Ord for Hit<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.key.cmp(self.key))
    }
}

impl PartialOrd for Hit<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Hit<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Hit<'_> {}

/// Keeps the best `k` hits offered to it.
pub(crate) struct TopK<'a> {
    k: usize,
    heap: BinaryHeap<Reverse<Hit<'a>>>,
}

impl<'a> TopK<'a> {
    /// An empty ranking of at most `k` hits.
    pub fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.saturating_add(1).min(4096)),
        }
    }

    /// Offers a hit; it is kept if it is among the best `k` so far.
    pub fn offer(&mut self, hit: Hit<'a>) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Reverse(hit));
        } else if let Some(Reverse(worst)) = self.heap.peek()
            && hit > *worst
        {
            self.heap.pop();
            self.heap.push(Reverse(hit));
        }
    }

    /// The kept hits, best first, as owned (id, score) pairs.
    pub fn into_sorted(self) -> Vec<(String, f32)> {
        // `into_sorted_vec` is ascending in `Reverse`, so best first.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(hit)| (hit.key.to_owned(), hit.score))
            .collect()
    }
}
