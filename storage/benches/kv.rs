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
//! 3. the latency (p50, p99, mean) of reading a random user's last 50 turns with
//!    `UserData::last_turns` through `Store::read_blocking`, among 100,000 users of 50 turns,
//!    against the same range query through raw rusqlite, with and without decoding the turns;
//!    and the time and file size of loading those turns (transactions of ~5,000 turns through
//!    a `Store` opened with `synchronous = OFF`, reopened with `FULL` to measure).
//!
//! Every workload runs for a fixed time per round; the ways of doing it take turns (their
//! order rotates every round, and the files are flushed between rounds so that one round's
//! dirty pages do not slow the next one's fsyncs) and the median of the rounds is reported,
//! with the seam/raw ratio. Every round checks what it wrote or read (row counts, values,
//! 50 turns in order from the right session); a failed check exits with a non-zero status.
//!
//! Run: `cargo bench -p engram-storage --bench kv` (about 3-4 minutes on 2 cores), or add
//! `-- --quick` for a smoke run with 2,000 users. Options after `--`: `--users N`,
//! `--turns N` (per user), `--seconds S` (per round), `--rounds N`, `--dir PATH`, `--quick`.
//! Files go to a temporary directory under `target/tmp` (or under `--dir`) that is removed at
//! the end. It must be on a real disk: on tmpfs an fsync costs nothing (a warning says so).
//! The run ends with markdown tables for the README, headed by the command.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use engram_storage::codec::decode;
use engram_storage::data::UserData;
use engram_storage::model::{SessionRule, Timestamp, Turn};
use engram_storage::sqlite::{SqliteOptions, Synchronous};
use engram_storage::{Keyspace, RangeOptions, Store};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags, params};

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
const UPSERT: &str =
    "INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v";
const SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID";
const LAST_TURNS: &str = "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k DESC LIMIT ?3";
const USAGE: &str = "usage: cargo bench -p engram-storage --bench kv -- \
    [--quick] [--users N] [--turns N] [--seconds S] [--rounds N] [--dir PATH]";

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
        "config: {} users x {} turns, {} rounds of {}s per workload, files in {}",
        group(cfg.users as f64),
        cfg.turns,
        cfg.rounds,
        cfg.seconds,
        tmp.path().display()
    );

    let writes = bench_writes(tmp.path(), &cfg)?;
    let db = tmp.path().join("turns.sqlite");
    let load = load_turns(&db, &cfg)?;
    let reads = bench_reads(&db, &cfg)?;
    let report = Report {
        command,
        machine,
        cfg,
        writes,
        load,
        reads,
        total: started.elapsed(),
    };
    report.print();
    Ok(())
}

struct Config {
    users: u64,
    turns: u64,
    seconds: f64,
    rounds: usize,
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
                "--dir" => cfg.dir = Some(PathBuf::from(value)),
                other => return Err(format!("unknown option {other}\n{USAGE}").into()),
            }
        }
        if cfg.users == 0
            || cfg.turns == 0
            || cfg.rounds == 0
            || cfg.seconds.is_nan()
            || cfg.seconds <= 0.0
        {
            return Err(
                format!("users, turns, rounds and seconds must be positive\n{USAGE}").into(),
            );
        }
        Ok(cfg)
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

/// What one round measured.
struct Round {
    /// Operations done.
    ops: u64,
    /// Operations per second.
    rate: f64,
    p50_ns: f64,
    p99_ns: f64,
    mean_ns: f64,
}

/// Runs `op` (which returns the nanoseconds it measured) until `cfg.seconds` have passed.
fn timed_round(cfg: &Config, mut op: impl FnMut(u64) -> BenchResult<u64>) -> BenchResult<Round> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)?;
    let mut ops = 0;
    let start = Instant::now();
    while start.elapsed() < cfg.round_time() {
        hist.saturating_record(op(ops)?);
        ops += 1;
    }
    Ok(Round {
        ops,
        rate: ops as f64 / start.elapsed().as_secs_f64(),
        p50_ns: hist.value_at_quantile(0.50) as f64,
        p99_ns: hist.value_at_quantile(0.99) as f64,
        mean_ns: hist.mean(),
    })
}

fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// `items` rotated left by `round`, so that each one takes every position in turn.
fn rotated<T: Copy>(items: &[T], round: usize) -> Vec<T> {
    let mut order = items.to_vec();
    order.rotate_left(round % items.len());
    order
}

