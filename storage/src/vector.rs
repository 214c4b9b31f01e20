//! Node-local vector indexes, derived from persisted embeddings.
//!
//! A [`VectorIndex`] maps memory ids to L2-normalised vectors and answers top-k cosine queries.
//! Small sets are searched exactly (a scan of a few hundred dot products costs microseconds);
//! once a set holds [`VectorConfig::exact_threshold`] live vectors, an HNSW graph (`hnsw_rs`)
//! serves it. The same type serves per-user sets and node-wide shared sets.
//!
//! What it does:
//! - Validates every vector (dimension, finiteness, non-zero) and normalises it on the way in.
//! - Upsert tombstones the old entry and inserts a new one; remove tombstones. Searches skip
//!   tombstones; when they pass [`VectorConfig::rebuild_tombstone_fraction`] of the entries the
//!   index is rebuilt (compacted): inside the write that crossed the line while the set is
//!   small ([`VectorConfig::max_inline_rebuild`]), otherwise by the owner calling
//!   [`VectorIndex::compact`] when [`VectorIndex::needs_rebuild`] says so.
//!
//! What it deliberately does not do:
//! - Persist anything. The index is a cache of the `("u", tenant, user, "vec", id)` rows:
//!   [`VectorIndex::rebuild`] reloads it from [`crate::data`] reads. `hnsw_rs` dumps are never
//!   written or read (several of its reload error paths call `process::exit(1)`).
//! - Mix models: the caller keeps one index per embedding model
//!   ([`VectorIndex::rebuild_embeddings`] refuses rows of another model).
//! - Log vectors or ids.
//!
//! Graph search (see `benches/vector.rs` and docs/benchmarks.md): `hnsw_rs` 0.3.5 builds the
//! graph, but keeps only the nearest links when a node's list overflows, so well-separated
//! clusters end up sparsely linked, and its own search moves at most one hop per upper layer.
//! On synthetic clusters of 100k vectors that lost whole queries (recall@10 about 0.6 at `ef`
//! 64). We search its graph ourselves ([`GraphSearch::ScanEntry`]) and keep twice its default
//! links (`M` = 32): recall@10 0.98-1.0 at `ef` 64 there. Recall on real embeddings at that
//! size is still to be measured.
//!
//! Concurrency: `VectorIndex` is `Send + Sync`; searches share a read lock, writes take the write
//! lock. An HNSW insert or an inline rebuild blocks searches of the same index while it runs;
//! [`VectorIndex::rebuild`] and [`VectorIndex::compact`] build without holding the lock and only
//! swap under it. Callers on async threads run writes and rebuilds on a blocking thread.

mod exact;
mod graph;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::types::Embedding;
use exact::{Hit, TopK, dot, normalise};
use graph::Graph;

/// Result of vector index operations.
pub type Result<T, E = VectorError> = std::result::Result<T, E>;

/// What can go wrong in a vector index.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VectorError {
    /// A vector of the wrong length (the caller's fault, 400).
    #[error("vector has {got} dimensions, the index expects {expected}")]
    DimensionMismatch {
        /// The index's dimension.
        expected: usize,
        /// The vector's length.
        got: usize,
    },

    /// A vector with a NaN or infinite component (the caller's fault, 400).
    #[error("vector component {index} is not finite")]
    NonFinite {
        /// Position of the first bad component.
        index: usize,
    },

    /// A vector of norm zero, which has no direction (the caller's fault, 400).
    #[error("vector has norm zero")]
    ZeroVector,

    /// A stored embedding of another model than the index's (ours, 500: the caller mixed
    /// models, or a migration is half done).
    #[error("embedding of model {got:?} in an index of model {expected:?}")]
    ModelMismatch {
        /// The model the index serves.
        expected: String,
        /// The model of the offending row.
        got: String,
    },

    /// The configuration is unusable (the operator's fault, 500 at start-up).
    #[error("invalid vector index configuration: {0}")]
    InvalidConfig(String),
}

