//! The validation gate on the in-memory SQLite store, with explicit times (the injected
//! clock of the actors passes `now` the same way).

use engram_inference::distil::{Distilled, Priority};
use engram_storage::data::UserData;
use engram_storage::types::{Intent, Timestamp};
use engram_storage::{Keyspace, Store};

use super::*;

const MINUTE: i64 = 60_000;
const RULES: GateRules = GateRules {
    ttl_ms: 30 * 24 * 60 * MINUTE,
    replace_within_ms: 10 * MINUTE,
    max_versions: 100,
};

fn types() -> Vec<String> {
    KEY_INTENT_TYPES.iter().map(|t| (*t).to_owned()).collect()
}

fn intent(intent_type: &str, target: &str) -> Distilled {
    Distilled {
        intent_type: intent_type.into(),
        target: target.into(),
        priority: Priority::Medium,
        key_reason: "test".into(),
    }
}

/// Runs `f` on alice's data in one transaction.
fn with_alice<T>(store: &Store, f: impl FnOnce(&mut UserData<'_>) -> T) -> T {
    let ks = Keyspace::new("engram");
    let mut f = Some(f);
    store
        .run_blocking(|txn| {
            let mut u = UserData::new(txn, &ks, "acme", "alice");
            Ok(f.take().map(|f| f(&mut u)))
        })
        .unwrap()
        .unwrap()
}

fn passed(
    store: &Store,
    at: i64,
    d: &Distilled,
    source: Source,
    message: &str,
    attempts: u32,
) -> Verdict {
    with_alice(store, |u| {
        gate(
            u,
            Timestamp(at),
            Timestamp(at),
            d,
            source,
            message,
            Some(1),
            &types(),
            attempts,
            &RULES,
        )
        .unwrap()
    })
}

fn versions(store: &Store, intent_type: &str) -> Vec<Intent> {
    with_alice(store, |u| u.intents(intent_type).unwrap())
}

#[test]
fn a_result_is_written_in_the_seeds_shape_with_its_ttl_and_no_intent_writes_nothing() {
    let store = Store::in_memory().unwrap();
    let verdict = passed(
        &store,
        1_000,
        &intent("appointment", "明天体检"),
        Source::Rule,
        "帮我预约明天体检",
        0,
    );
    assert!(matches!(verdict, Verdict::Written(_)));
    let stored = versions(&store, "appointment");
    assert_eq!(stored.len(), 1);
    let fields: Value = serde_json::from_str(&stored[0].fields).unwrap();
    assert_eq!(fields["business_intent"]["intent_type"], "appointment");
    assert_eq!(fields["business_intent"]["target"], "明天体检");
    assert_eq!(fields["decision_basis"]["priority"], "medium");
    // 1970-01-02 at 09:00: tomorrow, at the hour of a day named without one.
    assert_eq!(
        fields["target_value"],
        json!({"time": "1970-01-02T09:00:00Z", "location": null, "what": "明天体检"})
    );
    assert_eq!(fields["source"], "rule");
    assert_eq!(fields["expires_at"], 1_000 + RULES.ttl_ms);
    assert_eq!(stored[0].source_turn, Some(1));
    let none = passed(&store, 2_000, &intent("none", ""), Source::Model, "你好", 0);
    assert_eq!(none, Verdict::Dropped("no intent"));
    let unknown = passed(&store, 2_000, &intent("refund", "x"), Source::Model, "x", 0);
    assert_eq!(unknown, Verdict::Dropped("unknown type"));
}

#[test]
fn a_renewal_without_a_target_is_distilled_once_more_then_dropped() {
    let store = Store::in_memory().unwrap();
    let bare = intent("subscription_renewal", " ");
    assert_eq!(
        passed(&store, 1, &bare, Source::Model, "续一下", 0),
        Verdict::Retry
    );
    assert_eq!(
        passed(&store, 2, &bare, Source::Model, "续一下", 1),
        Verdict::Dropped("missing target")
    );
    assert!(versions(&store, "subscription_renewal").is_empty());
    // A complaint needs no target.
    let complaint = intent("complaint", "");
    assert!(matches!(
        passed(&store, 3, &complaint, Source::Model, "太差了", 0),
        Verdict::Written(_)
    ));
}

#[test]
fn the_same_type_within_ten_minutes_keeps_only_the_latest_version() {
    let store = Store::in_memory().unwrap();
    let t0 = 1_000_000;
    passed(
        &store,
        t0,
        &intent("appointment", "体检"),
        Source::Rule,
        "m",
        0,
    );
    let Verdict::Written(second) = passed(
        &store,
        t0 + 9 * MINUTE,
        &intent("appointment", "明天上午体检"),
        Source::Model,
        "m",
        0,
    ) else {
        panic!("not written");
    };
    assert_eq!(second.replaced, Some(Timestamp(t0)));
    let stored = versions(&store, "appointment");
    assert_eq!(stored.len(), 1, "the earlier version was replaced");
    assert_eq!(target_of(&stored[0]), "明天上午体检");
    assert!(stored[0].active);
    // Past the window a new version is added and the earlier one kept, inactive.
    let Verdict::Written(third) = passed(
        &store,
        t0 + 20 * MINUTE,
        &intent("appointment", "周五洗牙"),
        Source::Model,
        "m",
        0,
    ) else {
        panic!("not written");
    };
    assert_eq!(third.replaced, None);
    let stored = versions(&store, "appointment");
    assert_eq!(stored.len(), 2);
    assert!(!stored[0].active && stored[1].active);
}

#[test]
fn a_cancellation_deactivates_the_matching_renewal_only() {
    let store = Store::in_memory().unwrap();
    passed(
        &store,
        1,
        &intent("subscription_renewal", "视频会员"),
        Source::Rule,
        "m",
        0,
    );
    // Another product: the renewal stays.
    let Verdict::Written(other) = passed(
        &store,
        20 * MINUTE,
        &intent("subscription_cancel", "健身卡"),
        Source::Rule,
        "m",
        0,
    ) else {
        panic!("not written");
    };
    assert_eq!(other.renewal_deactivated, None);
    assert!(versions(&store, "subscription_renewal")[0].active);
    let Verdict::Written(cancel) = passed(
        &store,
        40 * MINUTE,
        &intent("subscription_cancel", "取消视频会员自动续费"),
        Source::Rule,
        "m",
        0,
    ) else {
        panic!("not written");
    };
    assert_eq!(cancel.renewal_deactivated, Some(Timestamp(1)));
    assert!(!versions(&store, "subscription_renewal")[0].active);
    assert!(target_matches("Premium plan", "premium streaming"));
    assert!(!target_matches("gym membership", "video subscription"));
}

#[test]
fn personal_data_raises_protection_flags_for_compliance_and_is_never_stored_in_clear() {
    let store = Store::in_memory().unwrap();
    let message = "我的身份证号是110101199003074514，帮我预约明天体检";
    let d = intent("appointment", "明天体检 110101199003074514");
    let Verdict::Written(gated) = passed(&store, 1, &d, Source::Model, message, 0) else {
        panic!("not written");
    };
    assert!(gated.flagged);
    let stored = &versions(&store, "appointment")[0];
    let fields: Value = serde_json::from_str(&stored.fields).unwrap();
    assert_eq!(fields["protection"], "high");
    assert_eq!(fields["compliance_review"], true);
    assert_eq!(
        fields["identity_anchor"],
        json!({"user_id": "alice", "anchor": "resident-id", "age": null, "health_condition": []})
    );
    assert!(fields.get("sealed").is_none(), "no health condition");
    assert!(
        !stored.fields.contains("110101199003074514"),
        "{}",
        stored.fields
    );
    // Without personal data, no flag.
    let Verdict::Written(plain) = passed(
        &store,
        20 * MINUTE,
        &intent("complaint", "快递"),
        Source::Model,
        "快递太慢",
        0,
    ) else {
        panic!("not written");
    };
    assert!(!plain.flagged);
}

#[test]
fn a_version_past_its_ttl_is_not_served_as_a_key_intent() {
    let store = Store::in_memory().unwrap();
    passed(
        &store,
        1,
        &intent("complaint", "快递"),
        Source::Rule,
        "m",
        0,
    );
    passed(
        &store,
        2,
        &intent("appointment", "体检"),
        Source::Rule,
        "m",
        0,
    );
    let served = |at: i64| {
        with_alice(&store, |u| key_intents(u, Timestamp(at)).unwrap())
            .into_iter()
            .map(|i| i.intent_type)
            .collect::<Vec<_>>()
    };
    assert_eq!(served(10), ["appointment", "complaint"], "newest first");
    assert!(served(2 + RULES.ttl_ms).is_empty());
}

#[test]
fn the_sweep_removes_versions_past_their_ttl_with_their_expiry_entries() {
    let store = Store::in_memory().unwrap();
    let ks = Keyspace::new("engram");
    passed(
        &store,
        1,
        &intent("complaint", "快递"),
        Source::Rule,
        "m",
        0,
    );
    // Replaced within the window: the replaced version's entry goes with it.
    passed(
        &store,
        2,
        &intent("complaint", "快递太慢"),
        Source::Model,
        "m",
        0,
    );
    let entries = || {
        let range = ks.expiries_before(Timestamp(i64::MAX));
        store
            .read_blocking(|txn| {
                txn.get_range(
                    &range.begin,
                    &range.end,
                    engram_storage::RangeOptions::default(),
                )
            })
            .unwrap()
            .iter()
            .filter_map(|(k, _)| ks.parse_expiry(k))
            .collect::<Vec<_>>()
    };
    assert_eq!(entries().len(), 1, "one entry for the one version left");
    let early = with_alice(&store, |u| {
        u.expire_intents(Timestamp(RULES.ttl_ms)).unwrap()
    });
    assert_eq!(early, 0, "not yet due");
    let due = with_alice(&store, |u| {
        u.expire_intents(Timestamp(2 + RULES.ttl_ms)).unwrap()
    });
    assert_eq!(due, 1);
    assert!(versions(&store, "complaint").is_empty());
    assert!(entries().is_empty(), "its expiry entry went with it");
}

#[test]
fn a_cancellation_naming_no_subscription_is_recorded_and_deactivates_the_renewal() {
    let store = Store::in_memory().unwrap();
    // Without a renewal on record, the cancellation is still a version of its own.
    let first = passed(
        &store,
        1_000,
        &intent("subscription_cancel", "我不需要续订了"),
        Source::Rule,
        "我不需要续订了",
        0,
    );
    let Verdict::Written(ack) = first else {
        panic!("{first:?}")
    };
    assert_eq!(ack.renewal_deactivated, None);
    let stored = versions(&store, "subscription_cancel");
    let fields: Value = serde_json::from_str(&stored[0].fields).unwrap();
    assert_eq!(
        fields["target_value"],
        json!({"product": null, "cycle": null})
    );
    // With one, it names none, so it ends whichever is active.
    passed(
        &store,
        20 * MINUTE,
        &intent("subscription_renewal", "视频会员续费一年"),
        Source::Rule,
        "帮我把视频会员续费一年",
        0,
    );
    let again = passed(
        &store,
        40 * MINUTE,
        &intent("subscription_cancel", "我不需要续订了"),
        Source::Rule,
        "我不需要续订了",
        0,
    );
    let Verdict::Written(ack) = again else {
        panic!("{again:?}")
    };
    assert_eq!(ack.renewal_deactivated, Some(Timestamp(20 * MINUTE)));
    assert!(!versions(&store, "subscription_renewal")[0].active);
}

#[test]
fn a_health_condition_in_the_identity_protects_the_version_with_a_notice_and_an_audit_entry() {
    let store = Store::in_memory().unwrap();
    let message = "我今年35岁，有高血压，帮我预约明天体检";
    let Verdict::Written(gated) = passed(
        &store,
        1_000,
        &intent("appointment", "明天体检"),
        Source::Rule,
        message,
        0,
    ) else {
        panic!("not written");
    };
    assert!(gated.flagged);
    let stored = &versions(&store, "appointment")[0];
    let fields: Value = serde_json::from_str(&stored.fields).unwrap();
    assert_eq!(
        fields["identity_anchor"],
        json!({"user_id": "alice", "anchor": null, "age": 35, "health_condition": ["hypertension"]})
    );
    assert_eq!(
        (
            &fields["protection"],
            &fields["compliance_review"],
            &fields["sealed"]
        ),
        (&json!("high"), &json!(true), &json!(false)),
        "this store has no key service"
    );
    let ks = Keyspace::new("engram");
    let (notices, audit) = store
        .run_blocking(|txn| {
            let notices = engram_storage::data::notice::notices_page(txn, &ks, "acme", None, 10)?;
            let audit = engram_storage::access::audit_page(
                txn,
                &ks,
                "acme",
                (Timestamp(0), Timestamp(i64::MAX)),
                10,
                |_| true,
            )?;
            Ok((notices, audit))
        })
        .unwrap();
    assert_eq!(notices.len(), 1);
    let notice = &notices[0];
    assert_eq!(
        (
            notice.user_id.as_str(),
            notice.reason.as_str(),
            notice.version
        ),
        ("alice", "health_condition", stored.version)
    );
    let entries = audit.0;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].action, "intent.health_protected");
    assert_eq!(entries[0].principal, MEMORY_MODEL);
    let trail = serde_json::to_string(&entries[0]).unwrap();
    assert!(
        !trail.contains("hypertension") && !trail.contains("高血压"),
        "{trail}"
    );
    assert!(
        !trail.contains("alice"),
        "the trail names users by pseudonym: {trail}"
    );
}
