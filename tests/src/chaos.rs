//! Helpers of the cluster chaos tests (`tests/cluster.rs`, `tests/pipeline.rs`): starting nodes
//! of a local cluster, reading the cluster view, waiting until placement settles, a gateway
//! that sends each request to any node and retries with the same request id, closed-loop
//! writers that log every acknowledged write, and the invariants checked from the shared store
//! afterwards (turns, epochs, and that every turn got its vector).
//! Every wait is on a condition with a deadline.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engram_actors::placement::UserKey;
use engram_storage::WorkQueue;
use hyper::StatusCode;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::harness::{HttpClient, Node, Sandbox, turn};
use crate::history::{Call, History, Outcome};

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

/// One acknowledged write.
#[derive(Debug, Clone)]
pub struct Ack {
    /// The turn's user text.
    pub text: String,
    /// When it was acknowledged.
    pub at: Instant,
}

/// Sends each request to some node of the cluster (any node serves any user), moving on to
/// another after an error or a non-200, as a gateway behind a load balancer would, with the
/// same request id every time. Every operation and each of its tries is recorded in
/// [`Gateway::history`], so that a retry cannot hide an answer the test does not allow.
pub struct Gateway {
    nodes: std::sync::Mutex<Vec<HttpClient>>,
    next: AtomicUsize,
    /// Requests sent again (after an error or a non-200).
    pub retries: AtomicUsize,
    /// Every append and read sent, with its tries.
    pub history: History,
}

/// The session every chaos workload appends to.
pub const SESSION: &str = "s1";

impl Gateway {
    /// A gateway over `nodes`.
    pub fn new(nodes: Vec<HttpClient>) -> Arc<Self> {
        Arc::new(Gateway {
            nodes: std::sync::Mutex::new(nodes),
            next: AtomicUsize::new(0),
            retries: AtomicUsize::new(0),
            history: History::new(),
        })
    }

    /// Sends to `node` too.
    pub fn add(&self, node: HttpClient) {
        self.nodes.lock().unwrap().push(node);
    }

    /// Sends to `nodes` only from now on.
    pub fn replace_nodes(&self, nodes: Vec<HttpClient>) {
        *self.nodes.lock().unwrap() = nodes;
    }

    /// The node (its index and a client) for a request's `attempt`-th try: requests start
    /// at successive nodes and each retry moves to the next one, so a request reaches every
    /// node within n tries.
    fn pick(&self, start: usize, attempt: usize) -> (usize, HttpClient) {
        let nodes = self.nodes.lock().unwrap();
        let i = (start + attempt) % nodes.len();
        (i, nodes[i].clone())
    }

