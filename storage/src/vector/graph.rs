//! The approximate index: `hnsw_rs` 0.3.5's graph, searched by our own routine.
//!
//! It stores unit vectors under dense internal ids and answers "the nearest `n` internal ids".
//! It does not know about keys, tombstones or filters: [`super::VectorIndex`] over-fetches and
//! filters the candidates itself, and never dumps or reloads a graph (`hnsw_rs`'s reload paths
//! may call `process::exit`); a graph is always rebuilt from the vectors.
//!
//! `hnsw_rs` builds the graph; [`Graph::nearest`] searches it itself. Two defects of `hnsw_rs`'s
//! own path showed on clustered data (docs/benchmarks.md, "Vector index"):
//! - Its `search` looks at the pivot's neighbours once per upper layer and moves at most one hop
//!   (insert, by contrast, descends each layer greedily to convergence).
//! - Its insert adds the reverse links by distance only: an overflowing list drops its farthest
//!   link, which is usually the one to another cluster that the diversity heuristic chose. The
//!   clusters end up sparsely linked, so a search that enters layer 0 in the wrong cluster
//!   rarely gets out.
//!
//! So the default search ([`GraphSearch::ScanEntry`]) scans the sparse upper layers (at most
//! [`SCAN_MAX`] points) for the point nearest the query, descends greedily from there, and runs the
//! usual `ef`-wide best-first search on layer 0. `hnsw_rs`'s point table is not public, so the
//! graph keeps its own list of the points by `PointId`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use hnsw_rs::anndists::dist::Distance;
use hnsw_rs::hnsw::{Hnsw, Point, PointId};

use super::exact::dot;
use super::{GraphSearch, HnswParams};

/// Builds that insert at least this many vectors use `hnsw_rs`'s rayon-parallel insert; smaller
/// ones insert in order, which (with `hnsw_rs`'s fixed layer seed) makes them deterministic.
const PARALLEL_BUILD_MIN: usize = 10_000;

/// [`GraphSearch::ScanEntry`] scans the upper layers holding at most this many points in all.
const SCAN_MAX: usize = 1024;

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

type GraphPoint = Arc<Point<'static, f32>>;

/// A distance and an internal id, ordered by distance (then id, for determinism).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scored {
    dist: f32,
    id: usize,
    p_id: PointId,
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.dist
            .total_cmp(&other.dist)
            .then(self.id.cmp(&other.id))
    }
}

