//! Network faults between the nodes of a local cluster, under load: an asymmetric partition, a
//! flapping link, a slow link, and a seeded random schedule of every fault the lab knows
//! (cuts, one-way cuts, flapping, slow links) mixed with process faults (SIGKILL and restart,
//! SIGSTOP and SIGCONT).
//!
//! Each test runs three real `engram-node` processes on the sandbox's shared SQLite file,
//! each in its own network namespace of a lab (`engram_tests::netns`), without the embedding
//! pool (heartbeat timing must not depend on the model's CPU use). Clients reach every node
//! from this host whatever is cut between the nodes, through a [`Gateway`] that retries
//! elsewhere with the same request id; a [`Load`] of closed-loop writers and readers records
//! the history, and `stop_and_verify` checks at the end that every acknowledged write is
//! stored exactly once in acknowledgement order, that no (shard, epoch) was written by two
//! nodes, and the whole history (no stale or backward read, no answer but 200 and 503).
//!
//! The lab needs root and iproute2 (`ip`, and `tc` for slow links): where it cannot be built
//! the tests fail with the reason. The kernel of the build machine has no `netem` qdisc, so a
//! slow link is a token-bucket filter (`tbf`): a bandwidth limit whose queue adds delay, not
//! a fixed latency. The tests run one at a time (a lock): each starts three nodes and a load
//! on a 2-core machine, and the slow-link test compares rates. Every wait is on a condition
//! with a deadline; the only sleeps are the fault schedules themselves. The random schedules
//! print their seed; `ENGRAM_CHAOS_SEED=<seed>` replays one.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use engram_tests::chaos::{
    Gateway, Load, clients_of, exported_metric, pause_outside_writes, settled, texts, user_of,
};
use engram_tests::harness::{HttpClient, Node, Sandbox, turn};
use engram_tests::netns::Lab;
use hyper::StatusCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One test at a time: three node processes and a load each, on a 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a cluster may take to settle (all shards placed by rendezvous and served), a
/// restart or a take-over included, on a busy 2-core machine.
const SETTLE: Duration = Duration::from_secs(60);
/// How long every user may take to be served again after a fault: a request that reaches a
/// node unable to reach the owner waits `cluster.handoff-wait`, 5 s, before the retry, and
/// each closed-loop writer cycles through its 6 users one write at a time (19-41 s
/// while a node is partitioned one way, measured).
const SERVED_AGAIN: Duration = Duration::from_secs(90);
/// How long forwarding may take to work again after a heal (the dialer backs off up to 5 s).
const FORWARDING_BACK: Duration = Duration::from_secs(60);
/// Users written by the load.
const USERS: usize = 24;
/// The load's closed-loop writers (6 users each).
const WRITERS: usize = 4;

/// The lab, its slow links tried once, or a failure that says why this machine cannot build
/// it: these tests exist to run the partitions, and a test that passes without them would
/// prove nothing.
fn lab(n: usize) -> Lab {
    let built = Lab::create(n).and_then(|lab| {
        lab.slow(0, SLOW_KBIT)?;
        lab.unslow(0)?;
        Ok(lab)
    });
    built.unwrap_or_else(|why| {
        panic!(
            "the partition tests need a network lab (root, iproute2's `ip` and `tc` with the \
             tbf qdisc; .ci/setup installs iproute2) and this machine cannot build one: {why}"
        )
    })
}

/// Starts nodes `ids` in the lab, node `i` in namespace `i`, on the shared SQLite file,
/// without the embedding pool.
async fn start_in_lab(lab: &Lab, sandbox: &Sandbox, ids: &[&str]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let spec = sandbox
            .shared_node(id)
            .set("inference.enabled", false)
            .set("http.listen", format!("{}:0", lab.addr(i)))
            .set("cluster.listen", format!("{}:0", lab.addr(i)))
            .wrapped(lab.exec(i));
        nodes.push(spec.start().await);
    }
    nodes
}

