//! Vector index benchmark: HNSW build time, memory per vector, recall@10 against exact search,
//! and single-thread query latency (p50/p99), on SYNTHETIC data.
//!
//! Data: seeded, clustered, L2-normalised Gaussian vectors of 384 dimensions (64 random unit
//! centres; each vector is a centre plus isotropic Gaussian noise, cosine to its centre about
//! 0.6), and queries drawn the same way but not in the set. Real embeddings come later; recall on
//! them will differ.
//!
//! "similarity kept" is the sum of the cosines HNSW returned over the sum of the true top-k
//! cosines: it tells near-ties (a miss whose cosine is within rounding of the truth) from real
//! misses.
//!
//! Memory is the growth of the process's resident set (`VmRSS` in `/proc/self/status`) across
//! the build, divided by the number of vectors; it includes the index's own copy of each vector
//! (1,536 bytes) as well as `hnsw_rs`'s copy and graph.
//!
//! Run: `cargo bench -p engram-storage --bench vector` (sizes 10k and 100k), `-- --quick` for a
//! smoke run, `-- --sizes 10000,100000,1000000` to choose, `-- --keep-pruned` to try `hnsw_rs`'s
//! `keep_pruned`.

use std::time::{Duration, Instant};

use engram_storage::vector::{VectorConfig, VectorIndex};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DIM: usize = 384;
const CLUSTERS: usize = 64;
const K: usize = 10;
const NOISE: f32 = 0.068;

struct Synthetic {
    centres: Vec<Vec<f32>>,
}

impl Synthetic {
    fn new(seed: u64) -> Synthetic {
        let mut rng = SmallRng::seed_from_u64(seed);
        let centres = (0..CLUSTERS)
            .map(|_| unit((0..DIM).map(|_| gaussian(&mut rng)).collect()))
            .collect();
        Synthetic { centres }
    }

    fn vector(&self, rng: &mut SmallRng) -> Vec<f32> {
        let centre = &self.centres[rng.random_range(0..CLUSTERS)];
        unit(centre.iter().map(|c| c + NOISE * gaussian(rng)).collect())
    }
}

/// A standard normal sample (Box-Muller).
fn gaussian(rng: &mut SmallRng) -> f32 {
    let u1: f32 = rng.random_range(f32::EPSILON..1.0);
    let u2: f32 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Resident set size in bytes, from `/proc/self/status` (0 where unavailable).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn run(size: usize, queries: usize, ef_values: &[usize], config: &VectorConfig) {
    let data = Synthetic::new(42);
    let mut rng = SmallRng::seed_from_u64(7);
    let query_vectors: Vec<Vec<f32>> = (0..queries).map(|_| data.vector(&mut rng)).collect();

    let index = VectorIndex::new(config.clone()).expect("valid config");
    let rss_before = rss_bytes();
    let started = Instant::now();
    // Rows are generated lazily so the source data does not count towards the index's memory.
    let mut rng = SmallRng::seed_from_u64(1);
    let rows = (0..size).map(|i| (format!("mem-{i:08}"), data.vector(&mut rng)));
    index.rebuild(rows).expect("valid vectors");
    let build = started.elapsed();
    let rss_after = rss_bytes();
    assert!(
        index.stats().hnsw,
        "sizes below the exact threshold are not benchmarked"
    );
    #[allow(clippy::cast_precision_loss)]
    let per_vector = rss_after.saturating_sub(rss_before) as f64 / size as f64;
    #[allow(clippy::cast_precision_loss)]
    let rate = size as f64 / build.as_secs_f64();
    println!(
        "n={size}: build {:.1} s ({rate:.0} vectors/s), RSS delta {:.0} MiB = {per_vector:.0} bytes/vector",
        build.as_secs_f64(),
        rss_after.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0),
    );

    let mut exact_times = Vec::with_capacity(queries);
    let truth: Vec<Vec<(String, f32)>> = query_vectors
        .iter()
        .map(|q| {
            let t = Instant::now();
            let hits = index.search_exact(q, K, |_| true).expect("valid query");
            exact_times.push(t.elapsed());
            hits
        })
        .collect();
    exact_times.sort();
    let mean_score = |rank: usize| {
        #[allow(clippy::cast_precision_loss)]
        let n = truth.len() as f32;
        truth.iter().map(|hits| hits[rank].1).sum::<f32>() / n
    };
    println!(
        "  exact scan:   p50 {:>8.1} us  p99 {:>8.1} us  (true neighbours: mean cosine 1st {:.3}, {K}th {:.3})",
        micros(percentile(&exact_times, 0.5)),
        micros(percentile(&exact_times, 0.99)),
        mean_score(0),
        mean_score(K - 1),
    );
    let true_score_sum: f64 = truth
        .iter()
        .flatten()
        .map(|(_, score)| f64::from(*score))
        .sum();

    for &ef in ef_values {
        index.set_ef_search(ef);
        let mut times = Vec::with_capacity(queries);
        let mut found = 0usize;
        let mut lost = 0usize;
        let mut score_sum = 0.0f64;
        for (q, expected) in query_vectors.iter().zip(&truth) {
            let t = Instant::now();
            let hits = index.search(q, K, |_| true).expect("valid query");
            times.push(t.elapsed());
            let hits_found = hits
                .iter()
                .filter(|(id, _)| expected.iter().any(|(e, _)| e == id))
                .count();
            found += hits_found;
            lost += usize::from(hits_found == 0);
            score_sum += hits.iter().map(|(_, s)| f64::from(*s)).sum::<f64>();
        }
        times.sort();
        #[allow(clippy::cast_precision_loss)]
        let recall = found as f64 / (queries * K) as f64;
        println!(
            "  hnsw ef={ef:<4} p50 {:>8.1} us  p99 {:>8.1} us  recall@{K} {recall:.4}  \
             similarity kept {:.4}  queries with no true neighbour {lost}",
            micros(percentile(&times, 0.5)),
            micros(percentile(&times, 0.99)),
            score_sum / true_score_sum,
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--sizes") {
        Some(i) => args
            .get(i + 1)
            .expect("--sizes needs a comma-separated list")
            .split(',')
            .map(|s| s.trim().parse().expect("sizes are integers"))
            .collect(),
        None if quick => vec![5_000],
        None => vec![10_000, 100_000],
    };
    let queries = if quick { 100 } else { 500 };
    let mut config = VectorConfig::with_dimension(DIM);
    config.hnsw.keep_pruned = args.iter().any(|a| a == "--keep-pruned");
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "vector index bench: SYNTHETIC clustered Gaussian unit vectors, d={DIM}, {CLUSTERS} clusters, \
         M=16, ef_construction=128, keep_pruned={}, k={K}, {queries} queries, {threads} threads for the build, \
         queries single-threaded",
        config.hnsw.keep_pruned
    );
    for size in sizes {
        run(size, queries, &[32, 64, 128, 256], &config);
    }
}
