//! Tests of lease rows, fencing and membership rows.

use super::{
    fence, member, members, put_member, release_shard, shard_lease, shard_leases, take_shard,
};
use crate::types::{Member, MemberStatus, Timestamp};
use crate::{Error, Keyspace, Store};

#[test]
fn taking_a_shard_bumps_the_epoch_and_fences_the_previous_owner() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let e1 = store
        .run_blocking(|txn| take_shard(txn, &ks, 7, "n1", Timestamp(1)))
        .unwrap();
    assert_eq!(e1, 1);
    store
        .run_blocking(|txn| fence(txn, &ks, 7, "n1", 1))
        .unwrap();

    let e2 = store
        .run_blocking(|txn| take_shard(txn, &ks, 7, "n2", Timestamp(2)))
        .unwrap();
    assert_eq!(e2, 2);
    // n1 still believes it owns shard 7 at epoch 1: its write is rejected and not visible.
    let err = store
        .run_blocking(|txn| {
            fence(txn, &ks, 7, "n1", 1)?;
            txn.set(b"stale", b"write")
        })
        .unwrap_err();
    let Error::Fenced {
        shard: 7,
        epoch: 1,
        holder,
        holder_epoch: 2,
    } = err
    else {
        panic!("expected Fenced, got {err}");
    };
    assert_eq!(holder.as_deref(), Some("n2"));
    assert_eq!(store.read_blocking(|txn| txn.get(b"stale")).unwrap(), None);
    // Same node, stale epoch: also fenced.
    assert!(matches!(
        store.run_blocking(|txn| fence(txn, &ks, 7, "n2", 1)),
        Err(Error::Fenced { .. })
    ));
}

#[test]
fn releasing_keeps_the_epoch_so_the_next_taker_moves_past_it() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    assert!(matches!(
        store.run_blocking(|txn| fence(txn, &ks, 1, "n1", 0)),
        Err(Error::Fenced {
            holder: None,
            holder_epoch: 0,
            ..
        })
    ));
    let e = store
        .run_blocking(|txn| take_shard(txn, &ks, 1, "n1", Timestamp(1)))
        .unwrap();
    assert!(matches!(
        store.run_blocking(|txn| release_shard(txn, &ks, 1, "n2", e)),
        Err(Error::Fenced { .. })
    ));
    store
        .run_blocking(|txn| release_shard(txn, &ks, 1, "n1", e))
        .unwrap();
    let lease = store
        .read_blocking(|txn| shard_lease(txn, &ks, 1))
        .unwrap()
        .unwrap();
    assert_eq!((lease.owner, lease.epoch), (None, 1));
    assert!(matches!(
        store.run_blocking(|txn| fence(txn, &ks, 1, "n1", 1)),
        Err(Error::Fenced { .. })
    ));
    assert_eq!(
        store
            .run_blocking(|txn| take_shard(txn, &ks, 1, "n2", Timestamp(2)))
            .unwrap(),
        2
    );
    store
        .run_blocking(|txn| take_shard(txn, &ks, 300, "n1", Timestamp(3)))
        .unwrap();
    let all = store.read_blocking(|txn| shard_leases(txn, &ks)).unwrap();
    let listed: Vec<(u32, Option<String>, u64)> = all
        .into_iter()
        .map(|(s, l)| (s, l.owner, l.epoch))
        .collect();
    assert_eq!(
        listed,
        [(1, Some("n2".into()), 2), (300, Some("n1".into()), 1)],
        "every lease row, in shard order"
    );
}

#[test]
fn membership_rows_are_listed_by_node_id() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for (id, hb) in [("node-b", 5), ("node-a", 7)] {
        let row = Member {
            node_id: id.into(),
            http_addr: "127.0.0.1:8080".into(),
            cluster_addr: "127.0.0.1:7000".into(),
            started_at: Timestamp(1),
            heartbeat_at: Timestamp(hb),
            status: MemberStatus::Active,
        };
        store
            .run_blocking(|txn| put_member(txn, &ks, &row))
            .unwrap();
    }
    let all = store.read_blocking(|txn| members(txn, &ks)).unwrap();
    let ids: Vec<_> = all.iter().map(|m| m.node_id.as_str()).collect();
    assert_eq!(ids, ["node-a", "node-b"]);
    let b = store
        .read_blocking(|txn| member(txn, &ks, "node-b"))
        .unwrap()
        .unwrap();
    assert_eq!(b.heartbeat_at, Timestamp(5));
    assert_eq!(
        store
            .read_blocking(|txn| member(txn, &ks, "node-c"))
            .unwrap(),
        None
    );
}
