//! Unit tests of the SQLite engine: commits run with `synchronous = FULL` by default (read back
//! from the connection), and group commit: batching, isolation of failing jobs inside a batch,
//! failed commits, the write lock shared with direct writers and other connections, and
//! shutdown.
//!
//! Batches are made deterministic by occupying the writer thread with a job that waits for a
//! signal while the test queues others: everything queued by then joins that job's commit.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tempfile::TempDir;
use tokio::task::JoinHandle;

use super::group::WRITER_THREAD;
use super::{GroupCommit, SqliteEngine, SqliteOptions, Synchronous};
use crate::kv::{Engine, decode_counter};
use crate::{Error, RangeOptions, Result, RetryPolicy, Store, TxnMode};

const WAIT: Duration = Duration::from_secs(20);

/// A file store with group commit, its engine, and the directory holding it.
pub(super) fn file_store() -> (Arc<SqliteEngine>, Store, PathBuf, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let engine = Arc::new(SqliteEngine::open(&path, SqliteOptions::default()).unwrap());
    let store = Store::new(Arc::clone(&engine) as Arc<dyn Engine>);
    (engine, store, path, dir)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Submits a job that holds the writer thread (inside a batch) until `release` is sent or
/// dropped, and waits until it runs (after a direct transaction holding the write lock ends,
/// so that the writer thread is seen to take it).
pub(super) fn occupy_writer(
    engine: &SqliteEngine,
    store: &Store,
) -> (JoinHandle<Result<()>>, mpsc::Sender<()>) {
    // A batch before this one clears `busy` only after answering its jobs: wait until it has,
    // so that `busy` below is this job's.
    wait_until("the writer thread is idle", || !writer_busy(engine));
    let held = store.begin(TxnMode::Write).unwrap();
    let (entered, running) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let task = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .run(move |txn| {
                    let _ = entered.send(std::thread::current().name() == Some(WRITER_THREAD));
                    let _ = released.recv();
                    txn.set(b"blocker", b"1")
                })
                .await
        })
    };
    wait_until("the writer thread takes the job", || writer_busy(engine));
    // Rolled back: it commits nothing.
    drop(held);
    let on_writer = running.recv_timeout(WAIT).expect("the writer runs the job");
    assert!(on_writer, "the job runs on the writer thread");
    (task, release)
}

fn writer_busy(engine: &SqliteEngine) -> bool {
    engine.group.as_ref().is_some_and(|group| group.busy())
}

/// Spawns `store.run(f)` and waits until it is queued for the (occupied) writer thread.
pub(super) fn spawn_queued<T: Send + 'static>(
    engine: &SqliteEngine,
    store: &Store,
    f: impl FnMut(&mut crate::Txn) -> Result<T> + Send + 'static,
) -> JoinHandle<Result<T>> {
    let before = engine.queued_jobs();
    let store = store.clone();
    let task = tokio::spawn(async move { store.run(f).await });
    wait_until("the job is queued", || engine.queued_jobs() == before + 1);
    task
}

/// A store on `engine` with counters of its own, so that checks do not count as commits.
fn observer(engine: &Arc<SqliteEngine>) -> Store {
    Store::new(Arc::clone(engine) as Arc<dyn Engine>)
}

fn get(engine: &Arc<SqliteEngine>, key: &[u8]) -> Option<Vec<u8>> {
    observer(engine).read_blocking(|txn| txn.get(key)).unwrap()
}

fn count(engine: &Arc<SqliteEngine>, begin: &[u8], end: &[u8]) -> usize {
    observer(engine)
        .read_blocking(|txn| txn.get_range(begin, end, RangeOptions::default()))
        .unwrap()
        .len()
}

