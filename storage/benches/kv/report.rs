//! The report at the end of a run: markdown tables of the medians, with the command and the
//! machine, for docs/benchmarks.md; and the formatting of figures.

use std::path::Path;
use std::time::Duration;

use crate::concurrent::{COMMITS, Commit, ConcurrentFigures};
use crate::load::LoadFigures;
use crate::measure::{Figures, Metric, med, ratio, rounds};
use crate::reads::{READERS, Reader};
use crate::writes::{WRITERS, WriteFigures};
use crate::{BATCH, Config, LOAD_TXN_TURNS, VALUE_LEN};

pub struct Report {
    pub command: String,
    pub machine: String,
    pub cfg: Config,
    pub writes: Option<WriteFigures>,
    pub concurrent: Option<ConcurrentFigures>,
    pub turns: Option<(LoadFigures, Figures<Reader>)>,
    pub total: Duration,
}

/// Formats a figure for a table.
type Format = fn(f64) -> String;

const RATE: Metric = |r| r.rate;
const P50: Metric = |r| r.p50_ns;
const P99: Metric = |r| r.p99_ns;
const MEAN: Metric = |r| r.mean_ns;

impl Report {
    pub fn print(&self) {
        let cfg = &self.cfg;
        println!(
            "\n## Results: medians of {} rounds of {}s\n",
            cfg.rounds, cfg.seconds
        );
        println!(
            "`{}`  \n{}  \nrun time {:.0}s",
            self.command,
            self.machine,
            self.total.as_secs_f64()
        );
        if let Some(writes) = &self.writes {
            print_writes(writes);
        }
        if let Some(concurrent) = &self.concurrent {
            print_concurrent(concurrent);
        }
        if let Some((load, reads)) = &self.turns {
            print_turns(cfg, load, reads);
        }
        println!(
            "\nWrites: {VALUE_LEN}-byte values under 14-byte keys (12 for concurrent writers) in \
             random order, one file per column, files flushed between rounds. Reads: one \
             thread, file in the OS page cache, every read checked. Ratios: median of the first \
             way over median of the second (lowest-highest single round); above 1 is slower for \
             times, below 1 is slower for rates."
        );
    }
}

fn print_writes(writes: &WriteFigures) {
    let writes_per_s: Metric = |r| r.rate * BATCH as f64;
    let count: Format = group;
    let time: Format = ns;
    println!(
        "\n| writes, one writer | seam (`Store`), FULL | raw rusqlite, FULL | seam / raw | seam, NORMAL |"
    );
    println!("|---|---:|---:|---:|---:|");
    let (single, batched) = (&writes.single, &writes.batched);
    for (label, figures, f, fmt) in [
        ("1-set txn/s", single, RATE, count),
        ("1-set txn p50", single, P50, time),
        ("1-set txn p99", single, P99, time),
        ("100-set txn/s", batched, RATE, count),
        ("100-set writes/s", batched, writes_per_s, count),
        ("100-set txn p50", batched, P50, time),
    ] {
        table_row(label, figures, WRITERS, f, fmt);
    }
}

fn print_concurrent(concurrent: &ConcurrentFigures) {
    let [on, off] = COMMITS;
    println!(
        "\n| concurrent writers, 1-set txns via `Store::run`, FULL | txn/s, {} | txn/s, {} | \
         ratio | p50, {0} | p50, {1} | p99, {0} | p99, {1} | txns per commit, {0} |",
        on.label(),
        off.label()
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let per_commit: Metric = |r| r.per_commit;
    for (writers, figures) in concurrent {
        let fig = |commit: Commit, f: Metric| med(rounds(figures, commit), f);
        println!(
            "| {writers} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            group(fig(on, RATE)),
            group(fig(off, RATE)),
            ratio(rounds(figures, on), rounds(figures, off), RATE),
            ns(fig(on, P50)),
            ns(fig(off, P50)),
            ns(fig(on, P99)),
            ns(fig(off, P99)),
            fig(on, per_commit)
        );
    }
}

fn print_turns(cfg: &Config, load: &LoadFigures, reads: &Figures<Reader>) {
    let (n, _) = cfg.expected_read();
    println!(
        "\n| last {n} turns of 1 of {} users | seam (`Store`) | raw SQL + decode | seam / raw \
         | raw SQL, bytes only |",
        group(cfg.users as f64)
    );
    println!("|---|---:|---:|---:|---:|");
    for (label, f) in [("p50", P50), ("p99", P99), ("mean", MEAN)] {
        table_row(label, reads, READERS, f, ns);
    }
    let secs = load.elapsed.as_secs_f64();
    println!(
        "\nLoad: {} turns ({} users x {}, {} bytes of text a turn on average), {} turns a \
         transaction, synchronous OFF: {secs:.1}s ({} turns/s), then {:.1}s to flush; \
         file {}.",
        group(load.turns as f64),
        group(cfg.users as f64),
        cfg.turns,
        load.text_bytes / load.turns.max(1),
        group(((LOAD_TXN_TURNS / cfg.turns).max(1) * cfg.turns) as f64),
        group(load.turns as f64 / secs),
        load.flush.as_secs_f64(),
        bytes(load.file_bytes)
    );
}

/// One table row: the seam, the baseline, their ratio, and a third way.
fn table_row<T: PartialEq + Copy>(
    label: &str,
    figures: &Figures<T>,
    [seam, raw, other]: [T; 3],
    f: Metric,
    fmt: Format,
) {
    let (a, b) = (rounds(figures, seam), rounds(figures, raw));
    let third = fmt(med(rounds(figures, other), f));
    println!(
        "| {label} | {} | {} | {} | {third} |",
        fmt(med(a, f)),
        fmt(med(b, f)),
        ratio(a, b, f)
    );
}

/// Cores, CPU, memory, SQLite version and the file system holding `dir`.
pub fn machine_line(dir: &Path) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
        })
        .map_or("unknown cpu", str::trim)
        .to_owned();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fs = filesystem_of(dir);
    if fs.starts_with("tmpfs") || fs.starts_with("ramfs") {
        eprintln!(
            "WARNING: {} is on {fs}: fsync costs nothing there",
            dir.display()
        );
    }
    format!(
        "machine: {cores} cores ({cpu}), {} RAM, SQLite {}, files on {fs}",
        bytes(mem_kb * 1024),
        rusqlite::version()
    )
}

/// The type and device of the mount holding `dir`, from `/proc/self/mounts`.
fn filesystem_of(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, point, fs) = (fields.next()?, fields.next()?, fields.next()?);
            Some((device, point.replace("\\040", " "), fs))
        })
        .filter(|(_, point, _)| dir.starts_with(point))
        .max_by_key(|(_, point, _)| point.len())
        .map_or_else(
            || "unknown fs".to_owned(),
            |(device, _, fs)| format!("{fs} ({device})"),
        )
}

/// `1234567.8` as `1,234,568`.
pub fn group(value: f64) -> String {
    let digits = format!("{value:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 && c != '-' {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn ns(value: f64) -> String {
    match value {
        v if v >= 1e6 => format!("{:.2} ms", v / 1e6),
        v if v >= 1e3 => format!("{:.1} µs", v / 1e3),
        v => format!("{v:.0} ns"),
    }
}

pub fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", n / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    }
}
