//! The front door (`Users`) on one node with a real SQLite store: who may ask what, the read
//! policy applied inside the user's actor (masking, the sensitive-read breaker per principal,
//! withheld contexts), bounded intent versions, and the node's bound on live actors.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use engram_actors::Error;
use engram_actors::clock::ManualClock;
use engram_actors::front::{Reader, Users};
use engram_actors::model::policy::Route;
use engram_actors::model::retrieve::SearchMode;
use engram_actors::placement::UserKey;
use engram_actors::request::user::{
    AnchorQuery, ApproveReads, ContextQuery, Forget, IntentQuery, IntentWrite, ListMemories,
    ListSessions, MemoryWrite, SearchQuery, TurnRequest,
};
use engram_actors::services::Settings;
use engram_storage::access::Scope;
use tempfile::TempDir;

/// A resident ID number with a valid check digit.
const ID: &str = "11010519491231002X";

mod plain;

struct Node {
    users: Users,
    clock: Arc<ManualClock>,
    _dir: TempDir,
}

fn node(settings: Settings) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let plain = plain::node(&dir, settings);
    Node {
        users: Users::new(plain.directory, None, Duration::from_secs(1)),
        clock: plain.clock,
        _dir: dir,
    }
}

fn reader(principal: &str, scope: Scope) -> Reader {
    Reader {
        principal: principal.into(),
        scope,
        tenant: "acme".into(),
    }
}

fn gateway(principal: &str) -> Reader {
    reader(principal, Scope::Gateway)
}

fn admin() -> Reader {
    reader("root", Scope::Admin)
}

fn user(name: &str) -> UserKey {
    UserKey::new("acme", name)
}

fn turn(request_id: &str) -> TurnRequest {
    TurnRequest {
        request_id: request_id.into(),
        session_id: Some("s1".into()),
        user_text: "Show the orders of East China from dw_orders".into(),
        assistant_text: "Found 1,284 orders.".into(),
        route: Some(Route::Nl2sqlQuery),
        success: true,
        trace_id: None,
        choices: Vec::new(),
        clarification: None,
    }
}

fn memory(request_id: &str, text: &str) -> MemoryWrite {
    plain::memory_write(request_id, text)
}

fn search() -> SearchQuery {
    SearchQuery {
        query: "identity number".into(),
        k: 10,
        kinds: Vec::new(),
        mode: SearchMode::Bm25,
        active_only: false,
        rerank: false,
    }
}

fn context() -> ContextQuery {
    ContextQuery {
        session_id: None,
        query: Some("identity number".into()),
        route: Route::DeepAnalysisWorkflow,
        token_budget: 1200,
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn admin_only_requests_other_tenants_and_operator_keys_are_refused_by_the_actor() {
    let node = node(Settings::default());
    let alice = user("alice");
    node.users.ask(&admin(), &alice, turn("t1")).await.unwrap();
    let refused = [
        node.users
            .ask(&gateway("g1"), &alice, Forget)
            .await
            .unwrap_err(),
        node.users
            .ask(&gateway("g1"), &alice, ApproveReads)
            .await
            .unwrap_err(),
        node.users
            .ask(&reader("op", Scope::Operator), &alice, ListSessions)
            .await
            .unwrap_err(),
        node.users
            .ask(
                &Reader {
                    tenant: "globex".into(),
                    ..admin()
                },
                &alice,
                ListSessions,
            )
            .await
            .unwrap_err(),
    ];
    for err in refused {
        assert!(matches!(err, Error::Forbidden(_)), "{err}");
    }
    let sessions = node
        .users
        .ask(&admin(), &alice, ListSessions)
        .await
        .unwrap();
    assert_eq!(sessions.len(), 1, "nothing was forgotten");
}

#[tokio::test]
async fn personal_data_leaves_the_actor_masked_for_gateways_and_whole_for_admins() {
    let node = node(Settings::default());
    let alice = user("alice");
    let text = format!("my identity number is {ID}");
    node.users
        .ask(&admin(), &alice, memory("m1", &text))
        .await
        .unwrap();
    let masked = node
        .users
        .ask(&gateway("g1"), &alice, ListMemories { kind: None })
        .await
        .unwrap();
    assert!(
        !masked[0].summary_text.contains(ID),
        "{}",
        masked[0].summary_text
    );
    let whole = node
        .users
        .ask(&admin(), &alice, ListMemories { kind: None })
        .await
        .unwrap();
    assert_eq!(whole[0].summary_text, text);
}

#[tokio::test]
async fn the_breaker_counts_per_principal_withholds_contexts_and_counts_anchor_matches() {
    let node = node(Settings::default());
    let alice = user("alice");
    node.users
        .ask(
            &admin(),
            &alice,
            memory("m1", &format!("my identity number is {ID}")),
        )
        .await
        .unwrap();
    let limit = Settings::default().breaker.threshold;
    for _ in 0..limit {
        node.users
            .ask(&gateway("g1"), &alice, search())
            .await
            .unwrap();
    }
    let refused = node
        .users
        .ask(&gateway("g1"), &alice, search())
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::ApprovalRequired { reads } if reads == limit));
    // Another gateway is not locked out by the first.
    node.users
        .ask(&gateway("g2"), &alice, search())
        .await
        .unwrap();
    // A context is never refused: past the limit its sensitive memories are withheld.
    let ctx = node
        .users
        .ask(&gateway("g1"), &alice, context())
        .await
        .unwrap();
    assert!(
        ctx.text.contains("withheld: sensitive-read limit reached"),
        "{}",
        ctx.text
    );
    assert!(!ctx.text.contains("identity number is"), "{}", ctx.text);
    // Anchor matches count too, in their own budget: g2 may still match that many times.
    let matches = Settings::default().breaker.match_threshold;
    let anchor = || AnchorQuery { value: ID.into() };
    let mut answered = 0;
    while node
        .users
        .ask(&gateway("g2"), &alice, anchor())
        .await
        .is_ok()
    {
        answered += 1;
        assert!(answered <= matches, "anchor matches are not limited");
    }
    assert_eq!(answered, matches);
    // An approval clears every principal's counts: g1's reads, g2's read and matches.
    let ack = node
        .users
        .ask(&admin(), &alice, ApproveReads)
        .await
        .unwrap();
    assert_eq!(ack.cleared, limit + 1 + matches);
    node.users
        .ask(&gateway("g1"), &alice, search())
        .await
        .unwrap();
    let ctx = node
        .users
        .ask(&gateway("g1"), &alice, context())
        .await
        .unwrap();
    assert!(!ctx.text.contains("withheld: sensitive"), "{}", ctx.text);
}

