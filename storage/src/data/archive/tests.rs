//! Tests of the archive tier: retention moves turns here, the archive purges them later,
//! within a byte budget per transaction, sealed like the live turns, and gone on forget.

use super::RetentionRule;
use crate::crypto::{MasterKeys, is_sealed};
use crate::data::UserData;
use crate::data::tests::{RULE, turn, with_user};
use crate::keyspace::ExpiryTarget;
use crate::model::Timestamp;
use crate::{Keyspace, RangeOptions, Store, data::expired};

const DAY: i64 = 86_400_000;

fn rule(now: i64) -> RetentionRule {
    RetentionRule {
        now: Timestamp(now),
        retention_ms: 30 * DAY,
        archive_ms: 1826 * DAY,
    }
}

fn appended(store: &Store, ks: &Keyspace, session: &str, text: &str, at: i64) {
    with_user(store, ks, "alice", |u| {
        u.append_turn(&mut turn(session, text, at), RULE)
    });
}

fn archive_targets(store: &Store, ks: &Keyspace, now: i64) -> Vec<(i64, ExpiryTarget)> {
    store
        .read_blocking(|txn| expired(txn, ks, Timestamp(now), 100))
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.target, ExpiryTarget::Archive { .. }))
        .map(|e| (e.expires_at.0, e.target))
        .collect()
}

#[test]
fn retention_moves_turns_to_the_archive_which_purges_them_after_the_archive_period() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for (i, at) in [0, DAY, 40 * DAY].into_iter().enumerate() {
        appended(&store, &ks, "s", &format!("turn {i}"), at);
    }
    let moved = with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", rule(35 * DAY), &mut { usize::MAX })
    });
    assert_eq!(moved, 2);
    let live = with_user(&store, &ks, "alice", |u| u.turns_from("s", 0));
    assert_eq!(live.len(), 1, "only the turn within 30 days stays live");
    let archived = with_user(&store, &ks, "alice", |u| {
        u.archived_turns(Some("s"), None, 0)
    });
    assert_eq!(
        archived
            .iter()
            .map(|a| (a.turn.user_text.as_str(), a.turn.seq, a.archived_at.0))
            .collect::<Vec<_>>(),
        [("turn 0", 0, 35 * DAY), ("turn 1", 1, 35 * DAY)]
    );
    let rows = with_user(&store, &ks, "alice", |u| u.archive_rows());
    assert_eq!((rows[0].turns, rows[0].purge_at.0), (2, 1826 * DAY));
    assert!(
        archive_targets(&store, &ks, 1826 * DAY).is_empty(),
        "kept for the archive period from the turn's creation"
    );
    assert_eq!(
        archive_targets(&store, &ks, 1826 * DAY + 1),
        [(
            1826 * DAY,
            ExpiryTarget::Archive {
                session_id: "s".into()
            }
        )]
    );

    // The first archived turn is due; the second a day later.
    let purged = with_user(&store, &ks, "alice", |u| {
        u.purge_archive("s", rule(1826 * DAY + 1))
    });
    assert_eq!(purged, 1);
    let left = with_user(&store, &ks, "alice", |u| u.archived_turns(None, None, 0));
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].turn.user_text, "turn 1");
    assert_eq!(
        archive_targets(&store, &ks, i64::MAX)[0].0,
        1827 * DAY,
        "re-indexed at the oldest remaining archived turn"
    );
    let purged = with_user(&store, &ks, "alice", |u| {
        u.purge_archive("s", rule(1827 * DAY + 1))
    });
    assert_eq!(purged, 1);
    assert!(with_user(&store, &ks, "alice", |u| u.archive_rows()).is_empty());
    assert!(archive_targets(&store, &ks, i64::MAX).is_empty());
}