/// HNSW parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct HnswParams {
    /// Links per node and layer (`M`; layer 0 keeps `2M`). 2 to 255. 32 rather than the usual
    /// 16: `hnsw_rs` prunes overflowing link lists to the nearest, and the spare links keep
    /// clusters connected (recall@10 at 100k clustered vectors, `ef` 64: 0.92 with 16, 0.98
    /// with 32).
    pub max_connections: u8,
    /// Candidate list size while inserting (`ef_construction`).
    pub ef_construction: usize,
    /// Candidate list size while searching (`ef`); raised to the fetch size when smaller.
    pub ef_search: usize,
    /// Fill each node's links up to `M` with candidates the diversity heuristic pruned
    /// (`hnsw_rs`'s `keep_pruned`): more links, better connectivity between clusters.
    pub keep_pruned: bool,
    /// How a search finds its way into the graph (see [`GraphSearch`]).
    pub search: GraphSearch,
}

/// How a graph search reaches layer 0. The variants other than the default are kept to measure
/// against (benches/vector.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraphSearch {
    /// Scan the few hundred points of the sparse upper layers for the nearest, descend greedily
    /// from there, then search layer 0.
    #[default]
    ScanEntry,
    /// Descend greedily from the graph's single entry point, then search layer 0.
    Descent,
    /// `hnsw_rs`'s own `search`: at most one hop per upper layer, then layer 0.
    Library,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            max_connections: 32,
            ef_construction: 128,
            ef_search: 64,
            keep_pruned: false,
            search: GraphSearch::default(),
        }
    }
}

/// Configuration of one [`VectorIndex`].
#[derive(Debug, Clone, PartialEq)]
pub struct VectorConfig {
    /// Length of every vector (384 for multilingual-e5-small and all-MiniLM-L6-v2).
    pub dimension: usize,
    /// From this many live vectors on, an HNSW graph serves searches; below it, exact scans.
    pub exact_threshold: usize,
    /// Rebuild once tombstones exceed this fraction of all entries (live + tombstoned).
    pub rebuild_tombstone_fraction: f32,
    /// Rebuilds that a write triggers run inside that write (holding the write lock) only while
    /// the live set is at most this large; larger sets only raise [`VectorIndex::needs_rebuild`]
    /// and the owner calls [`VectorIndex::compact`] or [`VectorIndex::rebuild`] off the hot path.
    pub max_inline_rebuild: usize,
    /// Graph parameters, used once the set is large.
    pub hnsw: HnswParams,
}

impl Default for VectorConfig {
    fn default() -> Self {
        VectorConfig {
            dimension: 384,
            exact_threshold: 2_000,
            rebuild_tombstone_fraction: 0.2,
            max_inline_rebuild: 5_000,
            hnsw: HnswParams::default(),
        }
    }
}

impl VectorConfig {
    /// The default configuration for vectors of `dimension` components.
    pub fn with_dimension(dimension: usize) -> Self {
        VectorConfig {
            dimension,
            ..VectorConfig::default()
        }
    }

    /// Explains what is wrong with the configuration, if anything.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: &str| Err(VectorError::InvalidConfig(why.to_owned()));
        if self.dimension == 0 {
            return bad("dimension must be at least 1");
        }
        if !(self.rebuild_tombstone_fraction > 0.0 && self.rebuild_tombstone_fraction <= 1.0) {
            return bad("rebuild-tombstone-fraction must be in (0, 1]");
        }
        if self.hnsw.max_connections < 2 {
            return bad("hnsw max-connections must be at least 2");
        }
        if self.hnsw.ef_construction == 0 || self.hnsw.ef_search == 0 {
            return bad("hnsw ef-construction and ef-search must be at least 1");
        }
        Ok(())
    }
}

/// Counters describing an index, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorStats {
    /// Live vectors.
    pub live: usize,
    /// Tombstoned entries not yet compacted away.
    pub tombstones: usize,
    /// Whether an HNSW graph serves searches (otherwise exact scans).
    pub hnsw: bool,
    /// Rebuilds since creation: tombstone compactions, switches to HNSW and [`VectorIndex::rebuild`].
    pub rebuilds: u64,
}

