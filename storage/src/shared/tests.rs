//! Tests of a tenant's shared sets on the in-memory SQLite store.

use super::*;
use crate::Store;

fn with_tenant<T>(
    store: &Store,
    ks: &Keyspace,
    tenant: &str,
    f: impl Fn(&mut TenantData<'_>) -> Result<T>,
) -> T {
    store
        .run_blocking(|txn| f(&mut TenantData::new(txn, ks, tenant)))
        .unwrap()
}

fn entry(id: &str) -> SqlEntry {
    SqlEntry {
        id: id.into(),
        question: format!("question {id}"),
        route: "nl2sql".into(),
        domain: "sales".into(),
        sql: "SELECT 1 FROM orders".into(),
        tables: vec!["orders".into()],
        vector: vec![0.5; 4],
        model: "test".into(),
        stored_at: Timestamp(1),
        expires_at: Timestamp(2),
    }
}

#[test]
fn pages_read_every_entry_once_in_id_order() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for i in 0..25 {
        let e = entry(&format!("e{i:02}"));
        with_tenant(&store, &ks, "acme", |t| t.put_sql_entry(&e));
    }
    // Another tenant's entries are not in the pages.
    with_tenant(&store, &ks, "other", |t| t.put_sql_entry(&entry("x")));
    let mut seen = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, next) = with_tenant(&store, &ks, "acme", |t| t.sql_page(after.as_deref(), 10));
        seen.extend(page.into_iter().map(|e| e.id));
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("e{i:02}")).collect();
    assert_eq!(seen, expected);
}

#[test]
fn settings_default_until_stored_and_domains_override_them() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let settings = with_tenant(&store, &ks, "acme", |t| t.settings());
    assert_eq!(settings, SharedSettings::default());
    assert_eq!(settings.similarity("sales"), 0.92);
    assert_eq!(settings.ttl_ms("sales"), 900_000);
    let mut changed = settings;
    changed.domains.insert(
        "sales".into(),
        DomainSettings {
            similarity: Some(0.95),
            ttl_ms: None,
        },
    );
    with_tenant(&store, &ks, "acme", |t| t.put_settings(&changed));
    let read = with_tenant(&store, &ks, "acme", |t| t.settings());
    assert_ne!(read, SharedSettings::default());
    assert_eq!(read.similarity("sales"), 0.95);
    assert_eq!(read.similarity("hr"), 0.92);
    assert_eq!(read.ttl_ms("sales"), 900_000);
    let other = with_tenant(&store, &ks, "other", |t| t.settings());
    assert_eq!(other, SharedSettings::default(), "settings are per tenant");
}

#[test]
fn pruning_removes_only_old_idempotency_entries() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    for (id, at) in [("old1", 10), ("old2", 20), ("new", 100)] {
        let e = IdempotencyEntry {
            at: Timestamp(at),
            response: vec![1],
        };
        with_tenant(&store, &ks, "acme", |t| t.put_idempotency(id, &e));
    }
    // Two rows a page: the first page reads new and old1, the second old2.
    let (removed, next) = with_tenant(&store, &ks, "acme", |t| {
        t.prune_idempotency_page(None, 2, Timestamp(50))
    });
    assert_eq!(removed, 1);
    let (removed, next) = with_tenant(&store, &ks, "acme", |t| {
        t.prune_idempotency_page(next.as_deref(), 2, Timestamp(50))
    });
    assert_eq!((removed, next), (1, None));
    let left = |id: &str| with_tenant(&store, &ks, "acme", |t| t.idempotency(id)).is_some();
    assert!(!left("old1") && !left("old2") && left("new"));
}

#[test]
fn recorders_count_distinct_keys_survive_a_new_transaction_and_leave_with_the_example() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    // One key recording three times is one recorder.
    for _ in 0..3 {
        let n = with_tenant(&store, &ks, "acme", |t| {
            t.add_example_recorder("ex", "key-a", 3)
        });
        assert_eq!(n, 1);
    }
    assert_eq!(
        with_tenant(&store, &ks, "acme", |t| t
            .add_example_recorder("ex", "key-b", 3)),
        2
    );
    assert_eq!(
        with_tenant(&store, &ks, "acme", |t| t
            .add_example_recorder("ex", "key-c", 3)),
        3
    );
    // Past `keep`, nothing more is stored.
    assert_eq!(
        with_tenant(&store, &ks, "acme", |t| t
            .add_example_recorder("ex", "key-d", 3)),
        3
    );
    assert_eq!(
        with_tenant(&store, &ks, "acme", |t| t.example_recorders("ex")),
        vec!["key-a", "key-b", "key-c"]
    );
    // Per tenant, per example.
    assert!(with_tenant(&store, &ks, "other", |t| t.example_recorders("ex")).is_empty());
    assert!(with_tenant(&store, &ks, "acme", |t| t.example_recorders("ex2")).is_empty());
    // The recorders are not an example of the library's pages.
    let (page, _) = with_tenant(&store, &ks, "acme", |t| t.example_page(None, 10));
    assert!(page.is_empty());
    with_tenant(&store, &ks, "acme", |t| t.delete_example("ex"));
    assert!(with_tenant(&store, &ks, "acme", |t| t.example_recorders("ex")).is_empty());
}
