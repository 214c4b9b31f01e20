//! Reranker cost bench (a program that prints a markdown table, not a CI gate): the time to
//! score one question against 10, 30 and 50 candidate passages, as the retrieval program's
//! `--rerank N` does, for float32, float16, int8 and int8-rows linear layers taking turns in the same
//! rounds (medians), and how far the packed precisions' scores are from float32's.
//! Questions and passages are conversation turns of `locomo-dev.json` in the evaluation data
//! directory (`ENGRAM_EVAL_DATA`, default `../shared/data` beside the repository, where the
//! public sets stay: `common::eval_data`).
//!
//! Run: `source ~/.cache/engram/env && cargo bench -p engram-inference --bench rerank`
//! (`ENGRAM_BENCH_SECS` sets each measurement's length, default 5).

use std::time::{Duration, Instant};

use anyhow::Result;
use engram_inference::{DeviceChoice, Precision, Reranker, RerankerConfig};

mod common;
use common::locomo_turns;

const COMMAND: &str =
    "source ~/.cache/engram/env && cargo bench -p engram-inference --bench rerank";

/// Rounds per candidate count, the precisions taking turns within each.
const ROUNDS: usize = 3;

fn main() -> Result<()> {
    let span = common::measurement();
    let turns = locomo_turns()?;
    let mut rerankers = Vec::new();
    for (label, precision) in [
        ("float32", Precision::Float32),
        ("float16", Precision::Float16),
        ("int8", Precision::Int8),
        ("int8-rows", Precision::Int8Rows),
    ] {
        let config = RerankerConfig {
            device: DeviceChoice::Cpu,
            precision,
            ..RerankerConfig::default()
        };
        rerankers.push((label, Reranker::load(&config)?));
    }
    println!(
        "# Reranker cost (ms-marco-MiniLM-L-12-v2, CPU, {} threads)\n",
        tch::get_num_threads()
    );
    println!("`{COMMAND}`\n");
    println!(
        "| candidates | precision | ms a question (median) | pairs/s | x float32 | max abs diff from float32 |"
    );
    println!("|---|---|---|---|---|---|");
    for candidates in [10, 30, 50] {
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); rerankers.len()];
        let mut diff = vec![0.0_f32; rerankers.len()];
        for round in 0..ROUNDS {
            for (r, (_, reranker)) in rerankers.iter().enumerate() {
                let started = Instant::now();
                let mut question = round * 997;
                while started.elapsed() < span / ROUNDS as u32 {
                    let at = question % (turns.len() - candidates - 1);
                    let query = turns[at].as_str();
                    let passages: Vec<&str> = turns[at + 1..=at + candidates]
                        .iter()
                        .map(String::as_str)
                        .collect();
                    let t = Instant::now();
                    let scores = reranker.score(query, &passages)?;
                    times[r].push(t.elapsed());
                    if r > 0 && question % 7 == 0 {
                        let base = rerankers[0].1.score(query, &passages)?;
                        for (a, b) in scores.iter().zip(&base) {
                            diff[r] = diff[r].max((a - b).abs());
                        }
                    }
                    question += 31;
                }
            }
        }
        let medians: Vec<Duration> = times
            .iter_mut()
            .map(|t| {
                t.sort();
                t[t.len() / 2]
            })
            .collect();
        for (r, (label, _)) in rerankers.iter().enumerate() {
            let ms = medians[r].as_secs_f64() * 1e3;
            println!(
                "| {candidates} | {label} | {ms:.1} | {:.0} | x{:.2} | {:.3} |",
                candidates as f64 / medians[r].as_secs_f64(),
                medians[0].as_secs_f64() / medians[r].as_secs_f64(),
                diff[r]
            );
        }
    }
    Ok(())
}
