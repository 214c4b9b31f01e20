//! The tenant's semantic SQL cache on a real SQLite file with the real encoder, through the
//! node's directory, with the injected clock: thresholds and lifetimes per tenant and domain,
//! late vectors, the literal guard, invalidation and retries, and expiry while no actor runs.

mod support;

use engram_actors::Error;
use engram_actors::clock::Clock;
use engram_actors::embed::Fallback;
use engram_actors::request::tenant::*;
use engram_storage::Keyspace;
use engram_storage::shared::DomainSettings;
use support::shared::*;
use support::{Node, node, pool};
use tempfile::TempDir;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_question_reuses_the_sql_within_its_domain_threshold_and_lifetime() {
    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let node = node(&dir, &pool).await;
    put(
        &node,
        "p1",
        "How many orders did we get last week?",
        "sales",
        ORDERS,
    )
    .await;

    // The same question, normalised, and a paraphrase hit; an unrelated one does not.
    let same = lookup(&node, "  how many orders did we get LAST WEEK ", "sales").await;
    assert_eq!(same.hit.as_ref().map(|h| h.similarity), Some(1.0));
    let close = lookup(&node, "how many orders did we receive last week", "sales").await;
    let similarity = close.hit.as_ref().map(|h| h.similarity).unwrap();
    assert!((0.92..1.0).contains(&similarity), "{similarity}");
    assert_eq!(close.threshold, 0.92);
    assert_eq!(hit(&node, "show revenue by region", "sales").await, None);
    // A question whose vector did not come in time finds only its own normalised text.
    let late = |question: &str| SqlLookup {
        question: question.into(),
        route: "nl2sql".into(),
        domain: "sales".into(),
        vector: Some(QuestionVector::Fallback(Fallback::Deadline)),
    };
    let reply = node
        .directory
        .ask_admin(&acme(), late("how many orders did we receive last week"))
        .await
        .unwrap();
    assert_eq!(
        (reply.hit, reply.fallback),
        (None, Some(Fallback::Deadline))
    );
    let reply = node
        .directory
        .ask_admin(&acme(), late("How many orders did we get last week"))
        .await
        .unwrap();
    assert_eq!(reply.hit.map(|h| h.similarity), Some(1.0));
    // Another domain, or another route, never sees the entry.
    assert_eq!(
        hit(&node, "How many orders did we get last week?", "hr").await,
        None
    );
    let other_route = SqlLookup {
        question: "How many orders did we get last week?".into(),
        route: "chat".into(),
        domain: "sales".into(),
        vector: None,
    };
    let reply = node
        .directory
        .ask_admin(&acme(), other_route)
        .await
        .unwrap();
    assert!(reply.hit.is_none());

    // A domain's own threshold above the paraphrase's similarity turns it into a miss.
    let mut settings = node
        .directory
        .ask_admin(&acme(), ReadSettings)
        .await
        .unwrap();
    settings.domains.insert(
        "sales".into(),
        DomainSettings {
            similarity: Some(similarity + 0.001),
            ttl_ms: Some(5 * MINUTE),
        },
    );
    let write = WriteSettings {
        request_id: "s1".into(),
        settings: settings.clone(),
    };
    node.directory.ask_admin(&acme(), write).await.unwrap();
    assert_eq!(
        hit(&node, "how many orders did we receive last week", "sales").await,
        None
    );
    assert!(
        hit(&node, "How many orders did we get last week", "sales")
            .await
            .is_some()
    );

    // Entries live 15 minutes by default; the domain's 5 minutes apply to entries put after.
    node.clock.advance(14 * MINUTE);
    assert!(
        hit(&node, "How many orders did we get last week", "sales")
            .await
            .is_some()
    );
    node.clock.advance(MINUTE);
    assert_eq!(
        hit(&node, "How many orders did we get last week", "sales").await,
        None,
        "expired after 15 minutes"
    );
    let ack = put(
        &node,
        "p2",
        "How many orders did we get last week?",
        "sales",
        ORDERS,
    )
    .await;
    assert_eq!(ack.expires_at.0 - node.clock.now().0, 5 * MINUTE);
    node.clock.advance(5 * MINUTE);
    assert_eq!(
        hit(&node, "How many orders did we get last week", "sales").await,
        None
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidating_a_table_drops_exactly_the_entries_that_mention_it_once() {
    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let node = node(&dir, &pool).await;
    let ack = put(&node, "p1", "orders last week", "sales", ORDERS).await;
    assert_eq!(ack.tables, vec!["sales.orders"]);
    put(
        &node,
        "p2",
        "refunds by month",
        "sales",
        "SELECT m, sum(x) FROM refunds r JOIN orders o ON r.o = o.id GROUP BY m",
    )
    .await;
    put(
        &node,
        "p3",
        "headcount by team",
        "hr",
        "SELECT team, count(*) FROM staff GROUP BY team",
    )
    .await;
    // A retry of a put replays its answer and stores nothing twice.
    let again = put(
        &node,
        "p3",
        "headcount by team",
        "hr",
        "SELECT 1 FROM other",
    )
    .await;
    assert!(again.replayed);
    assert_eq!(again.tables, vec!["staff"]);

    let invalidate = SqlInvalidate {
        request_id: "i1".into(),
        table: "Orders".into(),
    };
    let done = node
        .directory
        .ask_admin(&acme(), invalidate.clone())
        .await
        .unwrap();
    assert_eq!((done.removed, done.replayed), (2, false));
    assert_eq!(hit(&node, "orders last week", "sales").await, None);
    assert_eq!(hit(&node, "refunds by month", "sales").await, None);
    assert!(hit(&node, "headcount by team", "hr").await.is_some());
    let replay = node.directory.ask_admin(&acme(), invalidate).await.unwrap();
    assert_eq!((replay.removed, replay.replayed), (2, true));

    let bad = SqlInvalidate {
        request_id: "i2".into(),
        table: "orders; drop".into(),
    };
    let err = node.directory.ask_admin(&acme(), bad).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { ref field, .. } if field == "table"),
        "{err}"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_literal_guard_keeps_other_times_and_numbers_from_a_close_questions_sql() {
    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let node = node(&dir, &pool).await;
    put(
        &node,
        "p1",
        "How many orders did we get last week?",
        "sales",
        ORDERS,
    )
    .await;
    put(
        &node,
        "p2",
        "top 5 customers by revenue",
        "sales",
        "SELECT c FROM rev LIMIT 5",
    )
    .await;
    // Close in meaning, other literals: no hit, however similar.
    let month = "How many orders did we get last month?";
    assert_eq!(hit(&node, month, "sales").await, None);
    assert_eq!(
        hit(&node, "top 10 customers by revenue", "sales").await,
        None
    );
    // The same literals in other words still hit.
    assert!(
        hit(
            &node,
            "how many orders did we receive in the past week",
            "sales"
        )
        .await
        .is_some()
    );
    // Turned off, the nearest question's SQL is served.
    let mut settings = node
        .directory
        .ask_admin(&acme(), ReadSettings)
        .await
        .unwrap();
    assert!(settings.literal_guard, "on by default");
    settings.literal_guard = false;
    let write = WriteSettings {
        request_id: "s1".into(),
        settings,
    };
    node.directory.ask_admin(&acme(), write).await.unwrap();
    assert_eq!(hit(&node, month, "sales").await.as_deref(), Some(ORDERS));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_that_expire_while_no_actor_runs_are_deleted_by_the_next_sweep() {
    use engram_actors::request::user::SweepScope;
    use engram_actors::user::UserMsg;
    use engram_storage::shared::TenantData;

    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let first = node(&dir, &pool).await;
    put(
        &first,
        "p1",
        "How many orders did we get last week?",
        "sales",
        ORDERS,
    )
    .await;
    first.shutdown().await;
    drop(first);
    let second = node(&dir, &pool).await;
    second.clock.advance(16 * MINUTE);
    let stored = |node: &Node| {
        let store = node.store.clone();
        async move {
            store
                .read(|txn| {
                    let ks = Keyspace::new("engram");
                    Ok(TenantData::new(txn, &ks, "acme")
                        .sql_page(None, 10)?
                        .0
                        .len())
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(stored(&second).await, 1);
    // Started after the entry expired: never served, and deleted by the sweep.
    assert_eq!(
        hit(&second, "How many orders did we get last week", "sales").await,
        None
    );
    let scope = SweepScope {
        records: true,
        turns: true,
        sessions: true,
    };
    second
        .directory
        .call(&acme(), |reply| UserMsg::Sweep(scope, reply))
        .await
        .unwrap();
    assert_eq!(stored(&second).await, 0);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_before_a_select_is_never_cached_nor_served_even_if_stored_before() {
    use engram_storage::shared::{SqlEntry, TenantData};
    use engram_storage::types::Timestamp;

    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let first = node(&dir, &pool).await;
    let question = "How many orders did we get last week?";
    for (i, sql) in [
        "DROP TABLE orders; SELECT 1",
        "SELECT 1 FROM orders; DROP TABLE orders",
        "DELETE FROM orders",
        "SELECT 1 -- ; DROP TABLE orders",
    ]
    .into_iter()
    .enumerate()
    {
        let poison = SqlPut {
            request_id: format!("p{i}"),
            question: question.into(),
            route: "nl2sql".into(),
            domain: "sales".into(),
            sql: sql.into(),
            vector: None,
        };
        let err = first
            .directory
            .ask_admin(&acme(), poison)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { ref field, ref reason }
                if field == "sql" && !reason.contains("orders")),
            "{sql}: {err}"
        );
        assert_eq!(hit(&first, question, "sales").await, None, "{sql}");
    }
    first.shutdown().await;

    // An entry that storage holds from before (written past the actor) is never served:
    // neither to the same question nor to a close one.
    let embedder = support::embedder(&pool);
    let normalised = "how many orders did we get last week".to_owned();
    let vector = embedder
        .questions("acme", std::slice::from_ref(&normalised))
        .await
        .unwrap()
        .pop()
        .unwrap();
    let now = first.clock.now();
    let entry = SqlEntry {
        id: "legacy".into(),
        question: normalised,
        route: "nl2sql".into(),
        domain: "sales".into(),
        sql: "DROP TABLE orders; SELECT 1".into(),
        tables: vec!["orders".into()],
        vector,
        model: embedder.model_name().into(),
        stored_at: now,
        expires_at: Timestamp(now.0 + 10 * MINUTE),
    };
    first
        .store
        .run(move |txn| {
            TenantData::new(txn, &Keyspace::new("engram"), "acme").put_sql_entry(&entry)
        })
        .await
        .unwrap();
    drop(first);
    let second = node(&dir, &pool).await;
    assert_eq!(hit(&second, question, "sales").await, None);
    assert_eq!(
        hit(&second, "how many orders did we receive last week", "sales").await,
        None
    );
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_one_tenant_asked_is_a_cache_miss_for_another_tenant() {
    use std::sync::atomic::Ordering::Relaxed;

    let pool = pool().await;
    let embedder = support::embedder(&pool);
    let counts = |e: &engram_actors::embed::Embedder| {
        let m = e.metrics();
        (m.cache_hits.load(Relaxed), m.cache_misses.load(Relaxed))
    };
    let text = "how many orders did globex get last week".to_owned();
    // Tenant A asks (a lookup's query and a write's question share the cache).
    embedder.query("acme", &text).await;
    assert_eq!(counts(&embedder), (0, 1));
    embedder
        .questions("acme", std::slice::from_ref(&text))
        .await
        .unwrap();
    assert_eq!(counts(&embedder), (1, 1), "A's second ask hits");
    // Tenant B's first lookup of the same text is a miss, by either path.
    embedder.query("globex", &text).await;
    assert_eq!(counts(&embedder), (1, 2), "B's first lookup misses");
    embedder
        .questions("initech", std::slice::from_ref(&text))
        .await
        .unwrap();
    assert_eq!(counts(&embedder), (1, 3), "C's first write misses");
    embedder.query("globex", &text).await;
    assert_eq!(counts(&embedder), (2, 3), "B's second lookup hits");
}
