//! The serving window: a node serves its shards for [`LeaseSettings::serve_for`] after the
//! start of its last complete round, and that window ends before either kind of take-over
//! may start. And fenced writes: a transaction that writes for several shards commits only
//! what it wrote for the shards the node still holds.

use std::time::Duration;

use tokio::time::Instant;

use super::*;

fn settings(heartbeat_ms: u64, lease_ms: u64, confirm_ms: u64) -> LeaseSettings {
    LeaseSettings {
        node_id: "a".into(),
        heartbeat_interval: Duration::from_millis(heartbeat_ms),
        lease_timeout: Duration::from_millis(lease_ms),
        suspect_confirm: Duration::from_millis(confirm_ms),
    }
}

#[test]
fn serving_stops_at_half_the_earliest_take_over_age() {
    for (lease, confirm) in [
        (3_000, 1_000),
        (3_000, 3_000),
        (2_000, 1_500),
        (10_000, 600),
    ] {
        let s = settings(250, lease, confirm);
        let earliest = s.lease_timeout.min(s.suspect_confirm);
        assert_eq!(s.serve_for() * 2, earliest, "{s:?}");
        assert!(s.serve_for() < s.suspect_confirm && s.serve_for() < s.lease_timeout);
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_stops_serving_once_its_last_round_is_older_than_serve_for() {
    let s = settings(250, 3_000, 1_000);
    let ownership = Ownership::new(&s);
    ownership.insert(7, 3);
    assert!(
        matches!(ownership.lease(7), Err(Error::NotOwner(_))),
        "nothing is served before the first round"
    );
    ownership.confirm(Instant::now());
    assert_eq!(ownership.lease(7).unwrap(), 3);
    tokio::time::advance(s.serve_for()).await;
    assert_eq!(ownership.lease(7).unwrap(), 3, "still within the window");
    tokio::time::advance(Duration::from_millis(1)).await;
    let late = ownership.lease(7);
    assert!(matches!(late, Err(Error::NotOwner(_))), "{late:?}");
    // A round that completes serves again, from its start.
    ownership.confirm(Instant::now());
    assert_eq!(ownership.lease(7).unwrap(), 3);
}

#[tokio::test]
async fn a_write_for_several_shards_commits_only_for_the_shards_still_held() {
    use engram_storage::cluster::take_shard;
    use engram_storage::types::Timestamp;
    use engram_storage::{Keyspace, Store};

    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let ownership = Ownership::new(&settings(250, 3_000, 1_000));
    // This node ("a") took shards 1 and 2 at epoch 1; then "b" took shard 2 (epoch 2).
    let ks_ = ks.clone();
    store
        .run_blocking(move |txn| {
            for shard in [1, 2] {
                take_shard(txn, &ks_, shard, "a", Timestamp(1))?;
            }
            take_shard(txn, &ks_, 2, "b", Timestamp(2)).map(drop)
        })
        .unwrap();
    for shard in [1, 2] {
        ownership.insert(shard, 1);
    }
    ownership.confirm(Instant::now());

    let shards = vec![(1, Some(1)), (2, Some(1)), (1, Some(1))];
    let (written, held) = fenced_write_each(&store, &ks, Some(&ownership), shards, |txn, held| {
        for (i, &held) in held.iter().enumerate() {
            if held {
                txn.set(format!("k{i}").as_bytes(), b"v")?;
            }
        }
        Ok(held.iter().filter(|h| **h).count())
    })
    .await
    .unwrap();
    assert_eq!(held, [true, false, true]);
    assert_eq!(written, 2);
    let found = store
        .read_blocking(|txn| {
            ["k0", "k1", "k2"]
                .map(|k| txn.get(k.as_bytes()))
                .into_iter()
                .collect::<engram_storage::Result<Vec<_>>>()
        })
        .unwrap();
    assert_eq!(
        found.iter().map(Option::is_some).collect::<Vec<_>>(),
        [true, false, true]
    );
    // The moved shard is no longer served (told once, though two writes found it).
    assert!(matches!(ownership.lease(2), Err(Error::NotOwner(_))));
    assert_eq!(ownership.lease(1).unwrap(), 1);
    assert_eq!(ownership.metrics.fenced_writes.load(Ordering::Relaxed), 1);

    // The single-shard form refuses the moved shard and writes nothing.
    let refused = fenced_write(&store, &ks, 2, Some((Arc::clone(&ownership), 1)), |txn| {
        txn.set(b"k3", b"v")
    })
    .await;
    assert!(matches!(refused, Err(Error::NotOwner(_))), "{refused:?}");
    assert_eq!(store.read_blocking(|txn| txn.get(b"k3")).unwrap(), None);
}
