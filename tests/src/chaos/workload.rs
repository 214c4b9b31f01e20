//! The chaos tests' workload: a gateway that sends each request to any node of the cluster
//! and retries with the same request id, recording every operation and try in a
//! [`History`], and a [`Load`] of closed-loop writers and readers over it whose final state
//! and history are checked when it stops.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use tokio::sync::Mutex;

use super::{one_owner_per_epoch, texts};
use crate::harness::{HttpClient, Sandbox, turn};
use crate::history::{Call, History, Outcome};

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
