//! The approximate index: a thin wrapper over `hnsw_rs` 0.3.5.
//!
//! It stores unit vectors under dense internal ids and answers "the nearest `n` internal ids".
//! It does not know about keys, tombstones or filters: [`super::VectorIndex`] over-fetches and
//! filters the candidates itself, and never dumps or reloads a graph (`hnsw_rs`'s reload paths
//! may call `process::exit`); a graph is always rebuilt from the vectors.

use hnsw_rs::anndists::dist::Distance;
use hnsw_rs::hnsw::Hnsw;

use super::HnswParams;
use super::exact::dot;

/// Builds that insert at least this many vectors use `hnsw_rs`'s rayon-parallel insert; smaller
/// ones insert in order, which (with `hnsw_rs`'s fixed layer seed) makes them deterministic.
const PARALLEL_BUILD_MIN: usize = 10_000;

/// Upper bound on HNSW layers (`hnsw_rs` caps it at 16 anyway).
const MAX_LAYERS: usize = 16;

/// `1 - dot` for unit vectors, clamped at zero.
///
/// `hnsw_rs`'s `DistDot` asserts `1 - dot >= 0`, which rounding breaks for a vector compared
/// with itself (norm 1 + 1e-7 is common), and `DistCosine` recomputes both norms in `f64` on every
/// evaluation. Vectors here are normalised on the way in, so the clamp only absorbs rounding.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ClampedDot;

impl Distance<f32> for ClampedDot {
    fn eval(&self, va: &[f32], vb: &[f32]) -> f32 {
        (1.0 - dot(va, vb)).max(0.0)
    }
}

/// An HNSW graph over unit vectors keyed by dense internal ids.
pub(crate) struct Graph {
    hnsw: Hnsw<'static, f32, ClampedDot>,
}

impl Graph {
    /// Builds a graph of `points` (internal id, unit vector), sized for `capacity` points.
    pub fn build<'v>(
        params: &HnswParams,
        capacity: usize,
        points: impl ExactSizeIterator<Item = (usize, &'v [f32])>,
    ) -> Graph {
        let mut hnsw = Hnsw::new(
            usize::from(params.max_connections),
            capacity.max(1),
            MAX_LAYERS,
            params.ef_construction,
            ClampedDot,
        );
        hnsw.set_keeping_pruned(params.keep_pruned);
        let graph = Graph { hnsw };
        if points.len() >= PARALLEL_BUILD_MIN {
            let batch: Vec<(&[f32], usize)> = points.map(|(id, v)| (v, id)).collect();
            graph.hnsw.parallel_insert_slice(&batch);
        } else {
            for (id, v) in points {
                graph.hnsw.insert_slice((v, id));
            }
        }
        graph
    }

    /// Adds one unit vector under `id`.
    pub fn insert(&self, id: usize, vector: &[f32]) {
        self.hnsw.insert_slice((vector, id));
    }

    /// Internal ids of about the `n` nearest points to `query`, nearest first. Tombstoned ids are
    /// included; the caller filters them.
    pub fn nearest(&self, query: &[f32], n: usize, ef: usize) -> Vec<usize> {
        self.hnsw
            .search(query, n, ef.max(n))
            .into_iter()
            .map(|neighbour| neighbour.d_id)
            .collect()
    }
}