fn stat(store: &Store) -> (u64, u64, u64) {
    let stats = store.stats();
    (
        stats.commits.load(Ordering::Relaxed),
        stats.batches.load(Ordering::Relaxed),
        stats.retries.load(Ordering::Relaxed),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_jobs_share_one_durable_commit() {
    let (engine, store, _, _dir) = file_store();
    let (blocker, release) = occupy_writer(&engine, &store);
    let tasks: Vec<_> = (0..50u32)
        .map(|i| spawn_queued(&engine, &store, move |txn| txn.set(&i.to_be_bytes(), b"v")))
        .collect();
    assert_eq!(engine.queued_jobs(), 50);
    release.send(()).unwrap();
    blocker.await.unwrap().unwrap();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    // The blocker and the 50 jobs queued behind it: 51 transactions, one commit.
    assert_eq!(stat(&store), (51, 1, 0));
    assert_eq!(count(&engine, &[0], &[1]), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_leaves_nothing_while_its_neighbours_commit() {
    let (engine, store, _, _dir) = file_store();
    let (blocker, release) = occupy_writer(&engine, &store);
    let before = spawn_queued(&engine, &store, |txn| txn.set(b"a", b"1"));
    let fenced = spawn_queued(&engine, &store, |txn| -> Result<()> {
        txn.set(b"b1", b"1")?;
        txn.clear(b"a")?;
        txn.atomic_add(b"n", 1)?;
        Err(Error::Fenced {
            shard: 1,
            epoch: 1,
            holder: None,
            holder_epoch: 2,
        })
    });
    let too_large = spawn_queued(&engine, &store, |txn| txn.set(b"big", &[0; 100_001]));
    let panics = spawn_queued(&engine, &store, |txn| -> Result<()> {
        txn.set(b"d", b"1")?;
        panic!("a bug in a transaction");
    });
    // Runs after the failures and sees none of their writes, only the first job's.
    let after = spawn_queued(&engine, &store, |txn| {
        txn.set(b"c", b"1")?;
        Ok((
            txn.get(b"a")?,
            txn.get(b"b1")?,
            txn.get(b"n")?,
            txn.get(b"d")?,
        ))
    });
    release.send(()).unwrap();
    blocker.await.unwrap().unwrap();
    before.await.unwrap().unwrap();
    let err = fenced.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Fenced { shard: 1, .. }), "{err}");
    let err = too_large.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ValueTooLarge { .. }), "{err}");
    let err = panics.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, Error::Task(m) if m.contains("a bug in a transaction")),
        "{err}"
    );
    let seen = after.await.unwrap().unwrap();
    assert_eq!(seen, (Some(b"1".to_vec()), None, None, None));
    // One commit holds the three jobs that succeeded.
    assert_eq!(stat(&store), (3, 1, 0));
    for (key, present) in [
        (&b"a"[..], true),
        (b"c", true),
        (b"blocker", true),
        (b"b1", false),
        (b"n", false),
        (b"big", false),
        (b"d", false),
    ] {
        assert_eq!(get(&engine, key).is_some(), present, "{key:?}");
    }
    // The writer thread outlived the panic.
    store.run(|txn| txn.set(b"e", b"1")).await.unwrap();
    assert!(get(&engine, b"e").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_fails_every_job_and_nothing_is_acknowledged_before_the_commit() {
    let (engine, store, _, _dir) = file_store();
    // Every COMMIT of the writer connection reports that it started and waits for a verdict:
    // true turns it into a rollback, as a failing fsync or a full disk would.
    let (in_commit, committing) = mpsc::channel();
    let (verdict, verdicts) = mpsc::channel::<bool>();
    engine.writer.lock().commit_hook(Some(move || {
        let _ = in_commit.send(());
        verdicts.recv().unwrap_or(false)
    }));

    for fail in [true, false] {
        let round = u8::from(fail);
        let (blocker, release) = occupy_writer(&engine, &store);
        let tasks: Vec<_> = (0..10u8)
            .map(|i| {
                let reader = Arc::clone(&engine);
                spawn_queued(&engine, &store, move |txn| {
                    txn.set(&[round, i], b"v")?;
                    Ok(Arc::clone(&reader))
                })
            })
            .collect();
        release.send(()).unwrap();
        committing.recv_timeout(WAIT).expect("the batch commits");
        // The commit is in progress: no job may have its answer, and nothing is visible.
        assert!(!blocker.is_finished());
        assert!(tasks.iter().all(|t| !t.is_finished()));
        assert_eq!(get(&engine, &[round, 0]), None);
        verdict.send(fail).unwrap();
        let mut results = vec![blocker.await.unwrap()];
        for (i, task) in tasks.into_iter().enumerate() {
            results.push(task.await.unwrap().map(|reader| {
                // An acknowledged write is committed: another connection sees it at once.
                assert!(get(&reader, &[round, i as u8]).is_some());
            }));
        }
        for result in results {
            match (fail, result) {
                (true, Err(Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)))) => {
                    assert_eq!(e.extended_code, rusqlite::ffi::SQLITE_CONSTRAINT_COMMITHOOK);
                }
                (false, Ok(())) => {}
                (_, other) => panic!("fail {fail}: unexpected {other:?}"),
            }
        }
        assert_eq!(
            count(&engine, &[round], &[round + 1]),
            if fail { 0 } else { 10 }
        );
    }
    // The failed commit was not retried and counted nothing; the second made 11 durable.
    assert_eq!(stat(&store), (11, 1, 0));
    assert_eq!(get(&engine, b"blocker").as_deref(), Some(&b"1"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_read_modify_writes_in_batches_lose_no_update() {
    let engine = Arc::new(SqliteEngine::in_memory().unwrap());
    let store = observer(&engine);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .run(|txn| {
                        let seen = txn.get(b"n")?.map_or(0, |v| decode_counter(&v));
                        txn.set(b"n", &(seen + 1).to_le_bytes())?;
                        Ok(seen)
                    })
                    .await
            })
        })
        .collect();
    let mut seen = Vec::new();
    for task in tasks {
        seen.push(task.await.unwrap().unwrap());
    }
    seen.sort_unstable();
    // Each transaction read the one before it: a serial order.
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
    assert_eq!(decode_counter(&get(&engine, b"n").unwrap()), 200);
    let (commits, batches, _) = stat(&store);
    assert_eq!(commits, 200);
    assert!((1..=200).contains(&batches), "{batches} batches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_job_error_is_retried_in_a_later_commit() {
    let engine = Arc::new(SqliteEngine::in_memory().unwrap());
    let store = observer(&engine);
    let mut attempts = 0;
    let value = store
        .run(move |txn| {
            txn.set(b"k", b"v")?;
            attempts += 1;
            if attempts == 1 {
                return Err(Error::Conflict);
            }
            Ok(attempts)
        })
        .await
        .unwrap();
    assert_eq!(value, 2);
    assert_eq!(stat(&store), (1, 1, 1));
    assert!(get(&engine, b"k").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_writers_and_the_writer_thread_share_the_write_lock() {
    let (engine, store, _, _dir) = file_store();
    let mut manual = store.begin(TxnMode::Write).unwrap();
    manual.set(b"manual", b"1").unwrap();
    let grouped = {
        let store = store.clone();
        tokio::spawn(async move { store.run(|txn| Ok(txn.get(b"manual")?.is_some())).await })
    };
    wait_until("the writer thread takes the job", || writer_busy(&engine));
    assert!(
        !grouped.is_finished(),
        "a group commit ran beside a direct writer"
    );
    manual.commit().unwrap();
    // It ran after the direct transaction committed, so it saw its write.
    assert!(grouped.await.unwrap().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_writer_and_queued_ones_all_run_on_the_writer_thread() {
    let (engine, store, _, _dir) = file_store();
    let thread = || std::thread::current().name().map(str::to_owned);
    let alone = store.run(move |_| Ok(thread())).await.unwrap();
    assert_eq!(alone.as_deref(), Some(WRITER_THREAD));
    let (blocker, release) = occupy_writer(&engine, &store);
    let queued = spawn_queued(&engine, &store, move |_| Ok(thread()));
    release.send(()).unwrap();
    blocker.await.unwrap().unwrap();
    let queued = queued.await.unwrap().unwrap();
    assert_eq!(queued.as_deref(), Some(WRITER_THREAD));
    // Three transactions (the one alone, the blocker, the queued one), two commits.
    assert_eq!(stat(&store), (3, 2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_locked_by_another_connection_is_retried_as_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(10),
        ..SqliteOptions::default()
    };
    let store = Store::sqlite(&path, options)
        .unwrap()
        .with_retry(RetryPolicy {
            max_attempts: 10_000,
            max_elapsed: WAIT,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        });
    // Another process's writer, as far as SQLite can tell.
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let tasks: Vec<_> = (0..20u8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.run(move |txn| txn.set(&[i], b"v")).await })
        })
        .collect();
    wait_until("the jobs retry", || {
        store.stats().retries.load(Ordering::Relaxed) >= 20
    });
    other.execute_batch("COMMIT").unwrap();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let rows = store
        .read_blocking(|txn| txn.get_range(&[0], &[20], RangeOptions::default()))
        .unwrap();
    assert_eq!(rows.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_group_commit_each_transaction_commits_on_its_own() {
    let engine = Arc::new(SqliteEngine::in_memory_with(GroupCommit::off()).unwrap());
    assert!(!engine.group_commit());
    let store = Store::new(Arc::clone(&engine) as Arc<dyn Engine>);
    let tasks: Vec<_> = (0..20u8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.run(move |txn| txn.set(&[i], b"v")).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(stat(&store), (20, 20, 0));
}

#[test]
fn dropping_the_store_stops_the_writer_and_closes_the_file() {
    let (engine, store, path, _dir) = file_store();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(store.run(|txn| txn.set(b"k", b"v")))
        .unwrap();
    let wal = path.with_extension("sqlite-wal");
    assert!(wal.exists());
    drop((engine, store));
    // The last connection to close checkpoints the WAL and removes it.
    assert!(!wal.exists(), "a connection is still open");
    let engine = Arc::new(SqliteEngine::open(&path, SqliteOptions::default()).unwrap());
    assert_eq!(get(&engine, b"k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn several_connections_opening_a_new_file_at_once_all_succeed() {
    // Switching a new file to WAL and creating the table can fail with busy at once, without
    // waiting in SQLite's busy handler, while another connection does the same.
    for _ in 0..50 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.sqlite");
        let barrier = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            let opens: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        SqliteEngine::open(&path, SqliteOptions::default()).map(drop)
                    })
                })
                .collect();
            for open in opens {
                open.join().unwrap().unwrap();
            }
        });
    }
}

