//! Idempotency entries of a user's writes, on a real SQLite file: replays are scoped to the
//! key that wrote, show a memory as it is now (a memory deleted since comes back deleted,
//! without its text), keep no memory text, and are pruned after the retention.

use std::time::Duration;

use engram_actors::front::{Reader, Users};
use engram_actors::request::user::{MemoryWrite, StatusChange, SweepScope};
use engram_actors::services::Settings;
use engram_actors::user::UserMsg;
use engram_storage::RangeOptions;
use engram_storage::access::Scope;
use engram_storage::types::MemoryStatus;

mod plain;

use plain::{Node, alice, turn};

fn gateway(principal: &str) -> Reader {
    Reader {
        principal: principal.into(),
        scope: Scope::Gateway,
        tenant: "acme".into(),
    }
}

fn users(node: &Node) -> Users {
    Users::new(node.directory.clone(), None, Duration::from_secs(1))
}

fn memory(request_id: &str, text: &str) -> MemoryWrite {
    MemoryWrite {
        payload: serde_json::json!({"note": text}),
        ..plain::memory_write(request_id, text)
    }
}

/// Every idempotency entry of Alice's, raw (key and value bytes).
async fn alice_entries(node: &Node) -> Vec<(Vec<u8>, Vec<u8>)> {
    let ks = engram_storage::Keyspace::new("engram");
    node.store
        .read(move |txn| {
            let range = ks.user("acme", "alice").idempotencies();
            txn.get_range(&range.begin, &range.end, RangeOptions::default())
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_replay_shows_a_memory_deleted_since_as_deleted_without_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let node = plain::node(&dir, Settings::default());
    let users = users(&node);
    let g1 = gateway("g1");
    let written = users
        .ask(
            &g1,
            &alice(),
            memory("m-1", "prefers the quarterly revenue view"),
        )
        .await
        .unwrap();
    assert!(!written.replayed);
    let id = written.memory.memory_id.clone();
    users
        .ask(
            &g1,
            &alice(),
            StatusChange {
                request_id: "del-1".into(),
                memory_id: id.clone(),
                status: MemoryStatus::Deleted,
            },
        )
        .await
        .unwrap();
    let replay = users
        .ask(
            &g1,
            &alice(),
            memory("m-1", "prefers the quarterly revenue view"),
        )
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.memory.memory_id, id);
    assert_eq!(replay.memory.status, MemoryStatus::Deleted);
    assert!(
        replay.memory.summary_text.is_empty() && !replay.memory.payload.contains("quarterly"),
        "a deleted memory's text came back: {:?}",
        replay.memory
    );
    // No entry keeps the memory's text in the first place.
    for (_, value) in alice_entries(&node).await {
        assert!(
            !value.windows(9).any(|w| w == b"quarterly"),
            "an idempotency entry keeps a memory's text"
        );
    }
}

#[tokio::test]
async fn a_replay_shows_a_live_memory_as_it_is_now() {
    let dir = tempfile::tempdir().unwrap();
    let node = plain::node(&dir, Settings::default());
    let users = users(&node);
    let g1 = gateway("g1");
    let first = users
        .ask(&g1, &alice(), memory("m-1", "likes weekly digests"))
        .await
        .unwrap();
    let replay = users
        .ask(&g1, &alice(), memory("m-1", "likes weekly digests"))
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.memory.summary_text, first.memory.summary_text);
    assert_eq!(replay.memory.status, first.memory.status);
}

#[tokio::test]
async fn another_key_reusing_a_request_id_gets_its_own_write_not_the_first_answer() {
    let dir = tempfile::tempdir().unwrap();
    let node = plain::node(&dir, Settings::default());
    let users = users(&node);
    let (g1, g2) = (gateway("g1"), gateway("g2"));
    let first = users
        .ask(
            &g1,
            &alice(),
            memory("same-id", "uses the finance dashboard"),
        )
        .await
        .unwrap();
    let other = users
        .ask(&g2, &alice(), memory("same-id", "wants answers in Chinese"))
        .await
        .unwrap();
    assert!(!other.replayed, "g2 was answered with g1's write");
    assert_ne!(other.memory.memory_id, first.memory.memory_id);
    assert_eq!(other.memory.summary_text, "wants answers in Chinese");
    // Each key's retry replays its own write.
    let again = users
        .ask(
            &g1,
            &alice(),
            memory("same-id", "uses the finance dashboard"),
        )
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.memory.memory_id, first.memory.memory_id);
    let again = users
        .ask(&g2, &alice(), memory("same-id", "wants answers in Chinese"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.memory.memory_id, other.memory.memory_id);
}

#[tokio::test]
async fn idempotency_entries_are_pruned_after_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let node = plain::node(&dir, Settings::default());
    let retention = Settings::default().idempotency_retention_ms;
    for i in 0..3 {
        node.directory
            .ask_admin(&alice(), turn(&format!("old-{i}"), "s1", "show the orders"))
            .await
            .unwrap();
    }
    node.clock.advance(retention + 1);
    node.directory
        .ask_admin(&alice(), turn("new-0", "s1", "and their total"))
        .await
        .unwrap();
    assert_eq!(alice_entries(&node).await.len(), 4);
    node.directory
        .call(&alice(), |r| UserMsg::Sweep(SweepScope::ALL, r))
        .await
        .unwrap();
    let left = alice_entries(&node).await;
    assert_eq!(left.len(), 1, "only the entry within the retention stays");
    // A retry past the retention is a new write; one within it still replays.
    let retried = node
        .directory
        .ask_admin(&alice(), turn("new-0", "s1", "and their total"))
        .await
        .unwrap();
    assert!(retried.replayed);
}
