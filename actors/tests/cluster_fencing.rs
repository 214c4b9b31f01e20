//! Two nodes' worth of user actors and lease managers in one process, on one real SQLite file
//! with an injected clock: leases are taken by rendezvous, a live owner keeps its shards, a
//! dead one loses them, and a stale owner that still believes it owns a shard cannot commit;
//! a suspected owner (its links closed) is taken over early once its heartbeat is older than
//! the confirmation age, never while it heartbeats; each node's maintenance jobs sweep only
//! its own shards' users; a drain is reported in the round that hands off the last shard.

use std::sync::Arc;
use std::time::Duration;

use engram_actors::Error;
use engram_actors::clock::{ManualClock, SharedClock};
use engram_actors::cluster::LeaseManager;
use engram_actors::directory::Directory;
use engram_actors::jobs::{self, Job, JobReport};
use engram_actors::model::entities::EntityExtractor;
use engram_actors::ownership::{LeaseSettings, Ownership};
use engram_actors::placement::UserKey;
use engram_actors::request::user::{TurnAck, TurnRequest};
use engram_actors::services::{Metrics, Services, Settings};
use engram_storage::data::UserData;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{Member, MemberStatus, Timestamp};
use engram_storage::{Keyspace, Store};

const SHARDS: u32 = 64;

struct Node {
    directory: Arc<Directory>,
    leases: Arc<LeaseManager>,
}

fn node(store: &Store, clock: &Arc<ManualClock>, id: &str) -> Node {
    node_with(store, clock, id, sharded())
}

fn node_with(store: &Store, clock: &Arc<ManualClock>, id: &str, actors: Settings) -> Node {
    let settings = LeaseSettings {
        node_id: id.into(),
        heartbeat_interval: Duration::from_millis(250),
        lease_timeout: Duration::from_secs(3),
        suspect_confirm: Duration::from_secs(1),
    };
    let services = Services {
        store: store.clone(),
        keyspace: Keyspace::new("engram"),
        clock: clock.clone() as SharedClock,
        extractor: Arc::new(EntityExtractor::default()),
        embedder: None,
        pipeline: None,
        distillation: None,
        reranker: None,
        ownership: Some(Ownership::new(&settings)),
        settings: actors,
        metrics: Arc::new(Metrics::default()),
    };
    let directory = Directory::new(services);
    let member = Member {
        node_id: id.into(),
        http_addr: String::new(),
        cluster_addr: String::new(),
        started_at: Timestamp(0),
        heartbeat_at: Timestamp(0),
        status: MemberStatus::Active,
    };
    let leases = LeaseManager::new(settings, member, Arc::clone(&directory)).unwrap();
    Node { directory, leases }
}

async fn append(node: &Node, request_id: &str, text: &str) -> engram_actors::Result<TurnAck> {
    append_for(node, &UserKey::new("acme", "alice"), request_id, text).await
}

async fn append_for(
    node: &Node,
    user: &UserKey,
    request_id: &str,
    text: &str,
) -> engram_actors::Result<TurnAck> {
    let req = TurnRequest {
        request_id: request_id.into(),
        session_id: Some("s1".into()),
        user_text: text.into(),
        assistant_text: "ok".into(),
        route: None,
        success: true,
        trace_id: None,
        choices: Vec::new(),
        clarification: None,
    };
    node.directory.ask_admin(user, req.clone()).await
}

async fn stored_request_ids(store: &Store) -> Vec<String> {
    stored_for(store, &UserKey::new("acme", "alice")).await
}

