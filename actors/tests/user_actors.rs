//! The user actors end to end on a real SQLite file: serialised writes, idempotent retries
//! across passivation and restarts, supervision, formation, context, sweeps and forgetting.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_actors::Error;
use engram_actors::clock::Clock;
use engram_actors::jobs::{self, Job};
use engram_actors::model::policy::DAY_MS;
use engram_actors::placement::UserKey;
use engram_actors::request::user::{
    FeedbackRequest, Forget, ListMemories, MemoryWrite, StatusChange, SweepScope,
};
use engram_actors::services::Settings;
use engram_actors::user::UserMsg;
use engram_storage::types::{MemoryKind, MemoryStatus, Timestamp};
use engram_storage::{Keyspace, RangeOptions};

mod plain;
use plain::{Node, alice, alice_memories, alice_stored, append, context, node, turn};

async fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_of_one_user_are_serialised_without_loss_or_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(node(&dir, Settings::default()));
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let node = node.clone();
            tokio::spawn(async move {
                append(
                    &node,
                    &alice(),
                    turn(&format!("req-{i}"), "s1", &format!("question {i}")),
                )
                .await
                .unwrap()
            })
        })
        .collect();
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.unwrap().seq.unwrap());
    }
    seqs.sort();
    assert_eq!(
        seqs,
        (0..100).collect::<Vec<u64>>(),
        "every turn got its own sequence number"
    );
    // And each turn is stored once.
    let ks = Keyspace::new("engram");
    let turns = node
        .store
        .read(move |txn| {
            let range = ks.user("acme", "alice").turns("s1");
            txn.get_range(&range.begin, &range.end, RangeOptions::default())
        })
        .await
        .unwrap();
    assert_eq!(turns.len(), 100);
    assert_eq!(node.directory.alive(), 1, "one actor served them all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_returns_the_original_result_even_after_passivation_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        idle_timeout: Duration::from_millis(100),
        ..Settings::default()
    };
    let first = {
        let node = node(&dir, settings.clone());
        let ack = append(&node, &alice(), turn("req-1", "s1", "I prefer line charts"))
            .await
            .unwrap();
        assert!(!ack.replayed && ack.written);
        let again = append(&node, &alice(), turn("req-1", "s1", "I prefer line charts"))
            .await
            .unwrap();
        assert!(again.replayed);
        assert_eq!((again.seq, &again.memories), (ack.seq, &ack.memories));
        // Passivation: the actor stops when idle, and a retry still replays. The idle timeout
        // may also pass between the steps above on a busy machine (the actor then passivates
        // and restarts earlier, which is as good): what counts is that the actor stopped by
        // passivation, not failure, and that the retry below starts a fresh one.
        // (The actor leaves the directory just before it counts its passivation: wait for both.)
        let metrics = &node.directory.services().metrics;
        let started = || metrics.actors_started.load(Ordering::Relaxed);
        wait_until(
            "every actor started is passivated",
            Duration::from_secs(5),
            || {
                node.directory.alive() == 0
                    && metrics.passivations.load(Ordering::Relaxed) == started()
            },
        )
        .await;
        let started = started();
        assert!(started >= 1);
        assert_eq!(
            metrics.failures.load(Ordering::Relaxed),
            0,
            "no actor failed"
        );
        let after = append(&node, &alice(), turn("req-1", "s1", "I prefer line charts"))
            .await
            .unwrap();
        assert!(after.replayed);
        assert_eq!(after.seq, ack.seq);
        assert_eq!(
            metrics.actors_started.load(Ordering::Relaxed),
            started + 1,
            "the retry was answered by a fresh actor, from storage"
        );
        node.directory.shutdown(Duration::from_secs(5)).await;
        ack
    };
    // A new process over the same file: still replayed, still one turn.
    let node = node(&dir, settings);
    let after_restart = append(&node, &alice(), turn("req-1", "s1", "I prefer line charts"))
        .await
        .unwrap();
    assert!(after_restart.replayed);
    assert_eq!(after_restart.seq, first.seq);
    let next = append(&node, &alice(), turn("req-2", "s1", "and now?"))
        .await
        .unwrap();
    assert_eq!(next.seq, Some(1), "the retry wrote nothing");
    // Reusing a request id for another kind of request is refused.
    let status = StatusChange {
        request_id: "req-1".into(),
        memory_id: "m00000000".into(),
        status: MemoryStatus::Active,
    };
    let err = node
        .directory
        .ask_admin(&alice(), status.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput { ref field, .. } if field == "request_id"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_actor_is_restarted_from_storage_and_its_siblings_carry_on() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(
        &dir,
        Settings {
            shards: 1,
            ..Settings::default()
        },
    );
    let bob = UserKey::new("acme", "bob");
    append(&node, &alice(), turn("a1", "s", "I prefer bar charts"))
        .await
        .unwrap();
    append(&node, &bob, turn("b1", "s", "hello")).await.unwrap();
    let bob_actor = node.directory.running(&bob).unwrap().get_id();
    let alice_actor = node.directory.running(&alice()).unwrap().get_id();
    node.directory.tell(&alice(), UserMsg::Fail).await.unwrap();
    let metrics = node.directory.services().metrics.clone();
    wait_until("alice's actor is restarted", Duration::from_secs(5), || {
        metrics.restarts.load(Ordering::Relaxed) == 1
    })
    .await;
    let restarted = node.directory.running(&alice()).unwrap().get_id();
    assert_ne!(restarted, alice_actor);
    assert_eq!(
        node.directory.running(&bob).unwrap().get_id(),
        bob_actor,
        "the sibling is untouched"
    );
    // The restarted actor has the user's state back from storage.
    let memories = alice_memories(&node, Some(MemoryKind::Profile)).await;
    assert_eq!(memories.len(), 1);
    assert_eq!(
        append(&node, &alice(), turn("a2", "s", "next"))
            .await
            .unwrap()
            .seq,
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formation_conflicts_and_context_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    let key = alice();
    append(
        &node,
        &key,
        turn(
            "r1",
            "s1",
            "Show GMV by region from dw_orders. I prefer line charts",
        ),
    )
    .await
    .unwrap();
    let ack = append(
        &node,
        &key,
        turn("r2", "s1", "Actually I prefer bar charts"),
    )
    .await
    .unwrap();
    assert!(
        ack.memories
            .iter()
            .any(|m| m.kind == MemoryKind::Profile && m.action == "superseded"),
        "{ack:?}"
    );
    let fb = FeedbackRequest {
        request_id: "f1".into(),
        session_id: Some("s1".into()),
        turn_seq: 0,
        liked: false,
        corrected_sql: Some("select sum(price) from dw_orders where price > 0".into()),
        comment: Some("GMV excludes refunds: filter price > 0".into()),
        trace_id: None,
    };
    let fb_ack = node.directory.ask_admin(&key, fb.clone()).await.unwrap();
    assert_eq!(fb_ack.memories[0].kind, MemoryKind::Correction);
    // Three identical choices make a profile candidate.
    for i in 0..3 {
        let mut t = turn(&format!("c{i}"), "s1", "show the numbers");
        t.choices = vec![("granularity".into(), "weekly".into())];
        let ack = append(&node, &key, t).await.unwrap();
        assert_eq!(
            ack.memories
                .iter()
                .any(|m| m.action == "created" && m.kind == MemoryKind::Profile),
            i == 2,
            "{ack:?}"
        );
    }
    let ctx = context(&node, &key, "s1", "what about their total amount?").await;
    let profile: Vec<_> = ctx.profile.iter().map(|m| m.text.as_str()).collect();
    assert!(
        profile.iter().any(|t| t.contains("bar charts")),
        "{profile:?}"
    );
    assert!(
        !profile.iter().any(|t| t.contains("line charts")),
        "the superseded preference is gone: {profile:?}"
    );
    assert_eq!(ctx.corrections.len(), 1);
    assert!(ctx.text.contains("GMV excludes refunds"));
    assert_eq!(ctx.recent_turns.len(), 5);
    assert!(
        ctx.entities.contains(&"dw_orders".to_string()),
        "{:?}",
        ctx.entities
    );
    assert!(
        ctx.text
            .ends_with("Do not invent memories that are not listed.")
    );
    // A failed turn is not written.
    let mut failed = turn("x1", "s1", "broken");
    failed.success = false;
    assert!(!append(&node, &key, failed).await.unwrap().written);
    assert_eq!(context(&node, &key, "s1", "").await.recent_turns.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeps_expire_then_purge_records_and_apply_retention_by_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    let key = alice();
    append(&node, &key, turn("r1", "s1", "what was GMV"))
        .await
        .unwrap();
    let write = MemoryWrite {
        request_id: "w1".into(),
        memory_id: None,
        kind: MemoryKind::Correction,
        text: "use dw_orders".into(),
        payload: serde_json::json!({}),
        status: MemoryStatus::Active,
        namespace: "default".into(),
        scope: "global".into(),
        confidence: 0.9,
        salience: 0.5,
        valid_from: None,
        valid_to: None,
        session_id: None,
        source_route: None,
        source_agent: None,
        trace_id: None,
    };
    node.directory.ask_admin(&key, write.clone()).await.unwrap();
    let expiry = || jobs::run(&node.directory, Job::ExpirySweep);
    let retention = || jobs::run(&node.directory, Job::Retention);
    assert_eq!(expiry().await.unwrap().expired, 0);
    let cleanup = || jobs::run(&node.directory, Job::SessionCleanup);
    assert_eq!(
        cleanup().await.unwrap().sessions_closed,
        0,
        "the session is fresh"
    );
    node.clock.advance(DAY_MS + 1);
    assert_eq!(
        cleanup().await.unwrap().sessions_closed,
        1,
        "idle for a day"
    );
    assert_eq!(
        context(&node, &key, "s1", "GMV").await.recent_turns.len(),
        1,
        "the last six turns stay raw after a day away"
    );
    node.clock.advance(20 * DAY_MS);
    assert_eq!(
        expiry().await.unwrap().users,
        0,
        "no memory is due at 21 days"
    );
    node.clock.advance(11 * DAY_MS);
    let report = expiry().await.unwrap();
    assert_eq!(
        (report.users, report.expired),
        (1, 1),
        "the turn's episodic candidate faded away at 25 days (salience 0.5, 0.02 a day)"
    );
    let kept = retention().await.unwrap();
    assert_eq!(
        (kept.users, kept.turns_removed),
        (1, 1),
        "the raw turn is past 30 days"
    );
    node.clock.advance(8 * DAY_MS);
    assert_eq!(
        expiry().await.unwrap().purged,
        1,
        "and was purged a week later"
    );
    node.clock.advance(210 * DAY_MS);
    let report = node
        .directory
        .call(&key, |r| UserMsg::Sweep(SweepScope::ALL, r))
        .await
        .unwrap();
    assert_eq!(
        (report.expired, report.purged),
        (1, 0),
        "the correction expired at 180 days"
    );
    let all = node
        .directory
        .ask_admin(&key, ListMemories { kind: None })
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].status, MemoryStatus::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_six_turns_stay_raw_across_windows_and_older_ones_are_summaries_within_retention()
{
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    let key = alice();
    for i in 0..3 {
        let text = format!("question {i} about GMV in dw_orders");
        append(&node, &key, turn(&format!("a{i}"), "s1", &text))
            .await
            .unwrap();
    }
    let seqs = |ctx: &engram_actors::model::context::MemoryContext| {
        (
            ctx.recent_turns.iter().map(|t| t.seq).collect::<Vec<_>>(),
            ctx.summaries.iter().map(|s| s.seq).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        seqs(&context(&node, &key, "s1", "GMV").await),
        (vec![0, 1, 2], vec![])
    );
    // Idle for a day: the window closed, and the last six turns are still raw.
    node.clock.advance(DAY_MS + 1);
    assert_eq!(
        seqs(&context(&node, &key, "s1", "GMV").await),
        (vec![0, 1, 2], vec![])
    );
    // The next turns open a new window; the last six of the session are raw, whichever
    // window they were written in, the older ones summarised.
    for i in 0..4 {
        append(&node, &key, turn(&format!("b{i}"), "s1", "and by week?"))
            .await
            .unwrap();
    }
    assert_eq!(
        seqs(&context(&node, &key, "s1", "GMV").await),
        (vec![1, 2, 3, 4, 5, 6], vec![0])
    );
    // Past the retention period (30 days) a turn leaves the working memory.
    node.clock.advance(29 * DAY_MS + 1);
    assert_eq!(
        seqs(&context(&node, &key, "s1", "GMV").await),
        (vec![3, 4, 5, 6], vec![])
    );
}

/// When alice's stored profile memories were last served, as storage has them.
async fn stored_access_times(node: &Node) -> Vec<Option<Timestamp>> {
    alice_stored(node, MemoryKind::Profile)
        .await
        .into_iter()
        .map(|r| r.last_accessed_at)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_memories_get_last_accessed_at_in_one_batched_write_not_one_per_read() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    let key = alice();
    append(&node, &key, turn("r1", "s1", "I prefer line charts"))
        .await
        .unwrap();
    node.clock.advance(1_000);
    let served_at = node.clock.now();
    for _ in 0..3 {
        let ctx = context(&node, &key, "s2", "line charts").await;
        assert_eq!(ctx.profile.len(), 1, "the preference is served");
    }
    assert_eq!(
        stored_access_times(&node).await,
        [None],
        "reads wrote nothing"
    );
    // The actor writes what it noted at its next tick, sweep, passivation or eviction.
    node.directory
        .call(&key, |r| UserMsg::Sweep(SweepScope::ALL, r))
        .await
        .unwrap();
    assert_eq!(stored_access_times(&node).await, [Some(served_at)]);
    let listed = alice_memories(&node, Some(MemoryKind::Profile)).await;
    assert_eq!(
        listed[0].last_accessed_at,
        Some(served_at),
        "and in the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_a_user_erases_storage_and_the_actor_cache() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    let key = alice();
    append(&node, &key, turn("r1", "s1", "I prefer pie charts"))
        .await
        .unwrap();
    append(
        &node,
        &UserKey::new("acme", "bob"),
        turn("r1", "s1", "hello"),
    )
    .await
    .unwrap();
    let ack = node.directory.ask_admin(&key, Forget).await.unwrap();
    assert!(ack.records >= 2);
    wait_until("the actor stopped", Duration::from_secs(5), || {
        node.directory.running(&key).is_none()
    })
    .await;
    let ks = Keyspace::new("engram");
    let all = node
        .store
        .read(|txn| txn.get_range(&[], &[0xff], RangeOptions::default()))
        .await
        .unwrap();
    let alice_range = ks.user("acme", "alice").all();
    assert!(all.iter().all(|(k, _)| !alice_range.contains(k)));
    assert!(
        all.iter()
            .all(|(_, v)| !v.windows(5).any(|w| w == b"alice"))
    );
    assert!(
        node.directory
            .ask_admin(&key, ListMemories { kind: None })
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !context(&node, &key, "s1", "charts")
            .await
            .text
            .contains("pie")
    );
}