/// The seed of a random schedule: `ENGRAM_CHAOS_SEED` when set, else from the clock.
fn seed() -> u64 {
    match std::env::var("ENGRAM_CHAOS_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("ENGRAM_CHAOS_SEED={s:?} is not a u64: {e}")),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Appends `text` for `user` through `through` with request id `id` until it is acknowledged
/// (a retry with the same id has exactly-once effects); returns how long that took. Only 503
/// (no reachable owner yet) and no answer are allowed before the 200.
async fn until_acknowledged(
    through: &HttpClient,
    user: &str,
    id: &str,
    text: &str,
    deadline: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        match through.append_turn(user, &turn(id, "s1", text, "ok")).await {
            Ok(reply) if reply.status == StatusCode::OK => return started.elapsed(),
            Ok(reply) => assert_eq!(
                reply.status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{id} through {}: {}",
                through.base(),
                reply.text()
            ),
            Err(_) => {}
        }
        assert!(
            started.elapsed() < deadline,
            "{id} through {} not acknowledged within {deadline:?}",
            through.base()
        );
        tokio::time::sleep(ms(100)).await;
    }
}

/// Checks through `client` that `text` is stored exactly once in `user`'s session.
async fn stored_once(client: &HttpClient, user: &str, text: &str) {
    let stored = texts(client, user).await;
    let n = stored.iter().filter(|t| *t == text).count();
    assert_eq!(n, 1, "{user}: {text:?} stored {n} times: {stored:?}");
}

/// The sum over `clients` of a metric each must export.
async fn total(clients: &[(&str, HttpClient)], name: &str) -> f64 {
    let mut sum = 0.0;
    for (_, client) in clients {
        sum += exported_metric(client, name).await;
    }
    sum
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
    let nodes = start_in_lab(&lab, &sandbox, &ids).await;
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, SETTLE).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, USERS, WRITERS);
    load.wait_for(50, Duration::from_secs(30)).await;
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
    let seed = seed();
    println!("flapping: seed {seed} (replay with ENGRAM_CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let lab = lab(3);
    let sandbox = Sandbox::new();
    let ids = ["flap-a", "flap-b", "flap-c"];
    let nodes = start_in_lab(&lab, &sandbox, &ids).await;
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, SETTLE).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, USERS, WRITERS);
    load.wait_for(50, Duration::from_secs(30)).await;

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

/// The slow link's rate, kbit/s each way.
const SLOW_KBIT: u32 = 256;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_to_one_node_keeps_every_user_served_and_loses_no_acknowledged_write() {
    let _serial = SERIAL.lock().await;
    let lab = lab(3);
    let sandbox = Sandbox::new();
    let ids = ["slow-a", "slow-b", "slow-c"];
    let nodes = start_in_lab(&lab, &sandbox, &ids).await;
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, SETTLE).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, USERS, WRITERS);
    load.wait_for(50, Duration::from_secs(30)).await;
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

/// A fault of the random schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// A node cut from every other, both ways.
    Cut(usize),
    /// Frames from the first node to the second vanish.
    OneWay(usize, usize),
    /// A node's link slowed.
    Slow(usize),
    /// A node SIGKILLed (removed: restarted).
    Kill(usize),
    /// A node SIGSTOPped (removed: SIGCONT).
    Pause(usize),
}

impl Fault {
    fn is_process(self) -> bool {
        matches!(self, Fault::Kill(_) | Fault::Pause(_))
    }

    /// The fault in words, with the nodes' ids.
    fn describe(self, ids: &[&str]) -> String {
        match self {
            Fault::Cut(i) => format!("cut of {}", ids[i]),
            Fault::OneWay(from, to) => format!("one-way cut {} -> {}", ids[from], ids[to]),
            Fault::Slow(i) => format!("slow link of {}", ids[i]),
            Fault::Kill(i) => format!("SIGKILL of {}", ids[i]),
            Fault::Pause(i) => format!("SIGSTOP of {}", ids[i]),
        }
    }
}

/// A step of the schedule: `fault` applied (or removed) `at` from the start.
#[derive(Debug, Clone, Copy)]
struct Step {
    at: Duration,
    fault: Fault,
    apply: bool,
}

