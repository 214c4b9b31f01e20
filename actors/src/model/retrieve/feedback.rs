//! A second round of hybrid retrieval seeded by the first round's best documents
//! (pseudo-relevance feedback): the question's words gain the seeds' shared words and its
//! vector moves towards theirs (Rocchio), so a passage that answers the question in other
//! words than it asks ("where did she move from?" meets "my home country, Sweden" through
//! the seed "since I moved from my home country") can rank. Both lists of the second round
//! join the first round's in the fusion with their own weight.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use engram_storage::vector::VectorError;

use super::{EntityExtractor, Query, Retriever, sort_desc};

/// Tuning of the second round ([`Feedback::docs`] 0 turns it off).
#[derive(Debug, Clone, PartialEq)]
pub struct Feedback {
    /// How many of the first round's best documents seed the second round.
    pub docs: usize,
    /// How many of the seeds' words join the question's (see [`Feedback::max_df`]).
    pub terms: usize,
    /// Weight of each added word against the question's own words (1 each).
    pub term_weight: f32,
    /// Weight of the seeds' mean vector added to the question's unit vector.
    pub vector_weight: f32,
    /// Words held by more than this share of the user's documents are never added.
    pub max_df: f32,
    /// Weight of the second round's lists in the fusion, against the first round's.
    pub weight: f32,
}

impl Feedback {
    /// The second round's settings when one runs (measured in docs/benchmarks.md).
    pub const SEEDED: Feedback = Feedback {
        docs: 3,
        terms: 10,
        term_weight: 0.5,
        vector_weight: 0.5,
        max_df: 0.1,
        weight: 1.0,
    };

    /// No second round.
    pub const OFF: Feedback = Feedback {
        docs: 0,
        terms: 0,
        term_weight: 0.0,
        vector_weight: 0.0,
        max_df: 0.0,
        weight: 0.0,
    };

    /// Whether searches run a second round.
    pub fn enabled(&self) -> bool {
        self.docs > 0 && self.weight > 0.0
    }
}

impl Default for Feedback {
    fn default() -> Self {
        Feedback::OFF
    }
}

impl<D: Clone + Eq + Hash + Borrow<str>> Retriever<D> {
    /// The second round's dense and BM25 lists (best first, at most `depth` each), seeded by
    /// the best of `fused` (the first round's scores).
    pub(super) fn feedback(
        &self,
        extractor: &EntityExtractor,
        query: &Query<'_, D>,
        fused: &HashMap<usize, f32>,
        allowed: &[bool],
    ) -> Result<(Vec<(usize, f32)>, Vec<(usize, f32)>), VectorError> {
        let p = &self.params;
        let f = &p.feedback;
        let mut first: Vec<(usize, f32)> = fused.iter().map(|(&s, &v)| (s, v)).collect();
        sort_desc(&mut first);
        let seeds: Vec<usize> = first.iter().take(f.docs).map(|&(slot, _)| slot).collect();

        let words = self.terms(extractor, query.text);
        let mut terms = self.bm25.lookup(&words, 1.0);
        let added = self.bm25.expansion(&seeds, &words, f.terms, f.max_df);
        terms.extend(added.into_iter().map(|term| (term, f.term_weight)));
        let mut lexical = self.bm25.score_terms(&terms, p.k1, p.b, allowed);
        sort_desc(&mut lexical);
        lexical.truncate(p.depth);

        let mut dense = Vec::new();
        if let (Some(question), Some(vectors)) = (query.vector, &self.vectors)
            && f.vector_weight > 0.0
        {
            let seed_vectors: Vec<Vec<f32>> = seeds
                .iter()
                .filter_map(|&slot| vectors.vector(self.docs[slot].id.borrow()))
                .collect();
            if !seed_vectors.is_empty() {
                let norm = question
                    .iter()
                    .map(|x| x * x)
                    .sum::<f32>()
                    .sqrt()
                    .max(f32::EPSILON);
                let share = f.vector_weight / seed_vectors.len() as f32;
                let mut moved: Vec<f32> = question.iter().map(|x| x / norm).collect();
                for seed in &seed_vectors {
                    for (m, s) in moved.iter_mut().zip(seed) {
                        *m += share * s;
                    }
                }
                dense = self.dense(Some(&moved), p.depth, allowed)?;
                sort_desc(&mut dense);
            }
        }
        Ok((dense, lexical))
    }
}
