//! One user's memory index: the memory records a user actor caches, and the hybrid retrieval
//! index over them (BM25 words, vectors in a storage [`VectorIndex`], recency and salience).
//!
//! What a record is indexed by:
//! - profile and correction memories: their summary text and stored embedding;
//! - an episodic memory (one per successful turn): the full text of its turn while the raw
//!   turn is retained (the 20-60 character summary loses most of what a question asks about),
//!   and its summary after; its embedding is the turn's passage embedding. Neighbouring turns
//!   of the same session lend context: the indexed words include the previous and next turn's
//!   words, and the indexed vector mixes in `neighbour_weight` of theirs (both measured on
//!   LoCoMo-dev: see docs/benchmarks.md).
//!
//! Personal data is indexed masked, as a gateway sees it ([`gateway_text`]), and a query's
//! words are masked the same way: an ID, card, passport or mobile number is found by its
//! last four characters at most, never by the digits a gateway does not see, so no search
//! (whatever its mode) tells a right guess of a masked number from a wrong one with the same
//! last four. Vectors are computed from the masked text too ([`crate::embed`]).
//!
//! Derived state only: built from storage when the actor starts, updated after each commit,
//! and never persisted. It does no I/O and never logs text or vectors.
//!
//! [`VectorIndex`]: engram_storage::vector::VectorIndex

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use engram_storage::types::{MemoryKind, MemoryRecord, MemoryStatus, Timestamp, Trigger};
use engram_storage::vector::VectorError;

use super::entities::EntityExtractor;
use super::pii::gateway_text;
use super::policy::is_live;
use super::policy::kind_policy;
use super::retrieve::{Analysis, DocFeatures, Query, Retriever, RetrieverParams, SearchMode};

/// Tuning of a [`MemoryIndex`].
#[derive(Debug, Clone, PartialEq)]
pub struct IndexParams {
    /// The retriever's tuning (BM25, fusion, priors, vector index).
    pub retriever: RetrieverParams,
    /// Weight of each neighbouring turn's vector mixed into an episodic memory's vector
    /// (0: none).
    pub neighbour_weight: f32,
    /// Whether an episodic memory's indexed words include its neighbouring turns' words.
    pub neighbour_text: bool,
}

impl Default for IndexParams {
    fn default() -> Self {
        IndexParams {
            retriever: RetrieverParams::default(),
            neighbour_weight: 0.3,
            neighbour_text: true,
        }
    }
}

/// One search of a user's memories.
#[derive(Debug, Clone)]
pub struct MemoryQuery<'a> {
    /// The query's words.
    pub text: &'a str,
    /// The query's embedding (query role), if the node embeds.
    pub vector: Option<&'a [f32]>,
    /// At most this many hits.
    pub k: usize,
    /// Which signals rank.
    pub mode: SearchMode,
    /// Now: live-ness and the recency prior are measured against it.
    pub now: Timestamp,
    /// Only these kinds (empty: every kind).
    pub kinds: &'a [MemoryKind],
    /// Leave out the episodic memories of these (session, turn) pairs (turns already in the
    /// context's working memory).
    pub exclude_turns: &'a [(&'a str, u64)],
    /// Rank unmatched live memories too, by recency and salience, after the matched ones.
    pub fill: bool,
    /// Only active memories; otherwise candidates too.
    pub active_only: bool,
}

/// What a record is indexed by, before neighbours are mixed in.
#[derive(Debug, Clone)]
struct Source {
    text: String,
    /// What the index reads from `text`, read once (a turn's text is indexed again as each
    /// neighbour comes).
    analysis: Arc<Analysis>,
    vector: Option<Vec<f32>>,
}

/// A user's cached records and their retrieval index.
pub struct MemoryIndex {
    params: IndexParams,
    records: BTreeMap<String, MemoryRecord>,
    sources: HashMap<String, Source>,
    /// Episodic memories by (session, turn), for neighbours.
    episodes: BTreeMap<(String, u64), String>,
    retriever: Retriever<String>,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIndex")
            .field("records", &self.records.len())
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryIndex {
    fn default() -> Self {
        MemoryIndex::new(IndexParams::default())
    }
}

fn turn_of(record: &MemoryRecord) -> Option<(String, u64)> {
    match (&record.session_id, record.turn_id) {
        (Some(session), Some(turn))
            if record.kind == MemoryKind::Episodic && record.trigger != Trigger::Clarification =>
        {
            Some((session.clone(), turn))
        }
        (Some(_) | None, Some(_) | None) => None,
    }
}

impl MemoryIndex {
    /// An empty index.
    pub fn new(params: IndexParams) -> Self {
        MemoryIndex {
            retriever: Retriever::new(params.retriever.clone()),
            params,
            records: BTreeMap::new(),
            sources: HashMap::new(),
            episodes: BTreeMap::new(),
        }
    }

