//! Several real `engram-node` processes on one SQLite file (the local cluster): shards split
//! by rendezvous over the live members, a node refusing users it does not own, take-over of a
//! SIGKILLed node's shards with no acknowledged write lost, and a paused ("zombie") owner
//! fenced out after SIGSTOP past its lease.
//!
//! The nodes run without the embedding pool (`inference.enabled = false`): these tests are
//! about placement and failover, and three libtorch processes on a two-core machine would
//! make heartbeat timing depend on the model's CPU use. Every wait is on a condition with a
//! deadline, never a fixed sleep.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_tests::chaos::{
    Gateway, Load, SHARDS, clients_of, epoch_of, exported_metric, metric_above_zero, owned_by,
    pause_outside_writes, settled, shard, start, status, texts, user_of,
};
use engram_tests::harness::{HttpClient, Sandbox, turn};
use hyper::{Method, StatusCode};

/// The longest a SIGKILLed node's users may wait to be served again. The take-over comes
/// after `cluster.suspect-confirm` (1 s) of silence once the links closed; docs/cluster.md
/// gives the distribution measured (about 1.2 s, at most 2.2 s with the whole suite running
/// on two cores), and this bound holds on a loaded two-core machine.
const FAILOVER_BOUND: Duration = Duration::from_secs(4);

