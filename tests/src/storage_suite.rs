//! The storage conformance suite: the semantics of the key-value seam that every backend must
//! honour, written once against [`Store`] and run against SQLite in-process, SQLite shared by
//! two processes, and FoundationDB where `FDB_CLUSTER_FILE` is set.
//!
//! Every check works under a caller-chosen key prefix, so several processes can run the suite
//! against one store at the same time without seeing each other's keys.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use engram_storage::kv::decode_counter;
use engram_storage::{Error, RangeOptions, Store, TxnMode};

/// One check of the suite: it runs against a store under a key prefix.
pub type Check = fn(&Store, &[u8]);

/// Each check of the suite, by name, for runners that iterate (the two-process worker).
pub const CHECKS: &[(&str, Check)] = &[
    ("read_your_writes", read_your_writes),
    (
        "range_reads_follow_byte_order",
        range_reads_follow_byte_order,
    ),
    (
        "clear_range_removes_exactly_the_range",
        clear_range_removes_exactly_the_range,
    ),
    (
        "atomic_add_is_little_endian_and_accumulates",
        atomic_add_is_little_endian_and_accumulates,
    ),
    (
        "concurrent_read_modify_write_loses_no_update",
        concurrent_read_modify_write_loses_no_update,
    ),
    ("abort_leaves_nothing_behind", abort_leaves_nothing_behind),
    (
        "limits_are_enforced_with_clear_errors",
        limits_are_enforced_with_clear_errors,
    ),
];

fn key(prefix: &[u8], suffix: &[u8]) -> Vec<u8> {
    [prefix, suffix].concat()
}

fn end_of(prefix: &[u8]) -> Vec<u8> {
    key(prefix, &[0xff])
}

fn clear_prefix(store: &Store, prefix: &[u8]) {
    store
        .run_blocking(|txn| txn.clear_range(prefix, &end_of(prefix)))
        .unwrap();
}

fn all_under(store: &Store, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .read_blocking(|txn| txn.get_range(prefix, &end_of(prefix), RangeOptions::default()))
        .unwrap()
}

/// A transaction sees its own sets, clears and range clears before it commits.
pub fn read_your_writes(store: &Store, prefix: &[u8]) {
    clear_prefix(store, prefix);
    let (a, b, c) = (key(prefix, b"a"), key(prefix, b"b"), key(prefix, b"c"));
    store.run_blocking(|txn| txn.set(&c, b"committed")).unwrap();
    store
        .run_blocking(|txn| {
            assert_eq!(txn.get(&a)?, None);
            txn.set(&a, b"1")?;
            assert_eq!(txn.get(&a)?.as_deref(), Some(&b"1"[..]));
            txn.set(&a, b"2")?;
            txn.set(&b, b"3")?;
            let seen = txn.get_range(prefix, &end_of(prefix), RangeOptions::default())?;
            assert_eq!(
                seen,
                vec![
                    (a.clone(), b"2".to_vec()),
                    (b.clone(), b"3".to_vec()),
                    (c.clone(), b"committed".to_vec())
                ]
            );
            txn.clear(&b)?;
            assert_eq!(txn.get(&b)?, None);
            txn.clear_range(&c, &end_of(prefix))?;
            assert_eq!(txn.get(&c)?, None);
            Ok(())
        })
        .unwrap();
    assert_eq!(all_under(store, prefix), vec![(a, b"2".to_vec())]);
}