    /// How many records are cached.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is cached.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// A cached record.
    pub fn get(&self, memory_id: &str) -> Option<&MemoryRecord> {
        self.records.get(memory_id)
    }

    /// Sets a cached record's `last_accessed_at` (no ranking input changes).
    pub fn mark_accessed(&mut self, memory_id: &str, at: Timestamp) {
        if let Some(record) = self.records.get_mut(memory_id) {
            record.last_accessed_at = Some(at);
        }
    }

    /// Every cached record, by memory id.
    pub fn records(&self) -> impl Iterator<Item = &MemoryRecord> {
        self.records.values()
    }

    /// The text a record is indexed by (its turn's text for an episodic memory).
    pub fn indexed_text(&self, memory_id: &str) -> Option<&str> {
        self.sources.get(memory_id).map(|s| s.text.as_str())
    }

    /// Whether a record has a vector.
    pub fn has_vector(&self, memory_id: &str) -> bool {
        self.sources
            .get(memory_id)
            .is_some_and(|s| s.vector.is_some())
    }

    /// Caches and indexes a record (replacing an earlier version). `text` is what to index it
    /// by (its turn's text for an episodic memory; `None` keeps what it was indexed by, or its
    /// summary); `vector` its embedding (`None` keeps the one it had while the text it is
    /// indexed by is unchanged: a vector belongs to its text). A deleted record loses its
    /// vector, as its stored embedding does. A bad vector is refused and changes nothing.
    pub fn upsert(
        &mut self,
        extractor: &EntityExtractor,
        record: MemoryRecord,
        text: Option<String>,
        vector: Option<Vec<f32>>,
    ) -> Result<(), VectorError> {
        let id = record.memory_id.clone();
        let old = self.sources.get(&id);
        let text = match text {
            Some(text) => gateway_text(&text),
            None => old.map_or_else(|| gateway_text(&record.summary_text), |s| s.text.clone()),
        };
        let analysis = match old {
            Some(old)
                if old.text == text
                    && self.records.get(&id).map(|r| r.created_at) == Some(record.created_at) =>
            {
                Arc::clone(&old.analysis)
            }
            _ => Arc::new(
                self.retriever
                    .analyse(extractor, &text, Some(record.created_at)),
            ),
        };
        let source = Source {
            analysis,
            vector: if record.status == MemoryStatus::Deleted {
                None
            } else {
                vector.or_else(|| {
                    old.filter(|s| s.text == text)
                        .and_then(|s| s.vector.clone())
                })
            },
            text,
        };
        let turn = turn_of(&record);
        let previous = self.sources.insert(id.clone(), source);
        let previous_record = self.records.insert(id.clone(), record);
        if let Some(turn) = &turn {
            self.episodes.insert(turn.clone(), id.clone());
        }
        if let Err(err) = self.reindex(&id) {
            // Put everything back as it was.
            match previous {
                Some(source) => self.sources.insert(id.clone(), source),
                None => self.sources.remove(&id),
            };
            match previous_record {
                Some(record) => self.records.insert(id.clone(), record),
                None => {
                    if let Some(turn) = &turn {
                        self.episodes.remove(turn);
                    }
                    self.records.remove(&id)
                }
            };
            return Err(err);
        }
        for neighbour in self.neighbours(turn.as_ref()) {
            self.reindex(&neighbour)?;
        }
        Ok(())
    }

    /// Gives a cached record the vector of `text`, if it is still indexed by that text and not
    /// deleted (a vector computed after the write, by the pipeline). Returns whether it did.
    pub fn attach_vector(
        &mut self,
        extractor: &EntityExtractor,
        memory_id: &str,
        text: &str,
        vector: Vec<f32>,
    ) -> Result<bool, VectorError> {
        let Some(record) = self.records.get(memory_id) else {
            return Ok(false);
        };
        let current = self.sources.get(memory_id);
        if record.status == MemoryStatus::Deleted
            || current.is_none_or(|s| s.text != gateway_text(text))
        {
            return Ok(false);
        }
        let record = record.clone();
        self.upsert(extractor, record, Some(text.to_owned()), Some(vector))?;
        Ok(true)
    }

