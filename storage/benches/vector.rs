//! Vector index benchmark: HNSW build time, memory per vector, recall@10 against exact search,
//! and single-thread query latency (p50/p99), on synthetic data or on real embeddings.
//!
//! Data (`--data`):
//! - `clustered` (default): SYNTHETIC, seeded, 384-d unit vectors in 64 clusters, queries drawn
//!   the same way but not in the set (`vector/synthetic.rs`): a random unit centre plus
//!   isotropic Gaussian noise (cosine to the centre about 0.6). The noise fills all 384
//!   dimensions, so within a cluster the true neighbours are barely nearer than the rest: hard
//!   for any graph index.
//! - `lowdim`: SYNTHETIC, a centre plus a Gaussian point of a random 24-d subspace of the
//!   cluster, plus small isotropic noise (cosine to the centre about 0.6): low intrinsic
//!   dimension, closer to sentence embeddings.
//! - `file:PATH`: REAL multilingual-e5-small embeddings of LoCoMo and MemDaily texts, made by
//!   `cargo run --release -p engram-tests --bin embed_corpus` (`vector/file.rs` reads them; a
//!   relative PATH is taken from the workspace root). The first `size` corpus rows, in file
//!   order, are indexed; every query row (questions, then held-out corpus texts) is searched.
//!   `--sizes` defaults to the whole corpus.
//!
//! Each figure is printed for the three graph searches on the same graph: `scan` (the default:
//! the nearest point of the sparse upper layers, then down), `descent` (greedy from the single
//! entry point) and `library` (`hnsw_rs`'s own search). The build inserts synthetic vectors in
//! random cluster order, or grouped by cluster with `--order clustered`.
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
//! smoke run, `-- --sizes 10000,100000,1000000` to choose, `--data lowdim`,
//! `--data file:target/bench-data/e5-corpus-100000.f32`, `--order clustered`, `--m 32`,
//! `--ef-construction 256`, `--ef 64,128`, `--keep-pruned` to try `hnsw_rs`'s `keep_pruned`.

#[path = "vector/file.rs"]
mod file;
#[path = "vector/synthetic.rs"]
mod synthetic;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use engram_storage::vector::{GraphSearch, VectorConfig, VectorIndex};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use self::synthetic::{CLUSTERS, DIM, Data, Synthetic};

const K: usize = 10;

/// Where the vectors come from.
enum Source {
    Synthetic(Data),
    File {
        path: PathBuf,
        vectors: file::Vectors,
    },
}

/// Vectors with their cluster (0 for real embeddings: one "cluster", the whole set).
type Rows = Vec<(usize, Vec<f32>)>;

impl Source {
    fn dimension(&self) -> usize {
        match self {
            Source::Synthetic(_) => DIM,
            Source::File { vectors, .. } => vectors.dimension,
        }
    }

    /// The first line of the report, up to the index's parameters.
    fn describe(&self, options: &Options) -> String {
        match self {
            Source::Synthetic(data) => format!(
                "SYNTHETIC {} unit vectors, d={DIM}, {CLUSTERS} clusters, {} order, {} queries",
                data.name(),
                if options.clustered_order {
                    "clustered"
                } else {
                    "random"
                },
                options.queries,
            ),
            Source::File { path, vectors } => format!(
                "REAL embeddings from {}, d={}, {} corpus rows in file order, {} queries \
                 (questions, then held-out corpus texts)",
                path.display(),
                vectors.dimension,
                vectors.corpus.len(),
                vectors.queries.len(),
            ),
        }
    }

    /// The sizes run when `--sizes` is not given.
    fn default_sizes(&self, quick: bool) -> Vec<usize> {
        match self {
            Source::Synthetic(_) if quick => vec![5_000],
            Source::Synthetic(_) => vec![10_000, 100_000],
            Source::File { vectors, .. } => vec![vectors.corpus.len()],
        }
    }

