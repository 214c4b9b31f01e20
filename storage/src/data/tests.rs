//! Tests of the typed data layer on the in-memory SQLite store.

use proptest::prelude::*;

use super::archive::RetentionRule;
use super::{UserData, expired};
use crate::types::{
    Embedding, IdempotencyEntry, Intent, MemoryKind, MemoryRecord, MemoryStatus, PendingInference,
    PiiLevel, RedactionLevel, ReviewFlag, SessionRule, Timestamp, Trigger, Turn,
};

pub(crate) const RULE: SessionRule = SessionRule {
    max_turns: 20,
    idle_ms: 1_000,
    retention_ms: 1_000_000,
};
use crate::keyspace::ExpiryTarget;
use crate::{Keyspace, RangeOptions, Store, WorkQueue};

pub(crate) fn record(id: &str, kind: MemoryKind, expires_at: Option<i64>) -> MemoryRecord {
    MemoryRecord {
        memory_id: id.into(),
        tenant: "acme".into(),
        user_id: "alice".into(),
        session_id: Some("s1".into()),
        turn_id: Some(1),
        trace_id: None,
        kind,
        scope: "global".into(),
        namespace: "default".into(),
        summary_text: format!("memory {id}"),
        payload: r#"{"topic":"chart"}"#.into(),
        source_route: Some("nl2sql_query".into()),
        source_agent: None,
        confidence: 0.5,
        salience: 0.5,
        status: MemoryStatus::Candidate,
        pii_level: PiiLevel::None,
        redaction_level: RedactionLevel::Full,
        trigger: Trigger::SuccessfulTurn,
        created_at: Timestamp(1_000),
        last_seen_at: Timestamp(1_000),
        last_accessed_at: None,
        expires_at: expires_at.map(Timestamp),
        valid_from: Some(Timestamp(1_000)),
        valid_to: None,
    }
}

pub(crate) fn turn(session: &str, text: &str, at: i64) -> Turn {
    Turn {
        session_id: session.into(),
        seq: 0,
        request_id: format!("req-{text}"),
        trace_id: None,
        route: None,
        user_text: text.into(),
        assistant_text: "ok".into(),
        entities: vec!["orders".into()],
        created_at: Timestamp(at),
        written_under: None,
        pii_level: crate::types::PiiLevel::None,
    }
}

pub(crate) fn with_user<T>(
    store: &Store,
    ks: &Keyspace,
    user: &str,
    f: impl Fn(&mut UserData<'_>) -> crate::Result<T>,
) -> T {
    store
        .run_blocking(|txn| f(&mut UserData::new(txn, ks, "acme", user)))
        .unwrap()
}

#[test]
fn a_sessions_first_turn_is_its_oldest_stored_one() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    assert!(with_user(&store, &ks, "alice", |u| u.first_turn("a")).is_none());
    for i in 0..4 {
        let session = if i == 1 { "b" } else { "a" };
        with_user(&store, &ks, "alice", |u| {
            u.append_turn(&mut turn(session, &format!("t{i}"), i), RULE)
        });
    }
    let first = |s: &str| with_user(&store, &ks, "alice", |u| u.first_turn(s)).map(|t| t.user_text);
    assert_eq!(
        (first("a"), first("b")),
        (Some("t0".into()), Some("t1".into()))
    );
    with_user(&store, &ks, "alice", |u| u.clear_turns_before("a", 3));
    assert_eq!(first("a").as_deref(), Some("t3"), "the oldest turn left");
}

#[test]
fn turns_get_increasing_sequence_numbers_and_read_back_in_order() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for i in 0..10 {
        let session = if i % 2 == 0 { "a" } else { "b" };
        let row = with_user(&store, &ks, "alice", |u| {
            u.append_turn(&mut turn(session, &format!("t{i}"), i), RULE)
        });
        assert_eq!(row.turn_count as i64, i / 2 + 1);
    }
    let last = with_user(&store, &ks, "alice", |u| u.last_turns("a", 3));
    let texts: Vec<_> = last.iter().map(|t| t.user_text.as_str()).collect();
    assert_eq!(texts, ["t4", "t6", "t8"]);
    let sessions = with_user(&store, &ks, "alice", |u| u.sessions());
    assert_eq!(sessions.len(), 2);
    assert_eq!(
        (
            sessions[0].turn_count,
            sessions[0].opened_at,
            sessions[0].last_turn_at
        ),
        (5, Timestamp(0), Timestamp(8))
    );
    let header = with_user(&store, &ks, "alice", |u| u.header()).unwrap();
    assert_eq!(header.next_turn_seq, 10);

    let removed = with_user(&store, &ks, "alice", |u| u.clear_turns_before("a", 6));
    assert_eq!(removed, 3);
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.last_turns("a", 0)).len(),
        2
    );
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.delete_session("b")),
        Some(5)
    );
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.delete_session("b")),
        None
    );
    assert_eq!(with_user(&store, &ks, "alice", |u| u.sessions()).len(), 1);
}

