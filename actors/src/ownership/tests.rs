//! The serving window: a node serves its shards for [`LeaseSettings::serve_for`] after the
//! start of its last complete round, and that window ends before either kind of take-over
//! may start.

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
