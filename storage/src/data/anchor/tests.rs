//! Tests of identity anchors: stored as keyed hashes only, found again (also under a rotated
//! master key), never written without a key service, and gone when the user is forgotten.

use super::AnchorWrite;
use crate::crypto::MasterKeys;
use crate::data::tests::with_user;
use crate::types::{AnchorKind, Timestamp};
use crate::{Keyspace, RangeOptions, Store};

const ID: &str = "11010519491231002X";

fn keyed(keys: &[(u32, [u8; 32])]) -> Keyspace {
    Keyspace::new("engram").with_master_keys(MasterKeys::new(keys.iter().copied()).unwrap())
}

fn everything(store: &Store, ks: &Keyspace) -> Vec<(Vec<u8>, Vec<u8>)> {
    let all = ks.all();
    store
        .read_blocking(|txn| txn.get_range(&all.begin, &all.end, RangeOptions::default()))
        .unwrap()
}

#[test]
fn the_keyspace_holds_the_keyed_hash_of_an_identifier_never_the_identifier() {
    let store = Store::in_memory().unwrap();
    let ks = keyed(&[(1, [1u8; 32])]);
    let write = |at| {
        with_user(&store, &ks, "alice", |u| {
            u.record_anchor(AnchorKind::ResidentId, ID, Timestamp(at))
        })
    };
    assert_eq!(write(10), AnchorWrite::Recorded);
    assert_eq!(write(20), AnchorWrite::Known, "recorded once");
    let found = with_user(&store, &ks, "alice", |u| {
        u.find_anchor(AnchorKind::ResidentId, ID)
    })
    .unwrap();
    assert_eq!(
        (found.kind, found.first_seen, found.key_id),
        (AnchorKind::ResidentId, Timestamp(10), 1)
    );
    for (kind, value, user) in [
        (AnchorKind::ResidentId, "110105194912310029", "alice"),
        (AnchorKind::Passport, ID, "alice"),
        (AnchorKind::ResidentId, ID, "bob"),
    ] {
        assert_eq!(
            with_user(&store, &ks, user, |u| u.find_anchor(kind, value)),
            None,
            "{kind:?} {user}"
        );
    }

    let mac = ks
        .encryption()
        .unwrap()
        .anchor_macs("acme", format!("resident-id\0{ID}").as_bytes())
        .unwrap()[0]
        .1;
    let rows = everything(&store, &ks);
    let anchor_key = ks.user("acme", "alice").anchor(&mac);
    let anchors: Vec<_> = rows
        .iter()
        .filter(|(k, _)| ks.user("acme", "alice").anchors().contains(k))
        .collect();
    assert_eq!(anchors.len(), 1);
    assert_eq!(anchors[0].0, anchor_key, "keyed by the HMAC");
    for (k, v) in &rows {
        for needle in [ID.as_bytes(), b"1101051949", b"resident-id"] {
            assert!(!k.windows(needle.len()).any(|w| w == needle), "in a key");
            assert!(!v.windows(needle.len()).any(|w| w == needle), "in a value");
        }
    }

    with_user(&store, &ks, "alice", |u| u.forget());
    assert!(
        everything(&store, &ks)
            .iter()
            .all(|(k, _)| !ks.user("acme", "alice").all().contains(k))
    );
}

#[test]
fn anchors_made_under_an_old_master_key_match_after_rotation() {
    let store = Store::in_memory().unwrap();
    let old = keyed(&[(1, [1u8; 32])]);
    with_user(&store, &old, "alice", |u| {
        u.record_anchor(AnchorKind::Passport, "E12345678", Timestamp(1))
    });
    let rotated = keyed(&[(1, [1u8; 32]), (2, [2u8; 32])]);
    let found = with_user(&store, &rotated, "alice", |u| {
        u.find_anchor(AnchorKind::Passport, "E12345678")
    });
    assert_eq!(found.map(|a| a.key_id), Some(1));
    assert_eq!(
        with_user(&store, &rotated, "alice", |u| u.record_anchor(
            AnchorKind::Passport,
            "E12345678",
            Timestamp(2)
        )),
        AnchorWrite::Known,
        "not anchored twice"
    );
    with_user(&store, &rotated, "alice", |u| {
        u.record_anchor(AnchorKind::Passport, "G87654321", Timestamp(3))
    });
    let kinds: Vec<_> = with_user(&store, &rotated, "alice", |u| u.anchors())
        .into_iter()
        .map(|a| a.key_id)
        .collect();
    assert_eq!(kinds.len(), 2);
    assert!(kinds.contains(&2), "new anchors use the current key");
}

#[test]
fn nothing_is_anchored_without_a_key_service() {
    let store = Store::in_memory().unwrap();
    let ks = Keyspace::new("engram");
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.record_anchor(
            AnchorKind::ResidentId,
            ID,
            Timestamp(1)
        )),
        AnchorWrite::Unkeyed
    );
    assert!(everything(&store, &ks).is_empty());
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u
            .find_anchor(AnchorKind::ResidentId, ID)),
        None
    );
}
