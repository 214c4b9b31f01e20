//! Chaos tests with the nodes' wall clocks skewed against each other (docs/cluster.md, "Clock
//! skew"): three real `engram-node` processes on one SQLite file, without the embedding pool
//! (as `chaos::start` runs them), under the chaos workload (`chaos::Gateway`, `chaos::Load`),
//! each test ending with `Load::stop_and_verify`: every acknowledged write stored once and in
//! order, no (shard, epoch) written by two nodes, and a clean history.
//!
//! - Inside the margin (pairwise skew under S = min(lease timeout, suspect-confirm) / 2 =
//!   500 ms): nothing changes; a SIGKILLed skewed node's shards are taken over, its users
//!   served again, and it gets its share back when it restarts.
//! - Beyond it, one node far behind (`-4 s`, more than the 3 s lease timeout) and one far
//!   ahead (`+4 s`): what the lease rules do with them, measured and printed; what holds
//!   whatever the clocks do (the fence) asserted.
//!
//! How the skew is injected: a skewed node runs under libfaketime (`NodeSpec::wrapped` with
//! `env LD_PRELOAD=<libfaketime.so.1> FAKETIME=<offset> FAKETIME_DONT_FAKE_MONOTONIC=1`): its
//! wall clock (the heartbeat stamps it writes, the ages it computes, what it stamps records
//! with) is off by the offset, its monotonic clock (serving window, timers) is real. Each test
//! measures every skewed node's offset from the heartbeat ages it and an unskewed node report
//! of each other, and fails unless the skew is in effect. Without libfaketime (the Debian
//! package `faketime`, which `.ci/setup` installs) a test fails with the reason, never skips.
//! Every wait is on a condition with a deadline.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_tests::chaos::{
    Gateway, Load, SHARDS, clients_of, exported_metric, settled, shard, start, status,
};
use engram_tests::harness::{HttpClient, Node, Sandbox};

/// Where Debian's `faketime` package puts the preloaded library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The longest a killed node's users may wait to be served again, generous for a busy 2-core
/// machine (docs/cluster.md gives the figures measured).
const FAILOVER_BOUND: Duration = Duration::from_secs(10);

/// A wall-clock offset given to a node: libfaketime's `FAKETIME` and the same in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Skew {
    faketime: &'static str,
    ms: i64,
}

const AHEAD_A_LITTLE: Skew = Skew {
    faketime: "+0.2",
    ms: 200,
};
const BEHIND_A_LITTLE: Skew = Skew {
    faketime: "-0.2",
    ms: -200,
};
const FAR_BEHIND: Skew = Skew {
    faketime: "-4",
    ms: -4000,
};
const FAR_AHEAD: Skew = Skew {
    faketime: "+4",
    ms: 4000,
};

/// The command line prefix that starts a node with its wall clock off by `skew`.
///
/// # Panics
/// If libfaketime is not installed: the test cannot inject the skew.
fn under_faketime(skew: Skew) -> Vec<String> {
    assert!(
        std::path::Path::new(LIBFAKETIME).is_file(),
        "{LIBFAKETIME} is missing: the clock-skew tests preload libfaketime to skew a node's \
         wall clock; install the Debian package faketime (.ci/setup does)"
    );
    [
        "env".to_owned(),
        format!("LD_PRELOAD={LIBFAKETIME}"),
        format!("FAKETIME={}", skew.faketime),
        "FAKETIME_DONT_FAKE_MONOTONIC=1".to_owned(),
    ]
    .into()
}

/// Starts node `id` on the sandbox's shared SQLite file, without the embedding pool (as
/// `chaos::start`), its wall clock off by `skew`.
async fn start_skewed(sandbox: &Sandbox, id: &str, skew: Skew) -> Node {
    sandbox
        .shared_node(id)
        .set("inference.enabled", false)
        .wrapped(under_faketime(skew))
        .start()
        .await
}

/// The heartbeat age (ms) `client`'s node reports of member `member`: its own clock minus
/// `member`'s last stamp.
async fn age_seen(client: &HttpClient, member: &str) -> Option<i64> {
    let view = status(client).await?;
    view["members"]
        .as_array()?
        .iter()
        .find(|m| m["node_id"] == member)?["heartbeat_age_ms"]
        .as_i64()
}

