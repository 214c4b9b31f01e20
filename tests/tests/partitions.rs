//! Network faults between the nodes of a local cluster, under load: an asymmetric partition
//! either way, a flapping link and a slow link. The seeded random schedule that mixes them with
//! process, disk and clock faults is in `fault_schedule.rs`.
//!
//! Each test runs three real `engram-node` processes on the sandbox's shared SQLite file,
//! each in its own network namespace of a lab (`engram_tests::netns`, built and started in by
//! `engram_tests::lab_cluster`), without the embedding pool (heartbeat timing must not depend
//! on the model's CPU use). Clients reach every node from this host whatever is cut between
//! the nodes, through a [`Gateway`] that retries elsewhere with the same request id; a
//! [`Load`] of closed-loop writers and readers records the history, and `stop_and_verify`
//! checks at the end that every acknowledged write is stored exactly once in acknowledgement
//! order, that no (shard, epoch) was written by two nodes, and the whole history (no stale or
//! backward read, no answer but 200 and 503).
//!
//! How the faults are injected: a cut is a neighbour entry pinned to a MAC address nobody has,
//! so frames vanish (`Lab::cut`, or one way only, `Lab::cut_one_way`); a slow link is a
//! token-bucket filter (`tbf`) on both ends of the node's link, `Lab::slow`. The lab needs root
//! and iproute2 (`ip`, and `tc` for slow links): where it cannot be built the tests fail with
//! the reason. The kernel of the build machine has no `netem` qdisc, so a slow link is a
//! bandwidth limit whose queue adds delay, not a fixed latency. The tests run one at a time (a
//! lock): each starts three nodes and a load on a 2-core machine, and the slow-link test
//! compares rates. Every wait is on a condition with a deadline; the only sleeps are the fault
//! schedules themselves. The flapping schedule prints its seed; `ENGRAM_CHAOS_SEED=<seed>`
//! replays it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_tests::chaos::{Gateway, Load, clients_of, settled, texts, user_of};
use engram_tests::harness::{HttpClient, Node, Sandbox, turn};
use engram_tests::lab_cluster::{
    FORWARDING_BACK, SERVED_AGAIN, SETTLE, SLOW_KBIT, USERS, WRITERS, lab, ms, seeded,
    start_in_lab, total, until_acknowledged,
};
use engram_tests::netns::Lab;
use hyper::StatusCode;
use rand::Rng;

/// One test at a time: three node processes and a load each, on a 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A settled cluster of `ids` in the lab under the chaos load, 50 writes in.
struct Loaded<'a> {
    nodes: Vec<Node>,
    clients: Vec<(&'a str, HttpClient)>,
    owners: HashMap<u32, String>,
    gateway: Arc<Gateway>,
    load: Load,
}

/// Starts `ids` in `lab`, waits until they settle, and starts the load through all of them.
async fn start_loaded<'a>(lab: &Lab, sandbox: &Sandbox, ids: &[&'a str]) -> Loaded<'a> {
    let nodes = start_in_lab(lab, sandbox, ids).await;
    let clients = clients_of(ids, &nodes);
    let owners = settled(&clients, SETTLE).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, USERS, WRITERS);
    load.wait_for(50, Duration::from_secs(30)).await;
    Loaded {
        nodes,
        clients,
        owners,
        gateway,
        load,
    }
}

/// Checks through `client` that `text` is stored exactly once in `user`'s session.
async fn stored_once(client: &HttpClient, user: &str, text: &str) {
    let stored = texts(client, user).await;
    let n = stored.iter().filter(|t| *t == text).count();
    assert_eq!(n, 1, "{user}: {text:?} stored {n} times: {stored:?}");
}

/// Acknowledged writes a second while the load acknowledges `writes` more.
async fn rate(load: &Load, writes: usize, deadline: Duration) -> f64 {
    let started = Instant::now();
    load.wait_for(writes, deadline).await;
    writes as f64 / started.elapsed().as_secs_f64().max(1e-3)
}

