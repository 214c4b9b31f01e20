//! Reading a random user's last turns through the seam against the same query through raw
//! rusqlite, with and without decoding.

use std::path::Path;
use std::time::Instant;

use engram_storage::codec::decode;
use engram_storage::data::UserData;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::Turn;
use engram_storage::{Keyspace, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, params};

use crate::load::{session_id, user_id};
use crate::measure::{Figures, elapsed_ns, rotated, rounds_mut, timed_round};
use crate::report::{group, ns};
use crate::writes::open_raw;
use crate::{BenchResult, Config, READ_LIMIT, TENANT};

const LAST_TURNS: &str = "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k DESC LIMIT ?3";

/// How a random user's last turns are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// `UserData::last_turns` through `Store::read_blocking`.
    Seam,
    /// The seam's SQL in a `BEGIN DEFERRED` transaction, keys built before the clock starts,
    /// values decoded into turns.
    RawDecoded,
    /// The same without decoding.
    RawBytes,
}

pub const READERS: [Reader; 3] = [Reader::Seam, Reader::RawDecoded, Reader::RawBytes];

impl Reader {
    pub fn label(self) -> &'static str {
        match self {
            Reader::Seam => "seam",
            Reader::RawDecoded => "raw+decode",
            Reader::RawBytes => "raw bytes",
        }
    }
}

pub fn bench_reads(path: &Path, cfg: &Config) -> BenchResult<Figures<Reader>> {
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
