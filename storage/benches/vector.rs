//! Vector index benchmark: HNSW build time, memory per vector, recall@10 against exact search,
//! and single-thread query latency (p50/p99), on SYNTHETIC data.
//!
//! Data (`--data`), seeded, 384-d unit vectors in 64 clusters, queries drawn the same way but not
//! in the set; real embeddings come later and recall on them will differ:
//! - `clustered` (default): a random unit centre plus isotropic Gaussian noise (cosine to the
//!   centre about 0.6). The noise fills all 384 dimensions, so within a cluster the true
//!   neighbours are barely nearer than the rest: hard for any graph index.
//! - `lowdim`: a centre plus a Gaussian point of a random 24-d subspace of the cluster, plus
//!   small isotropic noise (cosine to the centre about 0.6): low intrinsic dimension, closer to
//!   sentence embeddings.
//!
//! Each figure is printed for the three graph searches on the same graph: `scan` (the default:
//! the nearest point of the sparse upper layers, then down), `descent` (greedy from the single
//! entry point) and `library` (`hnsw_rs`'s own search). The build inserts the vectors in random cluster order, or grouped by cluster with
//! `--order clustered`.
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
//! smoke run, `-- --sizes 10000,100000,1000000` to choose, `--data lowdim`, `--order clustered`,
//! `--m 32`, `--ef-construction 256`, `--ef 64,128`, `--keep-pruned` to try `hnsw_rs`'s
//! `keep_pruned`.

use std::time::{Duration, Instant};

use engram_storage::vector::{GraphSearch, VectorConfig, VectorIndex};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DIM: usize = 384;
const CLUSTERS: usize = 64;
const K: usize = 10;
const NOISE: f32 = 0.068;
/// `lowdim`: dimension of each cluster's subspace, spread along it, and isotropic noise.
const SUBSPACE: usize = 24;
const SPREAD: f32 = 1.2;
const LOWDIM_NOISE: f32 = 0.01;

#[derive(Clone, Copy, PartialEq)]
enum Data {
    Clustered,
    LowDim,
}

struct Synthetic {
    data: Data,
    centres: Vec<Vec<f32>>,
    /// `lowdim`: per cluster, `SUBSPACE` random unit directions.
    bases: Vec<Vec<Vec<f32>>>,
}

impl Synthetic {
    fn new(data: Data, seed: u64) -> Synthetic {
        let mut rng = SmallRng::seed_from_u64(seed);
        let random_unit = |rng: &mut SmallRng| unit((0..DIM).map(|_| gaussian(rng)).collect());
        let centres = (0..CLUSTERS).map(|_| random_unit(&mut rng)).collect();
        let bases = match data {
            Data::Clustered => Vec::new(),
            Data::LowDim => (0..CLUSTERS)
                .map(|_| (0..SUBSPACE).map(|_| random_unit(&mut rng)).collect())
                .collect(),
        };
        Synthetic {
            data,
            centres,
            bases,
        }
    }

