//! Tests of the counts of repeated choices: neither topic nor value appears in any key or
//! value, with or without master keys; counts survive a key rotation and old-layout keys.

use crate::crypto::MasterKeys;
use crate::data::tests::with_user;
use crate::{Keyspace, RangeOptions, Store};

const TOPIC: &str = "favourite_zanzibar_metric";
const VALUE: &str = "osprey-weighted-gmv";

fn keyed(keys: &[(u32, [u8; 32])]) -> Keyspace {
    Keyspace::new("engram").with_master_keys(MasterKeys::new(keys.iter().copied()).unwrap())
}

fn everything(store: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .read_blocking(|txn| txn.get_range(&[], &[0xff; 16], RangeOptions::default()))
        .unwrap()
}

fn holds(rows: &[(Vec<u8>, Vec<u8>)], needle: &str) -> bool {
    let needle = needle.as_bytes();
    rows.iter().any(|(k, v)| {
        k.windows(needle.len()).any(|w| w == needle) || v.windows(needle.len()).any(|w| w == needle)
    })
}

fn count(store: &Store, ks: &Keyspace, topic: &str, value: &str) -> u64 {
    with_user(store, ks, "alice", |u| u.count_choice(topic, value))
}

#[test]
fn choices_are_counted_under_keyed_hashes_and_sealed_never_in_clear() {
    for ks in [Keyspace::new("engram"), keyed(&[(1, [7u8; 32])])] {
        let store = Store::in_memory().unwrap();
        assert_eq!(
            (1..=3)
                .map(|_| count(&store, &ks, TOPIC, VALUE))
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(count(&store, &ks, TOPIC, "other"), 1, "per value");
        assert_eq!(count(&store, &ks, "other", VALUE), 1, "per topic");
        assert_eq!(
            count(&store, &ks, "ab", "c"),
            1,
            "topic and value do not run into each other"
        );
        assert_eq!(count(&store, &ks, "a", "bc"), 1);
        assert_eq!(
            with_user(&store, &ks, "alice", |u| u.choice_count(TOPIC, VALUE)),
            3
        );
        let rows = everything(&store);
        for needle in [TOPIC, VALUE, "zanzibar", "osprey"] {
            assert!(!holds(&rows, needle), "{needle} is stored in clear");
        }
        let sealed = ks.encryption().is_some();
        let choices = rows
            .iter()
            .filter(|(k, _)| k.windows(6).any(|w| w == b"choice"))
            .collect::<Vec<_>>();
        assert_eq!(choices.len(), 5);
        if sealed {
            assert!(
                choices
                    .iter()
                    .all(|(_, v)| v[0] != crate::codec::FORMAT_POSTCARD),
                "counts are sealed under master keys"
            );
        }
    }
}

#[test]
fn keyed_hashes_differ_per_tenant_secret_and_counts_survive_a_rotation() {
    let store = Store::in_memory().unwrap();
    let one = keyed(&[(1, [7u8; 32])]);
    count(&store, &one, TOPIC, VALUE);
    count(&store, &one, TOPIC, VALUE);
    let plain_keys: Vec<Vec<u8>> = {
        let store = Store::in_memory().unwrap();
        count(&store, &Keyspace::new("engram"), TOPIC, VALUE);
        everything(&store).into_iter().map(|(k, _)| k).collect()
    };
    let keyed_keys: Vec<Vec<u8>> = everything(&store).into_iter().map(|(k, _)| k).collect();
    assert!(
        keyed_keys.iter().all(|k| !plain_keys.contains(k)),
        "the keyed hash is not the unkeyed one"
    );
    let rotated = keyed(&[(1, [7u8; 32]), (2, [8u8; 32])]);
    assert_eq!(
        count(&store, &rotated, TOPIC, VALUE),
        3,
        "found under key 1"
    );
    assert_eq!(count(&store, &rotated, TOPIC, VALUE), 4, "moved to key 2");
    let choices = everything(&store)
        .into_iter()
        .filter(|(k, _)| k.windows(6).any(|w| w == b"choice"))
        .count();
    assert_eq!(choices, 1, "one row per choice after the move");
}

#[test]
fn counts_of_the_old_layout_are_read_once_and_removed() {
    let store = Store::in_memory().unwrap();
    let ks = keyed(&[(1, [7u8; 32])]);
    let legacy = ks.user("acme", "alice").legacy_choice(TOPIC, VALUE);
    store
        .run_blocking(|txn| txn.set(&legacy, &2u64.to_le_bytes()))
        .unwrap();
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.choice_count(TOPIC, VALUE)),
        2
    );
    assert_eq!(count(&store, &ks, TOPIC, VALUE), 3);
    assert!(!holds(&everything(&store), TOPIC));
}