/// Whether `client`'s node counts member `member` alive, by its own clock.
async fn live_seen(client: &HttpClient, member: &str) -> Option<bool> {
    let view = status(client).await?;
    view["members"]
        .as_array()?
        .iter()
        .find(|m| m["node_id"] == member)?["live"]
        .as_bool()
}

/// Shards `client`'s node serves now.
async fn held(client: &HttpClient) -> Option<u64> {
    status(client).await?["held"].as_u64()
}

/// Bounds (ms) on how far a node's wall clock is ahead of an unskewed reference node's (the
/// machine's clock). An age is the reporter's clock minus the other's stamp, and a stamp is
/// read after it was made, so the reference's age of the node is at least minus the offset
/// and the node's age of the reference at least the offset:
/// `-age_reference(node) <= offset <= age_node(reference)`, whatever the delays.
#[derive(Debug, Clone, Copy)]
struct Offset {
    at_least: i64,
    at_most: i64,
}

/// Measures `node`'s offset from `reference` (an unskewed node) until the bound on the skew's
/// side is past `past` (ms; positive: `at_least >= past`, negative: `at_most <= past`), which
/// unskewed clocks cannot show since the bounds hold the true offset. At least 40 samples, so
/// that both bounds are tight.
///
/// # Panics
/// If the skew does not show by the deadline (libfaketime not in effect).
async fn measured_offset(
    node: (&str, &HttpClient),
    reference: (&str, &HttpClient),
    past: i64,
    deadline: Duration,
) -> Offset {
    let until = Instant::now() + deadline;
    let mut bounds = Offset {
        at_least: i64::MIN,
        at_most: i64::MAX,
    };
    let mut samples = 0;
    loop {
        if let (Some(of_node), Some(of_reference)) = (
            age_seen(reference.1, node.0).await,
            age_seen(node.1, reference.0).await,
        ) {
            bounds.at_least = bounds.at_least.max(-of_node);
            bounds.at_most = bounds.at_most.min(of_reference);
            samples += 1;
        }
        let shown = if past > 0 {
            bounds.at_least >= past
        } else {
            bounds.at_most <= past
        };
        if samples >= 40 && shown {
            return bounds;
        }
        assert!(
            Instant::now() < until,
            "the wall clock of {} is not skewed as the test set it (libfaketime not in effect?): \
             its offset from {} is between {} and {} ms after {samples} samples, and should be \
             past {past} ms",
            node.0,
            reference.0,
            bounds.at_least,
            bounds.at_most
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until `client`'s node serves `shards` shards; returns how long it took.
async fn holds(client: &HttpClient, shards: u64, deadline: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let now = held(client).await;
        if now == Some(shards) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < deadline,
            "the node serves {now:?} shards, not {shards}, after {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The metrics of the lease rounds and of forwarding a test reads from each node.
const COUNTERS: &[&str] = &[
    "engram_shards_taken_over_total",
    "engram_shards_taken_over_early_total",
    "engram_shards_handed_off_total",
    "engram_shards_lost_total",
    "engram_fenced_writes_total",
    "engram_requests_not_owner_total",
    "engram_requests_forwarded_total",
];

/// Each of [`COUNTERS`] of `client`'s node (which must export them), by short name.
async fn counters(client: &HttpClient) -> BTreeMap<&'static str, f64> {
    let mut out = BTreeMap::new();
    for name in COUNTERS {
        let short = name
            .trim_start_matches("engram_")
            .trim_end_matches("_total");
        out.insert(short, exported_metric(client, name).await);
    }
    out
}

/// The tries of the gateway's history answered other than 200 (or a read's 404), by the node's
/// id and the status (0: no answer).
fn refusals_by_node(gateway: &Gateway, ids: &[&str]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for op in gateway.history.ops() {
        for t in &op.tries {
            if t.status != 200 && t.status != 404 {
                let id = ids.get(t.node).copied().unwrap_or("?");
                *out.entry(format!("{id} {}", t.status)).or_insert(0) += 1;
            }
        }
    }
    out
}

/// Kills `nodes[victim]` under the load and checks that its users are served again and every
/// shard it held was taken over (some early, on its closed links); then restarts it and waits
/// until it has its share back. Returns how long its users waited.
async fn kill_and_restart(
    nodes: &mut [Node],
    ids: &[&str],
    victim: usize,
    load: &Load,
    gateway: &Gateway,
) -> Duration {
    let clients = clients_of(ids, nodes);
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let id = ids[victim];
    let users: Vec<String> = load
        .users
        .iter()
        .filter(|u| owners[&shard(u)] == id)
        .cloned()
        .collect();
    assert!(!users.is_empty(), "some users live on {id}");
    let on_victim = owners.values().filter(|o| *o == id).count();
    let survivors: Vec<(&str, HttpClient)> = clients
        .iter()
        .filter(|(other, _)| *other != id)
        .cloned()
        .collect();
    let mut before = Vec::new();
    for (_, client) in &survivors {
        before.push(counters(client).await);
    }

    nodes[victim].kill();
    let killed_at = Instant::now();
    let recovered = load
        .served_again(&users, killed_at, Duration::from_secs(30))
        .await;
    let failover = recovered - killed_at;
    assert!(
        failover < FAILOVER_BOUND,
        "the users of {id} (killed) were served again only after {failover:?}"
    );
    settled(&survivors, Duration::from_secs(30)).await;
    let (mut taken_over, mut early) = (0.0, 0.0);
    for ((_, client), before) in survivors.iter().zip(&before) {
        let after = counters(client).await;
        taken_over += after["shards_taken_over"] - before["shards_taken_over"];
        early += after["shards_taken_over_early"] - before["shards_taken_over_early"];
    }
    assert_eq!(
        taken_over, on_victim as f64,
        "every shard of {id} taken over"
    );
    assert!(early > 0.0, "no early take-over of {id}'s shards");

    nodes[victim].restart().await;
    let clients = clients_of(ids, nodes);
    gateway.replace_nodes(clients.iter().map(|(_, c)| c.clone()).collect());
    let back = settled(&clients, Duration::from_secs(30)).await;
    let share = back.values().filter(|o| *o == id).count();
    assert_eq!(share, on_victim, "{id} restarted gets its share back");
    load.wait_for(50, Duration::from_secs(30)).await;
    println!(
        "SIGKILL of {id}: its {} users of 24 served again after {:.2} s; its {on_victim} shards \
         taken over ({early} early); restarted, it holds its {share} again",
        users.len(),
        failover.as_secs_f64()
    );
    failover
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_skewed_within_the_margin_move_no_shard_and_a_killed_skewed_node_is_taken_over() {
    let sandbox = Sandbox::new();
    let ids = ["near-ahead", "near-behind", "near-true"];
    // 200 ms ahead and 200 ms behind: 400 ms apart, within S = 500 ms; the third unskewed.
    let mut nodes = vec![
        start_skewed(&sandbox, ids[0], AHEAD_A_LITTLE).await,
        start_skewed(&sandbox, ids[1], BEHIND_A_LITTLE).await,
        start(&sandbox, ids[2]).await,
    ];
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let reference = (ids[2], &clients[2].1);
    let ahead = measured_offset(
        (ids[0], &clients[0].1),
        reference,
        AHEAD_A_LITTLE.ms / 2,
        Duration::from_secs(30),
    )
    .await;
    let behind = measured_offset(
        (ids[1], &clients[1].1),
        reference,
        BEHIND_A_LITTLE.ms / 2,
        Duration::from_secs(30),
    )
    .await;
    for (id, _) in &clients {
        assert!(
            owners.values().any(|o| o == id),
            "{id} holds its share: rendezvous over all three"
        );
    }

    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, 24, 4);
    load.wait_for(100, Duration::from_secs(30)).await;
    // Within the margin every node counts every other alive: nothing was taken over, lost or
    // fenced, and the placement is the unskewed one.
    for (id, client) in &clients {
        let c = counters(client).await;
        assert_eq!(c["shards_taken_over"], 0.0, "{id} took shards over: {c:?}");
        assert_eq!(c["shards_lost"], 0.0, "{id} lost shards: {c:?}");
        for (other, _) in &clients {
            assert_eq!(
                live_seen(client, other).await,
                Some(true),
                "{id} counts {other} alive"
            );
        }
    }
    assert_eq!(settled(&clients, Duration::from_secs(30)).await, owners);

    // SIGKILL of the node ahead (its stamps look younger to its peers: noticed later), then
    // of the node behind (older: noticed sooner).
    let after_ahead = kill_and_restart(&mut nodes, &ids, 0, &load, &gateway).await;
    let after_behind = kill_and_restart(&mut nodes, &ids, 1, &load, &gateway).await;

    let clients = clients_of(&ids, &nodes);
    load.stop_and_verify(&clients[2].1, &sandbox).await;
    println!(
        "within the margin: {} is {}..{} ms ahead of {}, {} {}..{} ms; served again after a \
         SIGKILL in {:.2} s (ahead) and {:.2} s (behind); {} retried requests; refused tries by \
         node: {:?}",
        ids[0],
        ahead.at_least,
        ahead.at_most,
        ids[2],
        ids[1],
        behind.at_least,
        behind.at_most,
        after_ahead.as_secs_f64(),
        after_behind.as_secs_f64(),
        gateway.retries.load(Ordering::Relaxed),
        refusals_by_node(&gateway, &ids),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_far_behind_is_presumed_dead_by_its_peers_holds_no_shard_and_forwards_every_request()
{
    let sandbox = Sandbox::new();
    let ids = ["far-behind", "behind-peer-a", "behind-peer-b"];
    // Alone, the node 4 s behind takes every shard: nobody else judges its heartbeats.
    let mut nodes = vec![start_skewed(&sandbox, ids[0], FAR_BEHIND).await];
    let behind = nodes[0].client();
    holds(&behind, u64::from(SHARDS), Duration::from_secs(30)).await;
    let gateway = Gateway::new(vec![behind.clone()]);
    let load = Load::start(&gateway, 24, 4);
    load.wait_for(50, Duration::from_secs(30)).await;

    // Unskewed peers join under load. They read its heartbeats as 4 s old, more than the
    // lease timeout: presumed dead, alive and serving as it is, its shards are taken from it.
    let joined_at = Instant::now();
    for id in &ids[1..] {
        nodes.push(start(&sandbox, id).await);
        gateway.add(nodes.last().expect("just started").client());
    }
    let clients = clients_of(&ids, &nodes);
    let peers = &clients[1..];
    // Placed over the two peers only, each serving what its leases name; the node behind
    // serves nothing.
    settled(peers, Duration::from_secs(30)).await;
    holds(&behind, 0, Duration::from_secs(30)).await;
    let emptied = joined_at.elapsed();
    let offset = measured_offset(
        (ids[0], &behind),
        (ids[1], &peers[0].1),
        -3000,
        Duration::from_secs(30),
    )
    .await;
    // The two views: its peers count it dead, it counts them alive (their stamps are 4 s in
    // its future), so it never claims the shards they hold.
    for (id, client) in peers {
        assert_eq!(
            live_seen(client, ids[0]).await,
            Some(false),
            "{id} counts {} dead",
            ids[0]
        );
        assert_eq!(
            live_seen(&behind, id).await,
            Some(true),
            "{} counts {id} alive",
            ids[0]
        );
    }

    // Under load it stays without a shard, and every request sent to it is forwarded.
    let before = counters(&behind).await;
    let target = load.acked().await + 200;
    let until = Instant::now() + Duration::from_secs(60);
    let (mut samples, mut most) = (0, 0);
    while load.acked().await < target {
        assert!(Instant::now() < until, "load stalled below {target} writes");
        if let Some(now) = held(&behind).await {
            samples += 1;
            most = most.max(now);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(samples > 0, "{} never answered its status", ids[0]);
    assert_eq!(
        most, 0,
        "{} took shards back while its peers count it dead",
        ids[0]
    );
    let after = counters(&behind).await;
    assert!(
        after["requests_forwarded"] > before["requests_forwarded"],
        "{} forwards what it is sent: {after:?}",
        ids[0]
    );
    assert!(
        after["shards_lost"] > 0.0,
        "{} lost the shards its peers took from it: {after:?}",
        ids[0]
    );
    let mut peer_counters = Vec::new();
    for (id, client) in peers {
        peer_counters.push((*id, counters(client).await));
    }
    let taken_from_it: f64 = peer_counters
        .iter()
        .map(|(_, c)| c["shards_taken_over"])
        .sum();
    assert!(
        taken_from_it > 0.0,
        "its peers took its shards over: {peer_counters:?}"
    );

    load.stop_and_verify(&peers[0].1, &sandbox).await;
    println!(
        "{} is {}..{} ms ahead of {} (behind); its peers joined and it held no shard {:.2} s \
         later, and none in {samples} samples under load; its counters {after:?}; its peers' \
         {peer_counters:?}; {} retried requests; refused tries by node: {:?}",
        ids[0],
        offset.at_least,
        offset.at_most,
        ids[1],
        emptied.as_secs_f64(),
        gateway.retries.load(Ordering::Relaxed),
        refusals_by_node(&gateway, &ids),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_far_ahead_takes_every_shard_and_is_presumed_dead_that_much_later_when_killed() {
    let sandbox = Sandbox::new();
    let ids = ["ahead-peer-a", "ahead-peer-b", "far-ahead"];
    let mut nodes = vec![start(&sandbox, ids[0]).await, start(&sandbox, ids[1]).await];
    let clients = clients_of(&ids[..2], &nodes);
    settled(&clients, Duration::from_secs(30)).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, 24, 4);
    load.wait_for(50, Duration::from_secs(30)).await;

    // The node 4 s ahead joins under load. It reads its peers' heartbeats as 4 s old: they are
    // presumed dead, and it takes their shards from them, alive and serving as they are; they
    // read its stamps as from the future, count it alive and leave it what it took.
    let joined_at = Instant::now();
    nodes.push(start_skewed(&sandbox, ids[2], FAR_AHEAD).await);
    gateway.add(nodes[2].client());
    let clients = clients_of(&ids, &nodes);
    let ahead = clients[2].1.clone();
    holds(&ahead, u64::from(SHARDS), Duration::from_secs(30)).await;
    let took_all = joined_at.elapsed();
    for (_, client) in &clients[..2] {
        holds(client, 0, Duration::from_secs(30)).await;
    }
    let offset = measured_offset(
        (ids[2], &ahead),
        (ids[0], &clients[0].1),
        3000,
        Duration::from_secs(30),
    )
    .await;
    for (id, client) in &clients[..2] {
        assert_eq!(
            live_seen(client, ids[2]).await,
            Some(true),
            "{id} counts {} alive",
            ids[2]
        );
        assert_eq!(
            live_seen(&ahead, id).await,
            Some(false),
            "{} counts {id} dead",
            ids[2]
        );
    }
    let ahead_counters = counters(&ahead).await;
    assert!(
        ahead_counters["shards_taken_over"] > 0.0,
        "{} took shards over from its live peers: {ahead_counters:?}",
        ids[2]
    );
    let mut peer_counters = Vec::new();
    for (id, client) in &clients[..2] {
        peer_counters.push((*id, counters(client).await));
    }
    let lost: f64 = peer_counters.iter().map(|(_, c)| c["shards_lost"]).sum();
    assert!(
        lost > 0.0,
        "its peers lost the shards it took from them: {peer_counters:?}"
    );
    load.wait_for(100, Duration::from_secs(30)).await;

    // Killed, it is presumed dead only once its last stamp is older than suspect-confirm on
    // its peers' clocks, which are 4 s behind it.
    nodes[2].kill();
    let killed_at = Instant::now();
    let recovered = load
        .served_again(&load.users, killed_at, Duration::from_secs(60))
        .await;
    let failover = recovered - killed_at;
    let survivors = clients_of(&ids[..2], &nodes[..2]);
    gateway.replace_nodes(survivors.iter().map(|(_, c)| c.clone()).collect());
    settled(&survivors, Duration::from_secs(30)).await;
    let (mut taken_over, mut early) = (0.0, 0.0);
    for (_, client) in &survivors {
        let c = counters(client).await;
        taken_over += c["shards_taken_over"];
        early += c["shards_taken_over_early"];
    }
    load.wait_for(50, Duration::from_secs(30)).await;

    load.stop_and_verify(&survivors[0].1, &sandbox).await;
    println!(
        "{} is {}..{} ms ahead of {}; joining, it held all {SHARDS} shards after {:.2} s (its \
         counters {ahead_counters:?}; its peers' {peer_counters:?}); SIGKILLed, its users were \
         served again after {:.2} s ({taken_over} shards taken over by its peers in all, \
         {early} early); {} retried requests; refused tries by node: {:?}",
        ids[2],
        offset.at_least,
        offset.at_most,
        ids[0],
        took_all.as_secs_f64(),
        failover.as_secs_f64(),
        gateway.retries.load(Ordering::Relaxed),
        refusals_by_node(&gateway, &ids),
    );
}