#[test]
fn session_windows_close_after_max_turns_or_idle_time() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let rule = SessionRule {
        max_turns: 3,
        idle_ms: 100,
        retention_ms: 1_000_000,
    };
    let times = [0, 10, 20, 30, 40, 500, 510];
    let rows: Vec<_> = times
        .iter()
        .map(|&at| {
            with_user(&store, &ks, "alice", |u| {
                u.append_turn(&mut turn("s", "x", at), rule)
            })
        })
        .collect();
    let windows: Vec<_> = rows
        .iter()
        .map(|r| (r.window_start_seq, r.window_turns))
        .collect();
    // Turns 0-2 fill a window, 3-4 open the next, 5 comes after an idle gap.
    assert_eq!(
        windows,
        [(0, 1), (0, 2), (0, 3), (3, 1), (3, 2), (5, 1), (5, 2)]
    );
    assert_eq!(rows[6].turn_count, 7);
    let window = with_user(&store, &ks, "alice", |u| u.turns_from("s", 5));
    assert_eq!(window.iter().map(|t| t.seq).collect::<Vec<_>>(), [5, 6]);
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.session("s")).unwrap(),
        rows[6]
    );
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.count_choice("k", "v")),
        1
    );
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.count_choice("k", "v")),
        2
    );
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.count_choice("k", "w")),
        1
    );
}

#[test]
fn idle_windows_are_indexed_and_closed_by_the_cleanup() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let rule = SessionRule {
        max_turns: 20,
        idle_ms: 100,
        retention_ms: 1_000_000,
    };
    for at in [0, 50] {
        with_user(&store, &ks, "alice", |u| {
            u.append_turn(&mut turn("s", "x", at), rule)
        });
    }
    let due = |now| {
        store
            .read_blocking(|txn| expired(txn, &ks, Timestamp(now), 100))
            .unwrap()
    };
    assert!(
        due(150).is_empty(),
        "the idle entry moved with the second turn"
    );
    let idle = ExpiryTarget::SessionIdle {
        session_id: "s".into(),
    };
    assert_eq!(
        due(151).iter().map(|e| &e.target).collect::<Vec<_>>(),
        [&idle]
    );
    assert!(!with_user(&store, &ks, "alice", |u| u
        .close_idle_window("s", Timestamp(140))));
    assert!(with_user(&store, &ks, "alice", |u| u
        .close_idle_window("s", Timestamp(151))));
    let row = with_user(&store, &ks, "alice", |u| u.session("s")).unwrap();
    assert_eq!(
        (row.window_start_seq, row.window_turns, row.idle_at),
        (2, 0, None)
    );
    assert!(due(10_000).is_empty(), "closing removed the entry");
    let row = with_user(&store, &ks, "alice", |u| {
        u.append_turn(&mut turn("s", "y", 200), rule)
    });
    assert_eq!(
        (row.window_start_seq, row.window_turns, row.idle_at),
        (2, 1, Some(Timestamp(300)))
    );
}

#[test]
fn retention_moves_old_turns_out_of_the_session_and_reindexes_it() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let rule = SessionRule {
        max_turns: 20,
        idle_ms: 1_000_000,
        retention_ms: 100,
    };
    for at in [0, 10, 50, 200] {
        with_user(&store, &ks, "alice", |u| {
            u.append_turn(&mut turn("s", "x", at), rule)
        });
    }
    let due = |now| {
        store
            .read_blocking(|txn| expired(txn, &ks, Timestamp(now), 100))
            .unwrap()
    };
    assert!(due(100).is_empty());
    let found = due(101);
    assert_eq!(
        found[0].target,
        ExpiryTarget::Session {
            session_id: "s".into()
        }
    );
    let at = |now| RetentionRule {
        now: Timestamp(now),
        retention_ms: 100,
        archive_ms: 1_000_000,
        mode: crate::types::ArchiveMode::FullText,
    };
    // A sweep at 160 keeps turns created at or after 60.
    let removed = with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", at(160), &mut { usize::MAX })
    });
    assert_eq!(removed, 3);
    let left = with_user(&store, &ks, "alice", |u| u.turns_from("s", 0));
    assert_eq!(
        left.iter().map(|t| t.created_at.0).collect::<Vec<_>>(),
        [200]
    );
    let live = |due: Vec<super::ExpiredRef>| {
        due.into_iter()
            .filter(|e| !matches!(e.target, ExpiryTarget::Archive { .. }))
            .count()
    };
    assert_eq!(
        due(300).len(),
        0,
        "re-indexed at the oldest remaining turn plus retention"
    );
    assert_eq!(live(due(301)), 1);
    // When every turn is past retention the session goes.
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.apply_retention(
            "s",
            at(1_100),
            &mut { usize::MAX }
        )),
        1
    );
    assert!(with_user(&store, &ks, "alice", |u| u.sessions()).is_empty());
    assert_eq!(live(due(i64::MAX)), 0, "only the archive is indexed");
}

