//! Tests of API key rows and the audit trail on the in-memory SQLite store.

use super::*;
use crate::Store;

fn key(id: &str, tenant: &str) -> ApiKey {
    ApiKey {
        id: id.into(),
        tenant: tenant.into(),
        scope: Scope::Gateway,
        name: "test".into(),
        secret_hash: [7; 32],
        created_at: Timestamp(1),
        created_by: "root".into(),
        expires_at: None,
        replaced_by: None,
    }
}

fn entry(tenant: &str, at: i64, principal: &str, user: Option<&str>) -> AuditEntry {
    AuditEntry {
        id: format!("e{at}-{principal}"),
        at: Timestamp(at),
        principal: principal.into(),
        tenant: tenant.into(),
        user: user.map(Into::into),
        action: "context.read".into(),
        ids: vec![],
        client: Some("127.0.0.1:1".into()),
        outcome: 200,
    }
}

#[test]
fn keys_are_listed_per_tenant_and_expire() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    store
        .run_blocking(|txn| {
            put_api_key(txn, &ks, &key("a1", "acme"))?;
            put_api_key(txn, &ks, &key("b1", "beta"))?;
            let mut revoked = key("a2", "acme");
            revoked.expires_at = Some(Timestamp(10));
            put_api_key(txn, &ks, &revoked)
        })
        .unwrap();
    let (acme, all, a2) = store
        .read_blocking(|txn| {
            Ok((
                api_keys(txn, &ks, Some("acme"))?,
                api_keys(txn, &ks, None)?,
                api_key(txn, &ks, "a2")?,
            ))
        })
        .unwrap();
    assert_eq!(
        acme.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(),
        ["a1", "a2"]
    );
    assert_eq!(all.len(), 3);
    let a2 = a2.unwrap();
    assert!(a2.is_valid_at(Timestamp(9)));
    assert!(!a2.is_valid_at(Timestamp(10)));
}

#[test]
fn audit_pages_by_tenant_time_and_filter_and_purges_by_age() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    store
        .run_blocking(|txn| {
            let entries: Vec<_> = (0..30)
                .map(|i| entry("acme", i, if i % 2 == 0 { "k1" } else { "k2" }, Some("u")))
                .chain([entry("beta", 5, "k1", Some("u"))])
                .collect();
            append_audit(txn, &ks, &entries)
        })
        .unwrap();
    let (k1, next) = store
        .read_blocking(|txn| {
            audit_page(txn, &ks, "acme", (Timestamp(4), Timestamp(20)), 3, |e| {
                e.principal == "k1"
            })
        })
        .unwrap();
    assert_eq!(
        k1.iter().map(|e| e.at.0).collect::<Vec<_>>(),
        [4, 6, 8],
        "oldest first, within the range, filtered"
    );
    assert_eq!(next, Some(Timestamp(8)));
    let (rest, next) = store
        .read_blocking(|txn| {
            audit_page(txn, &ks, "acme", (Timestamp(9), Timestamp(20)), 100, |e| {
                e.principal == "k1"
            })
        })
        .unwrap();
    assert_eq!(rest.len(), 5);
    assert_eq!(next, None);
    assert!(
        rest.iter().all(|e| e.tenant == "acme"),
        "another tenant's entries are never read"
    );
    let removed = store
        .run_blocking(|txn| purge_audit_before(txn, &ks, Timestamp(10)))
        .unwrap();
    assert_eq!(removed, 2, "both tenants swept");
    let (left, _) = store
        .read_blocking(|txn| {
            audit_page(
                txn,
                &ks,
                "acme",
                (Timestamp(0), Timestamp(i64::MAX)),
                100,
                |_| true,
            )
        })
        .unwrap();
    assert_eq!(left.first().map(|e| e.at.0), Some(10));
}

#[test]
fn the_pepper_is_made_once_and_pseudonyms_hide_the_id() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let first = store
        .run_blocking(|txn| audit_pepper(txn, &ks, [1; 32]))
        .unwrap();
    let second = store
        .run_blocking(|txn| audit_pepper(txn, &ks, [2; 32]))
        .unwrap();
    assert_eq!(first, second, "the first pepper stays");
    let alice = user_pseudonym(&first, "acme", "alice");
    assert_eq!(alice, user_pseudonym(&first, "acme", "alice"));
    assert_ne!(alice, user_pseudonym(&first, "beta", "alice"));
    assert_ne!(alice, user_pseudonym(&[3; 32], "acme", "alice"));
    assert!(!alice.contains("alice"));
    assert_eq!(alice.len(), 64);
}
