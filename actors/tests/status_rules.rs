//! The status rules through the user actors on a real SQLite file: which memories a context
//! and a search serve by status, and how a candidate is confirmed by use.
//!
//! - A candidate a context served becomes active when that session's next turn succeeds (a
//!   failed turn or a turn of another session does not confirm it; one use confirms once).
//! - An inferred preference (a profile candidate from three identical choices) is not served
//!   in a context until confirmed (the fourth identical choice reinforces it to active);
//!   searches find candidates unless asked for active memories only.

use engram_actors::model::retrieve::SearchMode;
use engram_actors::request::user::{MemoryChange, SearchQuery, TurnAck};
use engram_actors::services::Settings;
use engram_storage::types::{MemoryKind, MemoryRecord, MemoryStatus};

mod plain;
use plain::{Node, alice, alice_memories, append, context, node, turn};

async fn memory(node: &Node, id: &str) -> MemoryRecord {
    let all = alice_memories(node, None).await;
    all.into_iter().find(|r| r.memory_id == id).unwrap()
}

fn promoted(ack: &TurnAck) -> Vec<&MemoryChange> {
    ack.memories
        .iter()
        .filter(|m| m.action == "promoted")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_a_context_served_becomes_active_when_the_sessions_next_turn_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    let key = alice();
    let monday = append(
        &node,
        &key,
        turn(
            "r1",
            "monday",
            "Show the refunds of East China from dw_refunds",
        ),
    )
    .await
    .unwrap();
    let formed = &monday.memories[0];
    assert_eq!(
        (formed.kind, formed.action.as_str()),
        (MemoryKind::Episodic, "created")
    );
    let id = formed.memory_id.clone();
    assert_eq!(memory(&node, &id).await.status, MemoryStatus::Candidate);

    // Tuesday's context serves Monday's episodic memory, a candidate, and says so.
    let ctx = context(&node, &key, "tuesday", "refunds of East China").await;
    let served = ctx.episodic.iter().find(|m| m.memory_id == id).unwrap();
    assert_eq!(served.status, MemoryStatus::Candidate);

    // A failed turn confirms nothing, nor does a turn of another session.
    let mut failed = turn("r2", "tuesday", "and by week?");
    failed.success = false;
    let ack = append(&node, &key, failed).await.unwrap();
    assert!(promoted(&ack).is_empty());
    let other = append(&node, &key, turn("r3", "wednesday", "hello"))
        .await
        .unwrap();
    assert!(promoted(&other).is_empty());
    assert_eq!(memory(&node, &id).await.status, MemoryStatus::Candidate);

    // Tuesday's next successful turn used it.
    let used = append(&node, &key, turn("r4", "tuesday", "and by week?"))
        .await
        .unwrap();
    let ids: Vec<&str> = promoted(&used)
        .iter()
        .map(|m| m.memory_id.as_str())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let record = memory(&node, &id).await;
    assert_eq!(record.status, MemoryStatus::Active);
    assert!(
        (record.confidence - 0.6).abs() < 1e-6,
        "{}",
        record.confidence
    );
    // A retry replays the answer and promotes nothing twice.
    let replay = append(&node, &key, turn("r4", "tuesday", "and by week?"))
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(promoted(&replay).len(), 1, "the stored answer");
    let again = append(&node, &key, turn("r5", "tuesday", "thanks"))
        .await
        .unwrap();
    assert!(promoted(&again).is_empty(), "one use confirms once");
    assert!((memory(&node, &id).await.confidence - 0.6).abs() < 1e-6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inferred_preference_is_not_served_until_confirmed_and_searches_find_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    let key = alice();
    let choose = |id: &str| {
        let mut req = turn(id, "s1", "Show GMV by region");
        req.choices = vec![("chart style".into(), "line chart".into())];
        req
    };
    let mut formed = None;
    for id in ["c1", "c2", "c3"] {
        let ack = append(&node, &key, choose(id)).await.unwrap();
        formed = formed.or_else(|| {
            ack.memories
                .iter()
                .find(|m| m.kind == MemoryKind::Profile)
                .map(|m| m.memory_id.clone())
        });
    }
    let id = formed.expect("three identical choices form a profile candidate");
    assert_eq!(memory(&node, &id).await.status, MemoryStatus::Candidate);

    let ctx = context(&node, &key, "s2", "chart style line chart").await;
    assert!(
        ctx.profile.is_empty(),
        "served unconfirmed: {:?}",
        ctx.profile
    );
    let search = |active_only: bool| SearchQuery {
        query: "chart style line chart".into(),
        k: 10,
        kinds: vec![MemoryKind::Profile],
        mode: SearchMode::Bm25,
        active_only,
        rerank: false,
    };
    let found = node.directory.ask_admin(&key, search(false)).await.unwrap();
    assert_eq!(found.hits.len(), 1, "a search finds the candidate");
    assert_eq!(found.hits[0].memory.status, MemoryStatus::Candidate);
    let active = node.directory.ask_admin(&key, search(true)).await.unwrap();
    assert!(
        active.hits.is_empty(),
        "unless asked for active memories only"
    );

    // The fourth identical choice reinforces it to confidence 0.7: active, and served.
    let ack = append(&node, &key, choose("c4")).await.unwrap();
    assert!(
        ack.memories
            .iter()
            .any(|m| m.memory_id == id && m.action == "reinforced"),
        "{:?}",
        ack.memories
    );
    assert_eq!(memory(&node, &id).await.status, MemoryStatus::Active);
    let ctx = context(&node, &key, "s2", "chart style line chart").await;
    assert_eq!(
        ctx.profile
            .iter()
            .map(|m| (m.memory_id.as_str(), m.status))
            .collect::<Vec<_>>(),
        [(id.as_str(), MemoryStatus::Active)]
    );
}