    /// A vector and its cluster.
    fn vector(&self, rng: &mut SmallRng) -> (usize, Vec<f32>) {
        let cluster = rng.random_range(0..CLUSTERS);
        let centre = &self.centres[cluster];
        let v = match self.data {
            Data::Clustered => centre.iter().map(|c| c + NOISE * gaussian(rng)).collect(),
            Data::LowDim => {
                let mut v = centre.clone();
                #[allow(clippy::cast_precision_loss)]
                let scale = SPREAD / (SUBSPACE as f32).sqrt();
                for direction in &self.bases[cluster] {
                    let z = scale * gaussian(rng);
                    v.iter_mut().zip(direction).for_each(|(x, d)| *x += z * d);
                }
                v.iter_mut()
                    .for_each(|x| *x += LOWDIM_NOISE * gaussian(rng));
                v
            }
        };
        (cluster, unit(v))
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

/// What a run measures besides the data.
struct Options {
    data: Data,
    clustered_order: bool,
    queries: usize,
    ef_values: Vec<usize>,
}

/// For a few queries, the 10th-nearest distance (`1 - cosine`) within the query's cluster over
/// the median distance to the cluster's points: near 1, the true neighbours hardly stand out.
fn hardness(rows: &[(usize, Vec<f32>)], queries: &[(usize, Vec<f32>)]) {
    let mut ratios: Vec<f64> = queries
        .iter()
        .take(20)
        .map(|(cluster, q)| {
            let mut dists: Vec<f32> = rows
                .iter()
                .filter(|(c, _)| c == cluster)
                .map(|(_, v)| 1.0 - q.iter().zip(v).map(|(a, b)| a * b).sum::<f32>())
                .collect();
            dists.sort_by(f32::total_cmp);
            f64::from(dists[K - 1]) / f64::from(dists[dists.len() / 2])
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    println!(
        "  hardness: 10th-nearest / median distance within the query's cluster, 20 queries: \
         min {:.3}  median {:.3}  max {:.3}",
        ratios[0],
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1],
    );
}

fn run(size: usize, options: &Options, config: &VectorConfig) {
    let data = Synthetic::new(options.data, 42);
    let mut rng = SmallRng::seed_from_u64(7);
    let query_vectors: Vec<(usize, Vec<f32>)> = (0..options.queries)
        .map(|_| data.vector(&mut rng))
        .collect();
    let mut rng = SmallRng::seed_from_u64(1);
    let mut rows: Vec<(usize, Vec<f32>)> = (0..size).map(|_| data.vector(&mut rng)).collect();
    if options.clustered_order {
        rows.sort_by_key(|(cluster, _)| *cluster);
    }
    hardness(&rows, &query_vectors);

    let index = VectorIndex::new(config.clone()).expect("valid config");
    // The rows exist before the measurement starts, so only the index's growth counts.
    let rss_before = rss_bytes();
    let started = Instant::now();
    index
        .rebuild(
            rows.iter()
                .enumerate()
                .map(|(i, (_, v))| (format!("mem-{i:08}"), v.clone())),
        )
        .expect("valid vectors");
    let build = started.elapsed();
    let rss_after = rss_bytes();
    drop(rows);
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

    let queries = options.queries;
    let mut exact_times = Vec::with_capacity(queries);
    let truth: Vec<Vec<(String, f32)>> = query_vectors
        .iter()
        .map(|(_, q)| {
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

    for (search, name) in [
        (GraphSearch::ScanEntry, "scan"),
        (GraphSearch::Descent, "descent"),
        (GraphSearch::Library, "library"),
    ] {
        index.set_graph_search(search);
        let search = name;
        for &ef in &options.ef_values {
            index.set_ef_search(ef);
            let mut times = Vec::with_capacity(queries);
            let mut found = 0usize;
            let mut lost = 0usize;
            let mut score_sum = 0.0f64;
            for ((_, q), expected) in query_vectors.iter().zip(&truth) {
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
                "  {search:<7} ef={ef:<4} p50 {:>8.1} us  p99 {:>8.1} us  recall@{K} {recall:.4}  \
                 similarity kept {:.4}  queries with no true neighbour {lost}",
                micros(percentile(&times, 0.5)),
                micros(percentile(&times, 0.99)),
                score_sum / true_score_sum,
            );
        }
    }
}

/// The value after `flag`, parsed, if the flag is present.
fn flag<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    let i = args.iter().position(|a| a == flag)?;
    let value = args
        .get(i + 1)
        .unwrap_or_else(|| panic!("{flag} needs a value"));
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("bad value for {flag}: {value}")),
    )
}

fn list(value: &str) -> Vec<usize> {
    value
        .split(',')
        .map(|s| s.trim().parse().expect("lists are of integers"))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let sizes = match flag::<String>(&args, "--sizes") {
        Some(sizes) => list(&sizes),
        None if quick => vec![5_000],
        None => vec![10_000, 100_000],
    };
    let data = match flag::<String>(&args, "--data").as_deref() {
        None | Some("clustered") => Data::Clustered,
        Some("lowdim") => Data::LowDim,
        Some(other) => panic!("--data is clustered or lowdim, not {other}"),
    };
    let options = Options {
        data,
        clustered_order: flag::<String>(&args, "--order").as_deref() == Some("clustered"),
        queries: if quick { 100 } else { 500 },
        ef_values: flag::<String>(&args, "--ef").map_or(vec![32, 64, 128, 256, 512], |l| list(&l)),
    };
    let mut config = VectorConfig::with_dimension(DIM);
    config.hnsw.keep_pruned = args.iter().any(|a| a == "--keep-pruned");
    if let Some(m) = flag(&args, "--m") {
        config.hnsw.max_connections = m;
    }
    if let Some(ef_construction) = flag(&args, "--ef-construction") {
        config.hnsw.ef_construction = ef_construction;
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "vector index bench: SYNTHETIC {} unit vectors, d={DIM}, {CLUSTERS} clusters, {} order, \
         M={}, ef_construction={}, keep_pruned={}, k={K}, {} queries, {threads} threads for the \
         build, queries single-threaded",
        if data == Data::LowDim {
            "lowdim"
        } else {
            "clustered"
        },
        if options.clustered_order {
            "clustered"
        } else {
            "random"
        },
        config.hnsw.max_connections,
        config.hnsw.ef_construction,
        config.hnsw.keep_pruned,
        options.queries,
    );
    for size in sizes {
        run(size, &options, &config);
    }
}
