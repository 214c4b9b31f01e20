//! Aggregative questions ("how many times...", "what activities does she...", 几次, 哪些)
//! ask for every mention of something, not the one passage nearest to the question: their
//! evidence is several passages that say similar things in different places. For them the
//! best candidates of a hybrid search are re-ranked by maximal marginal relevance, so that
//! near-copies of one mention (a turn and its neighbour about the same trip) give way to
//! other mentions.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::LazyLock;

use regex::Regex;

use super::Retriever;

/// Tuning of the re-ranking of aggregative questions ([`Diversity::lambda`] 1 turns it off).
#[derive(Debug, Clone, PartialEq)]
pub struct Diversity {
    /// Relevance against novelty: a candidate scores `lambda * relevance - (1 - lambda) *
    /// (its highest cosine to a candidate already placed)`, relevance min-max normalised over
    /// the candidates.
    pub lambda: f32,
    /// How many of the best candidates are re-ranked (the rest keep their order after them).
    pub candidates: usize,
}

impl Diversity {
    /// No re-ranking.
    pub const OFF: Diversity = Diversity {
        lambda: 1.0,
        candidates: 0,
    };

    /// Whether aggregative questions are re-ranked.
    pub fn enabled(&self) -> bool {
        self.lambda < 1.0 && self.candidates > 1
    }
}

impl Default for Diversity {
    fn default() -> Self {
        Diversity::OFF
    }
}

/// English cues: counting and totals, "all", "every", and "what/which" followed (within one
/// word) by a plural noun ("what activities", "which LGBTQ+ events").
static ENGLISH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)\b(?:how (?:many|often|much)|in total|altogether|every|list|all)\b",
        r"|\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?) of\s+)?(?:\S+\s+)??([a-z]{3,}s)\b",
    ))
    .expect("a valid pattern")
});

/// Chinese cues: 几 with a measure word, 多少, 哪些, totals and "all of them".
static CHINESE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new("几[个次位种人天本家件门项条]|多少|哪些|总共|一共|所有|分别|共有")
        .expect("a valid pattern")
});

/// Words ending in "s" that are not plural nouns.
const NOT_PLURAL: [&str; 8] = ["does", "was", "has", "this", "his", "its", "is", "yes"];

/// Whether `question` asks for every mention of something (a count, a list, a total).
pub fn is_aggregative(question: &str) -> bool {
    if CHINESE.is_match(question) {
        return true;
    }
    ENGLISH.captures_iter(question).any(|c| match c.get(1) {
        None => true,
        Some(word) => !NOT_PLURAL.contains(&word.as_str().to_lowercase().as_str()),
    })
}

impl<D: Clone + Eq + Hash + Borrow<str>> Retriever<D> {
    /// Re-ranks the best `candidates` of `ranked` (slot, score; best first) by maximal
    /// marginal relevance over their vectors; each document takes the score of the rank it
    /// lands on, so scores stay decreasing. Documents without a vector count as novel.
    pub(super) fn diversify(&self, mut ranked: Vec<(usize, f32)>) -> Vec<(usize, f32)> {
        let d = &self.params.diversity;
        let (Some(vectors), true) = (&self.vectors, ranked.len() > 1) else {
            return ranked;
        };
        let n = d.candidates.min(ranked.len());
        let rest = ranked.split_off(n);
        let hi = ranked[0].1;
        let lo = ranked[n - 1].1;
        let span = (hi - lo).max(f32::EPSILON);
        let units: Vec<Option<Vec<f32>>> = ranked
            .iter()
            .map(|&(slot, _)| vectors.vector(self.docs[slot].id.borrow()))
            .collect();
        let mut closest = vec![f32::NEG_INFINITY; n];
        let mut placed = vec![false; n];
        let mut out = Vec::with_capacity(n + rest.len());
        for _ in 0..n {
            let mut best: Option<(usize, f32)> = None;
            for i in (0..n).filter(|&i| !placed[i]) {
                let relevance = (ranked[i].1 - lo) / span;
                let redundancy = closest[i].max(0.0);
                let score = d.lambda * relevance - (1.0 - d.lambda) * redundancy;
                if best.is_none_or(|(_, b)| score > b) {
                    best = Some((i, score));
                }
            }
            let Some((pick, _)) = best else { break };
            placed[pick] = true;
            out.push((ranked[pick].0, ranked[out.len()].1));
            if let Some(chosen) = &units[pick] {
                for i in (0..n).filter(|&i| !placed[i]) {
                    if let Some(other) = &units[i] {
                        let cosine: f32 = chosen.iter().zip(other).map(|(a, b)| a * b).sum();
                        closest[i] = closest[i].max(cosine);
                    }
                }
            }
        }
        out.extend(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DocFeatures, Query, RetrieverParams, SearchMode};
    use super::*;
    use crate::model::entities::EntityExtractor;

    fn unit(v: [f32; 3]) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.map(|x| x / norm).to_vec()
    }

    #[test]
    fn aggregative_questions_give_near_copies_way_to_other_mentions() {
        let extractor = EntityExtractor::default();
        let mut r = Retriever::new(RetrieverParams {
            diversity: Diversity {
                lambda: 0.3,
                candidates: 10,
            },
            ..RetrieverParams::default()
        });
        // "trip" and "trip again" are near-copies; "pottery" is another mention, a little
        // further from the question.
        let docs = [
            ("trip", "camping trip in the mountains", [1.0, 0.1, 0.0]),
            (
                "trip again",
                "camping trip, the mountains",
                [1.0, 0.12, 0.0],
            ),
            ("pottery", "a pottery class", [0.5, 0.0, 0.87]),
        ];
        for (id, text, v) in docs {
            r.index(&extractor, id, text, Some(&unit(v)), DocFeatures::default())
                .unwrap();
        }
        let question = unit([1.0, 0.0, 0.0]);
        let ask = |text: &'static str| {
            let hits = r
                .search(
                    &extractor,
                    &Query::new(text, 3, SearchMode::Hybrid).vector(&question),
                )
                .unwrap();
            assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "{hits:?}");
            hits.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
        };
        assert_eq!(
            ask("what did she do"),
            ["trip", "trip again", "pottery"],
            "a single question ranks by relevance"
        );
        assert_eq!(
            ask("what activities did she do"),
            ["trip", "pottery", "trip again"],
            "an aggregative one places the other mention before the near-copy"
        );
    }

    #[test]
    fn aggregative_questions_are_told_from_single_ones() {
        for question in [
            "How many times did I go to the gym?",
            "What activities does Melanie partake in?",
            "What LGBTQ+ events has Caroline participated in?",
            "Which books has she read in total?",
            "我一共去过几次北京？",
            "我的朋友里有哪些人喜欢猫？",
            "有几个人和我一样是北方人？",
        ] {
            assert!(is_aggregative(question), "{question}");
        }
        for question in [
            "What did Caroline research?",
            "What is Caroline's identity?",
            "Where did she move from 4 years ago?",
            "What does Melanie do to destress?",
            "When was the charity race?",
            "我表弟的家乡是哪里？",
        ] {
            assert!(!is_aggregative(question), "{question}");
        }
    }
}
