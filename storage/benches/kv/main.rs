//! SQLite through the `Store` seam against raw rusqlite, on a real disk: a program that
//! prints figures, not a test (it gates nothing in CI).
//!
//! In one run, so that figures are comparable on a noisy shared machine, it measures:
//! 1. durable single-write transactions per second: one 100-byte set per transaction through
//!    `Store::run_blocking` with `synchronous = FULL`, against the same SQL through raw
//!    rusqlite (WAL, `synchronous = FULL`, the same `WITHOUT ROWID` table), plus the seam with
//!    `synchronous = NORMAL` to show what the fsync costs;
//! 2. batched transactions (100 sets each) per second and writes per second, the same three
//!    ways;
//! 3. concurrent durable single-write transactions: C tokio tasks (1, 16, 64, 256) each
//!    committing one 100-byte set per transaction on keys of its own through `Store::run`
//!    with `synchronous = FULL`, with group commit (the default) against without (every
//!    transaction commits and fsyncs on its own): transactions per second, p50 and p99
//!    latency, and transactions per durable commit;
//! 4. the latency (p50, p99, mean) of reading a random user's last 50 turns with
//!    `UserData::last_turns` through `Store::read_blocking`, among 100,000 users of 50 turns,
//!    against the same range query through raw rusqlite, with and without decoding the turns;
//!    and the time and file size of loading those turns (transactions of ~5,000 turns through
//!    a `Store` opened with `synchronous = OFF`, reopened with `FULL` to measure).
//!
//! Every workload runs for a fixed time per round; the ways of doing it take turns (their
//! order rotates every round, and the files are flushed between rounds so that one round's
//! dirty pages do not slow the next one's fsyncs) and the median of the rounds is reported,
//! with the ratio of the two ways compared. Every round checks what it wrote or read (row
//! counts, values, 50 turns in order from the right session); a failed check exits with a
//! non-zero status.
//!
//! Run: `cargo bench -p engram-storage --bench kv` (about 6 minutes on 2 cores), or add
//! `-- --quick` for a smoke run with 2,000 users. Options after `--`: `--users N`,
//! `--turns N` (per user), `--seconds S` (per round), `--rounds N`, `--writers 1,16,64,256`
//! (the concurrency levels of workload 3), `--only writes,concurrent,reads` (a subset of the
//! workloads; `reads` includes the load), `--dir PATH`, `--quick`.
//! Files go to a temporary directory under `target/tmp` (or under `--dir`) that is removed at
//! the end. It must be on a real disk: on tmpfs an fsync costs nothing (a warning says so).
//! The run ends with markdown tables for docs/benchmarks.md, headed by the command.

mod concurrent;
mod load;
mod measure;
mod reads;
mod report;
mod writes;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use engram_storage::types::SessionRule;

use crate::report::{Report, group, machine_line};

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// Sets per batched transaction.
const BATCH: usize = 100;
/// Bytes of each value written by the write workloads.
const VALUE_LEN: usize = 100;
/// Turns read per range read.
const READ_LIMIT: usize = 50;
/// Turns per transaction while loading.
const LOAD_TXN_TURNS: u64 = 5_000;
const TENANT: &str = "acme";
const USAGE: &str = "usage: cargo bench -p engram-storage --bench kv -- \
    [--quick] [--users N] [--turns N] [--seconds S] [--rounds N] [--writers C,C,..] \
    [--only writes,concurrent,reads] [--dir PATH]";

