//! What forgetting a user costs on SQLite as the store grows: the forget's transaction alone
//! (every key of the user cleared) against the erase that follows it before a node answers
//! (`Store::erase_history`: the file rebuilt from its live rows, the WAL truncated). A program
//! that prints figures, not a test.
//!
//! For each store size it loads users of `--turns` turns (texts of about 200 bytes, through
//! `UserData`, in transactions with `synchronous = OFF`), reopens the store as a node does
//! (`synchronous = FULL`), then forgets `--rounds` users one after another, timing each step;
//! it prints the medians, the erase's time per MB of store, and checks that each forgotten
//! user's id is in no file of the store afterwards (a failed check exits non-zero).
//!
//! Run: `cargo bench -p engram-storage --bench forget` (about a minute on 2 cores); options
//! after `--`: `--users 1000,4000,16000` (store sizes, in users), `--turns N`, `--rounds N`,
//! `--dir PATH` (a real disk; a temporary directory under `target/tmp` by default).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use engram_storage::data::UserData;
use engram_storage::sqlite::{SqliteOptions, Synchronous};
use engram_storage::types::{PiiLevel, SessionRule, Timestamp, Turn};
use engram_storage::{Keyspace, Store};

type BenchResult<T> = Result<T, Box<dyn Error>>;

const RULE: SessionRule = SessionRule {
    max_turns: u32::MAX,
    idle_ms: i64::MAX,
    retention_ms: 1 << 50,
};
const USAGE: &str = "usage: cargo bench -p engram-storage --bench forget -- \
    [--users N,N,..] [--turns N] [--rounds N] [--dir PATH]";

struct Args {
    users: Vec<usize>,
    turns: u64,
    rounds: usize,
    dir: Option<PathBuf>,
}

fn parse() -> BenchResult<Args> {
    let mut args = Args {
        users: vec![1_000, 4_000, 16_000],
        turns: 20,
        rounds: 5,
        dir: None,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(USAGE);
        match flag.as_str() {
            "--users" => {
                args.users = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--turns" => args.turns = value()?.parse()?,
            "--rounds" => args.rounds = value()?.parse()?,
            "--dir" => args.dir = Some(value()?.into()),
            _ => return Err(USAGE.into()),
        }
    }
    Ok(args)
}

fn turn(user: usize, seq: u64) -> Turn {
    Turn {
        session_id: "s1".into(),
        seq: 0,
        request_id: format!("r-{user}-{seq}"),
        user_text: format!(
            "user {user} asks, for the {seq}th time, for the orders of East China in October \
             from dw_orders with an amount over 1000, grouped by city and sorted by total"
        ),
        assistant_text: "Found 1,284 orders of East China in October with amount over 1000.".into(),
        trace_id: None,
        route: Some("nl2sql_query".into()),
        entities: vec!["dw_orders".into()],
        pii_level: PiiLevel::None,
        created_at: Timestamp(1_700_000_000_000 + i64::try_from(seq).unwrap_or(0) * 60_000),
        written_under: None,
    }
}

fn user_id(i: usize) -> String {
    format!("user-{i:07}")
}

fn load(path: &Path, users: usize, turns: u64) -> BenchResult<()> {
    let options = SqliteOptions {
        synchronous: Synchronous::Off,
        ..SqliteOptions::default()
    };
    let store = Store::sqlite(path, options)?;
    let ks = Keyspace::new("engram");
    for chunk in (0..users).collect::<Vec<_>>().chunks(200) {
        store.run_blocking(|txn| {
            for &u in chunk {
                let id = user_id(u);
                let mut data = UserData::new(txn, &ks, "acme", &id);
                for seq in 0..turns {
                    data.append_turn(&mut turn(u, seq), RULE)?;
                }
            }
            Ok(())
        })?;
    }
    Ok(())
}

fn store_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn found_in_files(dir: &Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            std::fs::read(e.path())
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("forget bench failed: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> BenchResult<()> {
    let args = parse()?;
    let base = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tmp"));
    std::fs::create_dir_all(&base)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "cargo bench -p engram-storage --bench forget -- --users {} --turns {} --rounds {}",
        args.users
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        args.turns,
        args.rounds
    );
    println!();
    println!(
        "| users | store MB | forget transaction, median ms | erase (VACUUM + WAL truncate), median ms | erase ms per MB |"
    );
    println!("|---|---|---|---|---|");
    for &users in &args.users {
        let dir = tempfile::tempdir_in(&base)?;
        let path = dir.path().join("forget.sqlite");
        load(&path, users, args.turns)?;
        let store = Store::sqlite(&path, SqliteOptions::default())?;
        let ks = Keyspace::new("engram");
        let mut forgets = Vec::new();
        let mut erases = Vec::new();
        let mut megabytes = 0.0;
        for round in 0..args.rounds.min(users) {
            let id = user_id(round * (users / args.rounds.max(1)).max(1));
            megabytes = store_bytes(dir.path()) as f64 / 1e6;
            let started = Instant::now();
            let (ks2, id2) = (ks.clone(), id.clone());
            runtime
                .block_on(store.run(move |txn| UserData::new(txn, &ks2, "acme", &id2).forget()))?;
            forgets.push(started.elapsed());
            let started = Instant::now();
            runtime.block_on(store.erase_history())?;
            erases.push(started.elapsed());
            if found_in_files(dir.path(), id.as_bytes()) {
                return Err(format!("{id} is still in a file of the store").into());
            }
        }
        let (forget, erase) = (median(forgets), median(erases));
        println!(
            "| {users} | {megabytes:.0} | {:.1} | {:.0} | {:.1} |",
            forget.as_secs_f64() * 1e3,
            erase.as_secs_f64() * 1e3,
            erase.as_secs_f64() * 1e3 / megabytes.max(0.001)
        );
    }
    Ok(())
}
