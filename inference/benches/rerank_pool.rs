//! The reranker's pool under concurrent searches (a program that prints a markdown table, not
//! a CI gate): the time each search waits for its scores (from its call to its answer) when
//! one, or five, searches of 30 candidates each ask at once, as five conversations do. Two
//! shapes of the same pool take turns in the same rounds: one search a batch (the CPU's
//! default, and the shape of the single reranker thread the pool replaced) and the searches
//! that wait scored together (a GPU's, [`RerankPoolConfig::batch_on_cpu`] here: up to eight
//! searches' candidates). Questions and candidates are conversation turns of
//! `locomo-dev.json` in the evaluation data directory (`common::eval_data`).
//!
//! Run: `source ~/.cache/engram/env && cargo bench -p engram-inference --bench rerank_pool`
//! (`ENGRAM_BENCH_ROUNDS` sets the rounds, default 12).

use std::time::{Duration, Instant};

use anyhow::Result;
use engram_inference::{
    DeviceChoice, RerankLoad, RerankPool, RerankPoolConfig, Reranker, RerankerConfig,
};

mod common;
use common::locomo_turns;

const COMMAND: &str =
    "source ~/.cache/engram/env && cargo bench -p engram-inference --bench rerank_pool";

/// Candidates a search scores (the node's default).
const CANDIDATES: usize = 30;

/// The node's batch: eight searches' candidates.
const BATCHED_PAIRS: usize = 8 * CANDIDATES;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One round: `searches` searches at once, each from its own caller; each one's wait.
async fn round(
    pool: &RerankPool,
    turns: &[String],
    searches: usize,
    round: usize,
) -> Result<Vec<Duration>> {
    let calls: Vec<_> = (0..searches)
        .map(|s| {
            let at = (round * 131 + s * 977) % (turns.len() - CANDIDATES - 1);
            let query = turns[at].clone();
            let passages = turns[at + 1..=at + CANDIDATES].to_vec();
            let pool = pool.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let scores = pool
                    .score(&format!("conversation-{s}"), &query, passages, None)
                    .await;
                scores.map(|scores| (scores.len(), started.elapsed()))
            })
        })
        .collect();
    let mut waits = Vec::with_capacity(searches);
    for call in calls {
        let (n, wait) = call.await??;
        anyhow::ensure!(n == CANDIDATES, "{n} scores for {CANDIDATES} candidates");
        waits.push(wait);
    }
    Ok(waits)
}

fn main() -> Result<()> {
    let rounds: usize = std::env::var("ENGRAM_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let turns = locomo_turns()?;
    let config = RerankerConfig {
        device: DeviceChoice::Cpu,
        ..RerankerConfig::default()
    };
    let reranker = Reranker::load(&config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let pool = |batch_on_cpu: bool| {
        let weights = reranker.share();
        let load: RerankLoad = Box::new(move || Ok(weights));
        RerankPool::new(
            vec![load],
            &RerankPoolConfig {
                queue_capacity: 64,
                tenant_share_percent: 100,
                max_batch_pairs: BATCHED_PAIRS,
                batch_on_cpu,
            },
        )
    };
    let shapes = [
        ("one search a batch (the CPU's default)", pool(false)),
        ("waiting searches together", pool(true)),
    ];
    println!(
        "# Rerank wait under concurrent searches (ms-marco-MiniLM-L-12-v2, float32, CPU, {} threads, {CANDIDATES} candidates a search, {rounds} rounds)\n",
        tch::get_num_threads()
    );
    println!("`{COMMAND}`\n");
    println!(
        "| searches at once | shape | p50 ms | p99 ms | p50 x one-a-batch | mean searches a batch |"
    );
    println!("|---|---|---|---|---|---|");
    runtime.block_on(async {
        // A warm-up search on each (the first pays for libtorch's threads).
        for (_, pool) in &shapes {
            round(pool, &turns, 1, 0).await?;
        }
        for searches in [1, 5] {
            let mut waits: Vec<Vec<Duration>> = vec![Vec::new(); shapes.len()];
            let before: Vec<(u64, u64)> = shapes.iter().map(|(_, p)| batches(p)).collect();
            for r in 0..rounds {
                // The shapes take turns within each round.
                for (i, (_, pool)) in shapes.iter().enumerate() {
                    waits[i].extend(round(pool, &turns, searches, r + 1).await?);
                }
            }
            let mut base = None;
            for (i, (label, pool)) in shapes.iter().enumerate() {
                let sorted = {
                    let mut w = waits[i].clone();
                    w.sort();
                    w
                };
                let p50 = percentile(&sorted, 0.5);
                let p99 = percentile(&sorted, 0.99);
                let base_p50 = *base.get_or_insert(p50);
                let (b, s) = batches(pool);
                let per_batch = (s - before[i].1) as f64 / (b - before[i].0).max(1) as f64;
                println!(
                    "| {searches} | {label} | {:.0} | {:.0} | {:.2} | {per_batch:.1} |",
                    ms(p50),
                    ms(p99),
                    p50.as_secs_f64() / base_p50.as_secs_f64(),
                );
            }
        }
        for (_, pool) in &shapes {
            pool.join().await;
        }
        anyhow::Ok(())
    })
}

/// The pool's batches and the searches they carried so far.
fn batches(pool: &RerankPool) -> (u64, u64) {
    use std::sync::atomic::Ordering;
    let c = pool.counters();
    (
        c.batches.load(Ordering::Relaxed),
        c.batch_searches.load(Ordering::Relaxed),
    )
}