/// Flushes every file in `dir`, so that the next round does not pay for this one's writes.
fn settle(dir: &Path) -> BenchResult<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() {
            std::fs::File::open(&path)?.sync_all()?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Writes

/// The three ways of writing that are compared, each on its own file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    SeamFull,
    RawFull,
    SeamNormal,
}

const WRITERS: [Writer; 3] = [Writer::SeamFull, Writer::RawFull, Writer::SeamNormal];

impl Writer {
    fn label(self) -> &'static str {
        match self {
            Writer::SeamFull => "seam FULL",
            Writer::RawFull => "raw FULL",
            Writer::SeamNormal => "seam NORMAL",
        }
    }
}

struct Writers {
    seam_full: Store,
    raw: Connection,
    seam_normal: Store,
}

impl Writers {
    fn open(dir: &Path) -> BenchResult<Writers> {
        let full = SqliteOptions {
            synchronous: Synchronous::Full,
            ..SqliteOptions::default()
        };
        let normal = SqliteOptions {
            synchronous: Synchronous::Normal,
            ..SqliteOptions::default()
        };
        Ok(Writers {
            seam_full: Store::sqlite(&dir.join("writes-seam-full.sqlite"), full)?,
            raw: open_raw(&dir.join("writes-raw-full.sqlite"))?,
            seam_normal: Store::sqlite(&dir.join("writes-seam-normal.sqlite"), normal)?,
        })
    }

    /// Commits one transaction setting every key of `keys` to `value`.
    fn commit(&self, writer: Writer, keys: &[[u8; 14]], value: &[u8]) -> BenchResult<()> {
        let seam = |store: &Store| {
            store.run_blocking(|txn| {
                for key in keys {
                    txn.set(key, value)?;
                }
                Ok(())
            })
        };
        match writer {
            Writer::SeamFull => seam(&self.seam_full)?,
            Writer::SeamNormal => seam(&self.seam_normal)?,
            Writer::RawFull => {
                self.raw.execute_batch("BEGIN IMMEDIATE")?;
                {
                    let mut stmt = self.raw.prepare_cached(UPSERT)?;
                    for key in keys {
                        stmt.execute(params![&key[..], value])?;
                    }
                }
                self.raw.execute_batch("COMMIT")?;
            }
        }
        Ok(())
    }

    /// The number of rows in `[begin, end)` and the value at `key`, read the same way.
    fn read_back(
        &self,
        writer: Writer,
        (begin, end): (&[u8], &[u8]),
        key: &[u8],
    ) -> BenchResult<(usize, Option<Vec<u8>>)> {
        let seam = |store: &Store| {
            store.read_blocking(|txn| {
                let n = txn.get_range(begin, end, RangeOptions::default())?.len();
                Ok((n, txn.get(key)?))
            })
        };
        Ok(match writer {
            Writer::SeamFull => seam(&self.seam_full)?,
            Writer::SeamNormal => seam(&self.seam_normal)?,
            Writer::RawFull => {
                let count = "SELECT COUNT(*) FROM kv WHERE k >= ?1 AND k < ?2";
                let n: i64 = self
                    .raw
                    .query_row(count, params![begin, end], |row| row.get(0))?;
                let get = "SELECT v FROM kv WHERE k = ?1";
                (
                    usize::try_from(n)?,
                    self.raw.query_row(get, [key], |row| row.get(0)).ok(),
                )
            }
        })
    }
}

/// Opens a raw connection with the seam's flags, pragmas and table.
fn open_raw(path: &Path) -> BenchResult<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    let sync: i64 = conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") || sync != 2 {
        return Err(format!("raw connection: journal_mode {mode}, synchronous {sync}").into());
    }
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

/// A bijection on u64 (splitmix64's finalizer): unique keys in a random-looking order.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// `"w"`, a workload tag, the round, then the scrambled counter; the first 6 bytes are the
/// round's prefix.
fn write_key(tag: u8, round: u32, n: u64) -> [u8; 14] {
    let mut key = [0u8; 14];
    key[..2].copy_from_slice(&[b'w', tag]);
    key[2..6].copy_from_slice(&round.to_be_bytes());
    key[6..].copy_from_slice(&mix(n).to_be_bytes());
    key
}

