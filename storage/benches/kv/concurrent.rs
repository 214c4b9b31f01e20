//! Concurrent durable single-write transactions through `Store::run`: C tokio tasks, each
//! committing one 100-byte set per transaction on keys of its own with `synchronous = FULL`,
//! with group commit (the default) and without (each transaction commits and fsyncs on its
//! own), each way on its own file.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use engram_storage::sqlite::{GroupCommit, SqliteOptions};
use engram_storage::{RangeOptions, Store, StoreStats};
use hdrhistogram::Histogram;

use crate::measure::{Figures, Round, elapsed_ns, histogram, rotated, rounds_mut, settle};
use crate::report::{group, ns};
use crate::writes::mix;
use crate::{BenchResult, Config, VALUE_LEN};

/// Whether the transactions share commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Group commit: `Store::run` transactions go to the writer thread, which commits all
    /// those waiting at once.
    Grouped,
    /// Every transaction commits on its own, as before group commit.
    Own,
}

pub const COMMITS: [Commit; 2] = [Commit::Grouped, Commit::Own];

impl Commit {
    pub fn label(self) -> &'static str {
        match self {
            Commit::Grouped => "group commit",
            Commit::Own => "own commits",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Commit::Grouped => b'g',
            Commit::Own => b'o',
        }
    }
}

/// The figures of each concurrency level, in the order of `--writers`.
pub type ConcurrentFigures = Vec<(usize, Figures<Commit>)>;

pub fn bench_concurrent(dir: &Path, cfg: &Config) -> BenchResult<ConcurrentFigures> {
    let open = |name: &str, group_commit| {
        Store::sqlite_with(&dir.join(name), SqliteOptions::default(), group_commit)
    };
    let grouped = open("concurrent-grouped.sqlite", GroupCommit::default())?;
    let own = open("concurrent-own.sqlite", GroupCommit::off())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut figures = Vec::new();
    for (level, &writers) in cfg.writers.iter().enumerate() {
        println!(
            "\n## {writers} concurrent writers, 1-set transactions through Store::run, \
             {} rounds of {}s",
            cfg.rounds, cfg.seconds
        );
        let mut by_commit: Figures<Commit> = COMMITS.iter().map(|c| (*c, Vec::new())).collect();
        for round in 0..cfg.rounds {
            for commit in rotated(&COMMITS, round) {
                let store = match commit {
                    Commit::Grouped => &grouped,
                    Commit::Own => &own,
                };
                let prefix = [b'c', commit.tag(), level as u8, round as u8];
                let r = runtime.block_on(concurrent_round(store, writers, prefix, cfg))?;
                settle(dir)?;
                println!(
                    "round {round} {:<12} {:>9} txn/s  p50 {:>9}  p99 {:>9}  {:>6.1} txn/commit",
                    commit.label(),
                    group(r.rate),
                    ns(r.p50_ns),
                    ns(r.p99_ns),
                    r.per_commit
                );
                rounds_mut(&mut by_commit, commit).push(r);
            }
        }
        figures.push((writers, by_commit));
    }
    Ok(figures)
}

/// The key of writer `w`'s `n`th transaction: the round's prefix, then a scrambled counter.
fn key(prefix: [u8; 4], w: usize, n: u64) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..4].copy_from_slice(&prefix);
    key[4..].copy_from_slice(&mix(((w as u64) << 40) | n).to_be_bytes());
    key
}

fn commit_counts(stats: &StoreStats) -> (u64, u64) {
    (
        stats.commits.load(Ordering::Relaxed),
        stats.batches.load(Ordering::Relaxed),
    )
}

/// `writers` tasks commit 1-set transactions under `prefix` until the round's time is up;
/// then every acknowledged row is checked to be there.
async fn concurrent_round(
    store: &Store,
    writers: usize,
    prefix: [u8; 4],
    cfg: &Config,
) -> BenchResult<Round> {
    let (commits, batches) = commit_counts(store.stats());
    let start = Instant::now();
    let deadline = start + cfg.round_time();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut hist = histogram().map_err(|e| e.to_string())?;
                let mut n = 0;
                while Instant::now() < deadline {
                    let key = key(prefix, w, n);
                    let t = Instant::now();
                    store
                        .run(move |txn| txn.set(&key, &[0xA5; VALUE_LEN]))
                        .await
                        .map_err(|e| e.to_string())?;
                    hist.saturating_record(elapsed_ns(t));
                    n += 1;
                }
                Ok::<(u64, Histogram<u64>), String>((n, hist))
            })
        })
        .collect();
    let mut hist = histogram()?;
    let mut ops = 0;
    for task in tasks {
        let (n, h) = task.await??;
        ops += n;
        hist.add(h)?;
    }
    let mut round = Round::new(ops, start.elapsed().as_secs_f64(), &hist);
    let (commits_after, batches_after) = commit_counts(store.stats());
    round.per_commit = (commits_after - commits) as f64 / (batches_after - batches).max(1) as f64;

    let mut end = prefix;
    end[3] += 1;
    let rows = store.read_blocking(|txn| {
        Ok(txn
            .get_range(&prefix, &end, RangeOptions::default())?
            .iter()
            .filter(|(_, v)| v[..] == [0xA5; VALUE_LEN])
            .count())
    })?;
    if rows as u64 != ops {
        return Err(format!(
            "{writers} writers under {prefix:?}: {ops} transactions acknowledged, {rows} rows read back"
        )
        .into());
    }
    Ok(round)
}
