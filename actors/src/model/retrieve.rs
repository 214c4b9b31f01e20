//! Hybrid retrieval over one user's documents (memory records or turns): BM25 over the words
//! [`EntityExtractor::tokens`] gives (jieba for Chinese, lower-cased words otherwise, with a
//! light English suffix stemmer), cosine similarity over caller-supplied L2-normalised
//! vectors, and recency and salience priors, fused by weighted reciprocal rank fusion or a
//! weighted sum of normalised scores; candidates that speak of a time the query names, or
//! name what it names (a person, a place), are lifted.
//!
//! A [`Retriever`] holds one user's index: term statistics (document frequencies, lengths,
//! postings) are kept up to date on every [`Retriever::index`] and [`Retriever::remove`], so a
//! search touches only the postings of the query's words. Vectors live in a storage
//! [`VectorIndex`]: exact scans for small sets, HNSW once a set passes the configured
//! threshold. Filters run before ranking: a filtered-out document takes no rank in any list.
//!
//! It does not embed text (the caller brings vectors from the inference pool), read a clock
//! (the query says what "now" is) or persist anything: it is derived state, rebuilt from
//! storage when a user actor starts.

mod analysis;
mod bm25;
#[cfg(test)]
mod tests;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use engram_storage::types::Timestamp;
use engram_storage::vector::{VectorConfig, VectorError, VectorIndex};

pub use self::analysis::{Analysis, DocText};
use self::bm25::Bm25Index;
pub use self::bm25::stem;
use super::entities::EntityExtractor;
use super::policy::{DAY_MS, decay};
use super::temporal::{self, DaySpan};

/// Which signals rank the documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SearchMode {
    /// Cosine similarity of the vectors only (documents without a vector are not found).
    Dense,
    /// BM25 only.
    Bm25,
    /// Dense and BM25 fused, plus the recency and salience priors.
    Hybrid,
}

/// How [`SearchMode::Hybrid`] combines its signals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Weighted reciprocal rank fusion: a document scores `w / (k + rank)` in each ranked
    /// list it appears in (rank 1 is the best, equal scores share a rank, only the first
    /// `depth` ranks count), plus
    /// `prior / (k + 1)`, so a prior of 1 weighs as much as ranking first in one list.
    Rrf {
        /// The rank offset (60 in the original paper; smaller favours the top ranks).
        k: f32,
    },
    /// A weighted sum of normalised scores: BM25 divided by the best BM25 of the query,
    /// cosine min-max normalised over the candidates, plus the priors.
    Weighted,
}

/// Tuning of a [`Retriever`].
#[derive(Debug, Clone, PartialEq)]
pub struct RetrieverParams {
    /// BM25 term-frequency saturation.
    pub k1: f32,
    /// BM25 length normalisation (0 none, 1 full).
    pub b: f32,
    /// Whether English words are stemmed (plural, `-ing`, `-ed`) before indexing.
    pub stem: bool,
    /// How hybrid search fuses.
    pub fusion: Fusion,
    /// Only the first `depth` documents of each ranked list take part in fusion.
    pub depth: usize,
    /// Weight of the dense list.
    pub dense_weight: f32,
    /// Weight of the BM25 list.
    pub bm25_weight: f32,
    /// Weight of the recency prior `0.5 ^ (age / recency_half_life_days)`.
    pub recency_weight: f32,
    /// Half-life of the recency prior, in days.
    pub recency_half_life_days: f32,
    /// Weight of the salience prior (the document's salience, 0 to 1).
    pub salience_weight: f32,
    /// Weight of a hybrid candidate speaking of a time the query names ("in July 2023",
    /// "last week", 上周): a document speaks of the day it was written and of the days its
    /// text mentions (see [`temporal`](super::temporal)). 0 turns date handling off, and
    /// documents are then indexed without their days.
    pub date_weight: f32,
    /// Weight of a hybrid candidate naming what the query names (a person, a place, a
    /// product: see [`EntityExtractor::mentions`]), scaled by the share of the query's names
    /// it holds. 0 turns entity handling off, and documents are then indexed without them.
    pub entity_weight: f32,
    /// The vector index (its dimension is taken from the first vector indexed).
    pub vectors: VectorConfig,
}

