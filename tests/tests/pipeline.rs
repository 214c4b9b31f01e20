//! The inference pipeline across real node processes on one SQLite file, with the real model:
//! a burst of writes is acknowledged at storage speed while embeddings follow, and no
//! acknowledged turn is left without its vector when the node is SIGKILLed mid-burst and
//! restarted, when a survivor takes over a SIGKILLed node's shards, or when shards are handed
//! off to a joining node mid-burst.
//!
//! The nodes embed a few texts a round, one round at a time ([`start_embedding`]), slower than
//! the writes come, so a burst leaves entries pending; each test checks in the shared store
//! that entries were pending when the node died or handed off. Every wait is on a condition
//! with a deadline.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use engram_actors::cluster::rendezvous;
use engram_storage::data::UserData;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::PendingInference;
use engram_storage::{Keyspace, Store, WorkQueue};
use engram_tests::chaos::{
    Gateway, Load, clients_of, drained, every_turn_has_its_vector, pending_entries, settled, shard,
    start_embedding,
};
use engram_tests::harness::Sandbox;

/// How long the embeddings of a burst may take to drain on a busy 2-core machine.
const DRAIN_BOUND: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_sigkilled_mid_burst_embeds_every_acknowledged_turn_after_its_restart() {
    let sandbox = Sandbox::new();
    let mut node = start_embedding(&sandbox, "burst-a", 1).await;
    settled(&[("burst-a", node.client())], Duration::from_secs(30)).await;
    let gateway = Gateway::new(vec![node.client()]);
    let load = Load::start(&gateway, 8, 4);
    load.wait_for(40, Duration::from_secs(60)).await;
    node.kill();
    let left = pending_entries(&sandbox).await;
    assert!(
        left > 0,
        "the burst outpaced the embeddings: entries were pending"
    );
    node.restart().await;
    load.wait_for(20, Duration::from_secs(60)).await;
    let users = load.users.clone();
    load.stop_and_verify(&node.client(), &sandbox).await;
    let took = drained(&sandbox, DRAIN_BOUND).await;
    every_turn_has_its_vector(&sandbox, &users).await;
    println!("{left} embeddings pending at the SIGKILL; drained {took:.1?} after the burst");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_embeds_what_a_sigkilled_node_left_pending_in_the_shards_it_takes_over() {
    let sandbox = Sandbox::new();
    let ids = ["take-a", "take-b"];
    let mut nodes = Vec::new();
    for id in ids {
        nodes.push(start_embedding(&sandbox, id, 1).await);
    }
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, 12, 4);
    let victims: Vec<String> = load
        .users
        .iter()
        .filter(|u| owners[&shard(u)] == "take-b")
        .cloned()
        .collect();
    assert!(!victims.is_empty(), "some users live on the victim");
    load.wait_for(40, Duration::from_secs(60)).await;
    nodes[1].kill();
    let left = pending_entries(&sandbox).await;
    assert!(left > 0, "entries were pending at the SIGKILL");
    load.wait_for(20, Duration::from_secs(60)).await;
    let users = load.users.clone();
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    let took = drained(&sandbox, DRAIN_BOUND).await;
    every_turn_has_its_vector(&sandbox, &users).await;
    println!(
        "{left} embeddings pending at the SIGKILL ({} of 12 users on the victim); drained \
         {took:.1?} after the burst",
        victims.len()
    );
}

/// The two nodes of the hand-off test, the first serving alone until the second joins.
const HAND_OFF: [&str; 2] = ["hand-a", "hand-b"];

/// Embeddings the users that move must have pending before the node joins: more than the
/// joining node embeds between two looks at the shared store (a round of 4 texts), so the
/// look that first sees it holding their shards still finds entries of theirs queued before.
const BACKLOG: usize = 12;

fn shared_store(sandbox: &Sandbox) -> Store {
    Store::sqlite(&sandbox.shared_sqlite(), SqliteOptions::default()).unwrap()
}

/// Embeddings pending in the shared store for `users`, in all.
async fn pending_of(store: &Store, users: &[String]) -> usize {
    let (ks, users) = (Keyspace::new("engram"), users.to_vec());
    store
        .read(move |txn| {
            let mut n = 0;
            for user in &users {
                n += UserData::new(txn, &ks, "default", user).count_queued(WorkQueue::Embedding)?;
            }
            Ok(n)
        })
        .await
        .unwrap()
}

