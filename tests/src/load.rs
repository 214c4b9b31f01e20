//! The workload of the `loadgen` benchmark: who is picked (uniform or Zipf over the user
//! population), what is sent (turns with unique request ids, context reads, memory records
//! for seeding), and how results are counted and printed (latency histograms per operation,
//! a markdown table).
//!
//! Only request bodies and bookkeeping live here; the binary (`src/bin/loadgen.rs`) owns the
//! command line, the node and the clients. Randomness comes from a seeded RNG, so two runs
//! with the same seed send the same sequence of operations per worker.

pub mod questions;

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::Rng;
use serde_json::{Value, json};

/// Session every benchmark turn goes to (and every context read names).
pub const SESSION: &str = "bench";

/// How users are picked.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// Every user equally often.
    Uniform,
    /// User of rank `k` (1-based) with weight `1 / k^s`.
    Zipf(f64),
}

/// Picks users from a population of `n` by a [`Distribution`].
#[derive(Debug, Clone)]
pub struct UserPicker {
    users: usize,
    /// Cumulative weights, normalised to end at 1 (empty for uniform).
    cdf: Vec<f64>,
}

impl UserPicker {
    /// A picker over users `0..users`.
    ///
    /// # Panics
    /// If `users` is 0 or the Zipf exponent is negative or not finite.
    pub fn new(users: usize, distribution: &Distribution) -> Self {
        assert!(users > 0, "at least one user");
        let cdf = match distribution {
            Distribution::Uniform => Vec::new(),
            Distribution::Zipf(s) => {
                assert!(
                    s.is_finite() && *s >= 0.0,
                    "zipf exponent {s} must be finite and >= 0"
                );
                let mut sum = 0.0;
                let mut cdf: Vec<f64> = (1..=users)
                    .map(|k| {
                        sum += 1.0 / (k as f64).powf(*s);
                        sum
                    })
                    .collect();
                for c in &mut cdf {
                    *c /= sum;
                }
                cdf
            }
        };
        UserPicker { users, cdf }
    }

    /// The population size.
    pub fn users(&self) -> usize {
        self.users
    }

    /// A user index in `0..users` (rank 1 of a Zipf distribution is index 0).
    pub fn pick(&self, rng: &mut impl Rng) -> usize {
        if self.cdf.is_empty() {
            return rng.random_range(0..self.users);
        }
        let u: f64 = rng.random();
        self.cdf.partition_point(|&c| c < u).min(self.users - 1)
    }
}

/// The id of user `i`.
pub fn user_id(i: usize) -> String {
    format!("u{i:05}")
}

const REGIONS: [&str; 6] = [
    "East China",
    "North China",
    "South China",
    "Central China",
    "Northeast",
    "Southwest",
];
const MONTHS: [&str; 6] = ["January", "March", "May", "July", "October", "December"];
const TABLES: [&str; 5] = [
    "dw_orders",
    "dw_refunds",
    "dim_customer",
    "fact_sales",
    "dw_inventory",
];
const METRICS: [&str; 5] = [
    "GMV",
    "OrderCount",
    "RefundRate",
    "AvgBasket",
    "ActiveUsers",
];

fn pick<'a>(rng: &mut impl Rng, words: &[&'a str]) -> &'a str {
    words[rng.random_range(0..words.len())]
}

/// A turn of an analytics conversation, with a unique `request_id`.
pub fn append_body(request_id: &str, rng: &mut impl Rng) -> Value {
    let (metric, region, month, table) = (
        pick(rng, &METRICS),
        pick(rng, &REGIONS),
        pick(rng, &MONTHS),
        pick(rng, &TABLES),
    );
    json!({
        "request_id": request_id,
        "session_id": SESSION,
        "route": "nl2sql_query",
        "user_text": format!("Show {metric} of {region} in {month} from {table}, by week"),
        "assistant_text": format!("{metric} of {region} in {month}: 4 weekly rows from {table}."),
    })
}