/// A set of unit vectors keyed by memory id, searchable by cosine similarity.
pub struct VectorIndex {
    inner: RwLock<Inner>,
}

/// Shows counters only: vectors and memory ids never reach logs.
impl std::fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorIndex")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The index's state. Internal ids are dense positions in `keys`, `live` and `vectors`.
struct Inner {
    config: VectorConfig,
    /// Memory id of each internal id (tombstoned ones too).
    keys: Vec<Arc<str>>,
    /// Whether each internal id is live.
    live: Vec<bool>,
    /// The unit vectors, `dimension` floats per internal id.
    vectors: Vec<f32>,
    /// Live memory id to internal id.
    ids: HashMap<Arc<str>, usize>,
    tombstones: usize,
    graph: Option<Graph>,
    rebuilds: u64,
    /// Bumped by every change, so [`VectorIndex::compact`] can tell whether its copy is stale.
    generation: u64,
}

impl VectorIndex {
    /// An empty index.
    pub fn new(config: VectorConfig) -> Result<VectorIndex> {
        config.validate()?;
        Ok(VectorIndex {
            inner: RwLock::new(Inner::empty(config)),
        })
    }

    /// Number of live vectors.
    pub fn len(&self) -> usize {
        self.inner.read().ids.len()
    }

    /// Whether the index holds no live vector.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` has a live vector.
    pub fn contains(&self, id: &str) -> bool {
        self.inner.read().ids.contains_key(id)
    }

    /// Current counters.
    pub fn stats(&self) -> VectorStats {
        let inner = self.inner.read();
        VectorStats {
            live: inner.ids.len(),
            tombstones: inner.tombstones,
            hnsw: inner.graph.is_some(),
            rebuilds: inner.rebuilds,
        }
    }

    /// Whether tombstones passed the configured fraction, or the set outgrew exact search, and
    /// the set was too large to rebuild inline ([`VectorConfig::max_inline_rebuild`]).
    pub fn needs_rebuild(&self) -> bool {
        self.inner.read().needs_rebuild()
    }

    /// Rebuilds from the index's own live vectors (dropping tombstones, switching between exact
    /// and HNSW as the size says) without blocking searches during the build: the live set is
    /// copied under the read lock, built without a lock, and swapped in under the write lock,
    /// unless a write happened meanwhile, in which case nothing changes and it returns `false`
    /// (try again, or [`VectorIndex::rebuild`] from storage). Run it on a blocking thread.
    pub fn compact(&self) -> bool {
        let (generation, mut fresh) = {
            let inner = self.inner.read();
            let mut fresh = Inner::empty(inner.config.clone());
            for (internal, key) in inner.keys.iter().enumerate() {
                if inner.live[internal] {
                    fresh.push(key, inner.vector(internal));
                }
            }
            (inner.generation, fresh)
        };
        fresh.compact();
        let mut inner = self.inner.write();
        if inner.generation != generation {
            return false;
        }
        fresh.rebuilds = inner.rebuilds + 1;
        fresh.generation = inner.generation + 1;
        fresh.config.hnsw.ef_search = inner.config.hnsw.ef_search;
        *inner = fresh;
        true
    }

    /// Changes the HNSW search width (`ef`) for later searches.
    pub fn set_ef_search(&self, ef_search: usize) {
        self.inner.write().config.hnsw.ef_search = ef_search.max(1);
    }

    /// Changes how later searches enter the graph, without a rebuild; for benchmarks.
    pub fn set_graph_search(&self, search: GraphSearch) {
        self.inner.write().config.hnsw.search = search;
    }

    /// Inserts or replaces the vector of `id`. The vector is validated and normalised; on error
    /// the index is unchanged.
    pub fn upsert(&self, id: &str, vector: &[f32]) -> Result<()> {
        let mut inner = self.inner.write();
        let unit = normalise(vector, inner.config.dimension)?;
        inner.generation += 1;
        inner.tombstone(id);
        inner.push(id, &unit);
        inner.maintain();
        Ok(())
    }