/// A SIGKILL keeps the page cache, so the SIGKILL suites pass even with `synchronous = OFF`:
/// what makes an acknowledged commit survive a power loss is checked here, on the connection.
#[test]
fn commits_are_fsynced_by_default_as_the_connection_reports() {
    let (engine, store, path, _dir) = file_store();
    assert_eq!(engine.synchronous().unwrap(), Synchronous::Full);
    assert!(store.durable_commits().unwrap());
    // The group-commit thread commits on the same connection, with the same setting.
    store.run_blocking(|txn| txn.set(b"k", b"v")).unwrap();
    assert_eq!(engine.synchronous().unwrap(), Synchronous::Full);
    drop((engine, store));
    // The check reads the connection, not the options: weaker settings read back as such.
    for (level, durable) in [(Synchronous::Normal, false), (Synchronous::Off, false)] {
        let options = SqliteOptions {
            synchronous: level,
            ..SqliteOptions::default()
        };
        let engine = SqliteEngine::open(&path, options).unwrap();
        assert_eq!(engine.synchronous().unwrap(), level);
        assert_eq!(engine.durable_commits().unwrap(), durable);
    }
    // An in-memory store is never durable.
    assert!(!Store::in_memory().unwrap().durable_commits().unwrap());
}

/// The WAL's checkpoint interval reaches every connection. With group commit the writer's own
/// automatic checkpoint is off (a thread of its own checkpoints); without, the writer
/// checkpoints at the interval itself.
#[test]
fn the_checkpoint_interval_is_the_options() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    for pages in [SqliteOptions::default().wal_autocheckpoint, 4_096] {
        let options = SqliteOptions {
            wal_autocheckpoint: pages,
            ..SqliteOptions::default()
        };
        let read = |conn: &Connection| -> u32 {
            conn.query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0))
                .unwrap()
        };
        let grouped = SqliteEngine::open(&path, options.clone()).unwrap();
        assert_eq!(read(&grouped.writer.lock()), 0);
        assert!(grouped.checkpointer.is_some());
        drop(grouped);
        let alone = SqliteEngine::open_with(&path, options.clone(), GroupCommit::off()).unwrap();
        assert_eq!(read(&alone.writer.lock()), pages);
        assert!(alone.checkpointer.is_none());
        let reader = super::open_connection(&path, &options).unwrap();
        assert_eq!(read(&reader), pages);
    }
}