/// One look at the shared store, in one read transaction: for each of `users` whose shard
/// `node` holds, the embeddings of the user still pending that were queued before `node`
/// took the shard, as (user, memory id). A leaseholder is the only writer of its shard and
/// an entry goes only with its vector (or its record), so each was pending when the shard
/// moved and is left for `node` to embed.
async fn pending_across_the_move(
    store: &Store,
    users: &[String],
    node: &str,
) -> Vec<(String, String)> {
    let (ks, users, node) = (Keyspace::new("engram"), users.to_vec(), node.to_owned());
    store
        .read(move |txn| {
            let mut found = Vec::new();
            for user in &users {
                let Some(lease) = engram_storage::cluster::shard_lease(txn, &ks, shard(user))?
                else {
                    continue;
                };
                if lease.owner.as_deref() != Some(node.as_str()) {
                    continue;
                }
                let entries = UserData::new(txn, &ks, "default", user)
                    .queued_entries::<PendingInference>(usize::MAX)?;
                found.extend(
                    entries
                        .into_iter()
                        .filter(|(_, e)| e.queued_at < lease.acquired_at)
                        .map(|(id, _)| (user.clone(), id)),
                );
            }
            Ok(found)
        })
        .await
        .unwrap()
}

/// Shards handed off to a joining node mid-burst take their pending entries along: the users
/// rendezvous moves to the joining node have at least [`BACKLOG`] embeddings pending in the
/// shared store before it starts (waited for); while it joins, the shared store is watched,
/// and entries of those users queued before the joining node took their shard are seen still
/// pending while it holds it (pending at the hand-off, asserted non-empty); each of them ends
/// with its vector, every acknowledged turn is stored once and in order, and every turn of
/// every user has its vector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_handed_off_mid_burst_take_their_pending_entries_to_the_new_owner() {
    let sandbox = Sandbox::new();
    let store = shared_store(&sandbox);
    let a = start_embedding(&sandbox, HAND_OFF[0], 4).await;
    settled(&[(HAND_OFF[0], a.client())], Duration::from_secs(30)).await;
    let gateway = Gateway::new(vec![a.client()]);
    let load = Load::start(&gateway, 8, 2);
    let moving: Vec<String> = load
        .users
        .iter()
        .filter(|u| rendezvous(shard(u), &HAND_OFF) == Some(HAND_OFF[1]))
        .cloned()
        .collect();
    assert!(
        !moving.is_empty(),
        "rendezvous gives the joining node users"
    );
    load.wait_for(40, Duration::from_secs(60)).await;
    // The burst outpaces a's embeddings: wait until the users that move have a backlog.
    let until = Instant::now() + Duration::from_secs(120);
    let backlog = loop {
        let n = pending_of(&store, &moving).await;
        if n >= BACKLOG {
            break n;
        }
        assert!(
            Instant::now() < until,
            "the users that move have {n} embeddings pending, not {BACKLOG}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Watch the shared store while b joins and the shards move.
    let stop = Arc::new(AtomicBool::new(false));
    let watch = tokio::spawn({
        let (store, moving, stop) = (store.clone(), moving.clone(), Arc::clone(&stop));
        async move {
            let mut handed = BTreeSet::new();
            loop {
                // One last look after the stop: the shards have moved by then.
                let last = stop.load(Ordering::Relaxed);
                handed.extend(pending_across_the_move(&store, &moving, HAND_OFF[1]).await);
                if last {
                    return handed;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    // A node joins: a hands it the shards rendezvous gives it, entries pending and all.
    let b = start_embedding(&sandbox, HAND_OFF[1], 4).await;
    gateway.add(b.client());
    let clients = [(HAND_OFF[0], a.client()), (HAND_OFF[1], b.client())];
    let owners = settled(&clients, Duration::from_secs(60)).await;
    for user in &moving {
        assert_eq!(owners[&shard(user)], HAND_OFF[1], "{user} moved to b");
    }
    stop.store(true, Ordering::Relaxed);
    let handed = watch.await.unwrap();
    assert!(
        !handed.is_empty(),
        "entries of the users that moved were pending at the hand-off"
    );
    load.wait_for(20, Duration::from_secs(60)).await;
    let users = load.users.clone();
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    let took = drained(&sandbox, DRAIN_BOUND).await;
    every_turn_has_its_vector(&sandbox, &users).await;
    let ks = Keyspace::new("engram");
    for (user, memory_id) in &handed {
        let (ks, who, id) = (ks.clone(), user.clone(), memory_id.clone());
        let vector = store
            .read(move |txn| UserData::new(txn, &ks, "default", &who).embedding(&id))
            .await
            .unwrap();
        assert!(
            vector.is_some(),
            "{user}: memory {memory_id}, pending at the hand-off, has no vector"
        );
    }
    println!(
        "{backlog} embeddings of the {} users that moved pending before b joined, {} of them \
         across the hand-off; drained {took:.1?} after the burst",
        moving.len(),
        handed.len()
    );
}
