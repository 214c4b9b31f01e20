//! Network faults between the nodes of a local cluster, under load: an asymmetric partition, a
//! flapping link, a slow link, and a seeded random schedule that mixes every fault the lab
//! knows (cuts, one-way cuts, flapping, slow links) with process faults (SIGKILL and restart,
//! SIGSTOP and SIGCONT), disk faults (a node's fsyncs failing, the store's disk full) and clock
//! jumps.
//!
//! Each test runs three real `engram-node` processes on the sandbox's shared SQLite file,
//! each in its own network namespace of a lab (`engram_tests::netns`), without the embedding
//! pool (heartbeat timing must not depend on the model's CPU use). Clients reach every node
//! from this host whatever is cut between the nodes, through a [`Gateway`] that retries
//! elsewhere with the same request id; a [`Load`] of closed-loop writers and readers records
//! the history, and `stop_and_verify` checks at the end that every acknowledged write is
//! stored exactly once in acknowledgement order, that no (shard, epoch) was written by two
//! nodes, and the whole history (no stale or backward read, no answer but 200 and 503; the
//! random schedule makes the same checks with 507 allowed too, a write its full disk refused).
//!
//! The lab needs root and iproute2 (`ip`, and `tc` for slow links): where it cannot be built
//! the tests fail with the reason. The kernel of the build machine has no `netem` qdisc, so a
//! slow link is a token-bucket filter (`tbf`): a bandwidth limit whose queue adds delay, not
//! a fixed latency. The tests run one at a time (a lock): each starts three nodes and a load
//! on a 2-core machine, and the slow-link test compares rates. Every wait is on a condition
//! with a deadline; the only sleeps are the fault schedules themselves. The random schedules
//! print their seed; `ENGRAM_CHAOS_SEED=<seed>` replays one.
//!
//! How the random schedule injects the faults beside the lab's, as `faults.rs` and
//! `clock_skew.rs` do one at a time (it fails with the reason where a tool is missing):
//!
//! - the store is on a tmpfs the test mounts (256 MB), the sandbox's shared file a link to it;
//!   a full disk is a ballast file that takes all the room (ENOSPC) for 1-3 s, then deleted.
//!   Meanwhile a node whose store found the disk full answers writes 507 `storage_full`
//!   (nothing written) and reads go on. A store claims room only when its WAL grows past its
//!   largest size or a checkpoint grows its file, so the nodes checkpoint every 100 WAL pages
//!   rather than 1000: with 1000, most short full disks passed without a write refused;
//! - every node runs under libfiu's POSIX preload (`ip netns exec NS fiu-run -x ...`, each
//!   program of the chain exec'ing the next, so the node keeps the pid the harness knows,
//!   which the test checks); its fsyncs and fdatasyncs are failed and restored with
//!   `fiu-ctrl` (whose exit status does not tell a failure: its stderr does);
//! - every node runs under libfaketime, which reads the node's wall-clock offset from a file
//!   at every call (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`, the monotonic clock left
//!   real): a clock jump writes +0.2 s or -0.2 s there and later +0, so that no two clocks are
//!   500 ms apart (the margin). The test first checks, through the heartbeat ages of
//!   `/v1/cluster/status`, that a jump takes effect on a running node.
//!
//! At most one process is down at a time and a bounded number of faults hold at once (see
//! `schedule`); every step is printed with its planned and actual time, and everything is
//! healed and restored before the cluster settles and the checks run.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use engram_tests::chaos::{
    Gateway, Load, clients_of, exported_metric, one_owner_per_epoch, pause_outside_writes, settled,
    status, texts, user_of,
};
use engram_tests::harness::{HttpClient, Node, NodeSpec, Sandbox, node_binary, turn};
use engram_tests::netns::{Lab, run};
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

/// Node `id`, the lab's node `i`: in namespace `i` (started under `ip netns exec`), on the
/// shared SQLite file, without the embedding pool.
fn lab_node(lab: &Lab, sandbox: &Sandbox, i: usize, id: &str) -> NodeSpec {
    sandbox
        .shared_node(id)
        .set("inference.enabled", false)
        .set("http.listen", format!("{}:0", lab.addr(i)))
        .set("cluster.listen", format!("{}:0", lab.addr(i)))
        .wrapped(lab.exec(i))
}