/// A context request for the next question of the benchmark session.
pub fn context_body(rng: &mut impl Rng) -> Value {
    let (metric, region) = (pick(rng, &METRICS), pick(rng, &REGIONS));
    json!({
        "session_id": SESSION,
        "query": format!("and what about {metric} in {region}?"),
        "route": "nl2sql_query",
    })
}

/// The `i`-th active memory record seeded for a user: kinds and words vary, so retrieval has
/// something to rank.
pub fn memory_body(request_id: &str, i: usize) -> Value {
    let kinds = ["profile", "episodic", "correction"];
    let text = format!(
        "note {i}: {} for {} in {} is read from {}",
        METRICS[i % METRICS.len()],
        REGIONS[(i / 5) % REGIONS.len()],
        MONTHS[(i / 30) % MONTHS.len()],
        TABLES[(i / 7) % TABLES.len()],
    );
    json!({ "request_id": request_id, "kind": kinds[i % kinds.len()], "text": text, "status": "active" })
}

/// An operation the benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `POST /v1/users/{u}/turns`.
    Append,
    /// `POST /v1/users/{u}/context`.
    Context,
    /// `POST /v1/users/{u}/memories` (seeding).
    Seed,
}

impl Op {
    /// Every operation, in report order.
    pub const ALL: [Op; 3] = [Op::Append, Op::Context, Op::Seed];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Op::Append => "append turn",
            Op::Context => "context read",
            Op::Seed => "seed memory record",
        }
    }

    fn index(self) -> usize {
        match self {
            Op::Append => 0,
            Op::Context => 1,
            Op::Seed => 2,
        }
    }
}

/// Latencies (microseconds) and failures per operation.
#[derive(Debug, Clone)]
pub struct Stats {
    latency: [Histogram<u64>; 3],
    errors: [u64; 3],
}

impl Default for Stats {
    fn default() -> Self {
        let histogram =
            || Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds");
        Stats {
            latency: [histogram(), histogram(), histogram()],
            errors: [0; 3],
        }
    }
}

impl Stats {
    /// Records a successful `op` that took `took`.
    pub fn record(&mut self, op: Op, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        self.latency[op.index()].saturating_record(micros);
    }

    /// Counts a failed `op`.
    pub fn error(&mut self, op: Op) {
        self.errors[op.index()] += 1;
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Stats) {
        for op in Op::ALL {
            let i = op.index();
            self.latency[i]
                .add(&other.latency[i])
                .expect("histograms with the same bounds");
            self.errors[i] += other.errors[i];
        }
    }

    /// Successful `op`s.
    pub fn count(&self, op: Op) -> u64 {
        self.latency[op.index()].len()
    }

    /// Failed `op`s.
    pub fn errors(&self, op: Op) -> u64 {
        self.errors[op.index()]
    }

    /// The `q` quantile of `op`'s latency.
    pub fn quantile(&self, op: Op, q: f64) -> Duration {
        Duration::from_micros(self.latency[op.index()].value_at_quantile(q))
    }

    /// A markdown table of the operations that ran, over `elapsed`.
    pub fn table(&self, elapsed: Duration) -> String {
        let mut out = String::from(
            "| operation | ok | errors | throughput (ops/s) | p50 | p99 | max |\n|---|---:|---:|---:|---:|---:|---:|\n",
        );
        let secs = elapsed.as_secs_f64().max(1e-9);
        for op in Op::ALL {
            let (ok, errors) = (self.count(op), self.errors(op));
            if ok + errors == 0 {
                continue;
            }
            let max = Duration::from_micros(self.latency[op.index()].max());
            let _ = writeln!(
                out,
                "| {} | {ok} | {errors} | {:.0} | {} | {} | {} |",
                op.name(),
                ok as f64 / secs,
                human(self.quantile(op, 0.5)),
                human(self.quantile(op, 0.99)),
                human(max),
            );
        }
        out
    }
}

/// `850 µs`, `12.3 ms`, `1.52 s`.
pub fn human(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1_000 {
        format!("{micros} µs")
    } else if micros < 1_000_000 {
        format!("{:.2} ms", micros as f64 / 1e3)
    } else {
        format!("{:.2} s", micros as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests;
