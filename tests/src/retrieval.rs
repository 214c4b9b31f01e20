//! The retrieval benchmark's logic (the program is `src/bin/retrieval.rs`): embedding passages
//! and questions through an on-disk cache, indexing each conversation's passages in one
//! [`Retriever`] (one user's documents), searching every question by dense, BM25 and hybrid
//! ranking, and reporting evidence recall@k per category with search latency.
//!
//! It calls the retriever directly, not the gateway: the actors have no embeddings yet.

pub mod cache;
pub mod dataset;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use engram_actors::model::entities::EntityExtractor;
use engram_actors::model::retrieve::{DocFeatures, Query, Retriever, RetrieverParams, SearchMode};
use engram_inference::{Encoder, TextRole};

use self::cache::{EmbeddingCache, key};
use self::dataset::Conversation;

/// The cut-offs reported.
pub const KS: [usize; 3] = [5, 10, 20];

/// The modes compared, in report order.
pub const MODES: [SearchMode; 3] = [SearchMode::Dense, SearchMode::Bm25, SearchMode::Hybrid];

/// Embeds `texts` in `role`, taking what it can from `cache` and adding the rest, `batch`
/// texts per encoder call. Prints progress and rate to stderr.
pub fn embed_cached(
    encoder: &Encoder,
    cache: &mut EmbeddingCache,
    texts: &[&str],
    role: TextRole,
    batch: usize,
) -> Result<Vec<Vec<f32>>> {
    let model = encoder.model().name();
    let role_tag = match role {
        TextRole::Query => "query",
        TextRole::Passage => "passage",
    };
    let keys: Vec<u64> = texts.iter().map(|t| key(&[model, role_tag, t])).collect();
    let mut missing: Vec<usize> = (0..texts.len())
        .filter(|&i| cache.get(keys[i]).is_none())
        .collect();
    missing.sort_unstable();
    missing.dedup_by_key(|i| keys[*i]);
    if !missing.is_empty() {
        let started = Instant::now();
        let mut done = 0;
        for chunk in missing.chunks(batch.max(1)) {
            let chunk_texts: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let vectors = encoder.embed(&chunk_texts, role)?;
            cache.insert(chunk.iter().map(|&i| keys[i]).zip(vectors).collect())?;
            done += chunk.len();
            let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "embedded {done}/{} {role_tag} texts ({rate:.1}/s)",
                missing.len()
            );
        }
    }
    keys.iter()
        .map(|k| {
            cache
                .get(*k)
                .map(<[f32]>::to_vec)
                .ok_or_else(|| anyhow::anyhow!("embedding missing after encoding"))
        })
        .collect()
}

/// How passages are indexed beyond their own text.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The retriever's tuning.
    pub params: RetrieverParams,
    /// Weight of the neighbouring passages' vectors mixed into a passage's vector (0: none).
    pub dense_context: f32,
    /// Whether a passage's BM25 text also holds the previous passage's text.
    pub bm25_previous: bool,
    /// Whether a passage's BM25 text also holds the next passage's text.
    pub bm25_next: bool,
}

/// Recall sums of one (mode, category).
#[derive(Debug, Clone, Default)]
struct Cell {
    questions: usize,
    recall: [f64; KS.len()],
}

/// Accumulated results.
#[derive(Debug, Default)]
pub struct Report {
    cells: BTreeMap<(usize, String), Cell>,
    latency: BTreeMap<usize, Vec<Duration>>,
    /// Passages indexed.
    pub passages: usize,
    /// Questions searched.
    pub questions: usize,
}