/// Which frames vanish in an asymmetric partition around one node.
#[derive(Debug, Clone, Copy)]
enum Vanish {
    /// The node's frames to its peers; theirs reach it.
    Outgoing,
    /// Its peers' frames to it; its own reach them.
    Incoming,
}

/// What one asymmetric phase measured.
struct Phase {
    window: f64,
    during: usize,
    retries: usize,
    replayed: bool,
    back: (Duration, Duration),
}

/// Cuts one direction of every link of `node` (`vanish`), checks that every user is served
/// again and that nobody takes `node`'s shards, probes a forward whose request gets through
/// while its answer is lost, heals, and checks that forwarding works both ways again.
/// `peer` is a peer of `node`.
async fn asymmetric_phase(
    lab: &Lab,
    clients: &[(&str, HttpClient)],
    owners: &HashMap<u32, String>,
    load: &Load,
    gateway: &Gateway,
    (node, peer): (usize, usize),
    vanish: Vanish,
) -> Phase {
    let directions: Vec<(usize, usize)> = (0..lab.len())
        .filter(|&j| j != node)
        .map(|j| match vanish {
            Vanish::Outgoing => (node, j),
            Vanish::Incoming => (j, node),
        })
        .collect();
    // The probe goes the way frames still pass: its request reaches the owner, the owner's
    // answer does not come back.
    let (sender, receiver) = match vanish {
        Vanish::Outgoing => (peer, node),
        Vanish::Incoming => (node, peer),
    };
    let tag = format!("{vanish:?}").to_lowercase();
    let user = user_of(owners, clients[receiver].0, &format!("probe-{tag}"));

    for &(from, to) in &directions {
        lab.cut_one_way(from, to).unwrap();
    }
    let cut_at = Instant::now();
    let retries_before = gateway.retries.load(Ordering::Relaxed);
    let acked_before = load.acked().await;
    let probe_id = format!("{tag}-probe");
    let probe_text = format!("sent as {tag} frames vanish");
    let lost = clients[sender]
        .1
        .append_turn(&user, &turn(&probe_id, "s1", &probe_text, "ok"))
        .await
        .unwrap();
    assert_eq!(
        lost.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a node that cannot hear the owner answers 503 within the hand-off wait: {}",
        lost.text()
    );
    // The same request straight to the owner: replayed if the forward reached it.
    let direct = clients[receiver]
        .1
        .must_append_turn(&user, &turn(&probe_id, "s1", &probe_text, "ok"))
        .await;
    let replayed = direct["replayed"] == true;
    let served = load
        .served_again(&load.users.clone(), cut_at, SERVED_AGAIN)
        .await;
    let during = load.acked().await - acked_before;
    let owners_during = settled(clients, SETTLE).await;
    assert_eq!(
        &owners_during, owners,
        "nobody took a shard: every node is alive and heartbeats"
    );
    assert_eq!(
        total(clients, "engram_shards_taken_over_total").await,
        0.0,
        "no shard was taken over, even for a moment: liveness is the storage heartbeat, \
         which no partition between the nodes touches"
    );

    for &(from, to) in &directions {
        lab.heal_one_way(from, to).unwrap();
    }
    let back_there = until_acknowledged(
        &clients[peer].1,
        &user_of(owners, clients[node].0, "after"),
        &format!("{tag}-after-1"),
        "forwarded to the node after the heal",
        FORWARDING_BACK,
    )
    .await;
    let back_here = until_acknowledged(
        &clients[node].1,
        &user_of(owners, clients[peer].0, "after"),
        &format!("{tag}-after-2"),
        "forwarded by the node after the heal",
        FORWARDING_BACK,
    )
    .await;
    stored_once(&clients[receiver].1, &user, &probe_text).await;
    Phase {
        window: (served - cut_at).as_secs_f64(),
        during,
        retries: gateway.retries.load(Ordering::Relaxed) - retries_before,
        replayed,
        back: (back_there, back_here),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asymmetric_partition_either_way_loses_no_acknowledged_write_and_heals() {
    let _serial = SERIAL.lock().await;
    let lab = lab(3);
    let sandbox = Sandbox::new();
    let ids = ["asym-a", "asym-b", "asym-c"];
    let Loaded {
        nodes: _nodes,
        clients,
        owners,
        gateway,
        load,
    } = start_loaded(&lab, &sandbox, &ids).await;
    // Forwarding works both ways before the cut.
    until_acknowledged(
        &clients[0].1,
        &user_of(&owners, "asym-c", "before"),
        "before-1",
        "forwarded to c",
        Duration::from_secs(30),
    )
    .await;
    until_acknowledged(
        &clients[2].1,
        &user_of(&owners, "asym-a", "before"),
        "before-2",
        "forwarded by c",
        Duration::from_secs(30),
    )
    .await;

    let mut report = Vec::new();
    for vanish in [Vanish::Outgoing, Vanish::Incoming] {
        let phase =
            asymmetric_phase(&lab, &clients, &owners, &load, &gateway, (2, 0), vanish).await;
        report.push((vanish, phase));
    }
    load.wait_for(50, Duration::from_secs(30)).await;
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    for (vanish, p) in report {
        let which = match vanish {
            Vanish::Outgoing => "c's frames to its peers vanish, theirs reach c",
            Vanish::Incoming => "its peers' frames to c vanish, c's reach them",
        };
        println!(
            "asymmetric partition ({which}): every user served again within {:.2} s of the cut \
             ({} writes acknowledged meanwhile, {:.1}/s; {} retried requests); a forward whose \
             answer was lost had been applied by the owner: {} (its retry replayed, stored \
             once); forwarding back {:.2} s (to c) and {:.2} s (from c) after the heal",
            p.window,
            p.during,
            p.during as f64 / p.window.max(1e-3),
            p.retries,
            p.replayed,
            p.back.0.as_secs_f64(),
            p.back.1.as_secs_f64(),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_links_flap_keeps_its_shards_loses_no_acknowledged_write_and_heals() {
    let _serial = SERIAL.lock().await;
    let (seed, mut rng) = seeded("flapping");
    let lab = lab(3);
    let sandbox = Sandbox::new();
    let ids = ["flap-a", "flap-b", "flap-c"];
    let Loaded {
        nodes: _nodes,
        clients,
        owners,
        gateway,
        load,
    } = start_loaded(&lab, &sandbox, &ids).await;

    let before = rate(&load, 200, Duration::from_secs(60)).await;
    let victim = rng.random_range(0..ids.len());
    let peer = (victim + 1) % ids.len();
    let acked_before = load.acked().await;
    let retries_before = gateway.retries.load(Ordering::Relaxed);
    let started = Instant::now();
    for cycle in 1..=10 {
        let down = ms(rng.random_range(300..=1500));
        let up = ms(rng.random_range(300..=1500));
        lab.cut(victim).unwrap();
        println!(
            "[{:6.2} s] cycle {cycle}: {} cut for {} ms",
            started.elapsed().as_secs_f64(),
            ids[victim],
            down.as_millis()
        );
        tokio::time::sleep(down).await;
        lab.heal(victim).unwrap();
        println!(
            "[{:6.2} s] cycle {cycle}: {} healed for {} ms",
            started.elapsed().as_secs_f64(),
            ids[victim],
            up.as_millis()
        );
        tokio::time::sleep(up).await;
    }
    let flapped = started.elapsed();
    let during = load.acked().await - acked_before;
    let served = load
        .served_again(&load.users.clone(), started, SERVED_AGAIN)
        .await;
    let retries = gateway.retries.load(Ordering::Relaxed) - retries_before;

    let healed_at = Instant::now();
    let back_there = until_acknowledged(
        &clients[peer].1,
        &user_of(&owners, ids[victim], "after"),
        "after-1",
        "forwarded to the flapping node",
        FORWARDING_BACK,
    )
    .await;
    let back_here = until_acknowledged(
        &clients[victim].1,
        &user_of(&owners, ids[peer], "after"),
        "after-2",
        "forwarded by the flapping node",
        FORWARDING_BACK,
    )
    .await;
    load.served_again(&load.users.clone(), healed_at, SERVED_AGAIN)
        .await;
    let owners_after = settled(&clients, SETTLE).await;
    assert_eq!(owners_after, owners, "every shard is where it was");
    let taken_over = total(&clients, "engram_shards_taken_over_total").await;
    assert_eq!(
        taken_over, 0.0,
        "a flapping link costs no node its shards: liveness is the storage heartbeat"
    );
    let forward_failures = total(&clients, "engram_forward_failures_total").await;
    load.wait_for(50, Duration::from_secs(30)).await;
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    println!(
        "flapping ({} cut and healed 10 times over {:.1} s, seed {seed}): {during} writes \
         acknowledged meanwhile ({:.1}/s; {before:.1}/s before), every user served within {:.2} s of the first cut, \
         {retries} retried requests, {forward_failures} failed forwards, no shard taken over; \
         forwarding back {:.2} s (to it) and {:.2} s (from it) after the last heal",
        ids[victim],
        flapped.as_secs_f64(),
        during as f64 / flapped.as_secs_f64(),
        (served - started).as_secs_f64(),
        back_there.as_secs_f64(),
        back_here.as_secs_f64(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_to_one_node_keeps_every_user_served_and_loses_no_acknowledged_write() {
    let _serial = SERIAL.lock().await;
    let lab = lab(3);
    let sandbox = Sandbox::new();
    let ids = ["slow-a", "slow-b", "slow-c"];
    let Loaded {
        nodes: _nodes,
        clients,
        owners,
        gateway,
        load,
    } = start_loaded(&lab, &sandbox, &ids).await;
    let before = rate(&load, 200, Duration::from_secs(60)).await;

    lab.slow(2, SLOW_KBIT)
        .unwrap_or_else(|why| panic!("the lab cannot slow a link: {why}"));
    let slowed_at = Instant::now();
    let retries_before = gateway.retries.load(Ordering::Relaxed);
    let served = load
        .served_again(&load.users.clone(), slowed_at, SERVED_AGAIN)
        .await;
    let slowed = rate(&load, 200, Duration::from_secs(120)).await;
    // A write forwarded over the slow link, both ways.
    let to_c = until_acknowledged(
        &clients[0].1,
        &user_of(&owners, "slow-c", "over"),
        "over-1",
        "forwarded to c over its slow link",
        FORWARDING_BACK,
    )
    .await;
    let from_c = until_acknowledged(
        &clients[2].1,
        &user_of(&owners, "slow-a", "over"),
        "over-2",
        "forwarded by c over its slow link",
        FORWARDING_BACK,
    )
    .await;
    let retries = gateway.retries.load(Ordering::Relaxed) - retries_before;
    let owners_during = settled(&clients, SETTLE).await;
    assert_eq!(
        owners_during, owners,
        "a slow link costs no node its shards"
    );

    lab.unslow(2).unwrap();
    // Past the burst of what the slow link held back.
    load.wait_for(50, Duration::from_secs(30)).await;
    let after = rate(&load, 200, Duration::from_secs(60)).await;
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    println!(
        "slow link ({SLOW_KBIT} kbit/s each way, tbf with a {} queue, on 1 of 3 nodes): \
         acknowledged writes {before:.1}/s before, {slowed:.1}/s while slow, {after:.1}/s \
         after; every user served again within {:.2} s; a write forwarded to it took {:.2} s, \
         one forwarded by it {:.2} s; {retries} retried requests while slow",
        engram_tests::netns::SLOW_QUEUE,
        (served - slowed_at).as_secs_f64(),
        to_c.as_secs_f64(),
        from_c.as_secs_f64(),
    );
}