/// One round of transactions of `batch` sets, then checks that every row is there.
fn write_round(
    writers: &Writers,
    writer: Writer,
    (tag, batch): (u8, usize),
    round: u32,
    cfg: &Config,
) -> BenchResult<Round> {
    let value = [0xA5u8; VALUE_LEN];
    let mut keys = Vec::with_capacity(batch);
    let r = timed_round(cfg, |txn| {
        keys.clear();
        keys.extend((0..batch as u64).map(|i| write_key(tag, round, txn * batch as u64 + i)));
        let t = Instant::now();
        writers.commit(writer, &keys, &value)?;
        Ok(elapsed_ns(t))
    })?;
    let written = r.ops * batch as u64;
    let (begin, end) = (write_key(tag, round, 0), write_key(tag, round + 1, 0));
    let (rows, last) = writers.read_back(writer, (&begin[..6], &end[..6]), &keys[batch - 1])?;
    if rows as u64 != written || last.as_deref() != Some(&value[..]) {
        return Err(format!(
            "{} round {round}: wrote {written} rows, read back {rows} (last value {})",
            writer.label(),
            if last.is_some() { "wrong" } else { "missing" }
        )
        .into());
    }
    Ok(r)
}

type Figures<T> = Vec<(T, Vec<Round>)>;

struct WriteFigures {
    single: Figures<Writer>,
    batched: Figures<Writer>,
}

fn bench_writes(dir: &Path, cfg: &Config) -> BenchResult<WriteFigures> {
    let writers = Writers::open(dir)?;
    let mut single = Vec::new();
    let mut batched = Vec::new();
    for (tag, batch, figures) in [(b's', 1, &mut single), (b'b', BATCH, &mut batched)] {
        println!(
            "\n## transactions of {batch} set(s), {} rounds of {}s",
            cfg.rounds, cfg.seconds
        );
        figures.extend(WRITERS.iter().map(|w| (*w, Vec::new())));
        for round in 0..cfg.rounds {
            for writer in rotated(&WRITERS, round) {
                let r = write_round(&writers, writer, (tag, batch), round as u32, cfg)?;
                settle(dir)?;
                println!(
                    "round {round} {:<11} {:>9} txn/s  p50 {:>9}  p99 {:>9}",
                    writer.label(),
                    group(r.rate),
                    ns(r.p50_ns),
                    ns(r.p99_ns)
                );
                rounds_mut(figures, writer).push(r);
            }
        }
    }
    Ok(WriteFigures { single, batched })
}

fn rounds_mut<T: PartialEq + Copy>(figures: &mut Figures<T>, key: T) -> &mut Vec<Round> {
    let i = figures
        .iter()
        .position(|(k, _)| *k == key)
        .expect("every variant has a row");
    &mut figures[i].1
}

fn rounds<T: PartialEq + Copy>(figures: &Figures<T>, key: T) -> &[Round] {
    figures
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(&[], |(_, r)| r.as_slice())
}

// ---------------------------------------------------------------------------------------------
// Loading turns

const VOCABULARY: &str = "show me revenue by region for the last quarter orders table \
    customer churn join on where group monthly active users compare with forecast sales \
    pipeline top 10 products margin and why did it drop in march dashboard filter segment \
    enterprise north america average order value week over returns SKU inventory";
const ROUTES: [&str; 4] = ["sql", "chat", "report", "search"];

fn user_id(u: u64) -> String {
    format!("user-{u:07}")
}

fn session_id(u: u64) -> String {
    format!("s-{:016x}", mix(u ^ 0x5E55_1011))
}

/// Makes turns with 100 to 300 bytes of text on each side.
struct TurnMaker {
    rng: SmallRng,
    words: Vec<&'static str>,
}

impl TurnMaker {
    fn new(seed: u64) -> Self {
        TurnMaker {
            rng: SmallRng::seed_from_u64(seed),
            words: VOCABULARY.split(' ').collect(),
        }
    }

    fn word(&mut self) -> &'static str {
        self.words[self.rng.random_range(0..self.words.len())]
    }

    fn text(&mut self) -> String {
        let target = self.rng.random_range(100..=300);
        let mut s = String::with_capacity(target + 16);
        while s.len() < target {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(self.word());
        }
        s.truncate(target);
        s
    }

    fn turn(&mut self, u: u64, seq: u64) -> Turn {
        let entities = (0..self.rng.random_range(0..4))
            .map(|_| self.word().to_owned())
            .collect();
        Turn {
            session_id: session_id(u),
            seq,
            request_id: format!("req-{:016x}", self.rng.random::<u64>()),
            trace_id: Some(format!("{:032x}", self.rng.random::<u128>())),
            route: Some(ROUTES[self.rng.random_range(0..ROUTES.len())].to_owned()),
            user_text: self.text(),
            assistant_text: self.text(),
            entities,
            created_at: Timestamp(1_750_000_000_000 + seq as i64 * 60_000),
        }
    }
}