impl Default for RetrieverParams {
    fn default() -> Self {
        RetrieverParams {
            k1: 1.2,
            b: 0.75,
            stem: true,
            // 20 rather than the paper's 60: on LoCoMo-dev it lifts recall@10 by 2 points.
            fusion: Fusion::Rrf { k: 20.0 },
            depth: 100,
            dense_weight: 1.0,
            bm25_weight: 1.0,
            recency_weight: 0.1,
            recency_half_life_days: 30.0,
            salience_weight: 0.1,
            // Tuned on LoCoMo's tuning half (0.25 to 2); see docs/benchmarks.md.
            date_weight: 0.5,
            // Tuned on LoCoMo's tuning half (0.25 to 1); see docs/benchmarks.md.
            entity_weight: 0.5,
            vectors: VectorConfig::default(),
        }
    }
}

/// Per-document features for the priors and filters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DocFeatures {
    /// When the document was last seen (written or confirmed).
    pub seen_at: Timestamp,
    /// Its salience when last seen, 0 to 1.
    pub salience: f32,
    /// Salience it loses a day after `seen_at` (its layer's decay): the prior ranks by the
    /// salience left at the query's time.
    pub decay_per_day: f32,
    /// When it was written: the day its relative dates are resolved against.
    pub written_at: Option<Timestamp>,
}

impl Default for DocFeatures {
    fn default() -> Self {
        DocFeatures {
            seen_at: Timestamp(0),
            salience: 0.5,
            decay_per_day: 0.0,
            written_at: None,
        }
    }
}

/// A filter run on every document before ranking: `true` keeps it.
pub type DocFilter<'a, D> = &'a dyn Fn(&D, &DocFeatures) -> bool;

/// One search.
pub struct Query<'a, D> {
    /// The query text (for BM25).
    pub text: &'a str,
    /// The query's L2-normalised vector (for dense search), if any.
    pub vector: Option<&'a [f32]>,
    /// How many documents to return.
    pub k: usize,
    /// Which signals rank.
    pub mode: SearchMode,
    /// Now, for the recency prior; `None` measures age from the newest document.
    pub now: Option<Timestamp>,
    /// Keeps only the documents it returns `true` for, before ranking.
    pub filter: Option<DocFilter<'a, D>>,
    /// In hybrid mode, also return documents that match neither the words nor the vector,
    /// ranked by their priors alone after every matched one (a context with no query still
    /// fills its slots with the most recent and salient memories).
    pub fill: bool,
}

impl<D> std::fmt::Debug for Query<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the text or the vector: they are user data.
        f.debug_struct("Query")
            .field("k", &self.k)
            .field("mode", &self.mode)
            .field("has_vector", &self.vector.is_some())
            .field("has_filter", &self.filter.is_some())
            .field("fill", &self.fill)
            .finish_non_exhaustive()
    }
}

impl<'a, D> Query<'a, D> {
    /// A query for the `k` best documents by `mode`, with no vector, filter or clock.
    pub fn new(text: &'a str, k: usize, mode: SearchMode) -> Self {
        Query {
            text,
            vector: None,
            k,
            mode,
            now: None,
            filter: None,
            fill: false,
        }
    }

    /// With the query's vector.
    pub fn vector(mut self, vector: &'a [f32]) -> Self {
        self.vector = Some(vector);
        self
    }

    /// With a filter run before ranking.
    pub fn filter(mut self, filter: DocFilter<'a, D>) -> Self {
        self.filter = Some(filter);
        self
    }

    /// With the current time for the recency prior.
    pub fn now(mut self, now: Timestamp) -> Self {
        self.now = Some(now);
        self
    }

    /// Hybrid search also ranks unmatched documents, by their priors (see [`Query::fill`]).
    pub fn fill(mut self) -> Self {
        self.fill = true;
        self
    }
}

