//! A seeded random schedule of faults on a local cluster under load: every network fault the
//! lab knows (cuts, one-way cuts, flapping, slow links, as `partitions.rs` runs one at a time)
//! mixed with process faults (SIGKILL and restart, SIGSTOP and SIGCONT), disk faults (a node's
//! fsyncs failing, the store's disk full) and clock jumps. The schedule prints its seed first;
//! `ENGRAM_CHAOS_SEED=<seed>` replays it.
//!
//! The test runs three real `engram-node` processes on one SQLite store, each in its own
//! network namespace of a lab (`engram_tests::netns`, built and started in by
//! `engram_tests::lab_cluster`), without the embedding pool. Clients reach every node from
//! this host whatever is cut between the nodes, through a [`Gateway`] that retries elsewhere
//! with the same request id; a [`Load`] of closed-loop writers and readers records the
//! history. At the end it checks that every acknowledged write is stored exactly once in
//! acknowledgement order, that no (shard, epoch) was written by two nodes, and the whole
//! history (no stale or backward read, no answer but 200, 503 and 507, a write its full disk
//! refused).
//!
//! How the faults are injected (the test fails with the reason where a tool is missing):
//!
//! - network faults by the lab (`Lab::cut`, `Lab::cut_one_way`, `Lab::slow`), which needs root
//!   and iproute2 (`ip`, and `tc` for slow links): where it cannot be built the test fails with
//!   the reason;
//! - process faults by the harness (`Node::kill` and `Node::restart`; SIGSTOP only outside
//!   a write, `pause_outside_writes`, and SIGCONT);
//! - disk and clock faults as `faults.rs` and `clock_skew.rs` inject them one at a time, here
//!   by `disk_and_clocks` (in `fault_schedule/`): the store is on a tmpfs the test mounts
//!   (256 MB), the sandbox's shared file a link to it; a full disk is a ballast file that takes
//!   all the room (ENOSPC) for 1-3 s, then deleted. Meanwhile a node whose store found the disk
//!   full answers writes 507 `storage_full` (nothing written) and reads go on. A store claims
//!   room only when its WAL grows past its largest size or a checkpoint grows its file, so the
//!   nodes checkpoint every 100 WAL pages rather than 1000: with 1000, most short full disks
//!   passed without a write refused;
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
//! healed and restored before the cluster settles and the checks run. The test is the only one
//! of its binary, so it needs no lock to run alone: cargo runs test binaries one after another.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_tests::chaos::{
    Gateway, Load, clients_of, exported_metric, one_owner_per_epoch, pause_outside_writes, settled,
    user_of,
};
use engram_tests::harness::{Node, Sandbox};
use engram_tests::lab_cluster::{
    FORWARDING_BACK, SERVED_AGAIN, SETTLE, SLOW_KBIT, USERS, WRITERS, lab, lab_node, ms, seeded,
    total, until_acknowledged,
};
use rand::Rng;
use rand::rngs::StdRng;

#[path = "fault_schedule/disk_and_clocks.rs"]
mod disk_and_clocks;

use disk_and_clocks::{DiskAndClocks, STORE_MIB, jump_shows, wal_files_open_through};

/// How far a clock jump moves a node's wall clock, ms, either way: two nodes jumped opposite
/// ways are 400 ms apart, inside [`MARGIN_MS`](disk_and_clocks::MARGIN_MS).
const JUMP_MS: i32 = 200;
/// The store's WAL pages between checkpoints in the random schedule (the default is 1000). A
/// store claims room of its filesystem when its WAL grows past its largest size or a
/// checkpoint grows its file; with 1000 pages a short full disk often passes before either.
const WAL_PAGES: u32 = 100;
/// Faults in force at once, at most, in the random schedule (a flap counts once).
const MOST_IN_FORCE: usize = 4;

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
    let (seed, mut rng) = seeded("random schedule");
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