/// With group commit a thread of its own checkpoints the WAL each time it has grown by the
/// interval (the writer thread's commits only wake it); under writers that never pause the WAL
/// still starts again from its beginning instead of growing, and everything written reads
/// back after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_of_its_own_checkpoints_the_wal_and_it_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let options = SqliteOptions {
        wal_autocheckpoint: 16,
        ..SqliteOptions::default()
    };
    let engine = Arc::new(SqliteEngine::open(&path, options.clone()).unwrap());
    let store = Store::new(Arc::clone(&engine) as Arc<dyn Engine>);
    let value = vec![7u8; 3_000];
    // Eight writers, so that commits land while the thread checkpoints; each write adds a page
    // or two, so 16 pages are reached every few commits. They write until the WAL has started
    // again three times.
    let started_again =
        |engine: &SqliteEngine| engine.checkpointer.as_ref().unwrap().restarts() >= 3;
    let writers: Vec<_> = (0..8u32)
        .map(|writer| {
            let (engine, store, value) = (Arc::clone(&engine), store.clone(), value.clone());
            tokio::spawn(async move {
                let deadline = Instant::now() + WAIT;
                let mut written = 0u32;
                while !started_again(&engine) {
                    assert!(
                        Instant::now() < deadline,
                        "timed out waiting for the WAL to start again"
                    );
                    let (key, value) = (
                        [writer.to_be_bytes(), written.to_be_bytes()].concat(),
                        value.clone(),
                    );
                    store.run(move |txn| txn.set(&key, &value)).await.unwrap();
                    written += 1;
                }
                written
            })
        })
        .collect();
    let mut written = 0;
    for writer in writers {
        written += writer.await.unwrap();
    }
    let checkpointer = engine.checkpointer.as_ref().unwrap();
    assert!(checkpointer.runs() >= 1);
    // Without the writer's own copy of what was committed during each checkpoint, this load
    // grows the WAL to 25,000-58,000 pages before it starts again three times; with it, to
    // 48-65 (measured). The bound leaves room for a thread kept waiting by a busy machine.
    assert!(checkpointer.peak() < 5_000, "{} pages", checkpointer.peak());
    // The metrics say the same.
    let figures = engine.figures();
    let figure = |name: &str| figures.iter().find(|f| f.name == name).unwrap().value;
    assert_eq!(
        figure("engram_sqlite_checkpoints_total"),
        checkpointer.runs() as f64
    );
    assert!(figure("engram_sqlite_wal_restarts_total") >= 3.0);
    assert!(figure("engram_sqlite_checkpoint_seconds_total") > 0.0);
    assert_eq!(
        figure("engram_sqlite_wal_pages_peak"),
        checkpointer.peak() as f64
    );
    assert_eq!(figure("engram_sqlite_checkpoint_failures_total"), 0.0);
    assert_eq!(figure("engram_sqlite_write_queue"), 0.0);
    drop(store);
    drop(engine);
    let engine = Arc::new(SqliteEngine::open(&path, options).unwrap());
    let store = Store::new(Arc::clone(&engine) as Arc<dyn Engine>);
    let stored = store
        .read_blocking(|txn| txn.get_range(&[0], &[0xff], RangeOptions::default()))
        .unwrap();
    assert_eq!(stored.len(), written as usize);
    assert!(stored.iter().all(|(_, stored)| *stored == value));
}

