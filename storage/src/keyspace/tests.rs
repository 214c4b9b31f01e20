//! Property tests: tuple keys sort the way the data layer relies on.

use proptest::prelude::*;

use super::{ExpiryTarget, Keyspace};
use crate::types::{MemoryKind, Timestamp};

fn ks() -> Keyspace {
    Keyspace::new("engram")
}

proptest! {
    #[test]
    fn turns_sort_by_session_then_sequence(
        s1 in "[a-z0-9-]{0,12}", s2 in "[a-z0-9-]{0,12}", q1: u64, q2: u64,
    ) {
        let user = ks().user("t", "u");
        let (k1, k2) = (user.turn(&s1, q1), user.turn(&s2, q2));
        prop_assert_eq!(k1.cmp(&k2), (s1.as_bytes(), q1).cmp(&(s2.as_bytes(), q2)));
        prop_assert!(user.turns(&s1).contains(&k1));
        prop_assert_eq!(user.turns(&s1).contains(&k2), s1 == s2);
    }

    #[test]
    fn sessions_never_overlap_when_one_id_prefixes_another(base in "[a-z]{1,8}", ext in "[a-z]{1,8}", q: u64) {
        let user = ks().user("t", "u");
        let longer = format!("{base}{ext}");
        prop_assert!(!user.turns(&base).contains(&user.turn(&longer, q)));
        prop_assert!(!ks().user("t", &base).all().contains(&ks().user("t", &longer).header()));
    }

    #[test]
    fn intent_versions_and_expiry_times_sort_numerically(a: i64, b: i64) {
        let user = ks().user("t", "u");
        prop_assert_eq!(user.intent("renewal", Timestamp(a)).cmp(&user.intent("renewal", Timestamp(b))), a.cmp(&b));
        let target = ExpiryTarget::Record { kind: MemoryKind::Profile, memory_id: "m".into() };
        let (ea, eb) = (ks().expiry(Timestamp(a), "t", "u", &target), ks().expiry(Timestamp(b), "t", "u", &target));
        prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
        prop_assert_eq!(ks().expiries_before(Timestamp(b)).contains(&ea), a < b);
    }

    #[test]
    fn expiry_keys_round_trip(at: i64, tenant in "\\PC{0,10}", user in "\\PC{0,10}", id in "\\PC{0,10}", which in 0..4u8) {
        let target = match which {
            0 => ExpiryTarget::Session { session_id: id },
            1 => ExpiryTarget::SessionIdle { session_id: id },
            2 => ExpiryTarget::Archive { session_id: id },
            _ => ExpiryTarget::Record { kind: MemoryKind::Episodic, memory_id: id },
        };
        let key = ks().expiry(Timestamp(at), &tenant, &user, &target);
        prop_assert_eq!(ks().parse_expiry(&key), Some((Timestamp(at), tenant, user, target)));
    }

    #[test]
    fn every_user_key_is_inside_the_user_range_and_the_keyspace(
        tenant in "\\PC{0,10}", user in "\\PC{0,10}", id in "\\PC{0,10}", seq: u64, mac: [u8; 32],
    ) {
        let keys = ks().user(&tenant, &user);
        let all = keys.all();
        for key in [
            keys.header(), keys.session(&id), keys.turn(&id, seq), keys.record(MemoryKind::Profile, &id),
            keys.intent(&id, Timestamp(seq as i64)), keys.embedding(&id), keys.idempotency(&id),
            keys.data_key(), keys.anchor(&mac), keys.archive(&id), keys.archived_turn(&id, seq),
            keys.archived_digest(&id, seq),
        ] {
            prop_assert!(all.contains(&key));
            prop_assert!(ks().all().contains(&key));
            prop_assert!(!Keyspace::new("other").all().contains(&key));
        }
        prop_assert_eq!(keys.parse_turn(&keys.turn(&id, seq)), Some((id.clone(), seq)));
        prop_assert_eq!(keys.parse_archived_turn(&keys.archived_turn(&id, seq)), Some((id.clone(), seq)));
        prop_assert_eq!(keys.parse_embedding(&keys.embedding(&id)), Some(id));
    }

    #[test]
    fn archive_rows_archived_turns_and_live_turns_never_overlap(id in "[a-z0-9-]{0,12}", seq: u64, mac: [u8; 32]) {
        let user = ks().user("t", "u");
        let archived = user.archived_turn(&id, seq);
        prop_assert!(user.archived_turns(&id).contains(&archived));
        prop_assert!(user.all_archived_turns().contains(&archived));
        prop_assert!(!user.archives().contains(&archived));
        prop_assert!(!user.all_archived_turns().contains(&user.archive(&id)));
        prop_assert!(!user.turns(&id).contains(&archived));
        prop_assert!(!user.all_archived_turns().contains(&user.turn(&id, seq)));
        prop_assert!(user.anchors().contains(&user.anchor(&mac)));
        prop_assert_eq!(user.parse_turn(&archived), None);
        let digest = user.archived_digest(&id, seq);
        prop_assert!(user.archived_digests(&id).contains(&digest));
        prop_assert!(user.all_archived_digests().contains(&digest));
        prop_assert!(!user.all_archived_turns().contains(&digest));
        prop_assert!(!user.all_archived_digests().contains(&archived));
        prop_assert!(!user.archives().contains(&digest));
    }
}

#[test]
fn records_of_one_kind_are_contiguous() {
    let user = ks().user("t", "u");
    for kind in MemoryKind::ALL {
        let range = user.records(kind);
        for other in MemoryKind::ALL {
            assert_eq!(range.contains(&user.record(other, "m1")), kind == other);
        }
        assert!(user.all_records().contains(&user.record(kind, "m1")));
    }
    let kinds: Vec<_> = MemoryKind::ALL
        .iter()
        .map(|k| user.record(*k, ""))
        .collect();
    assert!(
        kinds.windows(2).all(|w| w[0] < w[1]),
        "MemoryKind::ALL is in key order"
    );
}

#[test]
fn cluster_keys_parse_and_stay_out_of_user_ranges() {
    let ks = ks();
    assert_eq!(ks.parse_node(&ks.node("node-1")).as_deref(), Some("node-1"));
    assert!(ks.nodes().contains(&ks.node("n")));
    assert!(ks.shards().contains(&ks.shard(1023)));
    assert!(!ks.user("t", "u").all().contains(&ks.shard(1)));
    assert!(ks.shard(2) < ks.shard(10), "shards sort numerically");
}