/// An HNSW graph over unit vectors keyed by dense internal ids.
pub(crate) struct Graph {
    hnsw: Hnsw<'static, f32, ClampedDot>,
    /// `hnsw_rs`'s points by `PointId` (layer, slot): its own table is not public.
    points: Vec<Vec<GraphPoint>>,
    /// Points in the graph.
    len: usize,
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
        if points.len() >= PARALLEL_BUILD_MIN {
            let batch: Vec<(&[f32], usize)> = points.map(|(id, v)| (v, id)).collect();
            hnsw.parallel_insert_slice(&batch);
        } else {
            for (id, v) in points {
                hnsw.insert_slice((v, id));
            }
        }
        let mut table: Vec<Vec<GraphPoint>> = vec![Vec::new(); MAX_LAYERS];
        for point in hnsw.get_point_indexation() {
            let PointId(layer, _) = point.get_point_id();
            table[usize::from(layer)].push(point);
        }
        let len = table.iter().map(Vec::len).sum();
        Graph {
            hnsw,
            points: table,
            len,
        }
    }

    /// Adds one unit vector under `id`. Finding the new point for our table walks its layer's list
    /// (`hnsw_rs` does not return it): O(n) pointer copies, small next to the insert itself.
    pub fn insert(&mut self, id: usize, vector: &[f32]) {
        self.hnsw.insert_slice((vector, id));
        self.len += 1;
        // Exactly one layer grew by one point: mirror it.
        let indexation = self.hnsw.get_point_indexation();
        for (layer, mirrored) in self.points.iter_mut().enumerate() {
            let slot = mirrored.len();
            if indexation.get_layer_nb_point(layer) > slot {
                if let Some(point) = indexation.get_layer_iterator(layer).nth(slot) {
                    mirrored.push(point);
                }
                break;
            }
        }
    }

    /// Internal ids of about the `n` nearest points to `query`, nearest first. Tombstoned ids are
    /// included; the caller filters them.
    pub fn nearest(&self, query: &[f32], n: usize, ef: usize, search: GraphSearch) -> Vec<usize> {
        let ef = ef.max(n);
        if search == GraphSearch::Library {
            return self
                .hnsw
                .search(query, n, ef)
                .into_iter()
                .map(|neighbour| neighbour.d_id)
                .collect();
        }
        let Some(top) = self.points.iter().rposition(|layer| !layer.is_empty()) else {
            return Vec::new();
        };
        let distance = |point: &GraphPoint| (1.0 - dot(query, point.get_v())).max(0.0);
        let scored = |point: &GraphPoint| Scored {
            dist: distance(point),
            id: point.get_origin_id(),
            p_id: point.get_point_id(),
        };
        let (mut current, start) = match search {
            GraphSearch::ScanEntry => {
                // The upper layers from `from` up hold at most SCAN_MAX points in all.
                let mut from = top + 1;
                let mut count = 0;
                while from > 1 && count + self.points[from - 1].len() <= SCAN_MAX {
                    from -= 1;
                    count += self.points[from].len();
                }
                match self.points[from..].iter().flatten().map(scored).min() {
                    Some(nearest) => (nearest, from - 1),
                    None => (scored(&self.points[top][0]), top),
                }
            }
            GraphSearch::Descent | GraphSearch::Library => (scored(&self.points[top][0]), top),
        };
        // Greedy descent: on each upper layer, move to the nearest neighbour until none is nearer.
        for layer in (1..=start).rev() {
            loop {
                let mut best = current;
                for neighbour in &self.point(current.p_id).get_neighborhood_id()[layer] {
                    let dist = distance(self.point(neighbour.p_id));
                    if dist < best.dist {
                        best = Scored {
                            dist,
                            id: neighbour.d_id,
                            p_id: neighbour.p_id,
                        };
                    }
                }
                if best.id == current.id {
                    break;
                }
                current = best;
            }
        }
        self.search_layer0(current, ef, &distance)
            .into_iter()
            .take(n)
            .map(|scored| scored.id)
            .collect()
    }

    /// Best-first search of layer 0 from `entry`, keeping the `ef` nearest seen; nearest first.
    fn search_layer0(
        &self,
        entry: Scored,
        ef: usize,
        distance: &dyn Fn(&GraphPoint) -> f32,
    ) -> Vec<Scored> {
        // Internal ids are dense: one bit each.
        let mut visited = vec![0u64; self.len.div_ceil(64).max(entry.id / 64 + 1)];
        let mut visit = |id: usize| {
            if visited.len() <= id / 64 {
                visited.resize(id / 64 + 1, 0);
            }
            let (word, bit) = (id / 64, 1u64 << (id % 64));
            let fresh = visited[word] & bit == 0;
            visited[word] |= bit;
            fresh
        };
        visit(entry.id);
        let mut candidates = BinaryHeap::from([Reverse(entry)]);
        let mut results = BinaryHeap::from([entry]);
        while let Some(Reverse(candidate)) = candidates.pop() {
            if results.len() >= ef && results.peek().is_some_and(|far| candidate.dist > far.dist) {
                break;
            }
            for neighbour in &self.point(candidate.p_id).get_neighborhood_id()[0] {
                if !visit(neighbour.d_id) {
                    continue;
                }
                let scored = Scored {
                    dist: distance(self.point(neighbour.p_id)),
                    id: neighbour.d_id,
                    p_id: neighbour.p_id,
                };
                if results.len() < ef || results.peek().is_some_and(|far| scored < *far) {
                    candidates.push(Reverse(scored));
                    results.push(scored);
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
        }
        results.into_sorted_vec()
    }

    fn point(&self, PointId(layer, slot): PointId) -> &GraphPoint {
        #[allow(clippy::cast_sign_loss)] // hnsw_rs's slots of stored points are never negative
        let point = &self.points[usize::from(layer)][slot as usize];
        // The mirror holds each layer's points in hnsw_rs's order, where a slot is a position.
        debug_assert_eq!(point.get_point_id(), PointId(layer, slot));
        point
    }
}
