//! Helpers of the cluster chaos tests (`tests/cluster.rs`, `tests/pipeline.rs` and the fault
//! suites): starting nodes of a local cluster, reading the cluster view, waiting until
//! placement settles, the workload (`workload`: a gateway to any node and a load of writers and
//! readers, history-checked), and the invariants checked from the shared store afterwards
//! (turns, epochs, and that every turn got its vector).
//! Every wait is on a condition with a deadline.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use engram_actors::placement::UserKey;
use engram_storage::WorkQueue;
use hyper::StatusCode;
use serde_json::Value;

use crate::harness::{HttpClient, Node, Sandbox};

mod workload;

pub use workload::{ALLOWED, Ack, Gateway, Load, READERS, SESSION};

/// Shards of the default configuration.
pub const SHARDS: u32 = 1024;

/// The shard of `user` of the default tenant.
pub fn shard(user: &str) -> u32 {
    UserKey::new("default", user).shard(SHARDS)
}

/// Starts node `id` on the sandbox's shared SQLite file, without the embedding pool.
pub async fn start(sandbox: &Sandbox, id: &str) -> Node {
    sandbox
        .shared_node(id)
        .set("inference.enabled", false)
        .start()
        .await
}

/// Starts node `id` on the sandbox's shared SQLite file with the embedding pool and its
/// pipeline, embedding `round_texts` texts a round, one round at a time (slower than the
/// writes come, so that a burst leaves entries pending) and scanning for work every 500 ms.
/// Its background batches run at normal priority: the tests wait for them, and in the idle
/// class they would get no CPU on a machine that other work keeps busy.
pub async fn start_embedding(sandbox: &Sandbox, id: &str, round_texts: usize) -> Node {
    sandbox
        .shared_node(id)
        .set("inference.background-priority", "normal")
        .set("inference.pipeline.round-texts", round_texts as i64)
        .set("inference.pipeline.rounds-in-flight", 1)
        .set("inference.pipeline.scan-interval", "500ms")
        .start()
        .await
}

/// Each node's id with a client of it, in order.
pub fn clients_of<'a>(ids: &[&'a str], nodes: &[Node]) -> Vec<(&'a str, HttpClient)> {
    ids.iter()
        .zip(nodes)
        .map(|(id, n)| (*id, n.client()))
        .collect()
}

/// Pending-inference entries in the shared store, of every user.
pub async fn pending_entries(sandbox: &Sandbox) -> usize {
    queued_entries(sandbox, WorkQueue::Embedding).await
}

/// Entries of `queue` in the shared store, of every user.
pub async fn queued_entries(sandbox: &Sandbox, queue: WorkQueue) -> usize {
    let store = shared_store(sandbox);
    let ks = engram_storage::Keyspace::new("engram");
    store
        .read(move |txn| {
            let mut n = 0;
            let marks =
                engram_storage::data::pending::pending_users(txn, &ks, queue, None, usize::MAX)?;
            for marked in marks {
                n += engram_storage::data::UserData::new(txn, &ks, &marked.tenant, &marked.user)
                    .count_queued(queue)?;
            }
            Ok(n)
        })
        .await
        .unwrap()
}