fn mode_index(mode: SearchMode) -> usize {
    match mode {
        SearchMode::Dense => 0,
        SearchMode::Bm25 => 1,
        SearchMode::Hybrid => 2,
    }
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Indexes one conversation and searches all its questions in every mode.
pub fn evaluate(
    conversation: &Conversation,
    passage_vectors: &[Vec<f32>],
    question_vectors: &[Vec<f32>],
    options: &EvalOptions,
    extractor: &EntityExtractor,
    report: &mut Report,
) -> Result<()> {
    let passages = &conversation.passages;
    ensure!(
        passage_vectors.len() == passages.len(),
        "one vector per passage"
    );
    ensure!(
        question_vectors.len() == conversation.questions.len(),
        "one vector per question"
    );
    let mut retriever: Retriever<usize> = Retriever::new(options.params.clone());
    for (i, passage) in passages.iter().enumerate() {
        let mut vector = passage_vectors[i].clone();
        if options.dense_context > 0.0 {
            for j in [i.wrapping_sub(1), i + 1] {
                if let Some(n) = passage_vectors.get(j) {
                    for (x, y) in vector.iter_mut().zip(n) {
                        *x += options.dense_context * y;
                    }
                }
            }
            normalise(&mut vector);
        }
        let mut text = passage.text.clone();
        if let Some(prev) = i.checked_sub(1).filter(|_| options.bm25_previous) {
            text = format!("{} {text}", passages[prev].text);
        }
        if let Some(next) = passages.get(i + 1).filter(|_| options.bm25_next) {
            text = format!("{text} {}", next.text);
        }
        retriever.index(extractor, i, &text, Some(&vector), DocFeatures::default());
    }
    report.passages += passages.len();
    let k_max = KS[KS.len() - 1];
    for (question, vector) in conversation.questions.iter().zip(question_vectors) {
        report.questions += 1;
        for mode in MODES {
            let query = Query::new(&question.text, k_max, mode).vector(vector);
            let started = Instant::now();
            let hits = retriever.search(extractor, &query);
            let elapsed = started.elapsed();
            report
                .latency
                .entry(mode_index(mode))
                .or_default()
                .push(elapsed);
            let mut recall = [0.0; KS.len()];
            for (slot, &k) in KS.iter().enumerate() {
                let found = question
                    .evidence
                    .iter()
                    .filter(|e| hits.iter().take(k).any(|(id, _)| id == *e))
                    .count();
                recall[slot] = found as f64 / question.evidence.len() as f64;
            }
            for category in [question.category.clone(), "all".to_owned()] {
                let cell = report
                    .cells
                    .entry((mode_index(mode), category))
                    .or_default();
                cell.questions += 1;
                for (sum, r) in cell.recall.iter_mut().zip(recall) {
                    *sum += r;
                }
            }
        }
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

impl Report {
    /// Mean recall@k of `mode` over `category` ("all" for every question).
    pub fn recall(&self, mode: SearchMode, category: &str) -> Option<[f64; KS.len()]> {
        let cell = self.cells.get(&(mode_index(mode), category.to_owned()))?;
        let n = cell.questions.max(1) as f64;
        Some(cell.recall.map(|s| s / n))
    }

    /// The recall table (rows: categories then "all"; columns: mode x k) and the latency
    /// table, as markdown.
    pub fn markdown(&self) -> String {
        let mut categories: Vec<&String> = self
            .cells
            .keys()
            .filter(|(m, c)| *m == 0 && c != "all")
            .map(|(_, c)| c)
            .collect();
        categories.sort();
        let mut out = String::from("| category | n |");
        let mut rule = String::from("|---|---:|");
        for mode in MODES {
            for k in KS {
                out.push_str(&format!(" {mode:?} @{k} |"));
                rule.push_str("---:|");
            }
        }
        out.push('\n');
        out.push_str(&rule);
        out.push('\n');
        let all = "all".to_owned();
        for category in categories.into_iter().chain([&all]) {
            let n = self
                .cells
                .get(&(0, category.clone()))
                .map_or(0, |c| c.questions);
            let label = if category == "all" {
                "**all**"
            } else {
                category
            };
            out.push_str(&format!("| {label} | {n} |"));
            for mode in MODES {
                let recall = self.recall(mode, category).unwrap_or_default();
                for r in recall {
                    out.push_str(&format!(" {r:.3} |"));
                }
            }
            out.push('\n');
        }
        out.push_str("\n| mode | searches | p50 | p99 |\n|---|---:|---:|---:|\n");
        for mode in MODES {
            let mut lat = self
                .latency
                .get(&mode_index(mode))
                .cloned()
                .unwrap_or_default();
            lat.sort_unstable();
            out.push_str(&format!(
                "| {mode:?} | {} | {:.1} µs | {:.1} µs |\n",
                lat.len(),
                percentile(&lat, 0.5).as_secs_f64() * 1e6,
                percentile(&lat, 0.99).as_secs_f64() * 1e6,
            ));
        }
        out
    }
}
