//! Durable writes through the seam against raw rusqlite: transactions of one set and of 100
//! sets, with `synchronous = FULL` (and the seam with `NORMAL`), one file per way.

use std::path::Path;
use std::time::{Duration, Instant};

use engram_storage::sqlite::{SqliteOptions, Synchronous};
use engram_storage::{RangeOptions, Store};
use rusqlite::{Connection, OpenFlags, params};

use crate::measure::{Figures, Round, elapsed_ns, rotated, rounds_mut, settle, timed_round};
use crate::report::{group, ns};
use crate::{BATCH, BenchResult, Config, VALUE_LEN};

const UPSERT: &str =
    "INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v";
const SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID";

/// The three ways of writing that are compared, each on its own file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    SeamFull,
    RawFull,
    SeamNormal,
}

pub const WRITERS: [Writer; 3] = [Writer::SeamFull, Writer::RawFull, Writer::SeamNormal];

impl Writer {
    pub fn label(self) -> &'static str {
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
pub fn open_raw(path: &Path) -> BenchResult<Connection> {
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
pub fn mix(mut x: u64) -> u64 {
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

pub struct WriteFigures {
    pub single: Figures<Writer>,
    pub batched: Figures<Writer>,
}

pub fn bench_writes(dir: &Path, cfg: &Config) -> BenchResult<WriteFigures> {
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
