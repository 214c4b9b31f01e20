//! The tenant's shared sets (the semantic SQL cache and the few-shot library) on a real
//! SQLite file with the real encoder, through the node's directory, with the injected clock:
//! thresholds and lifetimes, invalidation, retries, the review workflow, failures, expiry,
//! auto-promotion and its audit entry, export and import, and a restart that rebuilds them.

mod support;

use engram_actors::Error;
use engram_actors::clock::Clock;
use engram_actors::embed::Fallback;
use engram_actors::placement::UserKey;
use engram_actors::tenant::api::*;
use engram_storage::Keyspace;
use engram_storage::access::audit_page;
use engram_storage::model::Timestamp;
use engram_storage::shared::{DomainSettings, ExampleStatus};
use support::{Node, node, pool};
use tempfile::TempDir;

const MINUTE: i64 = 60_000;
const DAY: i64 = 24 * 60 * MINUTE;

fn acme() -> UserKey {
    UserKey::shared("acme")
}

async fn put(node: &Node, id: &str, question: &str, domain: &str, sql: &str) -> SqlPutAck {
    let put = SqlPut {
        request_id: id.into(),
        question: question.into(),
        route: "nl2sql".into(),
        domain: domain.into(),
        sql: sql.into(),
        vector: None,
    };
    node.directory.ask_admin(&acme(), put).await.unwrap()
}

async fn lookup(node: &Node, question: &str, domain: &str) -> SqlLookupReply {
    let lookup = SqlLookup {
        question: question.into(),
        route: "nl2sql".into(),
        domain: domain.into(),
        vector: None,
    };
    node.directory.ask_admin(&acme(), lookup).await.unwrap()
}

async fn hit(node: &Node, question: &str, domain: &str) -> Option<String> {
    lookup(node, question, domain).await.hit.map(|h| h.sql)
}

const ORDERS: &str = "SELECT count(*) FROM sales.orders WHERE day >= current_date - 7";

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

async fn record(node: &Node, id: &str, question: &str, sql: &str, confidence: f32) -> ExampleAck {
    let record = ExampleRecord {
        request_id: id.into(),
        question: question.into(),
        sql: sql.into(),
        route: "nl2sql".into(),
        confidence,
        vector: None,
    };
    node.directory.ask_admin(&acme(), record).await.unwrap()
}

async fn review(node: &Node, id: &str, example: &str, action: ReviewAction) -> ExampleAck {
    let review = ExampleReview {
        request_id: id.into(),
        example_id: example.into(),
        action,
    };
    node.directory.ask_admin(&acme(), review).await.unwrap()
}