struct Doc<D> {
    id: D,
    features: DocFeatures,
    live: bool,
    /// The days it was written and speaks of (empty while date handling is off).
    days: Box<[DaySpan]>,
    /// Hashes of what its own text names, sorted (empty while entity handling is off).
    names: Box<[u64]>,
}

/// One user's retrieval index. `D` is the caller's document id (a string key: it also keys
/// the vector index).
pub struct Retriever<D> {
    params: RetrieverParams,
    docs: Vec<Doc<D>>,
    slots: HashMap<D, usize>,
    bm25: Bm25Index,
    vectors: Option<VectorIndex>,
}

impl<D> std::fmt::Debug for Retriever<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retriever")
            .field("docs", &self.slots.len())
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl<D: Clone + Eq + Hash + Borrow<str>> Retriever<D> {
    /// An empty index.
    pub fn new(params: RetrieverParams) -> Self {
        Retriever {
            params,
            docs: Vec::new(),
            slots: HashMap::new(),
            bm25: Bm25Index::default(),
            vectors: None,
        }
    }

    /// The tuning.
    pub fn params(&self) -> &RetrieverParams {
        &self.params
    }

    /// How many documents are indexed.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Indexes a document, replacing any earlier one with the same id. `vector` must have
    /// the dimension of the first vector indexed (it is normalised here); a bad vector is
    /// refused and leaves the index unchanged.
    pub fn index<'t>(
        &mut self,
        extractor: &EntityExtractor,
        id: D,
        text: impl Into<DocText<'t>>,
        vector: Option<&[f32]>,
        features: DocFeatures,
    ) -> Result<(), VectorError> {
        let DocText { words, own } = text.into();
        let mut analysis = self.analyse_words(extractor, words, features.written_at);
        analysis.names = self.names(extractor, own);
        self.index_analysed(id, &analysis, &[], vector, features)
    }

    /// [`Retriever::index`] of texts read before: the document is found by the terms and days
    /// of `own` and of each of `context`, and names what `own` names.
    pub fn index_analysed(
        &mut self,
        id: D,
        own: &Analysis,
        context: &[&Analysis],
        vector: Option<&[f32]>,
        features: DocFeatures,
    ) -> Result<(), VectorError> {
        match vector {
            Some(vector) => {
                let vectors = match &mut self.vectors {
                    Some(vectors) => vectors,
                    empty @ None => empty.insert(VectorIndex::new(VectorConfig {
                        dimension: vector.len(),
                        ..self.params.vectors.clone()
                    })?),
                };
                vectors.upsert(id.borrow(), vector)?;
            }
            None => {
                if let Some(vectors) = &self.vectors {
                    vectors.remove(id.borrow());
                }
            }
        }
        self.remove_terms(&id);
        let texts = || std::iter::once(own).chain(context.iter().copied());
        let slot = self.docs.len();
        self.bm25.add(slot, texts().flat_map(Analysis::terms));
        let days = match features.written_at {
            Some(written) if self.params.date_weight > 0.0 => {
                let day = temporal::day_of(written);
                let mut days = vec![(day, day)];
                for span in texts().flat_map(|t| t.days.iter()) {
                    if !days.contains(span) {
                        days.push(*span);
                    }
                }
                days.into_boxed_slice()
            }
            _ => Box::default(),
        };
        self.docs.push(Doc {
            id: id.clone(),
            features,
            live: true,
            days,
            names: own.names.clone(),
        });
        self.slots.insert(id, slot);
        Ok(())
    }

    /// Removes a document; returns whether it was there.
    pub fn remove(&mut self, id: &D) -> bool {
        if let Some(vectors) = &self.vectors {
            vectors.remove(id.borrow());
        }
        self.remove_terms(id)
    }

    fn remove_terms(&mut self, id: &D) -> bool {
        let Some(slot) = self.slots.remove::<str>(id.borrow()) else {
            return false;
        };
        self.bm25.remove(slot);
        self.docs[slot].live = false;
        true
    }

    /// Whether [`Retriever::maintain`] has work to do.
    pub fn needs_maintenance(&self) -> bool {
        self.vectors
            .as_ref()
            .is_some_and(VectorIndex::needs_rebuild)
    }

    /// Rebuilds the vector index if its tombstones or size ask for it (after many updates of
    /// a large set); run it off the async threads.
    pub fn maintain(&self) {
        if let Some(vectors) = &self.vectors
            && vectors.needs_rebuild()
        {
            vectors.compact();
        }
    }

    /// The `query.k` best documents, best first, with their scores (BM25, cosine, or the
    /// fused score, by mode). Ties keep indexing order. Fails only on a query vector of the
    /// wrong dimension or with non-finite components.
    pub fn search(
        &self,
        extractor: &EntityExtractor,
        query: &Query<'_, D>,
    ) -> Result<Vec<(D, f32)>, VectorError> {
        if query.k == 0 || self.slots.is_empty() {
            return Ok(Vec::new());
        }
        let allowed: Vec<bool> = self
            .docs
            .iter()
            .map(|d| d.live && query.filter.is_none_or(|f| f(&d.id, &d.features)))
            .collect();
        let ranked = match query.mode {
            SearchMode::Dense => self.dense(query.vector, query.k, &allowed)?,
            SearchMode::Bm25 => self.lexical(extractor, query.text, &allowed),
            SearchMode::Hybrid => self.hybrid(extractor, query, &allowed)?,
        };
        Ok(top_k(ranked, query.k)
            .into_iter()
            .map(|(slot, score)| (self.docs[slot].id.clone(), score))
            .collect())
    }

    fn terms(&self, extractor: &EntityExtractor, text: &str) -> Vec<String> {
        let mut words = extractor.tokens(text);
        if self.params.stem {
            for word in &mut words {
                stem(word);
            }
        }
        words
    }

    fn lexical(
        &self,
        extractor: &EntityExtractor,
        text: &str,
        allowed: &[bool],
    ) -> Vec<(usize, f32)> {
        let terms = self.terms(extractor, text);
        self.bm25
            .score(&terms, self.params.k1, self.params.b, allowed)
    }

    fn dense(
        &self,
        vector: Option<&[f32]>,
        k: usize,
        allowed: &[bool],
    ) -> Result<Vec<(usize, f32)>, VectorError> {
        let (Some(query), Some(vectors)) = (vector, &self.vectors) else {
            return Ok(Vec::new());
        };
        let slot_of = |id: &str| self.slots.get(id).copied();
        let hits = vectors.search(query, k, |id| slot_of(id).is_some_and(|s| allowed[s]))?;
        Ok(hits
            .into_iter()
            .filter_map(|(id, score)| Some((slot_of(&id)?, score)))
            .collect())
    }

    fn hybrid(
        &self,
        extractor: &EntityExtractor,
        query: &Query<'_, D>,
        allowed: &[bool],
    ) -> Result<Vec<(usize, f32)>, VectorError> {
        let p = &self.params;
        let mut dense = self.dense(query.vector, p.depth, allowed)?;
        let mut lexical = self.lexical(extractor, query.text, allowed);
        sort_desc(&mut dense);
        sort_desc(&mut lexical);
        dense.truncate(p.depth);
        lexical.truncate(p.depth);
        let now = query.now.unwrap_or_else(|| {
            let newest = self
                .docs
                .iter()
                .filter(|d| d.live)
                .map(|d| d.features.seen_at.0);
            Timestamp(newest.max().unwrap_or(0))
        });
        let half_life_ms = (p.recency_half_life_days * DAY_MS as f32).max(1.0);
        // The times the query names, resolved against its now; a span too long to tell
        // documents apart (a year) is left out.
        let asked: Vec<DaySpan> = if p.date_weight > 0.0 {
            temporal::mentioned(query.text, now)
                .into_iter()
                .filter(|(first, last)| last - first < temporal::MAX_QUERY_SPAN_DAYS)
                .collect()
        } else {
            Vec::new()
        };
        let named: Box<[u64]> = if p.entity_weight > 0.0 {
            extractor.mention_hashes(query.text)
        } else {
            Box::default()
        };
        let lifts = |slot: usize| self.date_match(slot, &asked) + self.name_match(slot, &named);
        let prior = |slot: usize| {
            let f = &self.docs[slot].features;
            let age_ms = now.0 - f.seen_at.0;
            let salience = decay(f.salience, f.decay_per_day, age_ms);
            p.recency_weight * 0.5f32.powf(age_ms.max(0) as f32 / half_life_ms)
                + p.salience_weight * salience.clamp(0.0, 1.0)
        };
        let mut fused: HashMap<usize, f32> = HashMap::with_capacity(dense.len() + lexical.len());
        match p.fusion {
            Fusion::Rrf { k } => {
                for (list, weight) in [(&dense, p.dense_weight), (&lexical, p.bm25_weight)] {
                    // Equal scores share the best of their ranks, so ties stay ties.
                    let mut rank = 0;
                    for (at, &(slot, score)) in list.iter().enumerate() {
                        if at == 0 || score != list[at - 1].1 {
                            rank = at + 1;
                        }
                        *fused.entry(slot).or_insert(0.0) += weight / (k + rank as f32);
                    }
                }
                for (slot, score) in &mut fused {
                    *score += (prior(*slot) + lifts(*slot)) / (k + 1.0);
                }
            }
            Fusion::Weighted => {
                let best = lexical.first().map_or(1.0, |&(_, s)| s.max(f32::EPSILON));
                for &(slot, s) in &lexical {
                    *fused.entry(slot).or_insert(0.0) += p.bm25_weight * s / best;
                }
                let hi = dense.first().map_or(1.0, |&(_, s)| s);
                let lo = dense.last().map_or(0.0, |&(_, s)| s);
                let span = (hi - lo).max(f32::EPSILON);
                for &(slot, s) in &dense {
                    *fused.entry(slot).or_insert(0.0) += p.dense_weight * (s - lo) / span;
                }
                for (slot, score) in &mut fused {
                    *score += prior(*slot) + lifts(*slot);
                }
            }
        }
        if query.fill {
            // Unmatched documents rank after every matched one, by their priors alone.
            let floor = fused.values().copied().reduce(f32::min).unwrap_or(0.0);
            let scale = match p.fusion {
                Fusion::Rrf { k } => 1.0 / (k + 1.0),
                Fusion::Weighted => 1.0,
            };
            let top = (p.recency_weight + p.salience_weight) * scale + f32::EPSILON;
            for slot in (0..self.docs.len()).filter(|&slot| allowed[slot]) {
                fused
                    .entry(slot)
                    .or_insert_with(|| floor - top + prior(slot) * scale);
            }
        }
        Ok(fused.into_iter().collect())
    }
}

impl<D> Retriever<D> {
    /// `date_weight` if the document speaks of a time in `asked`, else 0.
    fn date_match(&self, slot: usize, asked: &[DaySpan]) -> f32 {
        if !asked.is_empty() && temporal::overlaps(&self.docs[slot].days, asked) {
            self.params.date_weight
        } else {
            0.0
        }
    }

    /// `entity_weight` times the share of the query's names the document holds.
    fn name_match(&self, slot: usize, named: &[u64]) -> f32 {
        if named.is_empty() {
            return 0.0;
        }
        let names = &self.docs[slot].names;
        let held = named
            .iter()
            .filter(|n| names.binary_search(n).is_ok())
            .count();
        self.params.entity_weight * held as f32 / named.len() as f32
    }
}

/// Best first; equal scores keep slot (indexing) order.
fn sort_desc(list: &mut [(usize, f32)]) {
    list.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
}

fn top_k(mut list: Vec<(usize, f32)>, k: usize) -> Vec<(usize, f32)> {
    if list.len() > k {
        list.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        list.truncate(k);
    }
    sort_desc(&mut list);
    list
}