struct LoadFigures {
    turns: u64,
    elapsed: Duration,
    flush: Duration,
    text_bytes: u64,
    file_bytes: u64,
}

/// Appends `cfg.turns` turns for each of `cfg.users` users (in key order), ~5,000 turns a
/// transaction, through a store opened with `synchronous = OFF`; closes it (which checkpoints
/// the WAL into the file) and flushes the file.
fn load_turns(path: &Path, cfg: &Config) -> BenchResult<LoadFigures> {
    println!(
        "\n## loading {} users x {} turns (synchronous OFF)",
        group(cfg.users as f64),
        cfg.turns
    );
    let keyspace = Keyspace::new("engram");
    let options = SqliteOptions {
        synchronous: Synchronous::Off,
        ..SqliteOptions::default()
    };
    let store = Store::sqlite(path, options)?;
    let users_per_txn = (LOAD_TXN_TURNS / cfg.turns).max(1);
    let mut maker = TurnMaker::new(7);
    let mut text_bytes = 0u64;
    let report_every = (cfg.users / 10).max(1);
    let start = Instant::now();
    let mut first = 0;
    while first < cfg.users {
        let last = (first + users_per_txn).min(cfg.users);
        let batch: Vec<(String, Vec<Turn>)> = (first..last)
            .map(|u| {
                (
                    user_id(u),
                    (0..cfg.turns).map(|s| maker.turn(u, s)).collect(),
                )
            })
            .collect();
        let turns = batch.iter().flat_map(|(_, turns)| turns);
        text_bytes += turns
            .map(|t| (t.user_text.len() + t.assistant_text.len()) as u64)
            .sum::<u64>();
        let misnumbered = store.run_blocking(|txn| {
            let mut misnumbered = 0;
            for (user, turns) in &batch {
                let mut data = UserData::new(txn, &keyspace, TENANT, user);
                for turn in turns {
                    let mut written = turn.clone();
                    data.append_turn(&mut written, RULE)?;
                    misnumbered += usize::from(written.seq != turn.seq);
                }
            }
            Ok(misnumbered)
        })?;
        if misnumbered > 0 {
            return Err(format!("append_turn numbered {misnumbered} turns unexpectedly").into());
        }
        if last / report_every != first / report_every || last == cfg.users {
            let secs = start.elapsed().as_secs_f64();
            let rate = (last * cfg.turns) as f64 / secs;
            println!(
                "{:>9} users {secs:>6.1}s {:>9} turns/s",
                group(last as f64),
                group(rate)
            );
        }
        first = last;
    }
    drop(store);
    let elapsed = start.elapsed();
    let t = Instant::now();
    settle(path.parent().unwrap_or(Path::new(".")))?;
    let flush = t.elapsed();
    let file_bytes = std::fs::metadata(path)?.len();
    println!(
        "loaded in {:.1}s, flushed in {:.1}s, file {}",
        elapsed.as_secs_f64(),
        flush.as_secs_f64(),
        bytes(file_bytes)
    );
    Ok(LoadFigures {
        turns: cfg.users * cfg.turns,
        elapsed,
        flush,
        text_bytes,
        file_bytes,
    })
}

// ---------------------------------------------------------------------------------------------
// Range reads

/// How a random user's last turns are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// `UserData::last_turns` through `Store::read_blocking`.
    Seam,
    /// The seam's SQL in a `BEGIN DEFERRED` transaction, keys built before the clock starts,
    /// values decoded into turns.
    RawDecoded,
    /// The same without decoding.
    RawBytes,
}

const READERS: [Reader; 3] = [Reader::Seam, Reader::RawDecoded, Reader::RawBytes];

impl Reader {
    fn label(self) -> &'static str {
        match self {
            Reader::Seam => "seam",
            Reader::RawDecoded => "raw+decode",
            Reader::RawBytes => "raw bytes",
        }
    }
}