/// Waits until no inference is pending in the shared store; returns how long it took.
pub async fn drained(sandbox: &Sandbox, deadline: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let left = pending_entries(sandbox).await;
        if left == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < deadline,
            "{left} embeddings still pending after {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks in the shared store that each of `users` has one episodic memory per turn of
/// session `s1`, each with its embedding.
pub async fn every_turn_has_its_vector(sandbox: &Sandbox, users: &[String]) {
    let store = shared_store(sandbox);
    let ks = engram_storage::Keyspace::new("engram");
    for user in users {
        let (ks, who) = (ks.clone(), user.clone());
        let (turns, records, vectors) = store
            .read(move |txn| {
                let mut u = engram_storage::data::UserData::new(txn, &ks, "default", &who);
                Ok((
                    u.turns_from("s1", 0)?.len(),
                    u.records(engram_storage::types::MemoryKind::Episodic)?,
                    u.embeddings()?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(records.len(), turns, "{user}: one episodic memory per turn");
        for record in &records {
            assert!(
                vectors.iter().any(|(id, _)| *id == record.memory_id),
                "{user}: memory {} has no vector",
                record.memory_id
            );
        }
    }
}

fn shared_store(sandbox: &Sandbox) -> engram_storage::Store {
    engram_storage::Store::sqlite(
        &sandbox.shared_sqlite(),
        engram_storage::sqlite::SqliteOptions::default(),
    )
    .unwrap()
}

/// A user of the default tenant, named `prefix-N`, whose shard `owners` gives `node`.
pub fn user_of(owners: &HashMap<u32, String>, node: &str, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|u| owners[&shard(u)] == node)
        .unwrap_or_default()
}

/// The cluster view of a node, if it answers.
pub async fn status(client: &HttpClient) -> Option<Value> {
    match client.get("/v1/cluster/status").await {
        Ok(reply) if reply.status == StatusCode::OK => Some(reply.json()),
        Ok(_) | Err(_) => None,
    }
}

/// Shard owners by node id, from a status.
pub fn owners(status: &Value) -> HashMap<u32, String> {
    status["leases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            Some((
                u32::try_from(l["shard"].as_u64()?).ok()?,
                l["owner"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Waits until every shard is held by the node rendezvous hashing gives it among `clients`'
/// nodes, and every one of them serves exactly the shards its leases name; returns the
/// owners.
pub async fn settled(clients: &[(&str, HttpClient)], deadline: Duration) -> HashMap<u32, String> {
    let ids: Vec<&str> = clients.iter().map(|(id, _)| *id).collect();
    let until = Instant::now() + deadline;
    loop {
        let mut views = Vec::new();
        for (id, client) in clients {
            views.push((*id, status(client).await));
        }
        if let Some((_, Some(first))) = views.first() {
            let owners = owners(first);
            let placed = (0..SHARDS).all(|s| {
                owners.get(&s).map(String::as_str) == engram_actors::cluster::rendezvous(s, &ids)
            });
            let each_serves_its_own = views.iter().all(|(id, v)| {
                v.as_ref().is_some_and(|v| {
                    v["held"].as_u64() == Some(owners.values().filter(|o| o == id).count() as u64)
                })
            });
            if placed && each_serves_its_own {
                return owners;
            }
        }
        assert!(
            Instant::now() < until,
            "the cluster did not settle in {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads every turn of `users` from the shared SQLite file and checks that each was written
/// under a lease, that a user's turns carry non-decreasing epochs, and that no (shard, epoch)
/// was written by two nodes.
pub async fn one_owner_per_epoch(sandbox: &Sandbox, users: &[String]) {
    let store = shared_store(sandbox);
    let ks = engram_storage::Keyspace::new("engram");
    let mut writers: HashMap<(u32, u64), String> = HashMap::new();
    for user in users {
        let (ks, who) = (ks.clone(), user.clone());
        let turns = store
            .read(move |txn| {
                engram_storage::data::UserData::new(txn, &ks, "default", &who).turns_from("s1", 0)
            })
            .await
            .unwrap();
        let mut last = 0;
        for t in turns {
            let under = t
                .written_under
                .unwrap_or_else(|| panic!("{user} turn {} has no lease", t.seq));
            assert!(
                under.epoch >= last,
                "{user}: epochs go back at turn {}",
                t.seq
            );
            last = under.epoch;
            let node = writers
                .entry((shard(user), under.epoch))
                .or_insert_with(|| under.node.clone());
            assert_eq!(
                *node,
                under.node,
                "shard {} written by two nodes in epoch {}",
                shard(user),
                under.epoch
            );
        }
    }
}

/// `client`'s metric `name` (unlabelled); 0 when the node does not answer or lacks it.
pub async fn metric(client: &HttpClient, name: &str) -> f64 {
    let text = client
        .get("/metrics")
        .await
        .map(|r| r.text())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// `client`'s metric `name` (unlabelled), which the node must export: panics when `/metrics`
/// does not answer 200 or lacks the series, so that a check of a counter's value (often that
/// it stayed 0) cannot pass on a node that did not answer.
pub async fn exported_metric(client: &HttpClient, name: &str) -> f64 {
    let reply = client
        .get("/metrics")
        .await
        .unwrap_or_else(|e| panic!("/metrics did not answer: {e}"));
    assert!(
        reply.status.is_success(),
        "/metrics answered {}",
        reply.status
    );
    let text = reply.text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the node exports no {name}"))
}

/// Waits until `client`'s metric `name` (unlabelled) is above zero.
pub async fn metric_above_zero(client: &HttpClient, name: &str, deadline: Duration) {
    metric_at_least(client, name, 1.0, deadline).await;
}

/// Waits until `client`'s metric `name` (unlabelled) is at least `least`.
pub async fn metric_at_least(client: &HttpClient, name: &str, least: f64, deadline: Duration) {
    let until = Instant::now() + deadline;
    loop {
        let value = metric(client, name).await;
        if value >= least {
            return;
        }
        assert!(
            Instant::now() < until,
            "{name} stayed at {value}, below {least}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `client`'s view names `node` the owner of `shard` at an epoch above `epoch`.
pub async fn owned_by(client: &HttpClient, shard: u32, node: &str, epoch: u64, deadline: Duration) {
    let until = Instant::now() + deadline;
    loop {
        if let Some(view) = status(client).await {
            let lease = &view["leases"][shard as usize];
            if lease["owner"] == node && lease["epoch"].as_u64().unwrap_or(0) > epoch {
                return;
            }
        }
        assert!(Instant::now() < until, "{node} did not take shard {shard}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends SIGSTOP to `node` while this process holds the write lock of the sandbox's shared
/// SQLite file, so that the node is paused outside any write transaction of its own (its
/// writers wait for the lock, holding nothing). A node paused inside one keeps the file's
/// write lock, and every node's writes, heartbeats and take-overs included, wait until it
/// resumes: SQLite cannot take a lock back from a live process (docs/cluster.md). That is
/// a property of the shared file, not of the fencing these tests are about.
pub fn pause_outside_writes(node: &Node, sandbox: &Sandbox) {
    tokio::task::block_in_place(|| {
        let store = engram_storage::Store::sqlite(
            &sandbox.shared_sqlite(),
            engram_storage::sqlite::SqliteOptions::default(),
        )
        .unwrap();
        let lock = store
            .begin(engram_storage::TxnMode::Write)
            .expect("the shared file's write lock");
        node.pause();
        // Rolled back: nothing written, the lock released.
        drop(lock);
    });
}

/// The epoch of `shard` in a status view.
pub fn epoch_of(view: &Value, shard: u32) -> u64 {
    view["leases"][shard as usize]["epoch"]
        .as_u64()
        .unwrap_or(0)
}

/// The user texts of `user`'s session `s1`, oldest first.
pub async fn texts(client: &HttpClient, user: &str) -> Vec<String> {
    client
        .must_session_turns(user, SESSION)
        .await
        .iter()
        .map(|t| t["user_text"].as_str().unwrap_or_default().to_owned())
        .collect()
}
