//! Several real `engram-node` processes on one SQLite file (the local cluster): shards split
//! by rendezvous over the live members, a node refusing users it does not own, take-over of a
//! SIGKILLed node's shards with no acknowledged write lost, and a paused ("zombie") owner
//! fenced out after SIGSTOP past its lease.
//!
//! The nodes run without the embedding pool (`inference.enabled = false`): these tests are
//! about placement and failover, and three libtorch processes on a two-core machine would
//! make heartbeat timing depend on the model's CPU use. Every wait is on a condition with a
//! deadline, never a fixed sleep.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engram_actors::placement::UserKey;
use engram_tests::harness::{HttpClient, Node, Sandbox, turn};
use hyper::StatusCode;
use serde_json::Value;
use tokio::sync::Mutex;

const SHARDS: u32 = 1024;

fn shard(user: &str) -> u32 {
    UserKey::new("default", user).shard(SHARDS)
}

async fn start(sandbox: &Sandbox, id: &str) -> Node {
    sandbox
        .shared_node(id)
        .set("inference.enabled", false)
        .start()
        .await
}

/// The cluster view of a node, if it answers.
async fn status(client: &HttpClient) -> Option<Value> {
    match client.get("/v1/cluster/status").await {
        Ok(reply) if reply.status == StatusCode::OK => Some(reply.json()),
        Ok(_) | Err(_) => None,
    }
}