    /// Removes the vector of `id`; returns whether there was one.
    pub fn remove(&self, id: &str) -> bool {
        let mut inner = self.inner.write();
        let removed = inner.tombstone(id);
        if removed {
            inner.generation += 1;
            inner.maintain();
        }
        removed
    }

    /// Replaces the whole contents with `rows` (memory id, vector), as read from storage.
    /// A later row with the same id replaces an earlier one. Every row is validated before
    /// anything changes: on error the index is unchanged. Returns the number of live vectors.
    pub fn rebuild<I>(&self, rows: I) -> Result<usize>
    where
        I: IntoIterator<Item = (String, Vec<f32>)>,
    {
        let config = self.inner.read().config.clone();
        let mut fresh = Inner::empty(config);
        for (id, vector) in rows {
            let unit = normalise(&vector, fresh.config.dimension)?;
            fresh.tombstone(&id);
            fresh.push(&id, &unit);
        }
        fresh.compact();
        let live = fresh.ids.len();
        let mut inner = self.inner.write();
        fresh.rebuilds = inner.rebuilds + 1;
        fresh.generation = inner.generation + 1;
        fresh.config.hnsw.ef_search = inner.config.hnsw.ef_search;
        *inner = fresh;
        Ok(live)
    }

    /// [`VectorIndex::rebuild`] from stored embeddings (as `UserData::embeddings` returns them),
    /// refusing any row whose model is not `model`.
    pub fn rebuild_embeddings<I>(&self, model: &str, rows: I) -> Result<usize>
    where
        I: IntoIterator<Item = (String, Embedding)>,
    {
        let rows: Vec<(String, Vec<f32>)> = rows
            .into_iter()
            .map(|(id, embedding)| {
                if embedding.model == model {
                    Ok((id, embedding.vector))
                } else {
                    Err(VectorError::ModelMismatch {
                        expected: model.to_owned(),
                        got: embedding.model,
                    })
                }
            })
            .collect::<Result<_>>()?;
        self.rebuild(rows)
    }

    /// The `k` live vectors most similar to `query` among those whose id passes `filter`, as
    /// (memory id, cosine similarity), best first; ties go to the smaller id. Approximate once an
    /// HNSW graph serves the index. Errors only on a bad query.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, f32)>> {
        self.search_with(query, k, &filter, false)
    }

    /// Like [`VectorIndex::search`], but always a brute-force scan: the ground truth that
    /// benchmarks and recall checks compare HNSW against.
    pub fn search_exact(
        &self,
        query: &[f32],
        k: usize,
        filter: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, f32)>> {
        self.search_with(query, k, &filter, true)
    }

    fn search_with(
        &self,
        query: &[f32],
        k: usize,
        filter: &dyn Fn(&str) -> bool,
        exact: bool,
    ) -> Result<Vec<(String, f32)>> {
        let inner = self.inner.read();
        let unit = normalise(query, inner.config.dimension)?;
        let k = k.min(inner.ids.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        Ok(match (&inner.graph, exact) {
            (Some(graph), false) => inner.search_graph(graph, &unit, k, filter),
            (Some(_), true) | (None, _) => inner.search_exact(&unit, k, filter),
        })
    }
}

/// Rounds of over-fetching from the graph before falling back to an exact scan.
const GRAPH_ROUNDS: usize = 3;

impl Inner {
    fn empty(config: VectorConfig) -> Inner {
        Inner {
            config,
            keys: Vec::new(),
            live: Vec::new(),
            vectors: Vec::new(),
            ids: HashMap::new(),
            tombstones: 0,
            graph: None,
            rebuilds: 0,
            generation: 0,
        }
    }

    fn vector(&self, internal: usize) -> &[f32] {
        let d = self.config.dimension;
        &self.vectors[internal * d..(internal + 1) * d]
    }

    /// Tombstones the live entry of `id`, if any.
    fn tombstone(&mut self, id: &str) -> bool {
        match self.ids.remove(id) {
            Some(internal) => {
                self.live[internal] = false;
                self.tombstones += 1;
                true
            }
            None => false,
        }
    }

