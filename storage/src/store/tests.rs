//! Unit tests of the retry loop and the transaction wrapper.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::kv::{Limits, TxnMode};
use crate::{Error, RetryPolicy, Store};

fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        max_elapsed: Duration::from_secs(10),
        initial_backoff: Duration::from_micros(10),
        max_backoff: Duration::from_micros(100),
    }
}

#[test]
fn retryable_errors_are_retried_until_success_and_commit_once() {
    let store = Store::in_memory().unwrap().with_retry(fast_retry(5));
    let attempts = AtomicU32::new(0);
    let value = store
        .run_blocking(|txn| {
            txn.set(b"k", b"v")?;
            match attempts.fetch_add(1, Ordering::SeqCst) {
                0 => Err(Error::Conflict),
                1 => Err(Error::Busy),
                _ => Ok(7),
            }
        })
        .unwrap();
    assert_eq!(value, 7);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(store.stats().retries.load(Ordering::Relaxed), 2);
    assert_eq!(store.stats().commits.load(Ordering::Relaxed), 1);
    let stored = store.read_blocking(|txn| txn.get(b"k")).unwrap();
    assert_eq!(stored.as_deref(), Some(&b"v"[..]));
}

#[test]
fn retries_give_up_after_the_bound_with_the_last_error() {
    let store = Store::in_memory().unwrap().with_retry(fast_retry(4));
    let attempts = AtomicU32::new(0);
    let err = store
        .run_blocking(|_| -> crate::Result<()> {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err(Error::Conflict)
        })
        .unwrap_err();
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
    let Error::RetriesExhausted { attempts, last, .. } = err else {
        panic!("expected RetriesExhausted, got {err}");
    };
    assert_eq!(attempts, 4);
    assert!(matches!(*last, Error::Conflict), "last error: {last}");
    assert_eq!(store.stats().exhausted.load(Ordering::Relaxed), 1);
}

#[test]
fn non_retryable_errors_abort_at_once_and_leave_nothing() {
    let store = Store::in_memory().unwrap();
    let attempts = AtomicU32::new(0);
    let err = store
        .run_blocking(|txn| -> crate::Result<()> {
            attempts.fetch_add(1, Ordering::SeqCst);
            txn.set(b"a", b"1")?;
            Err(Error::Fenced {
                shard: 3,
                epoch: 1,
                holder: None,
                holder_epoch: 2,
            })
        })
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { shard: 3, .. }));
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(store.read_blocking(|txn| txn.get(b"a")).unwrap(), None);
}

#[test]
fn read_only_transactions_reject_writes() {
    let store = Store::in_memory().unwrap();
    let err = store.read_blocking(|txn| txn.set(b"a", b"1")).unwrap_err();
    assert!(matches!(err, Error::ReadOnly));
}

#[test]
fn size_limits_are_enforced_with_clear_errors() {
    let limits = Limits {
        max_key: 8,
        max_value: 16,
        max_txn: 40,
        warn_txn: 20,
    };
    let store = Store::in_memory().unwrap().with_limits(limits);
    let err = store
        .run_blocking(|txn| txn.set(b"123456789", b"v"))
        .unwrap_err();
    assert!(
        matches!(err, Error::KeyTooLarge { len: 9, limit: 8 }),
        "{err}"
    );
    let err = store.run_blocking(|txn| txn.get(b"123456789")).unwrap_err();
    assert!(matches!(err, Error::KeyTooLarge { .. }), "{err}");
    let err = store
        .run_blocking(|txn| txn.set(b"k", &[0; 17]))
        .unwrap_err();
    assert!(
        matches!(err, Error::ValueTooLarge { len: 17, limit: 16 }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "value of 17 bytes exceeds the limit of 16 bytes"
    );
    let err = store
        .run_blocking(|txn| {
            for i in 0..4u8 {
                txn.set(&[b'k', i], &[0; 12])?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::TransactionTooLarge {
                size: 42,
                limit: 40
            }
        ),
        "{err}"
    );
    // The oversized transaction was aborted whole.
    let left = store
        .read_blocking(|txn| txn.get_range(b"k", b"l", Default::default()))
        .unwrap();
    assert!(left.is_empty());
}

#[test]
fn size_accounting_counts_keys_and_values() {
    let store = Store::in_memory().unwrap();
    let mut txn = store.begin(TxnMode::Write).unwrap();
    txn.set(b"abc", b"12345").unwrap();
    txn.clear(b"xy").unwrap();
    txn.clear_range(b"a", b"b").unwrap();
    txn.atomic_add(b"n", 1).unwrap();
    assert_eq!(txn.size(), 8 + 2 + 2 + 9);
}

#[tokio::test]
async fn async_run_executes_off_the_runtime_and_returns_the_value() {
    let store = Store::in_memory().unwrap();
    let n = store
        .run(|txn| {
            txn.atomic_add(b"n", 5)?;
            txn.atomic_add(b"n", -2)?;
            txn.get(b"n")
        })
        .await
        .unwrap();
    assert_eq!(n.map(|v| crate::kv::decode_counter(&v)), Some(3));
}
