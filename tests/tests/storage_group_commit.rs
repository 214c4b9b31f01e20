//! Group commit of the SQLite backend from the outside: concurrent `Store::run` transactions
//! that share commits keep the seam's semantics (their own writes, clean aborts, limits), lose
//! no update when two processes and this one share the file, and lose no acknowledged write
//! when the process is killed with SIGKILL in the middle of a stream of shared commits.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use engram_storage::kv::decode_counter;
use engram_storage::sqlite::{GroupCommit, SqliteOptions};
use engram_storage::{Error, RangeOptions, Store};

#[path = "support/kv_worker.rs"]
mod kv_worker;

use kv_worker::{finish, kill_9, worker};

/// One writer's scenario under its own prefix: read-your-writes, then an aborted transaction,
/// then one over the value limit; only the first may leave anything.
async fn scenario(store: Store, prefix: Vec<u8>) {
    let key = move |s: &[u8]| [&prefix[..], s].concat();
    let (a, b, c, end) = (key(b"a"), key(b"b"), key(b"c"), key(&[0xff]));
    let seen = store
        .run({
            let (a, b, c, end) = (a.clone(), b.clone(), c.clone(), end.clone());
            move |txn| {
                assert_eq!(txn.get(&a)?, None);
                txn.set(&a, b"1")?;
                txn.set(&b, b"2")?;
                txn.atomic_add(&c, 3)?;
                txn.atomic_add(&c, 4)?;
                txn.clear(&b)?;
                let begin = &a[..a.len() - 1];
                txn.get_range(begin, &end, RangeOptions::default())
            }
        })
        .await
        .unwrap();
    assert_eq!(
        seen,
        vec![
            (a.clone(), b"1".to_vec()),
            (c.clone(), 7i64.to_le_bytes().to_vec())
        ]
    );
    let err = store
        .run({
            let (a, b) = (a.clone(), b.clone());
            move |txn| -> engram_storage::Result<()> {
                txn.set(&b, b"aborted")?;
                txn.clear(&a)?;
                Err(Error::Fenced {
                    shard: 0,
                    epoch: 1,
                    holder: None,
                    holder_epoch: 2,
                })
            }
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    let err = store
        .run({
            let b = b.clone();
            move |txn| txn.set(&b, &vec![0; 100_001])
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ValueTooLarge { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_keep_the_seam_semantics_in_shared_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::sqlite(&dir.path().join("kv.sqlite"), SqliteOptions::default()).unwrap();
    let writers = 64u32;
    let tasks: Vec<_> = (0..writers)
        .map(|w| tokio::spawn(scenario(store.clone(), format!("w/{w:04}/").into_bytes())))
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let rows = store
        .read_blocking(|txn| txn.get_range(b"w/", b"w0", RangeOptions::default()))
        .unwrap();
    assert_eq!(rows.len(), 2 * writers as usize, "{rows:?}");
    for (key, value) in &rows {
        match key.last() {
            Some(b'a') => assert_eq!(value, b"1"),
            Some(b'c') => assert_eq!(decode_counter(value), 7),
            _ => panic!("unexpected key {key:?}"),
        }
    }
    let stats = store.stats();
    let commits = stats.commits.load(std::sync::atomic::Ordering::Relaxed);
    let batches = stats.batches.load(std::sync::atomic::Ordering::Relaxed);
    // 64 writes and one read: fewer durable commits than write transactions.
    assert_eq!(commits, u64::from(writers));
    assert_eq!(stats.reads.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(
        batches < u64::from(writers),
        "{batches} commits for {writers} writes"
    );
}

#[test]
fn two_processes_with_group_commit_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let (tasks, n) = (8u32, 50u32);
    let path_arg = path.to_str().unwrap();
    let (tasks_arg, n_arg) = (tasks.to_string(), n.to_string());
    let a = worker(&["increment-concurrent", path_arg, &tasks_arg, &n_arg, "a"]);
    let b = worker(&["increment-concurrent", path_arg, &tasks_arg, &n_arg, "b"]);
    // This process increments too, with as many tasks, so three writer threads share the file.
    let store = Store::sqlite(&path, SqliteOptions::default()).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    for _ in 0..n {
                        store
                            .run(|txn| {
                                let seen = txn
                                    .get(b"shared/counter")?
                                    .map_or(0, |v| decode_counter(&v));
                                txn.set(b"shared/counter", &(seen + 1).to_le_bytes())
                            })
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.await.unwrap();
        }
    });
    assert_eq!(finish(a).trim(), "done");
    assert_eq!(finish(b).trim(), "done");
    let value = store
        .read_blocking(|txn| txn.get(b"shared/counter"))
        .unwrap()
        .unwrap();
    assert_eq!(decode_counter(&value), i64::from(3 * tasks * n));
    let tagged = store
        .read_blocking(|txn| txn.get_range(b"shared/a/", b"shared/c", RangeOptions::default()))
        .unwrap();
    assert_eq!(tagged.len(), (2 * tasks * n) as usize);
}

#[test]
fn sigkill_during_concurrent_appends_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite");
    let tasks = 32u32;
    let mut child = worker(&[
        "append-concurrent",
        path.to_str().unwrap(),
        &tasks.to_string(),
        "1000000",
    ]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut acked: BTreeMap<u32, u32> = BTreeMap::new();
    let (mut total, mut stats) = (0u32, None);
    // Let it acknowledge a few thousand writes in shared commits, then kill it mid-stream.
    while let Some(Ok(line)) = lines.next() {
        let fields: Vec<u64> = line
            .trim_start_matches("stats ")
            .split(' ')
            .map(|f| f.parse().unwrap())
            .collect();
        if line.starts_with("stats ") {
            stats = Some((fields[0], fields[1]));
        } else {
            let (task, i) = (fields[0] as u32, fields[1] as u32);
            let last = acked.entry(task).or_insert(i);
            assert!(i >= *last, "task {task} acknowledged {i} after {last}");
            *last = i;
            total += 1;
        }
        if total >= 3_000 || Instant::now() > deadline {
            break;
        }
    }
    kill_9(child.id());
    child.wait().unwrap();
    assert!(total > 0, "the worker acknowledged nothing");
    let (commits, batches) = stats.expect("the worker reported its commits");
    assert!(
        batches < commits,
        "no commit was shared: {commits} transactions in {batches} commits"
    );

    let store = Store::sqlite_with(&path, SqliteOptions::default(), GroupCommit::off()).unwrap();
    for task in 0..tasks {
        let prefix = format!("acked-c/{task:04}/");
        engram_tests::storage_suite::assert_acknowledged_prefix(
            &store,
            &prefix,
            acked.get(&task).copied(),
        );
    }
}