/// Session rule of the load: windows and retention never close within the benchmark.
const RULE: SessionRule = SessionRule {
    max_turns: u32::MAX,
    idle_ms: i64::MAX,
    retention_ms: 1 << 50,
};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kv bench failed: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> BenchResult<()> {
    // `cargo bench` passes `--bench` to every benchmark binary.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let cfg = Config::parse(&args)?;
    let started = Instant::now();
    let base = cfg
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base)?;
    let tmp = tempfile::Builder::new()
        .prefix("engram-kv-bench-")
        .tempdir_in(&base)?;
    let mut command = String::from("cargo bench -p engram-storage --bench kv");
    if !args.is_empty() {
        command = format!("{command} -- {}", args.join(" "));
    }
    let machine = machine_line(tmp.path());
    println!("# engram-storage kv bench\ncommand: {command}\n{machine}");
    println!(
        "config: {} users x {} turns, {} rounds of {}s per workload, writers {:?}, files in {}",
        group(cfg.users as f64),
        cfg.turns,
        cfg.rounds,
        cfg.seconds,
        cfg.writers,
        tmp.path().display()
    );

    let writes = cfg
        .runs("writes")
        .then(|| writes::bench_writes(tmp.path(), &cfg))
        .transpose()?;
    let concurrent = cfg
        .runs("concurrent")
        .then(|| concurrent::bench_concurrent(tmp.path(), &cfg))
        .transpose()?;
    let turns = if cfg.runs("reads") {
        let db = tmp.path().join("turns.sqlite");
        let load = load::load_turns(&db, &cfg)?;
        Some((load, reads::bench_reads(&db, &cfg)?))
    } else {
        None
    };
    let report = Report {
        command,
        machine,
        cfg,
        writes,
        concurrent,
        turns,
        total: started.elapsed(),
    };
    report.print();
    Ok(())
}

/// The workloads a run may do, for `--only`.
const WORKLOADS: [&str; 3] = ["writes", "concurrent", "reads"];

struct Config {
    users: u64,
    turns: u64,
    seconds: f64,
    rounds: usize,
    /// Concurrency levels of the concurrent workload.
    writers: Vec<usize>,
    /// The workloads to run.
    only: Vec<String>,
    dir: Option<PathBuf>,
}

impl Config {
    fn parse(args: &[String]) -> BenchResult<Config> {
        let quick = args.iter().any(|a| a == "--quick");
        let (users, seconds, rounds) = if quick {
            (2_000, 0.3, 3)
        } else {
            (100_000, 3.0, 5)
        };
        let mut cfg = Config {
            users,
            turns: 50,
            seconds,
            rounds,
            writers: vec![1, 16, 64, 256],
            only: WORKLOADS.iter().map(|w| w.to_string()).collect(),
            dir: None,
        };
        let mut it = args.iter().filter(|a| *a != "--quick");
        while let Some(arg) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{arg} {value}: {e}\n{USAGE}");
            match arg.as_str() {
                "--users" => cfg.users = value.parse().map_err(|e| bad(&e))?,
                "--turns" => cfg.turns = value.parse().map_err(|e| bad(&e))?,
                "--seconds" => cfg.seconds = value.parse().map_err(|e| bad(&e))?,
                "--rounds" => cfg.rounds = value.parse().map_err(|e| bad(&e))?,
                "--writers" => {
                    cfg.writers = value
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<_, _>>()
                        .map_err(|e| bad(&e))?;
                }
                "--only" => {
                    cfg.only = value.split(',').map(str::to_owned).collect();
                    if let Some(w) = cfg.only.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
                        return Err(bad(&format!("unknown workload {w}")).into());
                    }
                }
                "--dir" => cfg.dir = Some(PathBuf::from(value)),
                other => return Err(format!("unknown option {other}\n{USAGE}").into()),
            }
        }
        if cfg.users == 0
            || cfg.turns == 0
            || cfg.rounds == 0
            || cfg.seconds.is_nan()
            || cfg.seconds <= 0.0
            || cfg.writers.contains(&0)
        {
            return Err(format!(
                "users, turns, rounds, seconds and writers must be positive\n{USAGE}"
            )
            .into());
        }
        Ok(cfg)
    }

    /// Whether `workload` is to run.
    fn runs(&self, workload: &str) -> bool {
        self.only.iter().any(|w| w == workload)
    }

    fn round_time(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }

    /// Turns a read returns and the first sequence number among them.
    fn expected_read(&self) -> (usize, u64) {
        let n = READ_LIMIT.min(self.turns as usize);
        (n, self.turns - n as u64)
    }
}
