//! The tenant's few-shot library on a real SQLite file with the real encoder, through the
//! node's directory, with the injected clock: the review workflow, confidence, edits,
//! failures and disuse, auto-promotion and its audit entry, and both sets surviving a restart
//! and an export imported into another tenant.

mod support;

use engram_actors::Error;
use engram_actors::placement::UserKey;
use engram_actors::request::tenant::*;
use engram_storage::Keyspace;
use engram_storage::access::audit_page;
use engram_storage::shared::ExampleStatus;
use engram_storage::types::Timestamp;
use support::shared::*;
use support::{node, pool};
use tempfile::TempDir;

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

/// Turns `acme`'s auto-promotion on.
async fn auto_promote(node: &support::Node, request_id: &str) {
    let mut settings = node
        .directory
        .ask_admin(&acme(), ReadSettings)
        .await
        .unwrap();
    settings.auto_promote = true;
    let write = WriteSettings {
        request_id: request_id.into(),
        settings,
    };
    node.directory.ask_admin(&acme(), write).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_promotion_is_opt_in_needs_three_distinct_keys_and_is_audited() {
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
        let ack = record_as(&node, &format!("gw-{i}"), &format!("off{i}"), near, sql)
            .await
            .unwrap();
        assert!(!ack.promoted, "off by default");
    }
    auto_promote(&node, "s1").await;
    // A far question never promotes, however many keys it succeeds for.
    for i in 0..3 {
        let ack = record_as(
            &node,
            &format!("gw-{i}"),
            &format!("far{i}"),
            "headcount by team",
            "SELECT 1 FROM staff",
        )
        .await
        .unwrap();
        assert!(!ack.promoted);
    }
    // Three distinct keys recorded it while auto-promotion was off: a success now promotes.
    let ack = record_as(&node, "gw-0", "on", near, sql).await.unwrap();
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
async fn one_key_recording_a_pair_three_times_does_not_promote_it_and_the_count_survives_a_restart()
{
    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let first = node(&dir, &pool).await;
    let approved = record(
        &first,
        "r0",
        "How many orders did we get last week?",
        ORDERS,
        0.95,
    )
    .await
    .example
    .unwrap();
    review(&first, "v0", &approved.id, ReviewAction::Approve).await;
    auto_promote(&first, "s1").await;
    let near = "How many orders did we get last week, please?";
    let sql = "SELECT count(*) FROM sales.orders WHERE day > current_date - 7";
    for i in 0..3 {
        let ack = record_as(&first, "gw-a", &format!("a{i}"), near, sql)
            .await
            .unwrap();
        assert!(!ack.promoted, "success {} of one key", i + 1);
        assert_eq!(ack.example.unwrap().successes, i + 1);
    }
    let ack = record_as(&first, "gw-b", "b0", near, sql).await.unwrap();
    assert!(!ack.promoted, "two distinct keys");
    first.shutdown().await;
    drop(first);

    // The keys counted so far are stored: after a restart, a third key promotes it.
    let second = node(&dir, &pool).await;
    let ack = record_as(&second, "gw-b", "b1", near, sql).await.unwrap();
    assert!(!ack.promoted, "still two distinct keys");
    let ack = record_as(&second, "gw-c", "c0", near, sql).await.unwrap();
    assert!(ack.promoted, "three distinct keys");
    assert_eq!(ack.example.unwrap().status, ExampleStatus::Approved);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_select_followed_by_a_drop_neither_enters_the_library_nor_promotes_as_its_tables() {
    let dir = TempDir::new().unwrap();
    let pool = pool().await;
    let node = node(&dir, &pool).await;
    let approved = record(
        &node,
        "r0",
        "revenue by region",
        "SELECT region, sum(amount) FROM sales GROUP BY region",
        0.95,
    )
    .await
    .example
    .unwrap();
    review(&node, "v0", &approved.id, ReviewAction::Approve).await;
    auto_promote(&node, "s1").await;
    // Read by words it names `sales` only, like the approved example; parsed, it is two
    // statements, refused from every key, so it is neither stored nor promoted.
    let poison = "SELECT 1 FROM sales; DROP TABLE sales";
    for i in 0..3 {
        let err = record_as(
            &node,
            &format!("gw-{i}"),
            &format!("p{i}"),
            "revenue by region, please",
            poison,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { ref field, ref reason } if field == "sql" && !reason.contains("DROP")),
            "{err}"
        );
    }
    let listed = node
        .directory
        .ask_admin(
            &acme(),
            ExampleList {
                status: None,
                route: None,
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "only the approved example");
    // Nor can an edit or an import bring it in.
    let edit = ExampleReview {
        request_id: "v1".into(),
        example_id: approved.id.clone(),
        action: ReviewAction::Edit {
            question: None,
            sql: Some("DROP TABLE orders; SELECT 1".into()),
        },
    };
    let err = node.directory.ask_admin(&acme(), edit).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { ref field, .. } if field == "sql"),
        "{err}"
    );
    let import = ExampleImport {
        request_id: "imp".into(),
        examples: vec![PortableExample {
            question: "drop it".into(),
            sql: "DROP TABLE orders; SELECT 1".into(),
            route: "nl2sql".into(),
            confidence: 0.95,
            status: ExampleStatus::Approved,
            successes: 1,
            fail_count: 0,
        }],
    };
    let err = node.directory.ask_admin(&acme(), import).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { ref field, .. } if field == "examples[0].sql"),
        "{err}"
    );
    assert!(served(&node, "drop it").await.is_empty());
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
