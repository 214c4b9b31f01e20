//! The storage conformance suite against SQLite: a file store in this process, the in-memory
//! store, the same file shared by two processes, and the file store across a SIGKILL.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use engram_storage::kv::decode_counter;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::{Error, RangeOptions, RetryPolicy, Store};
use tempfile::TempDir;

#[path = "support/kv_worker.rs"]
mod kv_worker;

use kv_worker::{finish, kill_9, worker};

fn open_file() -> (Store, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::sqlite(&dir.path().join("kv.sqlite"), SqliteOptions::default()).unwrap();
    (store, dir)
}

mod file {
    engram_tests::storage_conformance!(super::open_file());
}

mod memory {
    engram_tests::storage_conformance!((engram_storage::Store::in_memory().unwrap(), ()));
}

#[test]
fn conformance_holds_for_two_processes_sharing_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let path = path.to_str().unwrap();
    let a = worker(&["conformance", path, "proc-a/"]);
    let b = worker(&["conformance", path, "proc-b/"]);
    for out in [finish(a), finish(b)] {
        let passed = out.lines().filter(|l| l.starts_with("ok ")).count();
        assert_eq!(passed, engram_tests::storage_suite::CHECKS.len(), "{out}");
    }
}

#[test]
fn two_processes_incrementing_one_counter_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let n = 200;
    let a = worker(&["increment", path.to_str().unwrap(), &n.to_string(), "a"]);
    let b = worker(&["increment", path.to_str().unwrap(), &n.to_string(), "b"]);
    // This process increments too, so three writers share the file.
    let store = Store::sqlite(&path, SqliteOptions::default()).unwrap();
    for _ in 0..n {
        store
            .run_blocking(|txn| {
                let seen = txn
                    .get(b"shared/counter")?
                    .map_or(0, |v| decode_counter(&v));
                txn.set(b"shared/counter", &(seen + 1).to_le_bytes())
            })
            .unwrap();
    }
    finish(a);
    finish(b);
    let value = store
        .read_blocking(|txn| txn.get(b"shared/counter"))
        .unwrap()
        .unwrap();
    assert_eq!(decode_counter(&value), 3 * n);
    let tagged = store
        .read_blocking(|txn| txn.get_range(b"shared/a/", b"shared/c", RangeOptions::default()))
        .unwrap();
    assert_eq!(tagged.len(), 2 * n as usize);
}

#[test]
fn a_lock_held_past_the_bound_gives_up_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(20),
        ..SqliteOptions::default()
    };
    let store = Store::sqlite(&path, options)
        .unwrap()
        .with_retry(RetryPolicy {
            max_attempts: 3,
            max_elapsed: Duration::from_secs(5),
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        });
    let mut holder = worker(&["hold", path.to_str().unwrap(), "3000"]);
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "locked");
    let err = store
        .run_blocking(|txn| txn.set(b"mine", b"1"))
        .unwrap_err();
    let Error::RetriesExhausted {
        attempts: 3, last, ..
    } = &err
    else {
        panic!("expected RetriesExhausted after busy errors, got {err}");
    };
    assert!(matches!(**last, Error::Busy), "{err}");
    assert!(
        err.to_string()
            .starts_with("transaction gave up after 3 attempts"),
        "{err}"
    );
    // Once the holder commits, the same write succeeds.
    assert_eq!(lines.next().unwrap().unwrap(), "released");
    holder.wait().unwrap();
    store.run_blocking(|txn| txn.set(b"mine", b"1")).unwrap();
    assert_eq!(
        store
            .read_blocking(|txn| txn.get(b"held"))
            .unwrap()
            .as_deref(),
        Some(&b"1"[..])
    );
}

#[test]
fn sigkill_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let mut child = worker(&["append", path.to_str().unwrap(), "1000000"]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // A SIGKILL keeps the page cache, so this test alone would pass with `synchronous = OFF`:
    // the worker's store reports that its commits are fsynced (PRAGMA synchronous = FULL).
    assert_eq!(
        lines.next().unwrap().unwrap(),
        "durable true",
        "the worker's commits are not fsynced"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut acked = None;
    // Let it commit a few dozen durable transactions, then kill it mid-stream.
    while let Some(Ok(line)) = lines.next() {
        acked = Some(line.parse::<u32>().unwrap());
        if acked >= Some(50) || Instant::now() > deadline {
            break;
        }
    }
    kill_9(child.id());
    child.wait().unwrap();
    let acked = acked.expect("the worker acknowledged nothing");
    let store = Store::sqlite(&path, SqliteOptions::default()).unwrap();
    engram_tests::storage_suite::assert_acknowledged_prefix(&store, "acked/", Some(acked));
}

#[test]
fn commits_survive_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    {
        let store = Store::sqlite(&path, SqliteOptions::default()).unwrap();
        store.run_blocking(|txn| txn.set(b"k", b"v")).unwrap();
    }
    let store = Store::sqlite(&path, SqliteOptions::default()).unwrap();
    assert_eq!(
        store.read_blocking(|txn| txn.get(b"k")).unwrap().as_deref(),
        Some(&b"v"[..])
    );
}