/// Range reads return keys in unsigned byte order, `[begin, end)`, forward and reverse, with
/// limits taking the first or last keys.
pub fn range_reads_follow_byte_order(store: &Store, prefix: &[u8]) {
    clear_prefix(store, prefix);
    let suffixes: [&[u8]; 8] = [
        b"b",
        b"\x00",
        b"a\x00",
        b"a",
        b"\xfe",
        b"ab",
        b"\x7f\xff",
        b"a\xff",
    ];
    store
        .run_blocking(|txn| {
            for (i, s) in suffixes.iter().enumerate() {
                txn.set(&key(prefix, s), &[i as u8])?;
            }
            Ok(())
        })
        .unwrap();
    let mut sorted: Vec<Vec<u8>> = suffixes.iter().map(|s| key(prefix, s)).collect();
    sorted.sort();
    let keys = |opts| -> Vec<Vec<u8>> {
        store
            .read_blocking(|txn| txn.get_range(prefix, &end_of(prefix), opts))
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    assert_eq!(keys(RangeOptions::default()), sorted);
    let mut reversed = sorted.clone();
    reversed.reverse();
    assert_eq!(
        keys(RangeOptions {
            limit: 0,
            reverse: true
        }),
        reversed
    );
    assert_eq!(keys(RangeOptions::first(3)), sorted[..3].to_vec());
    assert_eq!(keys(RangeOptions::last(2)), reversed[..2].to_vec());
    // The end is exclusive, the begin inclusive.
    let (begin, end) = (key(prefix, b"a"), key(prefix, b"ab"));
    let inner = store
        .read_blocking(|txn| txn.get_range(&begin, &end, RangeOptions::default()))
        .unwrap();
    let inner: Vec<_> = inner.into_iter().map(|(k, _)| k).collect();
    assert_eq!(inner, vec![key(prefix, b"a"), key(prefix, b"a\x00")]);
    // An empty or inverted range is empty.
    assert!(
        store
            .read_blocking(|txn| txn.get_range(&end, &begin, RangeOptions::default()))
            .unwrap()
            .is_empty()
    );
}

/// `clear_range` removes `[begin, end)` and nothing else.
pub fn clear_range_removes_exactly_the_range(store: &Store, prefix: &[u8]) {
    clear_prefix(store, prefix);
    store
        .run_blocking(|txn| {
            for s in [b"a", b"b", b"c", b"d"] {
                txn.set(&key(prefix, s), s)?;
            }
            Ok(())
        })
        .unwrap();
    store
        .run_blocking(|txn| txn.clear_range(&key(prefix, b"b"), &key(prefix, b"d")))
        .unwrap();
    let left: Vec<_> = all_under(store, prefix)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(left, vec![key(prefix, b"a"), key(prefix, b"d")]);
}

/// `atomic_add` adds to a little-endian 64-bit counter, from absent, with negative deltas,
/// several times in one transaction, and zero-extends shorter values.
pub fn atomic_add_is_little_endian_and_accumulates(store: &Store, prefix: &[u8]) {
    clear_prefix(store, prefix);
    let (n, short) = (key(prefix, b"n"), key(prefix, b"short"));
    store.run_blocking(|txn| txn.atomic_add(&n, 5)).unwrap();
    store
        .run_blocking(|txn| {
            txn.atomic_add(&n, 10)?;
            txn.atomic_add(&n, -3)
        })
        .unwrap();
    let value = store.read_blocking(|txn| txn.get(&n)).unwrap().unwrap();
    assert_eq!(value, 12i64.to_le_bytes());
    store.run_blocking(|txn| txn.set(&short, &[5])).unwrap();
    store.run_blocking(|txn| txn.atomic_add(&short, 1)).unwrap();
    let value = store.read_blocking(|txn| txn.get(&short)).unwrap().unwrap();
    assert_eq!((value.len(), decode_counter(&value)), (8, 6));
}

/// Two transactions that both read a key and write it back incremented, started together,
/// both commit exactly once and the key counts both: either one commits first and the other
/// conflicts and retries (optimistic backends: FoundationDB), or the second waits for the
/// first (pessimistic backends: SQLite's write lock). Neither may commit a stale read.
pub fn concurrent_read_modify_write_loses_no_update(store: &Store, prefix: &[u8]) {
    clear_prefix(store, prefix);
    let counter = key(prefix, b"counter");
    let gate = Arc::new(Gate::default());
    let committed_reads = Arc::new(Mutex::new(Vec::new()));
    let attempts = Arc::new(Mutex::new(0u32));
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let (store, counter, gate) = (store.clone(), counter.clone(), gate.clone());
            let (committed_reads, attempts) = (committed_reads.clone(), attempts.clone());
            std::thread::spawn(move || {
                let mut first = true;
                let read = store
                    .run_blocking(|txn| {
                        *attempts.lock().unwrap() += 1;
                        let seen = txn.get(&counter)?.map_or(0, |v| decode_counter(&v));
                        if std::mem::take(&mut first) {
                            // Both read before either writes, where the backend allows it.
                            gate.arrive_and_wait(2, Duration::from_millis(500));
                        }
                        txn.set(&counter, &(seen + 1).to_le_bytes())?;
                        Ok(seen)
                    })
                    .unwrap();
                committed_reads.lock().unwrap().push(read);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let value = store
        .read_blocking(|txn| txn.get(&counter))
        .unwrap()
        .unwrap();
    assert_eq!(decode_counter(&value), 2, "an update was lost");
    let mut reads = committed_reads.lock().unwrap().clone();
    reads.sort();
    assert_eq!(
        reads,
        [0, 1],
        "each commit must have read the other's result or nothing"
    );
    let attempts = *attempts.lock().unwrap();
    assert!(
        (2..=3).contains(&attempts),
        "one winner and at most one retry, got {attempts} attempts"
    );
}

/// A transaction that fails, or is dropped without commit, leaves nothing visible.
pub fn abort_leaves_nothing_behind(store: &Store, prefix: &[u8]) {
    clear_prefix(store, prefix);
    let err = store
        .run_blocking(|txn| -> engram_storage::Result<()> {
            txn.set(&key(prefix, b"a"), b"1")?;
            txn.atomic_add(&key(prefix, b"n"), 1)?;
            Err(Error::Fenced {
                shard: 0,
                epoch: 1,
                holder: None,
                holder_epoch: 0,
            })
        })
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }));
    let mut txn = store.begin(TxnMode::Write).unwrap();
    txn.set(&key(prefix, b"b"), b"2").unwrap();
    drop(txn);
    assert!(
        all_under(store, prefix).is_empty(),
        "an aborted transaction left data behind"
    );
}