/// The request ids of `user`'s stored turns of session s1.
async fn stored_for(store: &Store, user: &UserKey) -> Vec<String> {
    let (ks, user) = (Keyspace::new("engram"), user.clone());
    store
        .read(move |txn| {
            let turns = UserData::new(txn, &ks, &user.tenant, &user.user).turns_from("s1", 0)?;
            Ok(turns.into_iter().map(|t| t.request_id).collect())
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_cannot_commit_after_a_take_over() {
    let (_dir, store, clock) = fixture();

    // A alone takes every shard.
    let a = node(&store, &clock, "a");
    let first = a.leases.round().await.unwrap();
    assert_eq!(
        (first.taken, first.held),
        (SHARDS as usize, SHARDS as usize)
    );
    append(&a, "r1", "first turn").await.unwrap();

    // B joins while A is alive: A hands off the shards rendezvous now gives B, B takes them.
    let b = node(&store, &clock, "b");
    assert_eq!(b.leases.round().await.unwrap().taken, 0, "A holds them");
    let handoff = a.leases.round().await.unwrap();
    assert!(handoff.handed_off > 0 && handoff.handed_off < SHARDS as usize);
    let joined = b.leases.round().await.unwrap();
    assert_eq!(joined.taken, handoff.handed_off);
    assert_eq!(
        a.leases.ownership().held() + b.leases.ownership().held(),
        SHARDS as usize
    );

    // Make sure alice's shard is A's for the rest of the test: if B got it, swap roles.
    let shard = UserKey::new("acme", "alice").shard(SHARDS);
    let (owner, other) = if a.leases.ownership().snapshot().contains_key(&shard) {
        (a, b)
    } else {
        (b, a)
    };
    let other_refuses = append(&other, "r-wrong", "to the wrong node").await;
    assert!(
        matches!(other_refuses, Err(Error::NotOwner(_))),
        "{other_refuses:?}"
    );
    append(&owner, "r2", "second turn").await.unwrap();

    // The owner stops heartbeating (paused); once its heartbeat is older than the lease
    // timeout, the other node takes its shards with a new epoch.
    clock.advance(10_000);
    let takeover = other.leases.round().await.unwrap();
    assert!(takeover.taken > 0);
    assert_eq!(
        (takeover.taken_over, takeover.taken_over_early),
        (takeover.taken, 0),
        "taken from a node presumed dead by the lease timeout: {takeover:?}"
    );
    assert_eq!(other.leases.ownership().held(), SHARDS as usize);

    // The stale owner still believes it owns alice's shard (its view is fresh by its own
    // monotonic clock), but its write is fenced: refused, and nothing of it is stored.
    assert!(owner.leases.ownership().snapshot().contains_key(&shard));
    let stale = append(&owner, "r3", "written by a zombie").await;
    assert!(matches!(stale, Err(Error::NotOwner(_))), "{stale:?}");
    assert!(!owner.leases.ownership().snapshot().contains_key(&shard));
    assert_eq!(stored_request_ids(&store).await, ["r1", "r2"]);

    // The new owner serves alice from storage: her turns continue where they were.
    let ack = append(&other, "r4", "after the take-over").await.unwrap();
    assert_eq!(ack.seq, Some(2));
    assert_eq!(stored_request_ids(&store).await, ["r1", "r2", "r4"]);

    // The stale owner's next round sees it lost everything and stops its actors.
    let lost = owner.leases.round().await.unwrap();
    assert_eq!(lost.held, 0);
}

/// Two nodes that have split the shards between them.
/// A fresh SQLite file (kept while the `TempDir` lives), the store on it and a manual clock.
fn fixture() -> (tempfile::TempDir, Store, Arc<ManualClock>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    (dir, store, ManualClock::new(Timestamp(1_780_000_000_000)))
}

/// The actors' default settings over this test's [`SHARDS`] shards.
fn sharded() -> Settings {
    Settings {
        shards: SHARDS,
        ..Settings::default()
    }
}

async fn settled_pair(
    store: &Store,
    clock: &Arc<ManualClock>,
    settings: &Settings,
) -> (Node, Node) {
    let a = node_with(store, clock, "a", settings.clone());
    a.leases.round().await.unwrap();
    let b = node_with(store, clock, "b", settings.clone());
    b.leases.round().await.unwrap();
    a.leases.round().await.unwrap();
    b.leases.round().await.unwrap();
    assert!(a.leases.ownership().held() > 0 && b.leases.ownership().held() > 0);
    (a, b)
}

/// A user of tenant acme whose shard `node` holds.
fn user_on(node: &Node) -> UserKey {
    (0..)
        .map(|i| UserKey::new("acme", format!("user-{i}")))
        .find(|u| node.leases.ownership().holds(u.shard(SHARDS)))
        .unwrap()
}

/// Runs `job` on `node` after a round (so its leases are fresh), again while a sweep fails.
async fn run_job(node: &Node, job: Job) -> JobReport {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        node.leases.round().await.unwrap();
        let report = jobs::run(&node.directory, job).await.unwrap();
        if report.failed == 0 {
            return report;
        }
        assert!(std::time::Instant::now() < until, "{report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_sweeps_only_the_users_of_the_shards_it_holds() {
    let (_dir, store, clock) = fixture();
    // Raw turns are due for the archive 1 ms after they are written.
    let settings = Settings {
        shards: SHARDS,
        retention_ms: 1,
        ..Settings::default()
    };
    let (a, b) = settled_pair(&store, &clock, &settings).await;
    let (on_a, on_b) = (user_on(&a), user_on(&b));
    append_for(&a, &on_a, "a-1", "a turn on a").await.unwrap();
    append_for(&b, &on_b, "b-1", "a turn on b").await.unwrap();
    clock.advance(10);

    // b sweeps its own user and leaves a's alone: no actor, no not-owner failure.
    let swept = run_job(&b, Job::Retention).await;
    assert_eq!((swept.users, swept.turns_removed), (1, 1), "{swept:?}");
    assert_eq!(swept.not_owned, 1, "{swept:?}");
    assert!(b.directory.running(&on_a).is_none());
    // a's own run takes its user; b's is done.
    let swept = run_job(&a, Job::Retention).await;
    assert_eq!(
        (swept.users, swept.turns_removed, swept.not_owned),
        (1, 1, 0),
        "{swept:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_is_reported_in_the_round_that_hands_off_the_last_shard() {
    let (_dir, store, clock) = fixture();
    let (a, b) = settled_pair(&store, &clock, &sharded()).await;
    let held = a.leases.ownership().held();
    let not_yet = tokio::time::timeout(Duration::from_millis(50), a.leases.drained()).await;
    assert!(not_yet.is_err(), "drained before any drain was asked");

    engram_actors::cluster::request_drain(&store, &Keyspace::new("engram"), "a")
        .await
        .unwrap()
        .unwrap();
    let round = a.leases.round().await.unwrap();
    assert_eq!((round.handed_off, round.held), (held, 0), "{round:?}");
    tokio::time::timeout(Duration::from_secs(5), a.leases.drained())
        .await
        .expect("the drain is reported by the round that emptied the node");
    assert_eq!(b.leases.round().await.unwrap().taken, held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspected_owner_is_taken_over_once_silent_for_the_confirmation_age_not_before() {
    let (_dir, store, clock) = fixture();
    let (a, b) = settled_pair(&store, &clock, &sharded()).await;
    let on_a = a.leases.ownership().held();
    let user = user_on(&a);
    append_for(&a, &user, "e-1", "before the silence")
        .await
        .unwrap();

    // Silent past the confirmation age but its links are up: only the lease timeout counts.
    clock.advance(1_500);
    let round = b.leases.round().await.unwrap();
    assert_eq!((round.live, round.taken), (2, 0), "{round:?}");
    // A suspicion that ended (a link is up again) changes nothing either.
    b.leases.suspect("a");
    b.leases.trust("a");
    let round = b.leases.round().await.unwrap();
    assert_eq!((round.live, round.taken), (2, 0), "{round:?}");

    // a heartbeats; then its links close. While its heartbeat is no older than the
    // confirmation age it is alive and keeps every shard.
    a.leases.round().await.unwrap();
    b.leases.suspect("a");
    let round = b.leases.round().await.unwrap();
    assert_eq!(
        (round.live, round.taken),
        (2, 0),
        "a fresh heartbeat: {round:?}"
    );
    clock.advance(1_000);
    let round = b.leases.round().await.unwrap();
    assert_eq!(
        (round.live, round.taken),
        (2, 0),
        "exactly the age: {round:?}"
    );
    assert_eq!(a.leases.ownership().held(), on_a);

    // Older than the confirmation age (not the lease timeout): b takes a's shards early.
    clock.advance(1);
    let round = b.leases.round().await.unwrap();
    assert_eq!(round.live, 1, "{round:?}");
    assert_eq!(
        (round.taken, round.taken_over, round.taken_over_early),
        (on_a, on_a, on_a),
        "{round:?}"
    );
    let metrics = &b.leases.ownership().metrics;
    assert_eq!(
        metrics
            .taken_over_early
            .load(std::sync::atomic::Ordering::Relaxed),
        on_a as u64
    );
    assert_eq!(b.leases.ownership().held(), SHARDS as usize);

    // The fence still decides: a, which has not run a round since, cannot commit.
    let stale = append_for(&a, &user, "e-2", "written by the suspect").await;
    assert!(matches!(stale, Err(Error::NotOwner(_))), "{stale:?}");
    append_for(&b, &user, "e-3", "on the new owner")
        .await
        .unwrap();
    assert_eq!(stored_for(&store, &user).await, ["e-1", "e-3"]);

    // a was alive after all: its next round finds its shards gone and heartbeats; with a
    // fresh heartbeat it is live to b again, suspected or not, and gets its share back.
    let lost = a.leases.round().await.unwrap();
    // (The shard of the fenced write was dropped by the fence already.)
    assert!(lost.held == 0 && lost.lost + 1 >= on_a, "{lost:?}");
    let back = b.leases.round().await.unwrap();
    assert_eq!((back.live, back.handed_off), (2, on_a), "{back:?}");
    assert_eq!(a.leases.round().await.unwrap().taken, on_a);
}