#[test]
fn expiry_index_follows_the_record_in_the_same_transaction() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let mut rec = record("m1", MemoryKind::Episodic, Some(5_000));
    with_user(&store, &ks, "alice", |u| u.put_record(&rec));
    let due = |now| {
        store
            .read_blocking(|txn| expired(txn, &ks, Timestamp(now), 100))
            .unwrap()
    };
    assert!(due(5_000).is_empty(), "not due at its own expiry instant");
    let found = due(5_001);
    assert_eq!(found.len(), 1);
    let target = ExpiryTarget::Record {
        kind: MemoryKind::Episodic,
        memory_id: "m1".into(),
    };
    assert_eq!(
        (&found[0].target, found[0].user.as_str()),
        (&target, "alice")
    );

    rec.expires_at = Some(Timestamp(9_000));
    with_user(&store, &ks, "alice", |u| u.put_record(&rec));
    assert!(
        due(8_000).is_empty(),
        "the old entry was removed with the update"
    );
    assert_eq!(due(9_001).len(), 1);

    rec.expires_at = None;
    with_user(&store, &ks, "alice", |u| u.put_record(&rec));
    assert!(due(i64::MAX).is_empty());

    rec.expires_at = Some(Timestamp(7_000));
    with_user(&store, &ks, "alice", |u| u.put_record(&rec));
    assert!(with_user(&store, &ks, "alice", |u| u
        .remove_record(MemoryKind::Episodic, "m1")));
    assert!(
        due(i64::MAX).is_empty(),
        "removing the record removes its entry"
    );
    assert!(!with_user(&store, &ks, "alice", |u| u
        .remove_record(MemoryKind::Episodic, "m1")));
}

#[test]
fn records_intents_embeddings_and_idempotency_round_trip() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let profile = record("p1", MemoryKind::Profile, None);
    let correction = record("c1", MemoryKind::Correction, Some(10));
    with_user(&store, &ks, "alice", |u| {
        u.put_record(&profile)?;
        u.put_record(&correction)?;
        u.put_embedding(
            "p1",
            &Embedding {
                model: "e5".into(),
                vector: vec![0.5, -0.25],
            },
        )?;
        for (version, active) in [(20, false), (10, false), (30, true)] {
            u.put_intent(&Intent {
                intent_type: "renewal".into(),
                version: Timestamp(version),
                fields: "{}".into(),
                active,
                source_turn: None,
            })?;
        }
        u.put_idempotency(
            "req-1",
            &IdempotencyEntry {
                at: Timestamp(1),
                response: vec![1, 2, 3],
            },
        )
    });
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u
            .record(MemoryKind::Profile, "p1")),
        Some(profile.clone())
    );
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.records(MemoryKind::Profile)),
        vec![profile]
    );
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.records(MemoryKind::Correction)),
        vec![correction]
    );
    assert!(with_user(&store, &ks, "alice", |u| u.records(MemoryKind::Episodic)).is_empty());
    let versions: Vec<_> = with_user(&store, &ks, "alice", |u| u.intents("renewal"))
        .iter()
        .map(|i| i.version.0)
        .collect();
    assert_eq!(
        versions,
        [10, 20, 30],
        "intent versions are kept, oldest first"
    );
    let embeddings = with_user(&store, &ks, "alice", |u| u.embeddings());
    assert_eq!(
        embeddings,
        vec![(
            "p1".to_string(),
            Embedding {
                model: "e5".into(),
                vector: vec![0.5, -0.25]
            }
        )]
    );
    let idem = with_user(&store, &ks, "alice", |u| u.idempotency("req-1")).unwrap();
    assert_eq!(idem.response, [1, 2, 3]);
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.idempotency("req-2")),
        None
    );
}

