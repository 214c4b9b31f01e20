//! Helpers of the tests that run a local cluster in a network lab (`tests/partitions.rs`,
//! `tests/fault_schedule.rs`): the lab itself (built with its slow links tried once, or a
//! failure that says why this machine cannot build it), nodes started in its namespaces, the
//! seed of a random schedule, printed (`ENGRAM_CHAOS_SEED` replays one), a write retried until it is
//! acknowledged, totals of the nodes' metrics, and the bounds those tests wait within.
//! Every wait is on a condition with a deadline.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper::StatusCode;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::chaos::exported_metric;
use crate::harness::{HttpClient, Node, NodeSpec, Sandbox, turn};
use crate::netns::Lab;

/// How long a cluster may take to settle (all shards placed by rendezvous and served), a
/// restart or a take-over included, on a busy 2-core machine.
pub const SETTLE: Duration = Duration::from_secs(60);
/// How long every user may take to be served again after a fault: a request that reaches a
/// node unable to reach the owner waits `cluster.handoff-wait`, 5 s, before the retry, and
/// each closed-loop writer cycles through its 6 users one write at a time (19-41 s
/// while a node is partitioned one way, measured).
pub const SERVED_AGAIN: Duration = Duration::from_secs(90);
/// How long forwarding may take to work again after a heal (the dialer backs off up to 5 s).
pub const FORWARDING_BACK: Duration = Duration::from_secs(60);
/// Users written by the load.
pub const USERS: usize = 24;
/// The load's closed-loop writers (6 users each).
pub const WRITERS: usize = 4;

/// The rate of a slow link in these tests, kbit/s each way.
pub const SLOW_KBIT: u32 = 256;

/// The lab, its slow links tried once, or a failure that says why this machine cannot build
/// it: the tests that use it exist to run the partitions, and a test that passes without them
/// would prove nothing.
pub fn lab(n: usize) -> Lab {
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
pub fn lab_node(lab: &Lab, sandbox: &Sandbox, i: usize, id: &str) -> NodeSpec {
    sandbox
        .shared_node(id)
        .set("inference.enabled", false)
        .set("http.listen", format!("{}:0", lab.addr(i)))
        .set("cluster.listen", format!("{}:0", lab.addr(i)))
        .wrapped(lab.exec(i))
}

/// Starts nodes `ids` in the lab, node `i` in namespace `i`, as [`lab_node`] specifies them.
pub async fn start_in_lab(lab: &Lab, sandbox: &Sandbox, ids: &[&str]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        nodes.push(lab_node(lab, sandbox, i, id).start().await);
    }
    nodes
}

/// The seed of a random schedule: `ENGRAM_CHAOS_SEED` when set, else from the clock.
pub fn seed() -> u64 {
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

/// The seed of a random schedule ([`seed`]), printed first under `what` with how to replay
/// it, and a generator seeded with it.
pub fn seeded(what: &str) -> (u64, StdRng) {
    let seed = seed();
    println!("{what}: seed {seed} (replay with ENGRAM_CHAOS_SEED={seed})");
    (seed, StdRng::seed_from_u64(seed))
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Appends `text` for `user` through `through` with request id `id` until it is acknowledged
/// (a retry with the same id has exactly-once effects); returns how long that took. Only 503
/// (no reachable owner yet) and no answer are allowed before the 200.
pub async fn until_acknowledged(
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

/// The sum over `clients` of a metric each must export.
pub async fn total(clients: &[(&str, HttpClient)], name: &str) -> f64 {
    let mut sum = 0.0;
    for (_, client) in clients {
        sum += exported_metric(client, name).await;
    }
    sum
}