    /// Drops a record from the cache and the index; returns whether it was there.
    pub fn remove(&mut self, memory_id: &str) -> bool {
        let Some(record) = self.records.remove(memory_id) else {
            return false;
        };
        self.sources.remove(memory_id);
        self.retriever.remove(&memory_id.to_owned());
        let turn = turn_of(&record);
        let neighbours = self.neighbours(turn.as_ref());
        if let Some(turn) = &turn {
            self.episodes.remove(turn);
        }
        for neighbour in neighbours {
            // Their own vectors were accepted before: re-indexing them cannot fail.
            let _ = self.reindex(&neighbour);
        }
        true
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        *self = MemoryIndex::new(self.params.clone());
    }

    /// Whether [`MemoryIndex::maintain`] has work to do (a large set with many tombstones).
    pub fn needs_maintenance(&self) -> bool {
        self.retriever.needs_maintenance()
    }

    /// Rebuilds the vector index if tombstones ask for it (run off the async threads).
    pub fn maintain(&self) {
        self.retriever.maintain();
    }

    /// `memory_id`'s record if it is live and `query` may find it (its kinds, status and
    /// excluded turns; not its words or vector).
    pub fn found(&self, memory_id: &str, query: &MemoryQuery<'_>) -> Option<&MemoryRecord> {
        self.records.get(memory_id).filter(|r| {
            is_live(r, query.now)
                && (!query.active_only || r.status == MemoryStatus::Active)
                && (query.kinds.is_empty() || query.kinds.contains(&r.kind))
                && !turn_of(r).is_some_and(|(session, turn)| {
                    query
                        .exclude_turns
                        .iter()
                        .any(|&(s, t)| s == session && t == turn)
                })
        })
    }

    /// The best live memories for `query`, best first, with their scores.
    pub fn search(
        &self,
        extractor: &EntityExtractor,
        query: &MemoryQuery<'_>,
    ) -> Result<Vec<(&MemoryRecord, f32)>, VectorError> {
        let keep = |id: &String, _: &DocFeatures| self.found(id, query).is_some();
        // Found by what a gateway sees of it, never by the digits it does not.
        let words = gateway_text(query.text);
        let mut q = Query::new(&words, query.k, query.mode)
            .now(query.now)
            .filter(&keep);
        if let Some(vector) = query.vector {
            q = q.vector(vector);
        }
        if query.fill {
            q = q.fill();
        }
        Ok(self
            .retriever
            .search(extractor, &q)?
            .into_iter()
            .filter_map(|(id, score)| Some((self.records.get(&id)?, score)))
            .collect())
    }

    /// The episodic memories next to `turn` in its session (previous, next).
    fn neighbours(&self, turn: Option<&(String, u64)>) -> Vec<String> {
        let Some((session, seq)) = turn else {
            return Vec::new();
        };
        let before = self
            .episodes
            .range(..(session.clone(), *seq))
            .next_back()
            .filter(|((s, _), _)| s == session);
        let after = self
            .episodes
            .range((session.clone(), seq + 1)..)
            .next()
            .filter(|((s, _), _)| s == session);
        before
            .into_iter()
            .chain(after)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Indexes `id` with its neighbours' context.
    fn reindex(&mut self, id: &str) -> Result<(), VectorError> {
        let (Some(record), Some(source)) = (self.records.get(id), self.sources.get(id)) else {
            return Ok(());
        };
        let neighbours: Vec<&Source> = self
            .neighbours(turn_of(record).as_ref())
            .iter()
            .filter_map(|n| self.sources.get(n))
            .collect();
        let context: Vec<&Analysis> = if self.params.neighbour_text {
            neighbours.iter().map(|n| &*n.analysis).collect()
        } else {
            Vec::new()
        };
        let vector = source.vector.as_ref().map(|own| {
            let mut mixed = own.clone();
            if self.params.neighbour_weight > 0.0 {
                for theirs in neighbours.iter().filter_map(|n| n.vector.as_ref()) {
                    if theirs.len() == mixed.len() {
                        for (x, y) in mixed.iter_mut().zip(theirs) {
                            *x += self.params.neighbour_weight * y;
                        }
                    }
                }
            }
            mixed
        });
        let features = DocFeatures {
            seen_at: record.last_seen_at,
            salience: record.salience,
            decay_per_day: kind_policy(record.kind).decay_per_day,
            written_at: Some(record.created_at),
        };
        self.retriever.index_analysed(
            id.to_owned(),
            &source.analysis,
            &context,
            vector.as_deref(),
            features,
        )
    }
}

#[cfg(test)]
mod tests;