#[test]
fn forgetting_a_user_leaves_no_key_of_theirs_anywhere() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for user in ["alice", "alicia", "bob"] {
        with_user(&store, &ks, user, |u| {
            u.append_turn(&mut turn("s1", "hello", 1), RULE)?;
            u.put_flag(&ReviewFlag {
                flag_id: "m2".into(),
                memory_id: "m2".into(),
                conflicts_with: "m1".into(),
                reason: "test".into(),
                created_at: Timestamp(1),
            })?;
            u.count_choice("chart_type", "line")?;
            for (id, kind, expires) in [
                ("m1", MemoryKind::Profile, Some(100)),
                ("m2", MemoryKind::Episodic, Some(200)),
                ("m3", MemoryKind::Correction, None),
            ] {
                u.put_record(&MemoryRecord {
                    user_id: user.into(),
                    ..record(id, kind, expires)
                })?;
            }
            u.put_embedding(
                "m1",
                &Embedding {
                    model: "e5".into(),
                    vector: vec![1.0],
                },
            )?;
            u.put_pending(
                "m2",
                &PendingInference {
                    kind: MemoryKind::Episodic,
                    text: "hello".into(),
                    queued_at: Timestamp(1),
                },
            )?;
            u.put_queued(
                "s1/1",
                &crate::types::PendingDistillation {
                    task: crate::types::DistilTask::Intent,
                    session_id: "s1".into(),
                    turn_seq: 1,
                    text: "hello".into(),
                    attempts: 0,
                    queued_at: Timestamp(1),
                },
            )?;
            u.put_intent(&Intent {
                intent_type: "x".into(),
                version: Timestamp(1),
                fields: "{}".into(),
                active: true,
                source_turn: None,
            })?;
            u.put_idempotency(
                "r1",
                &IdempotencyEntry {
                    at: Timestamp(1),
                    response: vec![],
                },
            )
        });
    }
    let report = with_user(&store, &ks, "alice", |u| u.forget());
    assert_eq!(
        (report.records, report.expiry_entries),
        (3, 4),
        "2 records, a session's retention and its idle window"
    );

    // Scan the whole store: no key may name alice, and the other users are intact.
    let all = store
        .read_blocking(|txn| txn.get_range(&[], &[0xff; 16], RangeOptions::default()))
        .unwrap();
    let alice_keys = ks.user("acme", "alice").all();
    for (key, value) in &all {
        assert!(!alice_keys.contains(key), "a key of alice is left: {key:?}");
        if let Some((_, _, user, _)) = ks.parse_expiry(key) {
            assert_ne!(user, "alice", "an expiry entry of alice is left");
        }
        for queue in [WorkQueue::Embedding, WorkQueue::Distillation] {
            if let Some((_, user)) = ks.parse_pending_user(queue, key) {
                assert_ne!(user, "alice", "alice is left in a work index");
            }
        }
        assert!(
            !value.windows(5).any(|w| w == b"alice"),
            "a value names alice: {key:?}"
        );
    }
    let count = |user: &str| {
        all.iter()
            .filter(|(k, _)| ks.user("acme", user).all().contains(k))
            .count()
    };
    assert_eq!(count("alicia"), count("bob"));
    assert!(count("bob") >= 8);
    let due = store
        .read_blocking(|txn| expired(txn, &ks, Timestamp(i64::MAX), 100))
        .unwrap();
    assert_eq!(due.len(), 8, "alicia's and bob's expiry entries stay");
}

proptest! {
    #[test]
    fn memory_records_round_trip(
        summary in "\\PC{0,80}", payload in "\\PC{0,80}", confidence in 0.0f32..1.0, salience in 0.0f32..1.0,
        expires in proptest::option::of(any::<i64>()), valid_to in proptest::option::of(any::<i64>()),
        kind in prop_oneof![Just(MemoryKind::Working), Just(MemoryKind::Profile), Just(MemoryKind::Episodic), Just(MemoryKind::Correction)],
        status in prop_oneof![Just(MemoryStatus::Candidate), Just(MemoryStatus::Active), Just(MemoryStatus::Suppressed), Just(MemoryStatus::Expired), Just(MemoryStatus::Deleted)],
        pii in prop_oneof![Just(PiiLevel::None), Just(PiiLevel::Low), Just(PiiLevel::Medium), Just(PiiLevel::High)],
        redaction in prop_oneof![Just(RedactionLevel::Full), Just(RedactionLevel::Summary), Just(RedactionLevel::ReferenceOnly)],
    ) {
        let mut rec = record("m", kind, expires);
        rec.summary_text = summary;
        rec.payload = payload;
        rec.confidence = confidence;
        rec.salience = salience;
        rec.status = status;
        rec.pii_level = pii;
        rec.redaction_level = redaction;
        rec.valid_to = valid_to.map(Timestamp);
        let bytes = crate::codec::encode("memory record", &rec)?;
        prop_assert_eq!(crate::codec::decode::<MemoryRecord>("memory record", &bytes)?, rec);
    }
}

mod ciphers;
mod sealed;
mod users;
