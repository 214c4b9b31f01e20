//! Two nodes' worth of user actors and lease managers in one process, on one real SQLite file
//! with an injected clock: leases are taken by rendezvous, a live owner keeps its shards, a
//! dead one loses them, and a stale owner that still believes it owns a shard cannot commit.

use std::sync::Arc;
use std::time::Duration;

use engram_actors::Error;
use engram_actors::clock::{ManualClock, SharedClock};
use engram_actors::cluster::{LeaseManager, LeaseSettings, Ownership};
use engram_actors::directory::Directory;
use engram_actors::model::entities::EntityExtractor;
use engram_actors::placement::UserKey;
use engram_actors::services::{Metrics, Services, Settings};
use engram_actors::user::api::{TurnAck, TurnRequest};
use engram_storage::data::UserData;
use engram_storage::model::{Member, MemberStatus, Timestamp};
use engram_storage::sqlite::SqliteOptions;
use engram_storage::{Keyspace, Store};

const SHARDS: u32 = 64;

struct Node {
    directory: Arc<Directory>,
    leases: Arc<LeaseManager>,
}

fn node(store: &Store, clock: &Arc<ManualClock>, id: &str) -> Node {
    let settings = LeaseSettings {
        node_id: id.into(),
        heartbeat_interval: Duration::from_millis(500),
        lease_timeout: Duration::from_secs(3),
    };
    let services = Services {
        store: store.clone(),
        keyspace: Keyspace::new("engram"),
        clock: clock.clone() as SharedClock,
        extractor: Arc::new(EntityExtractor::default()),
        embedder: None,
        ownership: Some(Ownership::new(&settings)),
        settings: Settings {
            shards: SHARDS,
            ..Settings::default()
        },
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
    let req = TurnRequest {
        request_id: request_id.into(),
        session_id: Some("s1".into()),
        user_text: text.into(),
        assistant_text: "ok".into(),
        route: None,
        success: true,
        trace_id: None,
        choices: Vec::new(),
    };
    node.directory
        .ask_admin(&UserKey::new("acme", "alice"), req)
        .await
}

async fn stored_request_ids(store: &Store) -> Vec<String> {
    let ks = Keyspace::new("engram");
    store
        .read(move |txn| {
            let turns = UserData::new(txn, &ks, "acme", "alice").turns_from("s1", 0)?;
            Ok(turns.into_iter().map(|t| t.request_id).collect())
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_cannot_commit_after_a_take_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    let clock = ManualClock::new(Timestamp(1_780_000_000_000));

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