fn bench_reads(path: &Path, cfg: &Config) -> BenchResult<Figures<Reader>> {
    let store = Store::sqlite(path, SqliteOptions::default())?;
    let raw = open_raw(path)?;
    let keyspace = Keyspace::new("engram");
    println!(
        "\n## last {READ_LIMIT} turns of a random user, {} rounds of {}s (synchronous FULL)",
        cfg.rounds, cfg.seconds
    );
    let mut figures: Figures<Reader> = READERS.iter().map(|r| (*r, Vec::new())).collect();
    for round in 0..cfg.rounds {
        for reader in rotated(&READERS, round) {
            // The same users in the same order for every reader.
            let mut rng = SmallRng::seed_from_u64(1_000 + round as u64);
            let r = timed_round(cfg, |_| {
                let u = rng.random_range(0..cfg.users);
                match reader {
                    Reader::Seam => read_seam(&store, &keyspace, u, cfg),
                    Reader::RawDecoded => read_raw(&raw, &keyspace, u, cfg, true),
                    Reader::RawBytes => read_raw(&raw, &keyspace, u, cfg, false),
                }
            })?;
            println!(
                "round {round} {:<10} {:>8} reads/s  p50 {:>9}  p99 {:>9}  mean {:>9}",
                reader.label(),
                group(r.rate),
                ns(r.p50_ns),
                ns(r.p99_ns),
                ns(r.mean_ns)
            );
            rounds_mut(&mut figures, reader).push(r);
        }
    }
    Ok(figures)
}

/// Reads user `u`'s last turns through the seam, checks them, and returns the nanoseconds
/// the read took.
fn read_seam(store: &Store, keyspace: &Keyspace, u: u64, cfg: &Config) -> BenchResult<u64> {
    let (user, session) = (user_id(u), session_id(u));
    let t = Instant::now();
    let turns = store.read_blocking(|txn| {
        UserData::new(txn, keyspace, TENANT, &user).last_turns(&session, READ_LIMIT)
    })?;
    let elapsed = elapsed_ns(t);
    check_turns(&turns, u, cfg, "seam")?;
    Ok(elapsed)
}

/// Reads user `u`'s last turns with raw SQL, checks them, and returns the nanoseconds the
/// read (and the decoding, if `decoded`) took.
fn read_raw(
    conn: &Connection,
    keyspace: &Keyspace,
    u: u64,
    cfg: &Config,
    decoded: bool,
) -> BenchResult<u64> {
    let (user, session) = (user_id(u), session_id(u));
    let keys = keyspace.user(TENANT, &user);
    let range = keys.turns(&session);
    let limit = READ_LIMIT as i64;
    let t = Instant::now();
    conn.execute_batch("BEGIN DEFERRED")?;
    let rows = {
        let mut stmt = conn.prepare_cached(LAST_TURNS)?;
        let rows = stmt.query_map(params![range.begin, range.end, limit], |row| {
            Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, Vec<u8>>(1)?))
        })?;
        rows.collect::<rusqlite::Result<Vec<_>>>()?
    };
    conn.execute_batch("COMMIT")?;
    let turns = if decoded {
        rows.iter()
            .rev()
            .map(|(_, v)| decode::<Turn>("turn", v))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let elapsed = elapsed_ns(t);
    if decoded {
        check_turns(&turns, u, cfg, "raw")?;
    } else {
        let (n, _) = cfg.expected_read();
        let descending = rows.windows(2).all(|w| w[0].0 > w[1].0);
        let newest = keys.turn(&session, cfg.turns - 1);
        if rows.len() != n || !descending || rows.first().map(|r| &r.0) != Some(&newest) {
            let n = rows.len();
            return Err(format!("raw read of {user}: {n} rows (descending: {descending})").into());
        }
    }
    Ok(elapsed)
}