#[test]
fn a_session_moved_whole_leaves_and_its_archive_grows_across_runs() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    appended(&store, &ks, "s", "first", 0);
    with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", rule(31 * DAY), &mut { usize::MAX })
    });
    assert!(with_user(&store, &ks, "alice", |u| u.sessions()).is_empty());
    appended(&store, &ks, "s", "second", 40 * DAY);
    with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", rule(71 * DAY), &mut { usize::MAX })
    });
    let rows = with_user(&store, &ks, "alice", |u| u.archive_rows());
    assert_eq!((rows[0].turns, rows[0].purge_at.0), (2, 1826 * DAY));
    assert_eq!(archive_targets(&store, &ks, i64::MAX).len(), 1);
    // Paging by session and sequence number.
    appended(&store, &ks, "t", "other session", 41 * DAY);
    with_user(&store, &ks, "alice", |u| {
        u.apply_retention("t", rule(72 * DAY), &mut { usize::MAX })
    });
    let page = |after: Option<(&str, u64)>| {
        with_user(&store, &ks, "alice", |u| u.archived_turns(None, after, 2))
            .into_iter()
            .map(|a| a.turn.user_text)
            .collect::<Vec<_>>()
    };
    assert_eq!(page(None), ["first", "second"]);
    assert_eq!(page(Some(("s", 1))), ["other session"]);
    assert!(page(Some(("t", 2))).is_empty());
}

#[test]
fn retention_moves_at_most_its_budget_and_leaves_the_rest_due() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for at in 0..5 {
        appended(&store, &ks, "s", "x", at);
    }
    let moved = with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", rule(31 * DAY), &mut 1)
    });
    assert_eq!(moved, 1, "at least one turn, then the budget is spent");
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u.apply_retention(
            "s",
            rule(31 * DAY),
            &mut 0
        )),
        1
    );
    let due = store
        .read_blocking(|txn| expired(txn, &ks, Timestamp(31 * DAY), 100))
        .unwrap();
    assert!(
        due.iter().any(|e| e.target
            == ExpiryTarget::Session {
                session_id: "s".into()
            }),
        "the session is still due"
    );
    let moved = with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", rule(31 * DAY), &mut { usize::MAX })
    });
    assert_eq!(moved, 3);
    let rows = with_user(&store, &ks, "alice", |u| u.archive_rows());
    assert_eq!(rows[0].turns, 5);
}

#[test]
fn the_archive_is_sealed_and_forgetting_the_user_removes_it_and_its_index() {
    let store = Store::in_memory().unwrap();
    let keys = MasterKeys::new([(1, [2u8; 32])]).unwrap();
    let ks = Keyspace::new("engram").with_master_keys(keys);
    appended(&store, &ks, "s", "archived-secret", 0);
    with_user(&store, &ks, "bob", |u| {
        u.append_turn(&mut turn("s", "bob's", 0), RULE)
    });
    for user in ["alice", "bob"] {
        with_user(&store, &ks, user, |u| {
            u.apply_retention("s", rule(31 * DAY), &mut { usize::MAX })
        });
    }
    let alice = ks.user("acme", "alice");
    let all = alice.all_archived_turns();
    let rows = store
        .read_blocking(|txn| txn.get_range(&all.begin, &all.end, RangeOptions::default()))
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(is_sealed(&rows[0].1), "sealed with the user's data key");
    assert!(!rows[0].1.windows(6).any(|w| w == b"secret"));
    let blind = store.read_blocking(|txn| {
        UserData::new(txn, &Keyspace::new("engram"), "acme", "alice").archived_turns(None, None, 0)
    });
    assert!(blind.is_err(), "does not open without the keys");

    let report = with_user(&store, &ks, "alice", |u| u.forget());
    assert_eq!(report.expiry_entries, 1, "the archive's index entry");
    let everything = ks.all();
    let left = store
        .read_blocking(|txn| {
            txn.get_range(&everything.begin, &everything.end, RangeOptions::default())
        })
        .unwrap();
    assert!(left.iter().all(|(k, _)| !alice.all().contains(k)));
    let targets = archive_targets(&store, &ks, i64::MAX);
    assert_eq!(targets.len(), 1, "bob's archive stays");
    let due = store
        .read_blocking(|txn| expired(txn, &ks, Timestamp(i64::MAX), 100))
        .unwrap();
    assert!(due.iter().all(|e| e.user == "bob"));
}
