//! Rendezvous placement and liveness by heartbeat age.

use super::*;

#[test]
fn rendezvous_is_deterministic_balanced_and_moves_little() {
    let three = ["a", "b", "c"];
    let mut counts = HashMap::new();
    for shard in 0..3000 {
        let owner = rendezvous(shard, &three).unwrap();
        assert_eq!(rendezvous(shard, &["c", "a", "b"]), Some(owner));
        *counts.entry(owner).or_insert(0) += 1;
    }
    for node in three {
        assert!((850..1150).contains(&counts[node]), "{counts:?}");
    }
    // Adding a node moves only the shards it wins.
    let four = ["a", "b", "c", "d"];
    for shard in 0..3000 {
        let after = rendezvous(shard, &four).unwrap();
        if after != "d" {
            assert_eq!(Some(after), rendezvous(shard, &three));
        }
    }
    assert_eq!(rendezvous(1, &[]), None);
}

#[test]
fn liveness_follows_the_heartbeat_and_the_status() {
    let member = Member {
        node_id: "a".into(),
        http_addr: String::new(),
        cluster_addr: String::new(),
        started_at: Timestamp(0),
        heartbeat_at: Timestamp(10_000),
        status: MemberStatus::Active,
    };
    let timeout = Duration::from_secs(3);
    assert!(is_live(&member, Timestamp(13_000), timeout));
    assert!(!is_live(&member, Timestamp(13_001), timeout));
    let left = Member {
        status: MemberStatus::Left,
        ..member
    };
    assert!(!is_live(&left, Timestamp(10_000), timeout));
}