    /// Appends a turn for `client`, retrying with the same request id until it is
    /// acknowledged or the deadline passes (then its outcome is unknown).
    pub async fn append(
        &self,
        client: usize,
        user: &str,
        request_id: &str,
        deadline: Instant,
    ) -> Option<Ack> {
        let text = format!("note {request_id}");
        let body = turn(request_id, SESSION, &text, "ok");
        let op = self
            .history
            .invoke(client, user, Call::Append(text.clone()));
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for attempt in 0.. {
            let (node, http) = self.pick(start, attempt);
            let status = match http.append_turn(user, &body).await {
                Ok(reply) => reply.status.as_u16(),
                Err(_) => 0,
            };
            self.history.tried(op, node, status);
            if status == 200 {
                self.history.complete(op, Outcome::Ok(None));
                return Some(Ack {
                    text,
                    at: Instant::now(),
                });
            }
            if Instant::now() >= deadline {
                break;
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.history.complete(op, Outcome::Unknown);
        None
    }

    /// Reads `user`'s list once for `client`, through the next node in turn; `None` when
    /// that node did not answer 200.
    pub async fn read(&self, client: usize, user: &str) -> Option<Vec<String>> {
        let node = self.next.fetch_add(1, Ordering::Relaxed);
        self.read_through(client, node, user).await
    }

    /// Reads `user`'s list once for `client` through node `node` (an index into the nodes,
    /// modulo their number); `None` when that node did not answer 200.
    pub async fn read_through(
        &self,
        client: usize,
        node: usize,
        user: &str,
    ) -> Option<Vec<String>> {
        let op = self.history.invoke(client, user, Call::Read);
        let (node, http) = self.pick(node, 0);
        let path = format!("/v1/users/{user}/sessions/{SESSION}/memory?limit=500");
        let reply = http.get(&path).await;
        let status = reply.as_ref().map_or(0, |r| r.status.as_u16());
        self.history.tried(op, node, status);
        let list = match reply {
            Ok(r) if r.status == StatusCode::OK => Some(
                r.json()["turns"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| t["user_text"].as_str().unwrap_or_default().to_owned())
                    .collect::<Vec<_>>(),
            ),
            // No session yet: nothing appended is stored.
            Ok(r) if r.status == StatusCode::NOT_FOUND => Some(Vec::new()),
            Ok(_) | Err(_) => None,
        };
        let outcome = match &list {
            Some(list) => Outcome::Ok(Some(list.clone())),
            None => Outcome::Failed,
        };
        self.history.complete(op, outcome);
        list
    }
}

/// Closed-loop writers, each with its own users (so each user's order of acknowledgement is
/// defined), logging every acknowledged write, and readers of the same users through any
/// node, all recorded in the gateway's history.
pub struct Load {
    /// The users written.
    pub users: Vec<String>,
    gateway: Arc<Gateway>,
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<HashMap<String, Vec<Ack>>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Readers a [`Load`] runs beside its writers.
pub const READERS: usize = 2;

/// Answers a try may get under the chaos tests besides 200: 503, a shard moving or a node
/// that stopped serving. Anything else (a 500 a retry would hide) is an anomaly.
pub const ALLOWED: &[u16] = &[503];

impl Load {
    /// Starts `writers` writers over `users` users, and [`READERS`] readers.
    pub fn start(gateway: &Arc<Gateway>, users: usize, writers: usize) -> Load {
        let users: Vec<String> = (0..users).map(|i| format!("chaos-{i}")).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let acks: Arc<Mutex<HashMap<String, Vec<Ack>>>> = Arc::default();
        let mut tasks: Vec<tokio::task::JoinHandle<()>> = (0..writers)
            .map(|w| {
                let mine: Vec<String> = users.iter().skip(w).step_by(writers).cloned().collect();
                let (gateway, stop, acks) =
                    (Arc::clone(gateway), Arc::clone(&stop), Arc::clone(&acks));
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        for user in &mine {
                            let request_id = format!("{user}-{n}");
                            let deadline = Instant::now() + Duration::from_secs(30);
                            let ack = gateway
                                .append(w, user, &request_id, deadline)
                                .await
                                .unwrap_or_else(|| panic!("{request_id} never acknowledged"));
                            acks.lock().await.entry(user.clone()).or_default().push(ack);
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        for r in 0..READERS {
            let (gateway, stop, users) = (Arc::clone(gateway), Arc::clone(&stop), users.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let user = &users[rand::random_range(0..users.len())];
                    gateway.read(writers + r, user).await;
                    // Paced: reads should not starve the writers or the nodes' heartbeats.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }));
        }
        Load {
            users,
            gateway: Arc::clone(gateway),
            stop,
            acks,
            tasks: Mutex::new(tasks),
        }
    }

    /// Writes acknowledged so far.
    pub async fn acked(&self) -> usize {
        self.acks.lock().await.values().map(Vec::len).sum()
    }

    /// Waits until `more` writes more are acknowledged.
    pub async fn wait_for(&self, more: usize, deadline: Duration) {
        let target = self.acked().await + more;
        let until = Instant::now() + deadline;
        while self.acked().await < target {
            assert!(Instant::now() < until, "load stalled below {target} writes");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The time by which every user in `users` had a write acknowledged after `since`.
    pub async fn served_again(
        &self,
        users: &[String],
        since: Instant,
        deadline: Duration,
    ) -> Instant {
        loop {
            let served = {
                let acks = self.acks.lock().await;
                users
                    .iter()
                    .filter_map(|u| acks.get(u)?.iter().find(|a| a.at > since).map(|a| a.at))
                    .collect::<Vec<_>>()
            };
            if served.len() == users.len() {
                return served.into_iter().max().unwrap_or(since);
            }
            assert!(
                since.elapsed() < deadline,
                "users not served again within {deadline:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the writers and readers, then checks through `client` that every acknowledged
    /// write is stored exactly once, in the order it was acknowledged (the final state), in
    /// the shared store that no shard was written by two nodes under one epoch, and the
    /// whole history (`crate::history`): no stale, divergent or backward read through any
    /// node, no answer outside [`ALLOWED`].
    pub async fn stop_and_verify(
        self,
        client: &HttpClient,
        sandbox: &Sandbox,
    ) -> HashMap<String, Vec<Ack>> {
        let (acks, finals) = self.stop_and_check_final_state(client).await;
        one_owner_per_epoch(sandbox, &self.users).await;
        let report = self.gateway.history.check(&finals, ALLOWED);
        println!("history: {}", report.summary());
        report.assert_clean();
        acks
    }

    /// Stops the writers and readers, then checks through `client` the final state only:
    /// every acknowledged write stored exactly once, in the order it was acknowledged.
    /// Returns the acknowledged writes and each user's final list.
    pub async fn stop_and_check_final_state(
        &self,
        client: &HttpClient,
    ) -> (HashMap<String, Vec<Ack>>, HashMap<String, Vec<String>>) {
        self.stop.store(true, Ordering::Relaxed);
        let tasks = std::mem::take(&mut *self.tasks.lock().await);
        for task in tasks {
            task.await.unwrap();
        }
        let acks = self.acks.lock().await.clone();
        let mut finals = HashMap::new();
        for user in &self.users {
            let stored = texts(client, user).await;
            let acked: Vec<String> = acks
                .get(user)
                .map(|a| a.iter().map(|a| a.text.clone()).collect())
                .unwrap_or_default();
            assert_eq!(
                stored, acked,
                "{user}: stored turns differ from acknowledged ones"
            );
            finals.insert(user.clone(), stored);
        }
        (acks, finals)
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