/// Starts nodes `ids` in the lab, node `i` in namespace `i`, as [`lab_node`] specifies them.
async fn start_in_lab(lab: &Lab, sandbox: &Sandbox, ids: &[&str]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        nodes.push(lab_node(lab, sandbox, i, id).start().await);
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

/// Where Debian's `faketime` package puts the preloaded library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// The size of the tmpfs the random schedule's store lives on, MiB: room for the store and its
/// WAL (a few MiB) and its reserve (16 MiB); a full disk fills the rest with a ballast file.
const STORE_MIB: u32 = 256;
/// How far a clock jump moves a node's wall clock, ms, either way: two nodes jumped opposite
/// ways are 400 ms apart, inside [`MARGIN_MS`].
const JUMP_MS: i32 = 200;
/// The margin of clock skew between any two nodes, ms: S = min(lease timeout,
/// suspect-confirm) / 2 (docs/cluster.md, "Clock skew").
const MARGIN_MS: i32 = 500;
/// The store's WAL pages between checkpoints in the random schedule (the default is 1000). A
/// store claims room of its filesystem when its WAL grows past its largest size or a
/// checkpoint grows its file; with 1000 pages a short full disk often passes before either.
const WAL_PAGES: u32 = 100;
/// Faults in force at once, at most, in the random schedule (a flap counts once).
const MOST_IN_FORCE: usize = 4;

/// Sends a libfiu control command to process `pid`, started under `fiu-run -x` with its
/// control pipes named `pipes`-PID. `fiu-ctrl` exits 0 even when it finds no control pipe of
/// `pid` or the process refuses the command, saying so on stderr only: anything on stderr is a
/// failure here.
fn fiu(pipes: &Path, pid: u32, command: &str) {
    let out = Command::new("fiu-ctrl")
        .arg("-f")
        .arg(pipes)
        .args(["-c", command, &pid.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("fiu-ctrl cannot run here ({e}): .ci/setup installs fiu-utils"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "fiu-ctrl -c {command:?} {pid}: {} {stderr}",
        out.status
    );
}

/// The files whose names start with `shared.sqlite-` (the WAL and its index) that this
/// process has open while it has the sandbox's shared store open by its path.
fn wal_files_open_through(sandbox: &Sandbox) -> Vec<PathBuf> {
    tokio::task::block_in_place(|| {
        let store = engram_storage::Store::sqlite(
            &sandbox.shared_sqlite(),
            engram_storage::sqlite::SqliteOptions::default(),
        )
        .unwrap();
        let open = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|file| file.to_string_lossy().contains("shared.sqlite-"))
            .collect();
        drop(store);
        open
    })
}

/// The disk and clock faults of the random schedule, and which of them are in force: the
/// store on a tmpfs the test mounts, filled with a ballast file; each node's wall-clock offset
/// in a file libfaketime reads again at every call; each node's fsyncs switched with libfiu.
/// The tmpfs is unmounted on drop.
struct DiskAndClocks {
    /// The tmpfs.
    mount: PathBuf,
    /// What the nodes' libfiu control pipes are named, the pid appended: in the sandbox, so
    /// that they go with it (a killed process leaves them behind).
    pipes: PathBuf,
    /// Each node's clock file (libfaketime's `FAKETIME_TIMESTAMP_FILE`).
    clocks: Vec<PathBuf>,
    /// Each node's wall-clock offset now, ms.
    offsets: Vec<i32>,
    /// Nodes whose fsyncs fail now.
    failing: BTreeSet<usize>,
    /// The ballast's size in bytes, while the disk is full.
    ballast: Option<u64>,
}

impl DiskAndClocks {
    /// Mounts the tmpfs in the sandbox, links the sandbox's shared SQLite file to the store on
    /// it, and sets the clocks of `nodes` nodes to +0.
    ///
    /// The nodes open the store by its path on the tmpfs, so that its reserve (a file beside
    /// the path named) is there too. The link is for what opens the shared file by the
    /// sandbox's path, this test's pause and its checks of the store: SQLite resolves links and
    /// keeps the WAL and its index beside the file linked to, with the nodes'.
    fn set_up(sandbox: &Sandbox, nodes: usize) -> DiskAndClocks {
        assert!(
            Path::new(LIBFAKETIME).is_file(),
            "{LIBFAKETIME} is missing: the random schedule jumps nodes' wall clocks with \
             libfaketime; install the Debian package faketime (.ci/setup does)"
        );
        run("fiu-run", &["-n", "true"]).unwrap_or_else(|why| {
            panic!(
                "the random schedule fails nodes' fsyncs with libfiu, whose fiu-run cannot run \
                 here ({why}): install fiu-utils (.ci/setup does)"
            )
        });
        let mount = sandbox.path().join("store");
        std::fs::create_dir_all(&mount).unwrap();
        let size = format!("size={STORE_MIB}m");
        let at = mount.to_string_lossy();
        run("mount", &["-t", "tmpfs", "-o", &size, "tmpfs", &at]).unwrap_or_else(|why| {
            panic!("the random schedule keeps its store on a tmpfs it mounts (root only): {why}")
        });
        let mut faults = DiskAndClocks {
            clocks: (0..nodes)
                .map(|i| sandbox.path().join(format!("clock-{i}")))
                .collect(),
            offsets: vec![0; nodes],
            failing: BTreeSet::new(),
            ballast: None,
            mount,
            pipes: sandbox.path().join("fiu-ctrl"),
        };
        std::os::unix::fs::symlink(faults.store(), sandbox.shared_sqlite()).unwrap();
        for i in 0..nodes {
            faults.jump(i, 0);
        }
        faults
    }

    /// The store's file, on the tmpfs.
    fn store(&self) -> PathBuf {
        self.mount.join("shared.sqlite")
    }

    /// The command prefix that starts the lab's node `i`: in its namespace, under libfiu's
    /// POSIX preload (`fiu-run -x`) and under libfaketime, which reads the node's clock file at
    /// every call (`FAKETIME_NO_CACHE`) and leaves its monotonic clock real. `fiu-run` sets
    /// `LD_PRELOAD` to libfiu's libraries; a shell adds libfaketime and execs the node.
    fn wrapper(&self, lab: &Lab, i: usize) -> Vec<String> {
        let mut wrapper = lab.exec(i);
        wrapper.extend([
            "fiu-run".to_owned(),
            "-x".to_owned(),
            "-f".to_owned(),
            self.pipes.display().to_string(),
            "env".to_owned(),
            format!("FAKETIME_TIMESTAMP_FILE={}", self.clocks[i].display()),
            "FAKETIME_NO_CACHE=1".to_owned(),
            "FAKETIME_DONT_FAKE_MONOTONIC=1".to_owned(),
            "sh".to_owned(),
            "-c".to_owned(),
            format!("LD_PRELOAD=\"$LD_PRELOAD {LIBFAKETIME}\" exec \"$@\""),
            "sh".to_owned(),
        ]);
        wrapper
    }

    /// Checks that `node`'s process id is the node's own, at the end of the chain of programs
    /// it is started under (`ip netns exec`, `fiu-run`, `env` and `sh` each exec the next), and
    /// that libfiu's control pipe of that process answers.
    fn check_started(&self, node: &Node) {
        let pid = node.pid().expect("a node just started runs");
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let binary =
            node_binary().and_then(|b| std::fs::canonicalize(b).map_err(|e| e.to_string()));
        assert_eq!(
            Ok(exe),
            binary,
            "process {pid} of node {} is not the node itself",
            node.spec().id()
        );
        // A failure point nothing checks, enabled and disabled again: the pipe answers both.
        fiu(&self.pipes, pid, "enable name=engram/tests/probe");
        fiu(&self.pipes, pid, "disable name=engram/tests/probe");
    }

    /// Sets node `i`'s wall clock `ms` off the machine's, through a file renamed over its clock
    /// file (no read sees half of one). No two clocks may end up [`MARGIN_MS`] apart.
    fn jump(&mut self, i: usize, ms: i32) {
        let next = self.clocks[i].with_extension("next");
        std::fs::write(&next, format!("{:+}\n", f64::from(ms) / 1000.0)).unwrap();
        std::fs::rename(&next, &self.clocks[i]).unwrap();
        self.offsets[i] = ms;
        let (least, most) = (self.offsets.iter().min(), self.offsets.iter().max());
        let apart = most.zip(least).map_or(0, |(most, least)| most - least);
        assert!(
            apart < MARGIN_MS,
            "clocks {apart} ms apart: {:?}",
            self.offsets
        );
    }

    /// Fails (`fail`) or restores every fsync and fdatasync of node `i`, process `pid`.
    fn fsyncs(&mut self, i: usize, pid: u32, fail: bool) {
        let verb = if fail { "enable" } else { "disable" };
        for call in ["fdatasync", "fsync"] {
            fiu(
                &self.pipes,
                pid,
                &format!("{verb} name=posix/io/sync/{call}"),
            );
        }
        if fail {
            self.failing.insert(i);
        } else {
            self.failing.remove(&i);
        }
    }

    /// Bytes free on the tmpfs (`stat -f`: free blocks times their size).
    fn free(&self) -> u64 {
        let out = Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(&self.mount)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let figures: Vec<u64> = text
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        assert_eq!(figures.len(), 2, "stat -f of the tmpfs printed {text:?}");
        figures[0] * figures[1]
    }

    /// Fills the tmpfs with a ballast file: all but a MiB of the free room allocated at once
    /// (`fallocate`; writing 200 MiB takes seconds on a busy 2-core machine, and where the
    /// nodes took room meanwhile it fails and allocates nothing), then written until the
    /// filesystem has no room left (ENOSPC). Returns the ballast's size in bytes.
    fn fill(&mut self) -> u64 {
        let path = self.mount.join("ballast");
        let most = self.free().saturating_sub(1 << 20).to_string();
        let _ = run("fallocate", &["-l", &most, &path.to_string_lossy()]);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let block = vec![0x5a_u8; 1 << 16];
        tokio::task::block_in_place(|| {
            loop {
                match file.write(&block) {
                    Ok(n) if n > 0 => {}
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                    other => panic!("writing the ballast: {other:?}"),
                }
            }
        });
        let size = file.metadata().unwrap().len();
        self.ballast = Some(size);
        size
    }

    /// Deletes the ballast: the room is back.
    fn empty(&mut self) {
        std::fs::remove_file(self.mount.join("ballast")).unwrap();
        self.ballast = None;
    }

    /// The files on the tmpfs (the store, its WAL and index, its reserve, the ballast if any)
    /// with their sizes in KiB, in words.
    fn store_files(&self) -> String {
        let mut files: Vec<String> = std::fs::read_dir(&self.mount)
            .unwrap()
            .flatten()
            .filter_map(|f| Some((f.file_name(), f.metadata().ok()?.len())))
            .map(|(name, len)| format!("{} {} KiB", name.to_string_lossy(), len >> 10))
            .collect();
        files.sort();
        files.join(", ")
    }

    /// What is faulty of the disk and the clocks now, in words (for the log).
    fn in_force(&self, ids: &[&str]) -> String {
        let mut all: Vec<String> = self
            .failing
            .iter()
            .map(|&i| format!("{} fsyncs failing", ids[i]))
            .collect();
        for (i, offset) in self.offsets.iter().enumerate() {
            if *offset != 0 {
                all.push(format!("{} clock {offset:+} ms", ids[i]));
            }
        }
        if let Some(size) = self.ballast {
            all.push(format!("disk full ({} MiB of ballast)", size >> 20));
        }
        if all.is_empty() {
            "none".to_owned()
        } else {
            all.join(", ")
        }
    }

    /// Removes whatever is still in force: deletes the ballast, makes every failing node's
    /// fsyncs work, sets every clock to +0.
    fn restore(&mut self, nodes: &[Node]) {
        if self.ballast.is_some() {
            self.empty();
        }
        for i in self.failing.clone() {
            let pid = nodes[i].pid().expect("a node whose fsyncs fail runs");
            self.fsyncs(i, pid, false);
        }
        for i in 0..self.offsets.len() {
            self.jump(i, 0);
        }
    }
}

impl Drop for DiskAndClocks {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", &self.mount.to_string_lossy()]);
    }
}

/// Bounds (ms) on how far `node`'s wall clock is ahead of `reference`'s, from the heartbeat
/// ages each reports of the other now. An age is the reporter's clock minus the other's last
/// stamp, read after it was made, so `-age(of node, by reference) <= offset` (the node's
/// offset when it stamped) and `offset <= age(of reference, by node)` (its offset now).
async fn offset_bounds(
    node: (&str, &HttpClient),
    reference: (&str, &HttpClient),
) -> Option<(i64, i64)> {
    let age = |view: &serde_json::Value, member: &str| -> Option<i64> {
        view["members"]
            .as_array()?
            .iter()
            .find(|m| m["node_id"] == member)?["heartbeat_age_ms"]
            .as_i64()
    };
    let of_node = age(&status(reference.1).await?, node.0)?;
    let of_reference = age(&status(node.1).await?, reference.0)?;
    Some((-of_node, of_reference))
}

/// What a clock jump showed: how long after it the heartbeat ages showed it, and the bounds
/// on the offset they gave afterwards (ms).
struct Shown {
    after: Duration,
    at_least: i64,
    at_most: i64,
}

/// Jumps node `i`'s clock to `to` ms and samples the heartbeat ages it and `reference` (at
/// +0) report of each other until they show the jump: the bound on the jump's side past the
/// midpoint between the offsets before and after, which the clock before the jump cannot
/// show (the bounds hold the true offset). Then bounds the new offset with 20 samples of
/// stamps made after the jump (three heartbeats later), so that both are tight.
async fn jump_shows(
    faults: &mut DiskAndClocks,
    (i, node): (usize, (&str, &HttpClient)),
    reference: (&str, &HttpClient),
    to: i32,
) -> Shown {
    let from = faults.offsets[i];
    let midpoint = i64::from(from + to) / 2;
    let past = |(least, most): (i64, i64)| {
        if to > from {
            least > midpoint
        } else {
            most < midpoint
        }
    };
    faults.jump(i, to);
    let started = Instant::now();
    while !offset_bounds(node, reference).await.is_some_and(past) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a jump of {}'s wall clock from {from:+} to {to:+} ms did not show in its \
             heartbeat ages and {}'s within 10 s",
            node.0,
            reference.0
        );
        tokio::time::sleep(ms(25)).await;
    }
    let after = started.elapsed();
    tokio::time::sleep(ms(750)).await;
    let (mut at_least, mut at_most) = (i64::MIN, i64::MAX);
    for _ in 0..20 {
        if let Some((least, most)) = offset_bounds(node, reference).await {
            at_least = at_least.max(least);
            at_most = at_most.min(most);
        }
        tokio::time::sleep(ms(25)).await;
    }
    Shown {
        after,
        at_least,
        at_most,
    }
}