    /// `size` rows to index and the queries.
    fn vectors(&self, size: usize, options: &Options) -> (Rows, Rows) {
        match self {
            Source::Synthetic(data) => {
                let data = Synthetic::new(*data, 42);
                let mut rng = SmallRng::seed_from_u64(7);
                let queries = (0..options.queries)
                    .map(|_| data.vector(&mut rng))
                    .collect();
                let mut rng = SmallRng::seed_from_u64(1);
                let mut rows: Rows = (0..size).map(|_| data.vector(&mut rng)).collect();
                if options.clustered_order {
                    rows.sort_by_key(|(cluster, _)| *cluster);
                }
                (rows, queries)
            }
            Source::File { path, vectors } => {
                assert!(
                    size <= vectors.corpus.len(),
                    "{} holds {} corpus rows, fewer than {size}",
                    path.display(),
                    vectors.corpus.len()
                );
                let whole = |v: &[Vec<f32>]| v.iter().map(|v| (0, v.clone())).collect();
                (whole(&vectors.corpus[..size]), whole(&vectors.queries))
            }
        }
    }
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
    /// Synthetic data: insert grouped by cluster instead of in random cluster order.
    clustered_order: bool,
    /// Synthetic data: queries drawn (a file brings its own).
    queries: usize,
    /// The `ef` values searched with.
    ef_values: Vec<usize>,
}

/// For 20 queries spread over the list, the 10th-nearest distance (`1 - cosine`) within the
/// query's cluster (real embeddings: within the set) over the median distance to the cluster's
/// points: near 1, the true neighbours hardly stand out.
fn hardness(rows: &[(usize, Vec<f32>)], queries: &[(usize, Vec<f32>)], scope: &str) {
    let mut ratios: Vec<f64> = queries
        .iter()
        .step_by((queries.len() / 20).max(1))
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
        "  hardness: 10th-nearest / median distance {scope}, {} queries: \
         min {:.3}  median {:.3}  max {:.3}",
        ratios.len(),
        ratios[0],
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1],
    );
}

fn run(size: usize, source: &Source, options: &Options, config: &VectorConfig) {
    let (rows, query_vectors) = source.vectors(size, options);
    let scope = match source {
        Source::Synthetic(_) => "within the query's cluster",
        Source::File { .. } => "in the set",
    };
    hardness(&rows, &query_vectors, scope);

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

    let queries = query_vectors.len();
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
    let source = match flag::<String>(&args, "--data").as_deref() {
        None | Some("clustered") => Source::Synthetic(Data::Clustered),
        Some("lowdim") => Source::Synthetic(Data::LowDim),
        Some(other) => match other.strip_prefix("file:") {
            Some(path) => {
                let path = file::resolve(path);
                let vectors = file::load(&path);
                Source::File { path, vectors }
            }
            None => panic!("--data is clustered, lowdim or file:PATH, not {other}"),
        },
    };
    let sizes =
        flag::<String>(&args, "--sizes").map_or_else(|| source.default_sizes(quick), |l| list(&l));
    let options = Options {
        clustered_order: flag::<String>(&args, "--order").as_deref() == Some("clustered"),
        queries: if quick { 100 } else { 500 },
        ef_values: flag::<String>(&args, "--ef").map_or(vec![32, 64, 128, 256, 512], |l| list(&l)),
    };
    let mut config = VectorConfig::with_dimension(source.dimension());
    config.hnsw.keep_pruned = args.iter().any(|a| a == "--keep-pruned");
    if let Some(m) = flag(&args, "--m") {
        config.hnsw.max_connections = m;
    }
    if let Some(ef_construction) = flag(&args, "--ef-construction") {
        config.hnsw.ef_construction = ef_construction;
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "vector index bench: {}, M={}, ef_construction={}, keep_pruned={}, k={K}, {threads} \
         threads for the build, queries single-threaded",
        source.describe(&options),
        config.hnsw.max_connections,
        config.hnsw.ef_construction,
        config.hnsw.keep_pruned,
    );
    for size in sizes {
        run(size, &source, &options, &config);
    }
}