/// A range scan's cached statement runs again with other bounds and another limit without
/// being compiled again (the bundled SQLite would otherwise, for every new `LIMIT` value).
#[test]
fn a_range_scan_is_not_compiled_again_when_its_limit_changes() {
    let dir = tempfile::tempdir().unwrap();
    let conn =
        super::open_connection(&dir.path().join("kv.sqlite"), &SqliteOptions::default()).unwrap();
    super::init_schema(&conn).unwrap();
    for k in 0_u8..10 {
        conn.execute("INSERT INTO kv (k, v) VALUES (?1, ?1)", [[k]])
            .unwrap();
    }
    let mut found = Vec::new();
    for limit in 1_i64..=5 {
        let mut stmt = conn.prepare_cached(super::txn::RANGE_ASC).unwrap();
        let begin: &[u8] = &[u8::try_from(limit).unwrap()];
        let rows: Vec<Vec<u8>> = stmt
            .query_map(rusqlite::params![begin, &[10_u8][..], limit], |row| {
                row.get(0)
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        found.push(rows.len());
        assert_eq!(
            stmt.get_status(rusqlite::StatementStatus::RePrepare),
            0,
            "compiled again at limit {limit}"
        );
    }
    assert_eq!(found, [1, 2, 3, 4, 5]);
}

#[test]
fn the_reserve_is_kept_beside_the_file_released_on_a_full_disk_and_kept_again_with_room() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("engram.sqlite");
    let options = SqliteOptions {
        reserve: 1 << 20,
        ..SqliteOptions::default()
    };
    let engine = SqliteEngine::open(&path, options).unwrap();
    let reserve = dir.path().join("engram.sqlite.reserve");
    let kept = std::fs::metadata(&reserve).unwrap();
    assert_eq!(kept.len(), 1 << 20, "written out in full");
    assert!(!engine.disk_full());
    assert!(engine.disk_filled(), "released now");
    assert!(!engine.disk_filled(), "released once");
    assert!(!reserve.exists(), "released for the node's own writes");
    // This filesystem has room: the next question makes the reserve again.
    assert!(!engine.disk_full());
    assert_eq!(std::fs::metadata(&reserve).unwrap().len(), 1 << 20);
    // Without a reserve, nothing is kept and writes are never refused untried.
    let bare = SqliteEngine::open(
        &dir.path().join("bare.sqlite"),
        SqliteOptions {
            reserve: 0,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    assert!(!bare.disk_filled());
    assert!(!bare.disk_full());
    assert!(!dir.path().join("bare.sqlite.reserve").exists());
}
