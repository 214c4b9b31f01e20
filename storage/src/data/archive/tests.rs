//! Tests of the archive tier: retention moves turns here, the archive purges them later,
//! within a byte budget per transaction, sealed like the live turns, and gone on forget.

use sha2::{Digest as _, Sha256};

use super::{RetentionRule, Role};
use crate::crypto::{MasterKeys, is_sealed};
use crate::data::UserData;
use crate::data::tests::{RULE, turn, with_user};
use crate::keyspace::ExpiryTarget;
use crate::types::{ArchiveMode, Timestamp};
use crate::{Keyspace, RangeOptions, Store, data::expired};

const DAY: i64 = 86_400_000;

fn rule(now: i64) -> RetentionRule {
    RetentionRule {
        now: Timestamp(now),
        retention_ms: 30 * DAY,
        archive_ms: 1826 * DAY,
        mode: ArchiveMode::FullText,
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

fn summary(text: &str) -> crate::types::TurnSummary {
    crate::types::TurnSummary {
        text: text.into(),
        model: "test".into(),
        created_at: Timestamp(0),
    }
}

#[test]
fn with_the_archive_off_retention_deletes_old_turns_and_their_summaries_and_keeps_nothing() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for (i, at) in [0, DAY, 40 * DAY].into_iter().enumerate() {
        appended(&store, &ks, "s", &format!("turn {i}"), at);
    }
    with_user(&store, &ks, "alice", |u| {
        for seq in 0..3 {
            assert!(u.put_summary("s", seq, &summary(&format!("summary {seq}")))?);
        }
        Ok(())
    });
    let off = RetentionRule {
        mode: ArchiveMode::Off,
        ..rule(35 * DAY)
    };
    let removed = with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", off, &mut { usize::MAX })
    });
    assert_eq!(removed, 2);
    let live = with_user(&store, &ks, "alice", |u| u.turns_from("s", 0));
    assert_eq!(live.len(), 1, "only the turn within 30 days stays");
    let summaries = with_user(&store, &ks, "alice", |u| u.summaries("s"));
    assert_eq!(
        summaries.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        [2],
        "the summaries of deleted turns go with them"
    );
    let user = ks.user("acme", "alice");
    for range in [user.all_archived_turns(), user.all_archived_digests()] {
        let rows = store
            .read_blocking(|txn| txn.get_range(&range.begin, &range.end, RangeOptions::default()))
            .unwrap();
        assert!(rows.is_empty(), "nothing archived");
    }
    assert!(with_user(&store, &ks, "alice", |u| u.archive_rows()).is_empty());
    assert!(archive_targets(&store, &ks, i64::MAX).is_empty());
}

#[test]
fn with_digests_the_archive_keeps_keyed_hashes_an_auditor_can_match_but_no_text() {
    let store = Store::in_memory().unwrap();
    let keys = MasterKeys::new([(1, [2u8; 32])]).unwrap();
    let ks = Keyspace::new("engram").with_master_keys(keys);
    let said = "my order 8841 never arrived";
    appended(&store, &ks, "s", said, 0);
    appended(&store, &ks, "s", "and the refund?", DAY);
    let digests = RetentionRule {
        mode: ArchiveMode::Digests,
        ..rule(35 * DAY)
    };
    let moved = with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", digests, &mut { usize::MAX })
    });
    assert_eq!(moved, 2);
    assert!(with_user(&store, &ks, "alice", |u| u.sessions()).is_empty());
    let kept = with_user(&store, &ks, "alice", |u| u.archived_digests(None, None, 0));
    assert_eq!(
        kept.iter()
            .map(|d| (d.seq, d.created_at.0, d.key_id, d.user_chars))
            .collect::<Vec<_>>(),
        [(0, 0, Some(1), 27), (1, DAY, Some(1), 15)]
    );
    assert!(
        with_user(&store, &ks, "alice", |u| u.archived_turns(None, None, 0)).is_empty(),
        "no full text"
    );
    // The stored bytes hold no text, even opened.
    let user = ks.user("acme", "alice");
    let range = user.all_archived_digests();
    let rows = store
        .read_blocking(|txn| txn.get_range(&range.begin, &range.end, RangeOptions::default()))
        .unwrap();
    assert!(rows.iter().all(|(_, v)| is_sealed(v)));
    let opened = format!("{kept:?}");
    assert!(!opened.contains("8841") && !opened.contains("refund"));

    // An auditor holding a text checks whether it was said (whitespace aside), and when.
    let matched = with_user(&store, &ks, "alice", |u| {
        u.match_archived(Role::User, "  my order 8841\tnever arrived ")
    });
    assert_eq!(matched.len(), 1);
    assert_eq!((matched[0].seq, matched[0].created_at.0), (0, 0));
    for (role, text) in [
        (Role::User, "my order 8842 never arrived"),
        (Role::Assistant, said),
    ] {
        let none = with_user(&store, &ks, "alice", |u| u.match_archived(role, text));
        assert!(none.is_empty(), "{role:?} {text:?} matched");
    }
    // Another tenant's key gives other hashes.
    let other = store
        .run_blocking(|txn| {
            UserData::new(txn, &ks, "globex", "alice").dialogue_hash(Role::User, said, Some(1))
        })
        .unwrap();
    assert_ne!(other.0, kept[0].user_hash);

    // The archive period purges digests as it purges turns.
    let rows = with_user(&store, &ks, "alice", |u| u.archive_rows());
    assert_eq!((rows[0].turns, rows[0].purge_at.0), (2, 1826 * DAY));
    let purged = with_user(&store, &ks, "alice", |u| {
        u.purge_archive(
            "s",
            RetentionRule {
                now: Timestamp(1826 * DAY + 1),
                ..digests
            },
        )
    });
    assert_eq!(purged, 1);
    let purged = with_user(&store, &ks, "alice", |u| {
        u.purge_archive(
            "s",
            RetentionRule {
                now: Timestamp(1827 * DAY + 1),
                ..digests
            },
        )
    });
    assert_eq!(purged, 1);
    assert!(with_user(&store, &ks, "alice", |u| u.archive_rows()).is_empty());
    assert!(archive_targets(&store, &ks, i64::MAX).is_empty());
}

#[test]
fn without_a_key_service_digests_are_plain_sha256_and_say_so() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    appended(&store, &ks, "s", "hello", 0);
    let digests = RetentionRule {
        mode: ArchiveMode::Digests,
        ..rule(35 * DAY)
    };
    with_user(&store, &ks, "alice", |u| {
        u.apply_retention("s", digests, &mut { usize::MAX })
    });
    let kept = with_user(&store, &ks, "alice", |u| u.archived_digests(None, None, 0));
    assert_eq!(kept[0].key_id, None);
    let expected: [u8; 32] = Sha256::digest(b"dialogue\0user\0hello").into();
    assert_eq!(kept[0].user_hash, expected);
    assert_eq!(
        with_user(&store, &ks, "alice", |u| u
            .match_archived(Role::User, "hello"))
        .len(),
        1
    );
}