/// For each of the `windows` the disk was full, how long it was and the tries answered 507 by
/// each node (of the operations that ran then), in words.
fn refused_while_full(gateway: &Gateway, windows: &[(Instant, Instant)], ids: &[&str]) -> String {
    let ops = gateway.history.ops();
    let each: Vec<String> = windows
        .iter()
        .map(|&(from, until)| {
            let mut by_node = BTreeMap::new();
            let during = ops
                .iter()
                .filter(|op| op.invoked < until && op.completed.is_none_or(|c| c > from));
            for t in during.flat_map(|op| &op.tries).filter(|t| t.status == 507) {
                *by_node
                    .entry(ids.get(t.node).copied().unwrap_or("?"))
                    .or_insert(0) += 1;
            }
            format!(
                "{:.2} s (tries answered 507: {by_node:?})",
                (until - from).as_secs_f64()
            )
        })
        .collect();
    if each.is_empty() {
        "never".to_owned()
    } else {
        each.join(", ")
    }
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
    /// A node's fsyncs and fdatasyncs fail (removed: they work again).
    Fsync(usize),
    /// A node's wall clock jumps by the offset, ms (removed: back to +0).
    Clock(usize, i32),
    /// The store's filesystem filled with a ballast file (removed: the ballast deleted).
    Full,
}