/// The schedule of seed-drawn faults over `nodes` nodes, applied until `span` (removed up to a
/// few seconds later). At most one process is down (killed or paused) and at most two network
/// faults hold at a time, so that every user stays servable within the writers' 30 s; holds
/// stay short of anything the writers would wait out. A flap is a burst of short cuts of one
/// node.
fn schedule(rng: &mut StdRng, nodes: usize, span: Duration) -> Vec<Step> {
    let mut steps = Vec::new();
    // Faults in force, with when they end.
    let mut holding: Vec<(Duration, Fault)> = Vec::new();
    let mut t = Duration::ZERO;
    loop {
        t += ms(rng.random_range(300..=1500));
        if t >= span {
            break;
        }
        holding.retain(|(end, _)| *end > t);
        let node = rng.random_range(0..nodes);
        let other = (node + rng.random_range(1..nodes)) % nodes;
        let kind = rng.random_range(0..6u8);
        let hold = ms(rng.random_range(500..=4000));
        let network = holding.iter().filter(|(_, f)| !f.is_process()).count();
        let process_down = holding.iter().any(|(_, f)| f.is_process());
        let mut hold_fault = |fault: Fault, at: Duration, hold: Duration| {
            steps.push(Step {
                at,
                fault,
                apply: true,
            });
            steps.push(Step {
                at: at + hold,
                fault,
                apply: false,
            });
        };
        match kind {
            0 if network < 2 => {
                hold_fault(Fault::Cut(node), t, hold);
                holding.push((t + hold, Fault::Cut(node)));
            }
            1 if network < 2 => {
                hold_fault(Fault::OneWay(node, other), t, hold);
                holding.push((t + hold, Fault::OneWay(node, other)));
            }
            2 if network < 2 => {
                // A flap: 3 to 5 cuts of 300-1000 ms, 300-1000 ms apart.
                let mut at = t;
                for _ in 0..rng.random_range(3..=5) {
                    let down = ms(rng.random_range(300..=1000));
                    hold_fault(Fault::Cut(node), at, down);
                    at += down + ms(rng.random_range(300..=1000));
                }
                holding.push((at, Fault::Cut(node)));
            }
            3 if network < 2 && !holding.iter().any(|(_, f)| *f == Fault::Slow(node)) => {
                let hold = hold + ms(2000);
                hold_fault(Fault::Slow(node), t, hold);
                holding.push((t + hold, Fault::Slow(node)));
            }
            4 if !process_down => {
                let hold = hold.min(ms(3000));
                hold_fault(Fault::Kill(node), t, hold);
                holding.push((t + hold, Fault::Kill(node)));
            }
            5 if !process_down => {
                hold_fault(Fault::Pause(node), t, hold);
                holding.push((t + hold, Fault::Pause(node)));
            }
            // Not allowed now: a quiet slot.
            _ => {}
        }
    }
    // In time order; a removal and an application at the same instant keep their order.
    steps.sort_by_key(|s| s.at);
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_random_schedule_of_network_and_process_faults_loses_no_acknowledged_write() {
    let _serial = SERIAL.lock().await;
    let seed = seed();
    println!("random schedule: seed {seed} (replay with ENGRAM_CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let lab = lab(3);
    let sandbox = Sandbox::new();
    let ids = ["mix-a", "mix-b", "mix-c"];
    let mut nodes = start_in_lab(&lab, &sandbox, &ids).await;
    settled(&clients_of(&ids, &nodes), SETTLE).await;
    let gateway = Gateway::new(nodes.iter().map(Node::client).collect());
    let load = Load::start(&gateway, USERS, WRITERS);
    load.wait_for(50, Duration::from_secs(30)).await;

    let steps = schedule(&mut rng, ids.len(), Duration::from_secs(32));
    println!(
        "the schedule ({} steps; removing a SIGKILL restarts the node, removing a SIGSTOP \
         sends SIGCONT):",
        steps.len()
    );
    for s in &steps {
        println!(
            "  {:6.2} s {} {}",
            s.at.as_secs_f64(),
            if s.apply { "apply " } else { "remove" },
            s.fault.describe(&ids)
        );
    }
    let acked_before = load.acked().await;
    let retries_before = gateway.retries.load(Ordering::Relaxed);
    let started = Instant::now();
    for s in &steps {
        if let Some(wait) = s.at.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let at = started.elapsed();
        let what = match (s.fault, s.apply) {
            (Fault::Cut(i), true) => {
                lab.cut(i).unwrap();
                format!("cut {} from its peers", ids[i])
            }
            (Fault::Cut(i), false) => {
                lab.heal(i).unwrap();
                format!("healed a cut of {}", ids[i])
            }
            (Fault::OneWay(from, to), true) => {
                lab.cut_one_way(from, to).unwrap();
                format!("{}'s frames to {} vanish", ids[from], ids[to])
            }
            (Fault::OneWay(from, to), false) => {
                lab.heal_one_way(from, to).unwrap();
                format!("healed {} -> {}", ids[from], ids[to])
            }
            (Fault::Slow(i), true) => {
                lab.slow(i, SLOW_KBIT)
                    .unwrap_or_else(|why| panic!("the lab cannot slow a link: {why}"));
                format!("slowed {}'s link to {SLOW_KBIT} kbit/s", ids[i])
            }
            (Fault::Slow(i), false) => {
                lab.unslow(i).unwrap();
                format!("{}'s link at full speed", ids[i])
            }
            (Fault::Kill(i), true) => {
                nodes[i].kill();
                format!("SIGKILL {}", ids[i])
            }
            (Fault::Kill(i), false) => {
                nodes[i].restart().await;
                gateway.replace_nodes(nodes.iter().map(Node::client).collect());
                format!(
                    "restarted {} (up after {:.2} s)",
                    ids[i],
                    (started.elapsed() - at).as_secs_f64()
                )
            }
            (Fault::Pause(i), true) => {
                pause_outside_writes(&nodes[i], &sandbox);
                format!("SIGSTOP {}", ids[i])
            }
            (Fault::Pause(i), false) => {
                nodes[i].signal("CONT");
                format!("SIGCONT {}", ids[i])
            }
        };
        println!(
            "[{:6.2} s] {what} (planned {:.2} s); in force: {}",
            at.as_secs_f64(),
            s.at.as_secs_f64(),
            lab.faults()
        );
    }
    let ran = started.elapsed();
    let during = load.acked().await - acked_before;
    let retries = gateway.retries.load(Ordering::Relaxed) - retries_before;

    // Heal everything (the schedule removed each fault it applied; this is the backstop).
    lab.heal_all().unwrap();
    let healed_at = Instant::now();
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, SETTLE).await;
    let settle = healed_at.elapsed();
    // Forwarding works between every two nodes.
    let mut slowest = Duration::ZERO;
    for (i, (_, from)) in clients.iter().enumerate() {
        for (j, (to, _)) in clients.iter().enumerate().filter(|&(j, _)| j != i) {
            let took = until_acknowledged(
                from,
                &user_of(&owners, to, &format!("after-{i}")),
                &format!("after-{i}-{j}"),
                "forwarded after the schedule",
                FORWARDING_BACK,
            )
            .await;
            slowest = slowest.max(took);
        }
    }
    load.served_again(&load.users.clone(), healed_at, SERVED_AGAIN)
        .await;
    let taken_over = total(&clients, "engram_shards_taken_over_total").await;
    load.wait_for(50, Duration::from_secs(30)).await;
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    println!(
        "random schedule (seed {seed}): {} steps over {:.1} s, {during} writes acknowledged \
         meanwhile ({:.1}/s), {retries} retried requests; after the heal the cluster settled \
         in {:.2} s and forwarding worked between every two nodes within {:.2} s; {taken_over} \
         shards taken over (counted since each node's last start)",
        steps.len(),
        ran.as_secs_f64(),
        during as f64 / ran.as_secs_f64(),
        settle.as_secs_f64(),
        slowest.as_secs_f64(),
    );
}
