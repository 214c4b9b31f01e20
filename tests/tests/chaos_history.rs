//! The history checker (`engram_tests::history`) against a deliberately broken build: a node
//! that keeps answering reads of a user from a stale cache after the user's shard moved to
//! another node (`ENGRAM_FAULT=stale-reads`, honoured by debug builds only;
//! `actors/src/front/fault.rs`). Writes are untouched, so the final-state check (every
//! acknowledged write stored once, in order, read through the node that took the shards)
//! passes on the broken build; the history shows
//! reads through the old owner that miss writes acknowledged before they began. The same
//! scenario on the normal build is clean.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use engram_actors::cluster::rendezvous;
use engram_tests::chaos::{ALLOWED, Gateway, Load, clients_of, settled, shard};
use engram_tests::harness::Sandbox;
use engram_tests::history::Report;

/// Two nodes under load with readers through both; a third joins and takes a share of the
/// first one's users. The test reads each user that moved through its old owner before and
/// after the move (after a write of that user was acknowledged by the new owner). Returns
/// the history's report, once the final state is checked.
async fn move_users_and_read_through_the_old_owner(broken: bool) -> Report {
    let sandbox = Sandbox::new();
    let ids = ["hist-a", "hist-b", "hist-c"];
    let spec = |id: &str| {
        let spec = sandbox.shared_node(id).set("inference.enabled", false);
        if broken {
            spec.wrapped(vec!["env".into(), "ENGRAM_FAULT=stale-reads".into()])
        } else {
            spec
        }
    };
    let mut nodes = vec![spec(ids[0]).start().await, spec(ids[1]).start().await];
    settled(&clients_of(&ids[..2], &nodes), Duration::from_secs(30)).await;
    let gateway = Gateway::new(nodes.iter().map(|n| n.client()).collect());
    let load = Load::start(&gateway, 24, 4);
    let moving: Vec<String> = load
        .users
        .iter()
        .filter(|u| {
            rendezvous(shard(u), &ids[..2]) == Some(ids[0])
                && rendezvous(shard(u), &ids) == Some(ids[2])
        })
        .cloned()
        .collect();
    assert!(!moving.is_empty(), "some of a's users move to c");
    load.wait_for(50, Duration::from_secs(30)).await;
    // The test's own reads are client 1000: through a, while a owns them.
    for user in &moving {
        gateway.read_through(1000, 0, user).await;
    }

    nodes.push(spec(ids[2]).start().await);
    gateway.add(nodes[2].client());
    settled(&clients_of(&ids, &nodes), Duration::from_secs(30)).await;
    let moved_at = Instant::now();
    load.served_again(&moving, moved_at, Duration::from_secs(30))
        .await;
    for user in &moving {
        gateway.read_through(1000, 0, user).await;
    }
    load.wait_for(50, Duration::from_secs(30)).await;

    // The final state, read through the node that joined (it owns what moved).
    let (_, finals): (_, HashMap<String, Vec<String>>) =
        load.stop_and_check_final_state(&nodes[2].client()).await;
    let report = gateway.history.check(&finals, ALLOWED);
    println!(
        "{} build: {}",
        if broken { "broken" } else { "normal" },
        report.describe(3)
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_checker_catches_stale_reads_the_final_state_check_passes() {
    let broken = move_users_and_read_through_the_old_owner(true).await;
    let stale = broken.of("stale-read");
    assert!(
        !stale.is_empty(),
        "the broken build's stale reads went unnoticed (the fault is honoured by debug builds \
         of the node only): {}",
        broken.describe(12)
    );
    let normal = move_users_and_read_through_the_old_owner(false).await;
    normal.assert_clean();
}