/// What a fault is a fault of: the schedule bounds each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Network,
    Process,
    Disk,
    Clock,
}

impl Fault {
    fn class(self) -> Class {
        match self {
            Fault::Cut(_) | Fault::OneWay(..) | Fault::Slow(_) => Class::Network,
            Fault::Kill(_) | Fault::Pause(_) => Class::Process,
            Fault::Fsync(_) | Fault::Full => Class::Disk,
            Fault::Clock(..) => Class::Clock,
        }
    }

    /// The kind of fault, in words (for the summary).
    fn kind(self) -> &'static str {
        match self {
            Fault::Cut(_) => "cut",
            Fault::OneWay(..) => "one-way cut",
            Fault::Slow(_) => "slow link",
            Fault::Kill(_) => "SIGKILL",
            Fault::Pause(_) => "SIGSTOP",
            Fault::Fsync(_) => "failing fsyncs",
            Fault::Clock(..) => "clock jump",
            Fault::Full => "full disk",
        }
    }

    /// The fault in words, with the nodes' ids.
    fn describe(self, ids: &[&str]) -> String {
        match self {
            Fault::OneWay(from, to) => format!("one-way cut {} -> {}", ids[from], ids[to]),
            Fault::Cut(i) | Fault::Slow(i) | Fault::Kill(i) | Fault::Pause(i) | Fault::Fsync(i) => {
                format!("{} of {}", self.kind(), ids[i])
            }
            Fault::Clock(i, offset) => format!("clock jump of {} by {offset:+} ms", ids[i]),
            Fault::Full => "full disk".to_owned(),
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

/// Applies `fault` at `at` and removes it `hold` later.
fn hold_fault(steps: &mut Vec<Step>, fault: Fault, at: Duration, hold: Duration) {
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
}

/// The schedule of seed-drawn faults over `nodes` nodes, applied until `span` (removed up to a
/// few seconds later), with how many faults of each kind it drew (a flap, a burst of short cuts
/// of one node, counted once) and of quiet slots (a kind drawn when it was not allowed).
///
/// At most [`MOST_IN_FORCE`] faults hold at a time: two network faults, one process fault (at
/// most one process down, killed or paused), one disk fault (a node's fsyncs failing, or the
/// full disk) and two clock jumps ([`JUMP_MS`] either way, so that no two clocks are more than
/// twice that apart). A node's fsyncs fail only while it runs on (libfiu is switched through
/// the process, which a paused one cannot answer and a restarted one forgets), and the disk is
/// full only while no node is down for a restart (a node started on a full disk is another
/// test). Every hold is a few seconds, short of anything the writers would wait out (30 s a
/// write); a full disk 1-3 s, since a write refused meanwhile is retried through all of it.
fn schedule(
    rng: &mut StdRng,
    nodes: usize,
    span: Duration,
) -> (Vec<Step>, BTreeMap<&'static str, usize>) {
    let mut steps = Vec::new();
    let mut drawn = BTreeMap::new();
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
        let kind = rng.random_range(0..9u8);
        let hold = ms(rng.random_range(500..=4000));
        let holds =
            |fault: &dyn Fn(Fault) -> bool| holding.iter().filter(|(_, f)| fault(*f)).count();
        let room = holding.len() < MOST_IN_FORCE;
        let network = room && holds(&|f| f.class() == Class::Network) < 2;
        let process = room && holds(&|f| f.class() == Class::Process) == 0;
        let disk = room && holds(&|f| f.class() == Class::Disk) == 0;
        let clock = room && holds(&|f| f.class() == Class::Clock) < 2;
        let node_stopped = holds(&|f| f == Fault::Kill(node) || f == Fault::Pause(node)) > 0;
        let node_failing = holds(&|f| f == Fault::Fsync(node)) > 0;
        let full = holds(&|f| f == Fault::Full) > 0;
        let killed = holds(&|f| matches!(f, Fault::Kill(_))) > 0;
        let slowed = holds(&|f| f == Fault::Slow(node)) > 0;
        let jumped = holds(&|f| matches!(f, Fault::Clock(n, _) if n == node)) > 0;
        if kind == 2 && network {
            // A flap: 3 to 5 cuts of 300-1000 ms, 300-1000 ms apart.
            let mut at = t;
            for _ in 0..rng.random_range(3..=5) {
                let down = ms(rng.random_range(300..=1000));
                hold_fault(&mut steps, Fault::Cut(node), at, down);
                at += down + ms(rng.random_range(300..=1000));
            }
            holding.push((at, Fault::Cut(node)));
            *drawn.entry("flap").or_insert(0) += 1;
            continue;
        }
        let drew = match kind {
            0 if network => Some((Fault::Cut(node), hold)),
            1 if network => Some((Fault::OneWay(node, other), hold)),
            3 if network && !slowed => Some((Fault::Slow(node), hold + ms(2000))),
            4 if process && !node_failing && !full => Some((Fault::Kill(node), hold.min(ms(3000)))),
            5 if process && !node_failing => Some((Fault::Pause(node), hold)),
            6 if disk && !node_stopped => {
                Some((Fault::Fsync(node), ms(rng.random_range(1000..=4000))))
            }
            7 if clock && !jumped => {
                let offset = if rng.random_bool(0.5) {
                    JUMP_MS
                } else {
                    -JUMP_MS
                };
                Some((Fault::Clock(node, offset), hold))
            }
            8 if disk && !killed => Some((Fault::Full, ms(rng.random_range(1000..=3000)))),
            _ => None,
        };
        match drew {
            Some((fault, hold)) => {
                hold_fault(&mut steps, fault, t, hold);
                holding.push((t + hold, fault));
                *drawn.entry(fault.kind()).or_insert(0) += 1;
            }
            // Not allowed now: a quiet slot.
            None => *drawn.entry("quiet slot").or_insert(0) += 1,
        }
    }
    // In time order; a removal and an application at the same instant keep their order.
    steps.sort_by_key(|s| s.at);
    (steps, drawn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_random_schedule_of_disk_clock_process_and_network_faults_loses_no_acknowledged_write()
 {
    let _serial = SERIAL.lock().await;
    let seed = seed();
    println!("random schedule: seed {seed} (replay with ENGRAM_CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let lab = lab(3);
    let sandbox = Sandbox::new();
    let ids = ["mix-a", "mix-b", "mix-c"];
    let mut faults = DiskAndClocks::set_up(&sandbox, ids.len());
    let mut nodes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let spec = lab_node(&lab, &sandbox, i, id)
            .set("storage.sqlite.path", faults.store().display().to_string())
            .set("storage.sqlite.wal-autocheckpoint", WAL_PAGES)
            .wrapped(faults.wrapper(&lab, i));
        nodes.push(spec.start().await);
        faults.check_started(&nodes[i]);
    }
    let clients = clients_of(&ids, &nodes);
    settled(&clients, SETTLE).await;
    let wal = wal_files_open_through(&sandbox);
    assert!(
        !wal.is_empty() && wal.iter().all(|f| f.starts_with(&faults.mount)),
        "the shared store opened by the sandbox's path (a link) must use the WAL on the \
         tmpfs, with the nodes: it opened {wal:?}"
    );
    let gateway = Gateway::new(nodes.iter().map(Node::client).collect());
    let load = Load::start(&gateway, USERS, WRITERS);
    load.wait_for(50, Duration::from_secs(30)).await;

    // A clock jump takes effect on a running node, and so does its way back.
    let (a, b) = ((ids[0], &clients[0].1), (ids[1], &clients[1].1));
    let ahead = jump_shows(&mut faults, (0, a), b, JUMP_MS).await;
    let back = jump_shows(&mut faults, (0, a), b, 0).await;
    println!(
        "a clock jump on a running node: {} set {JUMP_MS:+} ms showed in the heartbeat ages \
         after {:.2} s (its offset from {} between {} and {} ms); set back to +0, after {:.2} s \
         (between {} and {} ms)",
        ids[0],
        ahead.after.as_secs_f64(),
        ids[1],
        ahead.at_least,
        ahead.at_most,
        back.after.as_secs_f64(),
        back.at_least,
        back.at_most,
    );

    let (steps, drawn) = schedule(&mut rng, ids.len(), Duration::from_secs(32));
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
    // When the disk was full: from the last byte of the ballast to its deletion.
    let mut full: Vec<(Instant, Instant)> = Vec::new();
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
                faults.check_started(&nodes[i]);
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
            (Fault::Fsync(i), fail) => {
                let pid = nodes[i]
                    .pid()
                    .expect("a node whose fsyncs are switched runs");
                faults.fsyncs(i, pid, fail);
                let now = if fail { "fail" } else { "work again" };
                format!("fsyncs of {} {now}", ids[i])
            }
            (Fault::Clock(i, offset), true) => {
                faults.jump(i, offset);
                format!("{}'s wall clock jumps {offset:+} ms", ids[i])
            }
            (Fault::Clock(i, offset), false) => {
                faults.jump(i, 0);
                format!("{}'s wall clock jumps {:+} ms, back to +0", ids[i], -offset)
            }
            (Fault::Full, true) => {
                let store = faults.store_files();
                let size = faults.fill();
                full.push((Instant::now(), Instant::now()));
                format!(
                    "filled the store's disk ({store}): a ballast of {} MiB, until ENOSPC, in \
                     {:.2} s",
                    size >> 20,
                    (started.elapsed() - at).as_secs_f64()
                )
            }
            (Fault::Full, false) => {
                faults.empty();
                if let Some((_, until)) = full.last_mut() {
                    *until = Instant::now();
                }
                "deleted the ballast".to_owned()
            }
        };
        println!(
            "[{:6.2} s] {what} (planned {:.2} s); in force: network {}; disk and clocks {}",
            at.as_secs_f64(),
            s.at.as_secs_f64(),
            lab.faults(),
            faults.in_force(&ids)
        );
    }
    let ran = started.elapsed();
    let during = load.acked().await - acked_before;
    let retries = gateway.retries.load(Ordering::Relaxed) - retries_before;

    // The schedule removed each fault it applied; this is the backstop, and the check.
    let left = format!("{}; {}", lab.faults(), faults.in_force(&ids));
    lab.heal_all().unwrap();
    faults.restore(&nodes);
    println!(
        "restored: every link healed, the ballast deleted, fsyncs working and every clock at +0 \
         (left in force by the schedule: {left})"
    );
    assert_eq!(left, "none; none", "the schedule left faults in force");
    let healed_at = Instant::now();
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, SETTLE).await;
    let settle = healed_at.elapsed();
    // Forwarding works between every two nodes, and each node writes as an owner.
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
    for (id, client) in &clients {
        assert_eq!(
            exported_metric(client, "engram_sqlite_reserve_released").await,
            0.0,
            "{id} keeps its store's reserve again once the disk has room"
        );
    }
    let taken_over = total(&clients, "engram_shards_taken_over_total").await;
    load.wait_for(50, Duration::from_secs(30)).await;
    // As `Load::stop_and_verify`, with 507 allowed too: a write the full disk refused.
    let (_, finals) = load.stop_and_check_final_state(&clients[0].1).await;
    one_owner_per_epoch(&sandbox, &load.users).await;
    let report = gateway.history.check(&finals, &[503, 507]);
    println!("history: {}", report.summary());
    report.assert_clean();
    let kinds: Vec<String> = drawn.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "the disk full {}",
        refused_while_full(&gateway, &full, &ids)
    );
    println!(
        "random schedule (seed {seed}): {} steps over {:.1} s, faults drawn by kind: {}; \
         {during} writes acknowledged meanwhile ({:.1}/s), {retries} retried requests; after \
         the heal the cluster settled in {:.2} s and forwarding worked between every two nodes \
         within {:.2} s; {taken_over} shards taken over (counted since each node's last start); \
         on the {STORE_MIB} MiB tmpfs: {}",
        steps.len(),
        ran.as_secs_f64(),
        kinds.join(", "),
        during as f64 / ran.as_secs_f64(),
        settle.as_secs_f64(),
        slowest.as_secs_f64(),
        faults.store_files(),
    );
}