/// Fails unless `turns` are user `u`'s last turns, oldest first, from their session.
fn check_turns(turns: &[Turn], u: u64, cfg: &Config, how: &str) -> BenchResult<()> {
    let (n, first) = cfg.expected_read();
    let session = session_id(u);
    let seqs: Vec<u64> = turns.iter().map(|t| t.seq).collect();
    let in_order = turns.len() == n && seqs.iter().copied().eq(first..cfg.turns);
    if !in_order
        || turns
            .iter()
            .any(|t| t.session_id != session || t.user_text.len() < 100)
    {
        return Err(format!(
            "{how} read of {}: {} turns, seqs {seqs:?}, expected {first}..{} of {session}",
            user_id(u),
            turns.len(),
            cfg.turns
        )
        .into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reporting

struct Report {
    command: String,
    machine: String,
    cfg: Config,
    writes: WriteFigures,
    load: LoadFigures,
    reads: Figures<Reader>,
    total: Duration,
}

/// A figure taken from a round.
type Metric = fn(&Round) -> f64;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The median of `f` over the rounds.
fn med(rounds: &[Round], f: Metric) -> f64 {
    median(rounds.iter().map(f).collect())
}

/// `a / b` of the medians, then the lowest and highest ratio of a single round.
fn ratio(a: &[Round], b: &[Round], f: Metric) -> String {
    let per_round: Vec<f64> = a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect();
    let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2} ({lo:.2}-{hi:.2})", med(a, f) / med(b, f))
}

impl Report {
    fn print(&self) {
        let cfg = &self.cfg;
        println!(
            "\n## Results: medians of {} rounds of {}s\n",
            cfg.rounds, cfg.seconds
        );
        println!(
            "`{}`  \n{}  \nrun time {:.0}s\n",
            self.command,
            self.machine,
            self.total.as_secs_f64()
        );

        let rate: Metric = |r| r.rate;
        let writes_per_s: Metric = |r| r.rate * BATCH as f64;
        let p50: Metric = |r| r.p50_ns;
        let p99: Metric = |r| r.p99_ns;
        let mean: Metric = |r| r.mean_ns;
        let fmt_count: fn(f64) -> String = group;
        let fmt_time: fn(f64) -> String = ns;

        println!(
            "| writes | seam (`Store`), FULL | raw rusqlite, FULL | seam / raw | seam, NORMAL |"
        );
        println!("|---|---:|---:|---:|---:|");
        let (single, batched) = (&self.writes.single, &self.writes.batched);
        for (label, figures, f, fmt) in [
            ("1-set txn/s", single, rate, fmt_count),
            ("1-set txn p50", single, p50, fmt_time),
            ("1-set txn p99", single, p99, fmt_time),
            ("100-set txn/s", batched, rate, fmt_count),
            ("100-set writes/s", batched, writes_per_s, fmt_count),
            ("100-set txn p50", batched, p50, fmt_time),
        ] {
            table_row(label, figures, WRITERS, f, fmt);
        }

        let (n, _) = cfg.expected_read();
        println!(
            "\n| last {n} turns of 1 of {} users | seam (`Store`) | raw SQL + decode | seam / raw \
             | raw SQL, bytes only |",
            group(cfg.users as f64)
        );
        println!("|---|---:|---:|---:|---:|");
        for (label, f) in [("p50", p50), ("p99", p99), ("mean", mean)] {
            table_row(label, &self.reads, READERS, f, fmt_time);
        }

        let load = &self.load;
        let secs = load.elapsed.as_secs_f64();
        println!(
            "\nLoad: {} turns ({} users x {}, {} bytes of text a turn on average), {} turns a \
             transaction, synchronous OFF: {secs:.1}s ({} turns/s), then {:.1}s to flush; \
             file {}.  ",
            group(load.turns as f64),
            group(cfg.users as f64),
            cfg.turns,
            load.text_bytes / load.turns.max(1),
            group(((LOAD_TXN_TURNS / cfg.turns).max(1) * cfg.turns) as f64),
            group(load.turns as f64 / secs),
            load.flush.as_secs_f64(),
            bytes(load.file_bytes)
        );
        println!(
            "Writes: {VALUE_LEN}-byte values under 14-byte keys in random order, one file per \
             column, files flushed between rounds. Reads: one thread, file in the OS page cache, \
             every read checked. Ratios: median of the seam over median of raw (lowest-highest \
             single round); above 1 is slower for times, below 1 is slower for rates."
        );
    }
}

/// One table row: the seam, the baseline, their ratio, and a third way.
fn table_row<T: PartialEq + Copy>(
    label: &str,
    figures: &Figures<T>,
    [seam, raw, other]: [T; 3],
    f: Metric,
    fmt: fn(f64) -> String,
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
fn machine_line(dir: &Path) -> String {
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
fn group(value: f64) -> String {
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

fn ns(value: f64) -> String {
    match value {
        v if v >= 1e6 => format!("{:.2} ms", v / 1e6),
        v if v >= 1e3 => format!("{:.1} µs", v / 1e3),
        v => format!("{v:.0} ns"),
    }
}

fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", n / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    }
}