/// The longest a paused owner's shard may take to be taken over: the lease timeout (3 s)
/// plus a heartbeat round and the round that takes it, with room for a loaded machine.
const PAUSED_TAKEOVER_BOUND: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_split_the_shards_and_either_serves_any_user() {
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
    // The other node forwards to the owner over the cluster transport.
    let forwarded = other
        .must_append_turn(user, &turn("split-2", "s1", "and of South China?", "ok"))
        .await;
    assert_eq!(forwarded["seq"], 1, "{forwarded}");
    let retried = other
        .must_append_turn(user, &turn("split-2", "s1", "and of South China?", "ok"))
        .await;
    assert_eq!(
        retried["replayed"], true,
        "a retry through the other node replays"
    );
    let turns = other.must_session_turns(user, "s1").await;
    assert_eq!(turns.len(), 2, "{turns:?}");
    let bad = other
        .append_turn(user, &serde_json::json!({ "request_id": "x" }))
        .await
        .unwrap();
    assert_eq!(
        bad.status,
        StatusCode::BAD_REQUEST,
        "the owner's answer is relayed as it is: {}",
        bad.text()
    );
    // The seed API names the user in the query or the body: routed the same way.
    other
        .must_post(
            "/write",
            &serde_json::json!({
                "user_id": user, "request_id": "split-3", "intent_type": "appointment",
                "fields": { "when": "tomorrow" }
            }),
        )
        .await;
    let recalled = other
        .must_get(&format!("/recall?user_id={user}&intent_type=appointment"))
        .await;
    assert!(recalled.to_string().contains("tomorrow"), "{recalled}");
    let sessions = other
        .must_get(&format!("/chat/sessions?user_id={user}"))
        .await;
    assert!(sessions.to_string().contains("s1"), "{sessions}");
    let metrics = other.must_metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("engram_requests_forwarded_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    // A body-less write names its request id with `Idempotency-Key`: forwarded with it, a
    // retry through the other node replays instead of deleting what came since.
    owner
        .must_append_turn(user, &turn("split-4", "s2", "first of s2", "ok"))
        .await;
    let keyed = other
        .clone()
        .with_header("idempotency-key", "clear-s2-once");
    let path = format!("/v1/users/{user}/sessions/s2/memory");
    let cleared = keyed.must(Method::DELETE, &path, None).await;
    assert_eq!(cleared["deleted"], 1, "{cleared}");
    owner
        .must_append_turn(user, &turn("split-5", "s2", "second of s2", "ok"))
        .await;
    let retried = keyed.must(Method::DELETE, &path, None).await;
    assert_eq!(
        (retried["deleted"].as_u64(), retried["replayed"].as_bool()),
        (Some(1), Some(true)),
        "the retry through the other node is the same request: {retried}"
    );
    assert_eq!(owner.must_session_turns(user, "s2").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_nodes_users_are_served_again_and_no_acknowledged_write_is_lost() {
    let sandbox = Sandbox::new();
    let ids = ["kill-a", "kill-b", "kill-c"];
    let mut nodes = Vec::new();
    for id in ids {
        nodes.push(start(&sandbox, id).await);
    }
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, 24, 4);
    let victim = "kill-c";
    let victims: Vec<String> = load
        .users
        .iter()
        .filter(|u| owners[&shard(u)] == victim)
        .cloned()
        .collect();
    assert!(!victims.is_empty(), "some users live on the victim");
    load.wait_for(100, Duration::from_secs(30)).await;

    nodes[2].kill();
    let killed_at = Instant::now();
    let acked_before = load.acked().await;
    let recovered = load
        .served_again(&victims, killed_at, Duration::from_secs(30))
        .await;
    let failover = recovered - killed_at;
    assert!(
        failover < FAILOVER_BOUND,
        "a SIGKILLed node's users were served again only after {failover:?}"
    );
    let acked_during = load.acked().await - acked_before;
    settled(&clients[..2], Duration::from_secs(30)).await;
    // Every shard of the victim was taken from it, and its closed links made the survivors
    // take them early (after cluster.suspect-confirm of silence, not the lease timeout).
    let (mut taken_over, mut early) = (0.0, 0.0);
    for (_, client) in &clients[..2] {
        taken_over += exported_metric(client, "engram_shards_taken_over_total").await;
        early += exported_metric(client, "engram_shards_taken_over_early_total").await;
    }
    let on_victim = owners.values().filter(|o| *o == victim).count();
    assert_eq!(
        taken_over, on_victim as f64,
        "every shard of the victim taken over"
    );
    assert!(
        early > 0.0,
        "no early take-over of the killed node's shards"
    );
    // The killed node restarts, rejoins and gets its shards back while the load goes on.
    nodes[2].restart().await;
    gateway.add(nodes[2].client());
    let clients = clients_of(&ids, &nodes);
    let back = settled(&clients, Duration::from_secs(30)).await;
    assert!(
        back.values().any(|o| o == victim),
        "the restarted node serves again"
    );
    load.wait_for(50, Duration::from_secs(30)).await;
    // Every acknowledged write is there exactly once, in order, under one owner per epoch.
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    println!(
        "SIGKILL of 1 of 3 nodes: every affected user ({} of 24) served again after {:.2} s \
         ({early} of its {on_victim} shards taken over early); {} writes acknowledged meanwhile \
         ({:.0}/s); {} retried requests",
        victims.len(),
        failover.as_secs_f64(),
        acked_during,
        acked_during as f64 / failover.as_secs_f64().max(1e-3),
        gateway.retries.load(Ordering::Relaxed),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_out_to_four_and_draining_back_to_three_under_load_loses_nothing() {
    let sandbox = Sandbox::new();
    let ids = ["scale-a", "scale-b", "scale-c", "scale-d"];
    let mut nodes = Vec::new();
    for id in &ids[..3] {
        nodes.push(start(&sandbox, id).await);
    }
    let mut clients: Vec<(&str, HttpClient)> = ids
        .iter()
        .zip(&nodes)
        .map(|(id, n)| (*id, n.client()))
        .collect();
    settled(&clients, Duration::from_secs(30)).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, 24, 4);
    load.wait_for(50, Duration::from_secs(30)).await;

    // Scale out: d joins; the others hand it the shards rendezvous gives it.
    let joined_at = Instant::now();
    nodes.push(start(&sandbox, "scale-d").await);
    clients.push(("scale-d", nodes[3].client()));
    gateway.add(nodes[3].client());
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let scale_out = joined_at.elapsed();
    let on_d = owners.values().filter(|o| *o == "scale-d").count();
    assert!(
        (150..400).contains(&on_d),
        "d got {on_d} of {SHARDS} shards"
    );
    load.wait_for(50, Duration::from_secs(30)).await;

    // Scale in: `engram-node drain` hands b's shards to the others and b exits.
    let drained_at = Instant::now();
    let config = nodes[1].spec().config_path();
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new(engram_tests::harness::node_binary().unwrap())
            .args(["drain", "--config"])
            .arg(config)
            .args(["--wait", "60s"])
            .status()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(status.success(), "engram-node drain: {status}");
    let exit = nodes[1].wait_exit(Duration::from_secs(30)).await;
    assert!(exit.success(), "a drained node exits cleanly: {exit}");
    let scale_in = drained_at.elapsed();
    let remaining: Vec<(&str, HttpClient)> = clients
        .iter()
        .filter(|(id, _)| *id != "scale-b")
        .cloned()
        .collect();
    gateway.replace_nodes(remaining.iter().map(|(_, c)| c.clone()).collect());
    settled(&remaining, Duration::from_secs(30)).await;
    // The operator's view: b left, the others hold every shard.
    let config = nodes[0].spec().config_path();
    let view = tokio::task::spawn_blocking(move || {
        std::process::Command::new(engram_tests::harness::node_binary().unwrap())
            .args(["status", "--config"])
            .arg(config)
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let view = String::from_utf8_lossy(&view.stdout).into_owned();
    assert!(
        view.lines()
            .any(|l| l.starts_with("scale-b") && l.contains("left")),
        "{view}"
    );
    assert!(view.contains("without owner 0"), "{view}");
    load.wait_for(50, Duration::from_secs(30)).await;
    // Nobody was presumed dead: shards moved by hand-off only (the drained node exited after
    // releasing everything, so its closed links took nothing over).
    for (id, client) in &remaining {
        let taken_over = exported_metric(client, "engram_shards_taken_over_total").await;
        assert_eq!(taken_over, 0.0, "{id} took shards over from a live node");
    }
    let acks = load.stop_and_verify(&remaining[0].1, &sandbox).await;
    println!(
        "scale out 3 -> 4 settled in {:.2} s ({on_d} shards moved to the new node); drain 4 -> 3 \
         done in {:.2} s; {} writes acknowledged, {} retried requests",
        scale_out.as_secs_f64(),
        scale_in.as_secs_f64(),
        acks.values().map(Vec::len).sum::<usize>(),
        gateway.retries.load(Ordering::Relaxed),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_loses_its_shards_and_what_it_is_sent_after_is_served_by_the_new_owner() {
    let sandbox = Sandbox::new();
    let a = start(&sandbox, "zombie-a").await;
    let b = start(&sandbox, "zombie-b").await;
    let clients = [("zombie-a", a.client()), ("zombie-b", b.client())];
    let owners = settled(&clients, Duration::from_secs(20)).await;
    let user = user_of(&owners, "zombie-a", "z");
    let (a_client, b_client) = (&clients[0].1, &clients[1].1);
    a_client
        .must_append_turn(&user, &turn("z-1", "s1", "before the pause", "ok"))
        .await;
    let epoch = epoch_of(&status(b_client).await.unwrap(), shard(&user));

    pause_outside_writes(&a, &sandbox);
    let paused_at = Instant::now();
    owned_by(
        b_client,
        shard(&user),
        "zombie-b",
        epoch,
        Duration::from_secs(20),
    )
    .await;
    let taken_after = paused_at.elapsed();
    println!(
        "a paused owner's shard taken over after {:.2} s",
        taken_after.as_secs_f64()
    );
    assert!(
        taken_after < PAUSED_TAKEOVER_BOUND,
        "a paused owner's shard was taken over only after {taken_after:?}"
    );
    b_client
        .must_append_turn(&user, &turn("z-2", "s1", "on the new owner", "ok"))
        .await;
    // A paused process keeps its links: taken over by the lease timeout, not early.
    assert_eq!(
        exported_metric(b_client, "engram_shards_taken_over_early_total").await,
        0.0,
        "a paused owner was taken over early"
    );

    // a wakes up believing it owns the shard: it must not write. It either refuses (503) or
    // hands the request to b once it has seen the take-over.
    a.signal("CONT");
    let sent = a_client
        .append_turn(&user, &turn("z-3", "s1", "sent to the zombie", "ok"))
        .await
        .unwrap();
    let expected: &[&str] = match sent.status {
        StatusCode::OK => &["before the pause", "on the new owner", "sent to the zombie"],
        StatusCode::SERVICE_UNAVAILABLE => &["before the pause", "on the new owner"],
        other => panic!("unexpected {other}: {}", sent.text()),
    };
    assert_eq!(texts(b_client, &user).await, expected);
    // a rejoins: the cluster settles again with both nodes serving their share.
    settled(&clients, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_caught_in_its_owners_pause_is_fenced_and_leaves_nothing() {
    let sandbox = Sandbox::new();
    // The test holds the store's write lock while the write gets in flight, which stalls a's
    // heartbeats too: with suspect-confirm at the lease timeout, a serves for 1.5 s after
    // its last round (not 500 ms), so the write passes its ownership check in that window
    // and reaches the fence. A paused process keeps its links: this changes no take-over.
    let spec = |id: &str| {
        sandbox
            .shared_node(id)
            .set("inference.enabled", false)
            .set("storage.sqlite.busy-timeout", "20ms")
            .set("cluster.suspect-confirm", "3s")
    };
    let a = spec("fence-a").start().await;
    let b = spec("fence-b").start().await;
    let clients = [("fence-a", a.client()), ("fence-b", b.client())];
    let owners = settled(&clients, Duration::from_secs(20)).await;
    let user = user_of(&owners, "fence-a", "f");
    let (a_client, b_client) = (clients[0].1.clone(), clients[1].1.clone());
    a_client
        .must_append_turn(&user, &turn("f-1", "s1", "before the pause", "ok"))
        .await;
    let epoch = epoch_of(&status(&b_client).await.unwrap(), shard(&user));

    // Hold SQLite's write lock so that a's next write waits inside its transaction loop.
    let store = engram_storage::Store::sqlite(
        &sandbox.shared_sqlite(),
        engram_storage::sqlite::SqliteOptions::default(),
    )
    .unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(released));
    let (locked, is_locked) = tokio::sync::oneshot::channel::<()>();
    let locked = Arc::new(std::sync::Mutex::new(Some(locked)));
    let lock = tokio::spawn({
        let (released, store, locked) = (Arc::clone(&released), store.clone(), Arc::clone(&locked));
        async move {
            store
                .run(move |txn| {
                    txn.get(b"\xffengram-test-lock")?;
                    if let Some(locked) = locked.lock().unwrap().take() {
                        let _ = locked.send(());
                    }
                    let _ = released
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(30));
                    Ok(())
                })
                .await
        }
    });
    is_locked.await.unwrap();
    let write = tokio::spawn({
        let (a_client, user) = (a_client.clone(), user.clone());
        async move {
            a_client
                .append_turn(&user, &turn("f-2", "s1", "caught in the pause", "ok"))
                .await
        }
    });
    // The write is in flight at a, past its ownership check, waiting for the lock (only
    // then may a pause: paused before the check, it would be refused without the fence).
    metric_above_zero(
        &a_client,
        "engram_fenced_writes_in_flight",
        Duration::from_secs(10),
    )
    .await;
    a.pause();
    release.send(()).unwrap();
    lock.await.unwrap().unwrap();
    owned_by(
        &b_client,
        shard(&user),
        "fence-b",
        epoch,
        Duration::from_secs(20),
    )
    .await;
    b_client
        .must_append_turn(&user, &turn("f-3", "s1", "on the new owner", "ok"))
        .await;

    // a resumes: its write re-reads the shard's row inside its transaction and aborts.
    a.signal("CONT");
    let reply = write.await.unwrap().unwrap();
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()["code"], "not_owner", "{}", reply.text());
    metric_above_zero(
        &a_client,
        "engram_fenced_writes_total",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        texts(&b_client, &user).await,
        ["before the pause", "on the new owner"],
        "nothing the stale owner attempted is visible"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_from_its_peers_by_a_blackhole_loses_nothing_and_heals() {
    // Needs root and iproute2's `ip` (.ci/setup installs it); without them the test fails.
    let lab = engram_tests::netns::Lab::create(3).unwrap_or_else(|why| {
        panic!(
            "the partition test cannot build its network lab (it needs root and iproute2's \
             `ip`, which .ci/setup installs): {why}"
        )
    });
    let sandbox = Sandbox::new();
    let ids = ["cut-a", "cut-b", "cut-c"];
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
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, 24, 4);
    load.wait_for(50, Duration::from_secs(30)).await;
    // Forwarding works before the cut: a user of c written through a.
    let user_of_c = user_of(&owners, "cut-c", "cut-user");
    clients[0]
        .1
        .must_append_turn(&user_of_c, &turn("cut-0", "s1", "before the cut", "ok"))
        .await;

    // c keeps reaching the store (liveness is its storage heartbeat), so it keeps its shards;
    // its peers can no longer reach it and it cannot reach them.
    lab.cut(2).unwrap();
    let cut_at = Instant::now();
    let retries_before = gateway.retries.load(Ordering::Relaxed);
    let acked_before = load.acked().await;
    let served = load
        .served_again(&load.users.clone(), cut_at, Duration::from_secs(90))
        .await;
    let during = load.acked().await - acked_before;
    let through_peer = clients[0]
        .1
        .append_turn(&user_of_c, &turn("cut-1", "s1", "through a cut peer", "ok"))
        .await
        .unwrap();
    assert_eq!(
        through_peer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a peer that cannot reach the owner answers 503 within the hand-off wait: {}",
        through_peer.text()
    );
    let owners_during = settled(&clients, Duration::from_secs(10)).await;
    assert_eq!(owners_during, owners, "nobody took c's shards: c is alive");

    lab.heal(2).unwrap();
    let healed_at = Instant::now();
    // Forwarding works again: the same write through a peer (same request id) succeeds.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let reply = clients[0]
            .1
            .append_turn(&user_of_c, &turn("cut-1", "s1", "through a cut peer", "ok"))
            .await;
        if reply.is_ok_and(|r| r.status == StatusCode::OK) {
            break;
        }
        assert!(
            Instant::now() < until,
            "forwarding did not recover after the heal"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovered = healed_at.elapsed();
    load.wait_for(50, Duration::from_secs(30)).await;
    load.stop_and_verify(&clients[0].1, &sandbox).await;
    assert_eq!(
        texts(&clients[1].1, &user_of_c).await,
        ["before the cut", "through a cut peer"],
        "the write retried across the heal is stored once"
    );
    let window = (served - cut_at).as_secs_f64();
    println!(
        "blackhole around 1 of 3 nodes: every user served again within {window:.2} s of the cut \
         ({during} writes acknowledged meanwhile, {:.1}/s; {} retried requests, each a request \
         that reached a node unable to reach the owner and waited out cluster.handoff-wait); \
         forwarding back {:.2} s after the heal",
        during as f64 / window.max(1e-3),
        gateway.retries.load(Ordering::Relaxed) - retries_before,
        recovered.as_secs_f64(),
    );
}