async fn served(node: &Node, question: &str) -> Vec<(String, f32)> {
    let search = ExampleSearch {
        question: question.into(),
        route: "nl2sql".into(),
        limit: 3,
        vector: None,
    };
    let reply = node.directory.ask_admin(&acme(), search).await.unwrap();
    reply
        .hits
        .into_iter()
        .map(|h| (h.example.id, h.similarity))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_are_served_only_once_approved_and_leave_after_failures_or_disuse() {
    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let node = node(&dir, &pool).await;
    let q = "How many orders did we get last week?";
    let ack = record(&node, "r1", q, ORDERS, 0.95).await;
    let example = ack.example.unwrap();
    assert_eq!(example.status, ExampleStatus::PendingReview);
    assert!(
        example.vector.is_empty(),
        "embeddings stay inside the actor"
    );
    assert!(served(&node, q).await.is_empty(), "pending review");
    // The review queue lists it; approval serves it, to the same and a close question.
    let queue = ExampleList {
        status: Some(ExampleStatus::PendingReview),
        route: None,
        after: None,
        limit: 10,
    };
    let listed = node.directory.ask_admin(&acme(), queue).await.unwrap();
    assert_eq!(listed.len(), 1);
    review(&node, "v1", &example.id, ReviewAction::Approve).await;
    assert_eq!(served(&node, q).await, vec![(example.id.clone(), 1.0)]);
    let close = served(&node, "How many orders did we get last week, please?").await;
    assert!(close.len() == 1 && close[0].1 >= 0.95, "{close:?}");
    assert!(
        served(&node, "how many customers signed up last week")
            .await
            .is_empty()
    );

    // Low confidence is never served, even approved.
    let low = record(
        &node,
        "r2",
        "total refunds this year",
        "SELECT sum(x) FROM refunds",
        0.5,
    )
    .await
    .example
    .unwrap();
    review(&node, "v2", &low.id, ReviewAction::Approve).await;
    assert!(served(&node, "total refunds this year").await.is_empty());

    // An edit keeps the approval and serves the new SQL.
    let edit = ReviewAction::Edit {
        question: None,
        sql: Some("SELECT count(*) FROM sales.orders WHERE week = 1".into()),
    };
    let edited = review(&node, "v3", &example.id, edit)
        .await
        .example
        .unwrap();
    assert_eq!(edited.status, ExampleStatus::Approved);

    // Three failures keep it; the fourth removes it.
    for i in 0..4 {
        let failure = ExampleFailure {
            request_id: format!("f{i}"),
            example_id: example.id.clone(),
        };
        let ack = node.directory.ask_admin(&acme(), failure).await.unwrap();
        assert_eq!(ack.removed, i == 3, "failure {}", i + 1);
    }
    assert!(served(&node, q).await.is_empty());
    let gone = ExampleFailure {
        request_id: "f9".into(),
        example_id: example.id.clone(),
    };
    let err = node.directory.ask_admin(&acme(), gone).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");

    // Unused for 30 days, an approved example expires; used, it stays.
    let kept = record(
        &node,
        "r3",
        "revenue by region",
        "SELECT region, sum(x) FROM sales GROUP BY region",
        0.95,
    )
    .await
    .example
    .unwrap();
    let idle = record(
        &node,
        "r4",
        "stock below minimum",
        "SELECT * FROM stock WHERE n < min",
        0.95,
    )
    .await
    .example
    .unwrap();
    review(&node, "v4", &kept.id, ReviewAction::Approve).await;
    review(&node, "v5", &idle.id, ReviewAction::Approve).await;
    node.clock.advance(20 * DAY);
    assert_eq!(served(&node, "revenue by region").await.len(), 1);
    node.clock.advance(11 * DAY);
    assert_eq!(
        served(&node, "revenue by region").await.len(),
        1,
        "used 11 days ago"
    );
    assert!(
        served(&node, "stock below minimum").await.is_empty(),
        "unused for 31 days"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_promotion_is_opt_in_needs_three_successes_and_is_audited() {
    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let node = node(&dir, &pool).await;
    let approved = record(
        &node,
        "r0",
        "How many orders did we get last week?",
        ORDERS,
        0.95,
    )
    .await
    .example
    .unwrap();
    review(&node, "v0", &approved.id, ReviewAction::Approve).await;
    let near = "How many orders did we get last week, please?";
    let sql = "SELECT count(*) FROM sales.orders WHERE day > current_date - 7";
    for i in 0..3 {
        let ack = record(&node, &format!("off{i}"), near, sql, 0.95).await;
        assert!(!ack.promoted, "off by default");
    }
    let mut settings = node
        .directory
        .ask_admin(&acme(), ReadSettings)
        .await
        .unwrap();
    settings.auto_promote = true;
    let write = WriteSettings {
        request_id: "s1".into(),
        settings,
    };
    node.directory.ask_admin(&acme(), write).await.unwrap();
    // A far question never promotes, however often it succeeds.
    for i in 0..3 {
        let ack = record(
            &node,
            &format!("far{i}"),
            "headcount by team",
            "SELECT 1 FROM staff",
            0.95,
        )
        .await;
        assert!(!ack.promoted);
    }
    let ack = record(&node, "on", near, sql, 0.95).await;
    assert!(ack.promoted);
    let example = ack.example.unwrap();
    assert_eq!(example.status, ExampleStatus::Approved);
    assert_eq!(example.reviewed_by.as_deref(), Some("auto-promotion"));
    assert_eq!(example.successes, 4);

    let ks = Keyspace::new("engram");
    let (entries, _) = node
        .store
        .read(move |txn| {
            audit_page(
                txn,
                &ks,
                "acme",
                (Timestamp(0), Timestamp(i64::MAX)),
                100,
                |_| true,
            )
        })
        .await
        .unwrap();
    let promoted: Vec<_> = entries
        .iter()
        .filter(|e| e.action == "fewshot.auto_approve")
        .collect();
    assert_eq!(promoted.len(), 1);
    assert_eq!(promoted[0].principal, "auto-promotion");
    assert_eq!(promoted[0].ids, vec![example.id]);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_survive_a_restart_and_an_export_imports_into_another_tenant_unchanged() {
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
    let a = record(
        &first,
        "r1",
        "revenue by region",
        "SELECT region, sum(x) FROM sales GROUP BY region",
        0.95,
    )
    .await
    .example
    .unwrap();
    record(
        &first,
        "r2",
        "stock below minimum",
        "SELECT * FROM stock WHERE n < min",
        0.7,
    )
    .await;
    review(&first, "v1", &a.id, ReviewAction::Approve).await;
    let exported = first
        .directory
        .ask_admin(&acme(), ExampleExport { status: None })
        .await
        .unwrap();
    first.shutdown().await;
    drop(first);

    // A new node on the same file rebuilds both sets (and their vector indexes).
    let second = node(&dir, &pool).await;
    assert!(
        hit(&second, "how many orders did we receive last week", "sales")
            .await
            .is_some()
    );
    assert_eq!(served(&second, "revenue by region").await.len(), 1);

    let other = UserKey::shared("globex");
    let import = ExampleImport {
        request_id: "imp".into(),
        examples: exported.clone(),
    };
    let ack = second.directory.ask_admin(&other, import).await.unwrap();
    assert_eq!((ack.created, ack.updated), (2, 0));
    let back = second
        .directory
        .ask_admin(&other, ExampleExport { status: None })
        .await
        .unwrap();
    assert_eq!(back, exported, "the round trip keeps every field");
    // Importing the same document again updates, and adds nothing.
    let import = ExampleImport {
        request_id: "imp2".into(),
        examples: exported,
    };
    let ack = second.directory.ask_admin(&other, import).await.unwrap();
    assert_eq!((ack.created, ack.updated), (0, 2));
    // An edited example keeps its id: what it holds now finds it, on import and on success.
    let edit = ReviewAction::Edit {
        question: Some("regional revenue".into()),
        sql: None,
    };
    review(&second, "v2", &a.id, edit).await;
    let edited = second
        .directory
        .ask_admin(&acme(), ExampleExport { status: None })
        .await
        .unwrap();
    let import = ExampleImport {
        request_id: "imp3".into(),
        examples: edited,
    };
    let ack = second.directory.ask_admin(&acme(), import).await.unwrap();
    assert_eq!((ack.created, ack.updated), (0, 2), "re-imported in place");
    let again = record(
        &second,
        "r3",
        "Regional revenue",
        "SELECT region, sum(x) FROM sales GROUP BY region",
        0.95,
    )
    .await;
    let again = again.example.unwrap();
    assert_eq!((again.id, again.successes), (a.id.clone(), 2));
    // The first tenant's sets are not the second's.
    assert_eq!(
        served(&second, "stock below minimum").await.len(),
        0,
        "acme's low-confidence example stays unserved"
    );
    second.shutdown().await;
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
    use engram_actors::user::UserMsg;
    use engram_actors::user::api::SweepScope;
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