    /// Appends a live entry (the caller tombstoned any previous one).
    fn push(&mut self, id: &str, unit: &[f32]) {
        let internal = self.keys.len();
        let key: Arc<str> = Arc::from(id);
        self.keys.push(Arc::clone(&key));
        self.live.push(true);
        self.vectors.extend_from_slice(unit);
        self.ids.insert(key, internal);
        if let Some(graph) = &mut self.graph {
            graph.insert(internal, unit);
        }
    }

    /// Whether a rebuild is due: tombstones passed the fraction or the set outgrew exact search.
    fn rebuild_due(&self) -> bool {
        #[allow(clippy::cast_precision_loss)]
        // a ratio test: f32 rounding of the counts is harmless
        let too_many_tombstones = self.tombstones as f32
            > self.config.rebuild_tombstone_fraction * self.keys.len() as f32;
        let outgrew_exact = self.graph.is_none() && self.ids.len() >= self.config.exact_threshold;
        too_many_tombstones || outgrew_exact
    }

    fn needs_rebuild(&self) -> bool {
        self.rebuild_due() && self.ids.len() > self.config.max_inline_rebuild
    }

    /// Rebuilds inline when one is due and the set is small enough.
    fn maintain(&mut self) {
        if self.rebuild_due() && self.ids.len() <= self.config.max_inline_rebuild {
            self.compact();
            self.rebuilds += 1;
        }
    }

    /// Drops tombstones, renumbers internal ids densely, and builds a graph if the live set is
    /// at least the exact threshold (dropping it otherwise).
    fn compact(&mut self) {
        let d = self.config.dimension;
        let live = self.ids.len();
        let mut keys = Vec::with_capacity(live);
        let mut vectors = Vec::with_capacity(live * d);
        for (internal, key) in self.keys.iter().enumerate() {
            if self.live[internal] {
                keys.push(Arc::clone(key));
                vectors.extend_from_slice(self.vector(internal));
            }
        }
        self.ids = keys
            .iter()
            .enumerate()
            .map(|(internal, key)| (Arc::clone(key), internal))
            .collect();
        self.live = vec![true; keys.len()];
        self.keys = keys;
        self.vectors = vectors;
        self.tombstones = 0;
        self.graph = None;
        if live > 0 && live >= self.config.exact_threshold {
            let points = self.vectors.chunks_exact(d).enumerate();
            self.graph = Some(Graph::build(&self.config.hnsw, live, points));
        }
    }

    fn search_exact(
        &self,
        unit: &[f32],
        k: usize,
        filter: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, f32)> {
        let mut top = TopK::new(k);
        for (internal, key) in self.keys.iter().enumerate() {
            if self.live[internal] && filter(key) {
                top.offer(Hit {
                    score: dot(unit, self.vector(internal)),
                    key,
                });
            }
        }
        top.into_sorted()
    }

    /// Over-fetches from the graph enough to make up for tombstones, filters, and re-scores the
    /// survivors exactly. If the filter is too selective for a few widening rounds to find `k`
    /// matches, falls back to an exact scan, so a selective filter costs time, never results.
    fn search_graph(
        &self,
        graph: &Graph,
        unit: &[f32],
        k: usize,
        filter: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, f32)> {
        let total = self.keys.len();
        let live = self.ids.len();
        // Expected fetch for k live results, plus a margin for the graph's misses.
        let mut fetch = (k * total).div_ceil(live.max(1)) + k / 4 + 4;
        for _ in 0..GRAPH_ROUNDS {
            let fetch_now = fetch.min(total);
            let mut top = TopK::new(k);
            let mut matched = 0usize;
            for internal in graph.nearest(
                unit,
                fetch_now,
                self.config.hnsw.ef_search,
                self.config.hnsw.search,
            ) {
                let Some(key) = self.keys.get(internal) else {
                    continue;
                };
                if self.live[internal] && filter(key) {
                    matched += 1;
                    top.offer(Hit {
                        score: dot(unit, self.vector(internal)),
                        key,
                    });
                }
            }
            if matched >= k || fetch_now >= total {
                return top.into_sorted();
            }
            fetch = fetch.saturating_mul(4);
        }
        self.search_exact(unit, k, filter)
    }
}