#[tokio::test]
async fn intent_versions_are_bounded_per_type_and_read_newest_first_in_pages() {
    let node = node(Settings {
        intent_versions: 3,
        ..Settings::default()
    });
    let alice = user("alice");
    for i in 0..5 {
        let ack = node
            .users
            .ask(
                &admin(),
                &alice,
                IntentWrite {
                    request_id: format!("w{i}"),
                    intent_type: "renewal".into(),
                    fields: serde_json::json!({ "n": i }),
                },
            )
            .await
            .unwrap();
        assert_eq!(ack.deactivated.len(), usize::from(i > 0));
        node.clock.advance(1_000);
    }
    let page = |before, limit| IntentQuery {
        intent_type: "renewal".into(),
        before,
        limit,
    };
    let all = node
        .users
        .ask(&admin(), &alice, page(None, 10))
        .await
        .unwrap();
    let fields: Vec<&str> = all.iter().map(|i| i.fields.as_str()).collect();
    assert_eq!(fields, [r#"{"n":4}"#, r#"{"n":3}"#, r#"{"n":2}"#]);
    assert_eq!(all.iter().filter(|i| i.active).count(), 1);
    assert!(all[0].active);
    let first = node
        .users
        .ask(&admin(), &alice, page(None, 2))
        .await
        .unwrap();
    let rest = node
        .users
        .ask(&admin(), &alice, page(Some(first[1].version), 2))
        .await
        .unwrap();
    assert_eq!(first.len() + rest.len(), 3);
    assert_eq!(rest[0].fields, r#"{"n":2}"#);
    let err = node
        .users
        .ask(&admin(), &alice, page(None, 0))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { ref field, .. } if field == "limit"));
}

#[tokio::test]
async fn reads_of_users_with_no_data_leave_no_live_actor() {
    let node = node(Settings::default());
    let directory = Arc::clone(node.users.directory());
    for i in 0..50 {
        let nobody = user(&format!("nobody-{i}"));
        let ctx = node
            .users
            .ask(&gateway("g1"), &nobody, context())
            .await
            .unwrap();
        assert!(ctx.recent_turns.is_empty());
        let hits = node
            .users
            .ask(&gateway("g1"), &nobody, search())
            .await
            .unwrap();
        assert!(hits.hits.is_empty());
        node.users
            .ask(&gateway("g1"), &nobody, ListSessions)
            .await
            .unwrap();
    }
    wait_until("the actors of users with no data stop", || {
        directory.alive() == 0
    })
    .await;
    node.users
        .ask(&gateway("g1"), &user("alice"), turn("t1"))
        .await
        .unwrap();
    node.users
        .ask(&gateway("g1"), &user("alice"), ListSessions)
        .await
        .unwrap();
    assert_eq!(directory.alive(), 1, "a user with data keeps their actor");
}

#[tokio::test]
async fn a_full_node_evicts_its_least_recently_used_actor_and_refuses_when_all_are_busy() {
    let node = node(Settings {
        max_actors: 2,
        ..Settings::default()
    });
    let directory = Arc::clone(node.users.directory());
    let metrics = Arc::clone(&directory.services().metrics);
    node.users
        .ask(&admin(), &user("a"), turn("t1"))
        .await
        .unwrap();
    node.clock.advance(500);
    node.users
        .ask(&admin(), &user("b"), turn("t1"))
        .await
        .unwrap();
    // Both used within the last second: no room for a third.
    let err = node
        .users
        .ask(&admin(), &user("c"), turn("t1"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Overloaded(_)), "{err}");
    assert_eq!(metrics.admissions_refused.load(Ordering::Relaxed), 1);
    // Past a's idle second (not b's), a is the one to go.
    node.clock.advance(600);
    node.users
        .ask(&admin(), &user("c"), turn("t1"))
        .await
        .unwrap();
    wait_until("a is evicted", || directory.running(&user("a")).is_none()).await;
    assert!(directory.running(&user("b")).is_some());
    assert_eq!(metrics.evictions.load(Ordering::Relaxed), 1);
    // An evicted user's state is reloaded from storage on next use (b, now the least
    // recently used, makes room).
    node.clock.advance(1_000);
    let sessions = node
        .users
        .ask(&admin(), &user("a"), ListSessions)
        .await
        .unwrap();
    assert_eq!(sessions.len(), 1);
    wait_until("b is evicted", || directory.running(&user("b")).is_none()).await;
    assert_eq!(metrics.evictions.load(Ordering::Relaxed), 2);
}
