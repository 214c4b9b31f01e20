//! Measuring: timed rounds into latency histograms, the order of the ways compared, flushing
//! between rounds, and the medians and ratios of the rounds.

use std::path::Path;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::{BenchResult, Config};

/// What one round measured.
pub struct Round {
    /// Operations done.
    pub ops: u64,
    /// Operations per second.
    pub rate: f64,
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub mean_ns: f64,
    /// Transactions per durable commit (1 unless commits were shared).
    pub per_commit: f64,
}

impl Round {
    /// The figures of `ops` operations in `secs` seconds whose latencies are in `hist`.
    pub fn new(ops: u64, secs: f64, hist: &Histogram<u64>) -> Round {
        Round {
            ops,
            rate: ops as f64 / secs,
            p50_ns: hist.value_at_quantile(0.50) as f64,
            p99_ns: hist.value_at_quantile(0.99) as f64,
            mean_ns: hist.mean(),
            per_commit: 1.0,
        }
    }
}

/// A histogram of nanoseconds, from 1 ns to an hour, with 3 significant digits.
pub fn histogram() -> BenchResult<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 3_600_000_000_000, 3)?)
}

/// Runs `op` (which returns the nanoseconds it measured) until `cfg.seconds` have passed.
pub fn timed_round(
    cfg: &Config,
    mut op: impl FnMut(u64) -> BenchResult<u64>,
) -> BenchResult<Round> {
    let mut hist = histogram()?;
    let mut ops = 0;
    let start = Instant::now();
    while start.elapsed() < cfg.round_time() {
        hist.saturating_record(op(ops)?);
        ops += 1;
    }
    Ok(Round::new(ops, start.elapsed().as_secs_f64(), &hist))
}

pub fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// `items` rotated left by `round`, so that each one takes every position in turn.
pub fn rotated<T: Copy>(items: &[T], round: usize) -> Vec<T> {
    let mut order = items.to_vec();
    order.rotate_left(round % items.len());
    order
}

/// Flushes every file in `dir`, so that the next round does not pay for this one's writes.
pub fn settle(dir: &Path) -> BenchResult<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() {
            std::fs::File::open(&path)?.sync_all()?;
        }
    }
    Ok(())
}

pub type Figures<T> = Vec<(T, Vec<Round>)>;

pub fn rounds_mut<T: PartialEq + Copy>(figures: &mut Figures<T>, key: T) -> &mut Vec<Round> {
    let i = figures
        .iter()
        .position(|(k, _)| *k == key)
        .expect("every variant has a row");
    &mut figures[i].1
}

pub fn rounds<T: PartialEq + Copy>(figures: &Figures<T>, key: T) -> &[Round] {
    figures
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(&[], |(_, r)| r.as_slice())
}

/// A figure taken from a round.
pub type Metric = fn(&Round) -> f64;

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The median of `f` over the rounds.
pub fn med(rounds: &[Round], f: Metric) -> f64 {
    median(rounds.iter().map(f).collect())
}

/// `a / b` of the medians, then the lowest and highest ratio of a single round.
pub fn ratio(a: &[Round], b: &[Round], f: Metric) -> String {
    let per_round: Vec<f64> = a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect();
    let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2} ({lo:.2}-{hi:.2})", med(a, f) / med(b, f))
}