/// Shard owners by node id, from a status.
fn owners(status: &Value) -> HashMap<u32, String> {
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

/// Waits until every shard is held by one of `ids` and every one of them serves exactly the
/// shards its leases name; returns the owners.
async fn settled(clients: &[(&str, HttpClient)], deadline: Duration) -> HashMap<u32, String> {
    let until = Instant::now() + deadline;
    loop {
        let mut views = Vec::new();
        for (id, client) in clients {
            views.push((*id, status(client).await));
        }
        if let Some((_, Some(first))) = views.first() {
            let owners = owners(first);
            let all_held = owners.len() == SHARDS as usize
                && owners
                    .values()
                    .all(|o| clients.iter().any(|(id, _)| id == o));
            let each_serves_its_own = views.iter().all(|(id, v)| {
                v.as_ref().is_some_and(|v| {
                    v["held"].as_u64() == Some(owners.values().filter(|o| o == id).count() as u64)
                })
            });
            if all_held && each_serves_its_own {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_file_split_the_shards_and_refuse_users_they_do_not_own() {
    let sandbox = Sandbox::new();
    let a = start(&sandbox, "split-a").await;
    let b = start(&sandbox, "split-b").await;
    let clients = [("split-a", a.client()), ("split-b", b.client())];
    let owners = settled(&clients, Duration::from_secs(20)).await;
    let held_by_a = owners.values().filter(|o| *o == "split-a").count();
    assert!(
        (300..724).contains(&held_by_a),
        "rendezvous splits the shards: {held_by_a} of {SHARDS} on a"
    );

    let user = "carol";
    let (owner, other) = if owners[&shard(user)] == "split-a" {
        (&clients[0].1, &clients[1].1)
    } else {
        (&clients[1].1, &clients[0].1)
    };
    owner
        .must_append_turn(
            user,
            &turn("split-1", "s1", "Show GMV of North China", "ok"),
        )
        .await;
    let refused = other
        .post(
            &format!("/v1/users/{user}/turns"),
            &turn("split-2", "s1", "to the wrong node", "ok"),
        )
        .await
        .unwrap();
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.json()["code"], "not_owner", "{}", refused.text());
    let turns = owner.must_session_turns(user, "s1").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
}

/// One acknowledged write.
#[derive(Debug, Clone)]
struct Ack {
    text: String,
    at: Instant,
}

/// Routes a user's requests to its shard's owner, refreshing the map from any live node.
struct Router {
    nodes: HashMap<String, HttpClient>,
    owners: Mutex<HashMap<u32, String>>,
    retries: AtomicUsize,
}

impl Router {
    async fn refresh(&self) {
        for client in self.nodes.values() {
            if let Some(view) = status(client).await {
                *self.owners.lock().await = owners(&view);
                return;
            }
        }
    }

    /// Appends a turn, retrying with the same request id until it is acknowledged or the
    /// deadline passes.
    async fn append(&self, user: &str, request_id: &str, deadline: Instant) -> Option<Ack> {
        let text = format!("note {request_id}");
        let body = turn(request_id, "s1", &text, "ok");
        loop {
            let owner = self.owners.lock().await.get(&shard(user)).cloned();
            if let Some(client) = owner.and_then(|o| self.nodes.get(&o))
                && let Ok(reply) = client.post(&format!("/v1/users/{user}/turns"), &body).await
                && reply.status == StatusCode::OK
            {
                return Some(Ack {
                    text,
                    at: Instant::now(),
                });
            }
            if Instant::now() >= deadline {
                return None;
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.refresh().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_nodes_users_are_served_again_and_no_acknowledged_write_is_lost() {
    let sandbox = Sandbox::new();
    let ids = ["kill-a", "kill-b", "kill-c"];
    let mut nodes = Vec::new();
    for id in ids {
        nodes.push(start(&sandbox, id).await);
    }
    let clients: Vec<(&str, HttpClient)> = ids
        .iter()
        .zip(&nodes)
        .map(|(id, n)| (*id, n.client()))
        .collect();
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let router = Arc::new(Router {
        nodes: clients
            .iter()
            .map(|(id, c)| ((*id).to_owned(), c.clone()))
            .collect(),
        owners: Mutex::new(owners.clone()),
        retries: AtomicUsize::new(0),
    });

    // Four writers, each with its own users (so each user's order of acknowledgement is
    // defined), writing until told to stop.
    let users: Vec<String> = (0..24).map(|i| format!("chaos-{i}")).collect();
    let victim = "kill-c";
    let victims: Vec<String> = users
        .iter()
        .filter(|u| owners[&shard(u)] == victim)
        .cloned()
        .collect();
    assert!(!victims.is_empty(), "some users live on the victim");
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Arc<Mutex<HashMap<String, Vec<Ack>>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4 {
        let mine: Vec<String> = users.iter().skip(w).step_by(4).cloned().collect();
        let (router, stop, acks) = (Arc::clone(&router), Arc::clone(&stop), Arc::clone(&acks));
        writers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                for user in &mine {
                    let request_id = format!("{user}-{n}");
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let ack = router
                        .append(user, &request_id, deadline)
                        .await
                        .unwrap_or_else(|| panic!("{request_id} never acknowledged"));
                    acks.lock().await.entry(user.clone()).or_default().push(ack);
                }
                n += 1;
            }
        }));
    }
    let until = Instant::now() + Duration::from_secs(30);
    while acks.lock().await.values().map(Vec::len).sum::<usize>() < 100 {
        assert!(Instant::now() < until, "no load before the fault");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    nodes[2].kill();
    let killed_at = Instant::now();
    let acked_before = acks.lock().await.values().map(Vec::len).sum::<usize>();
    // Every user of the victim is served again: an acknowledgement after the kill.
    let recovered = loop {
        let served = {
            let acks = acks.lock().await;
            victims
                .iter()
                .filter_map(|u| acks.get(u)?.iter().find(|a| a.at > killed_at).map(|a| a.at))
                .collect::<Vec<_>>()
        };
        if served.len() == victims.len() {
            break served.into_iter().max().unwrap_or(killed_at);
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "users of the killed node not served again in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let failover = recovered - killed_at;
    let acked_during = acks.lock().await.values().map(Vec::len).sum::<usize>() - acked_before;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    println!(
        "SIGKILL of 1 of 3 nodes: every affected user ({} of {}) served again after {:.2} s; \
         {} writes acknowledged meanwhile ({:.0}/s); {} retried requests",
        victims.len(),
        users.len(),
        failover.as_secs_f64(),
        acked_during,
        acked_during as f64 / failover.as_secs_f64().max(1e-3),
        router.retries.load(Ordering::Relaxed),
    );

    // Every acknowledged write is stored exactly once, in the order it was acknowledged.
    router.refresh().await;
    let live = &clients[..2];
    settled(live, Duration::from_secs(30)).await;
    let acks = acks.lock().await;
    for user in &users {
        let owner = router.owners.lock().await[&shard(user)].clone();
        let client = &router.nodes[&owner];
        let stored: Vec<String> = client
            .must_session_turns(user, "s1")
            .await
            .iter()
            .map(|t| t["user_text"].as_str().unwrap_or_default().to_owned())
            .collect();
        let acked: Vec<String> = acks[user].iter().map(|a| a.text.clone()).collect();
        assert_eq!(
            stored, acked,
            "{user}: stored turns differ from acknowledged ones"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_is_fenced_out_and_nothing_sent_to_it_after_is_stored() {
    let sandbox = Sandbox::new();
    let a = start(&sandbox, "zombie-a").await;
    let b = start(&sandbox, "zombie-b").await;
    let clients = [("zombie-a", a.client()), ("zombie-b", b.client())];
    let owners = settled(&clients, Duration::from_secs(20)).await;
    // A user of a.
    let user = (0..)
        .map(|i| format!("z-{i}"))
        .find(|u| owners[&shard(u)] == "zombie-a")
        .unwrap();
    let (a_client, b_client) = (&clients[0].1, &clients[1].1);
    a_client
        .must_append_turn(&user, &turn("z-1", "s1", "before the pause", "ok"))
        .await;
    let epoch_before = status(b_client).await.unwrap()["leases"][shard(&user) as usize]["epoch"]
        .as_u64()
        .unwrap();

    a.signal("STOP");
    // b takes a's shards once a's heartbeat is older than the lease timeout.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let view = status(b_client).await.unwrap();
        let lease = &view["leases"][shard(&user) as usize];
        if lease["owner"] == "zombie-b" {
            assert!(lease["epoch"].as_u64().unwrap() > epoch_before);
            break;
        }
        assert!(Instant::now() < until, "b did not take over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b_client
        .must_append_turn(&user, &turn("z-2", "s1", "on the new owner", "ok"))
        .await;

    // a wakes up believing it owns the user's shard; whatever it is sent is refused.
    a.signal("CONT");
    let zombie = a_client
        .post(
            &format!("/v1/users/{user}/turns"),
            &turn("z-3", "s1", "sent to the zombie", "ok"),
        )
        .await
        .unwrap();
    assert_eq!(
        zombie.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        zombie.text()
    );
    let stored: Vec<String> = b_client
        .must_session_turns(&user, "s1")
        .await
        .iter()
        .map(|t| t["user_text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(stored, ["before the pause", "on the new owner"]);

    // a rejoins: the cluster settles again with both nodes serving their share.
    settled(&clients, Duration::from_secs(20)).await;
}