/// FoundationDB's limits hold on every backend and fail with errors that say what was wrong.
pub fn limits_are_enforced_with_clear_errors(store: &Store, prefix: &[u8]) {
    clear_prefix(store, prefix);
    let long_key = key(prefix, &[b'k'; 10_001]);
    let err = store
        .run_blocking(|txn| txn.set(&long_key, b"v"))
        .unwrap_err();
    assert!(
        matches!(err, Error::KeyTooLarge { limit: 10_000, .. }),
        "{err}"
    );
    let err = store.read_blocking(|txn| txn.get(&long_key)).unwrap_err();
    assert!(matches!(err, Error::KeyTooLarge { .. }), "{err}");
    let err = store
        .run_blocking(|txn| txn.set(&key(prefix, b"v"), &vec![0; 100_001]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ValueTooLarge {
                len: 100_001,
                limit: 100_000
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("100001 bytes exceeds the limit of 100000"),
        "{err}"
    );
    let big = vec![7u8; 100_000];
    let err = store
        .run_blocking(|txn| {
            for i in 0..101u32 {
                txn.set(&key(prefix, &i.to_be_bytes()), &big)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::TransactionTooLarge {
                limit: 10_000_000,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        all_under(store, prefix).is_empty(),
        "a rejected transaction left data behind"
    );
    // The largest allowed value is accepted.
    store
        .run_blocking(|txn| txn.set(&key(prefix, b"max"), &big))
        .unwrap();
    clear_prefix(store, prefix);
}

/// A rendezvous of `n` threads that gives up after a timeout (a pessimistic backend blocks
/// the second thread before it can arrive).
#[derive(Default)]
struct Gate {
    arrived: Mutex<u32>,
    all_in: Condvar,
}

impl Gate {
    fn arrive_and_wait(&self, n: u32, timeout: Duration) {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived += 1;
        self.all_in.notify_all();
        let _ = self
            .all_in
            .wait_timeout_while(arrived, timeout, |a| *a < n)
            .unwrap();
    }
}

/// Generates one `#[test]` per check of the suite against the store `$open()` returns.
#[macro_export]
macro_rules! storage_conformance {
    ($open:expr) => {
        $crate::storage_conformance!(@tests $open;
            read_your_writes, range_reads_follow_byte_order, clear_range_removes_exactly_the_range,
            atomic_add_is_little_endian_and_accumulates, concurrent_read_modify_write_loses_no_update,
            abort_leaves_nothing_behind, limits_are_enforced_with_clear_errors);
    };
    (@tests $open:expr; $($check:ident),*) => {
        $(
            #[test]
            fn $check() {
                let (store, _guard) = $open;
                $crate::storage_suite::$check(&store, concat!("conformance/", stringify!($check), "/").as_bytes());
            }
        )*
    };
}

/// Asserts that the keys `{prefix}{i:08}` written in order by one writer form a gap-free
/// prefix of its stream holding each index as its value, and that the prefix reaches
/// `last_acked`, the last index the writer saw acknowledged (every acknowledged write
/// survived).
pub fn assert_acknowledged_prefix(store: &Store, prefix: &str, last_acked: Option<u32>) {
    let end = format!("{prefix}\u{7f}");
    let rows = store
        .read_blocking(|txn| {
            txn.get_range(prefix.as_bytes(), end.as_bytes(), RangeOptions::default())
        })
        .unwrap();
    if let Some(last) = last_acked {
        assert!(
            rows.len() as u32 > last,
            "{prefix}: {} writes were acknowledged but {} are stored",
            last + 1,
            rows.len()
        );
    }
    for (i, (key, value)) in rows.iter().enumerate() {
        assert_eq!(
            key,
            format!("{prefix}{i:08}").as_bytes(),
            "{prefix}: a gap in the writes"
        );
        assert_eq!(value, &(i as u32).to_le_bytes());
    }
}
