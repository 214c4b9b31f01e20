//! Backups of a live store: every write committed before the backup began is in it, it opens
//! as a store of its own, and a backup never overwrites a file or leaves a partial one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::{backup, partial_path};
use crate::sqlite::{SqliteEngine, SqliteOptions};
use crate::{Error, Store};

const BUSY: Duration = Duration::from_secs(5);

fn key(i: u64) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_writes_holds_every_write_acknowledged_before_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.sqlite");
    let store = Store::new(Arc::new(
        SqliteEngine::open(&path, SqliteOptions::default()).unwrap(),
    ));
    // Writers keep committing (one key each) while the backup runs; `acked` counts the
    // writes acknowledged so far, in order.
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, acked, stop) = (store.clone(), Arc::clone(&acked), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let k = key(i);
                store.run(move |txn| txn.set(&k, b"value")).await.unwrap();
                i += 1;
                acked.store(i, Ordering::SeqCst);
            }
        })
    };
    while acked.load(Ordering::SeqCst) < 200 {
        tokio::task::yield_now().await;
    }
    let before = acked.load(Ordering::SeqCst);
    let to = dir.path().join("backup.sqlite");
    let (from, target) = (path.clone(), to.clone());
    let made = tokio::task::spawn_blocking(move || backup(&from, &target, BUSY))
        .await
        .unwrap()
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    assert_eq!(made.path, to);
    assert!(made.bytes > 0);
    assert!(!partial_path(&to).exists());

    // The backup is a store of its own: open it and read every acknowledged key.
    let copy = Store::new(Arc::new(
        SqliteEngine::open(&to, SqliteOptions::default()).unwrap(),
    ));
    let found = copy
        .read(move |txn| {
            let mut missing = Vec::new();
            for i in 0..before {
                if txn.get(&key(i))?.is_none() {
                    missing.push(i);
                }
            }
            Ok(missing)
        })
        .await
        .unwrap();
    assert!(
        found.is_empty(),
        "acknowledged before the backup but missing: {found:?}"
    );
}

#[test]
fn a_backup_never_overwrites_a_file_nor_creates_a_store_that_was_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.sqlite");
    drop(SqliteEngine::open(&path, SqliteOptions::default()).unwrap());

    let taken = dir.path().join("taken.sqlite");
    std::fs::write(&taken, b"someone's file").unwrap();
    let err = backup(&path, &taken, BUSY).unwrap_err();
    assert!(
        matches!(&err, Error::Open(m) if m.contains("exists")),
        "{err}"
    );
    assert_eq!(std::fs::read(&taken).unwrap(), b"someone's file");

    let absent = dir.path().join("absent.sqlite");
    let to = dir.path().join("backup.sqlite");
    assert!(backup(&absent, &to, BUSY).is_err());
    assert!(
        !absent.exists(),
        "a backup created the store it was asked to copy"
    );
    assert!(!to.exists() && !partial_path(&to).exists());
}
