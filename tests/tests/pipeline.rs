//! The inference pipeline across real node processes on one SQLite file, with the real model:
//! a burst of writes is acknowledged at storage speed while embeddings follow, and no
//! acknowledged turn is left without its vector when the node is SIGKILLed mid-burst and
//! restarted, when a survivor takes over a SIGKILLed node's shards, or when shards are handed
//! off to a joining node mid-burst.
//!
//! The nodes embed a few texts a round, one round at a time ([`start_embedding`]), slower than
//! the writes come, so every burst leaves entries pending when the node dies or hands off. Every wait is on a
//! condition with a deadline.

use std::time::Duration;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_handed_off_mid_burst_take_their_pending_entries_to_the_new_owner() {
    let sandbox = Sandbox::new();
    let a = start_embedding(&sandbox, "hand-a", 4).await;
    settled(&[("hand-a", a.client())], Duration::from_secs(30)).await;
    let gateway = Gateway::new(vec![a.client()]);
    let load = Load::start(&gateway, 8, 2);
    load.wait_for(40, Duration::from_secs(60)).await;
    // A node joins: a hands it the shards rendezvous gives it, entries pending and all.
    let b = start_embedding(&sandbox, "hand-b", 4).await;
    gateway.add(b.client());
    let clients = [("hand-a", a.client()), ("hand-b", b.client())];
    let owners = settled(&clients, Duration::from_secs(60)).await;
    assert!(owners.values().any(|o| o == "hand-b"), "b took shards");
    let left = pending_entries(&sandbox).await;
    load.wait_for(20, Duration::from_secs(60)).await;
    let users = load.users.clone();
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    let took = drained(&sandbox, DRAIN_BOUND).await;
    every_turn_has_its_vector(&sandbox, &users).await;
    println!("{left} embeddings pending after the hand-off; drained {took:.1?} after the burst");
}
