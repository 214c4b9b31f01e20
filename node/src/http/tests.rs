//! In-process tests of the gateway's router: the versioned API end to end over the real
//! actors and an SQLite file, error mapping of malformed and hostile input, and the OpenAPI
//! document and the access rules against the route table and the routes actually served.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use engram_actors::clock::SystemClock;
use engram_actors::directory::Directory;
use engram_actors::front::Users;
use engram_actors::model::entities::EntityExtractor;
use engram_actors::services::{Metrics, Services, Settings};
use engram_storage::sqlite::SqliteOptions;
use engram_storage::{Keyspace, Store};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{AppState, Limits, router};
use crate::metrics::NodeMetrics;

fn extractor() -> Arc<EntityExtractor> {
    static EXTRACTOR: std::sync::OnceLock<Arc<EntityExtractor>> = std::sync::OnceLock::new();
    EXTRACTOR
        .get_or_init(|| Arc::new(EntityExtractor::default()))
        .clone()
}

/// The configured admin key of the in-process router.
pub(super) const ROOT_KEY: &str = "root-key-of-the-in-process-tests-0123456789";
/// A gateway key of tenant `default`, written into the store by [`app`].
pub(super) const GATEWAY_KEY: &str = "egk_0123456789abcdef_gateway-secret-of-the-in-process-tests";

/// The router over real actors and an SQLite file in `dir`, with a root key and a gateway
/// key ([`GATEWAY_KEY`]) of tenant `default`.
pub(super) async fn app(dir: &tempfile::TempDir) -> Router {
    app_with(dir, crate::config::LookupLimits::default()).await
}

/// [`app`] with these bounds of key lookups.
pub(super) async fn app_with(
    dir: &tempfile::TempDir,
    lookups: crate::config::LookupLimits,
) -> Router {
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    let keyspace = Keyspace::new("engram");
    let (id, secret) = crate::auth::parse_token(GATEWAY_KEY).unwrap();
    let key = engram_storage::access::ApiKey {
        id: id.into(),
        tenant: "default".into(),
        scope: engram_storage::access::Scope::Gateway,
        name: "tests".into(),
        secret_hash: crate::auth::hash_secret(secret),
        created_at: engram_storage::types::Timestamp(0),
        created_by: "root".into(),
        expires_at: None,
        replaced_by: None,
    };
    let ks = keyspace.clone();
    store
        .run(move |txn| engram_storage::access::put_api_key(txn, &ks, &key))
        .await
        .unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    let audit = crate::audit::AuditLog::start(
        store.clone(),
        keyspace.clone(),
        Arc::new(SystemClock),
        (std::time::Duration::from_secs(3_600), true, false),
        Arc::clone(&metrics),
    )
    .await
    .unwrap();
    let auth = crate::auth::Authenticator::new(
        store.clone(),
        keyspace.clone(),
        Some(ROOT_KEY),
        crate::auth::RateLimiter::new(0, 0),
        lookups,
    );
    let services = Services {
        store,
        keyspace,
        clock: Arc::new(SystemClock),
        extractor: extractor(),
        embedder: None,
        pipeline: None,
        distillation: None,
        reranker: None,
        ownership: None,
        settings: Settings::default(),
        metrics: Arc::new(Metrics::default()),
    };
    let directory = Directory::new(services);
    let state = AppState {
        extractor: Arc::clone(&directory.services().extractor),
        admin: engram_actors::admin::Admin::new(Arc::clone(&directory)),
        users: Arc::new(Users::new(
            directory,
            None,
            std::time::Duration::from_secs(1),
        )),
        auth: Arc::new(auth),
        audit,
        metrics,
        token_budget: 1200,
        lease_timeout: std::time::Duration::from_secs(3),
        cluster: None,
    };
    router(
        state,
        Limits {
            max_body_bytes: 1024 * 1024,
            max_in_flight: 64,
        },
    )
}

pub(super) async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    body: Option<Body>,
) -> (StatusCode, Value) {
    send_as(app, GATEWAY_KEY, method, uri, body).await
}

/// Sends a request with the bearer token `key`.
pub(super) async fn send_as(
    app: &Router,
    key: &str,
    method: Method,
    uri: &str,
    body: Option<Body>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {key}"));
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let response = app
        .clone()
        .oneshot(request.body(body.unwrap_or_else(Body::empty)).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 64 * 1024 * 1024)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(super) async fn post(app: &Router, uri: &str, body: Value) -> (StatusCode, Value) {
    send(app, Method::POST, uri, Some(Body::from(body.to_string()))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_turn_conversation_carries_the_first_turns_conditions_into_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let (status, first) = post(&app, "/v1/users/alice/turns", json!({
        "request_id": "t1", "session_id": "s1", "route": "nl2sql_query",
        "user_text": "Show the orders of East China in October from dw_orders with amount over 1000",
        "assistant_text": "Found 1,284 orders of East China in October with amount over 1000 (table dw_orders).",
    })).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["seq"], 0);
    assert!(
        first["entities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "dw_orders"),
        "{first}"
    );
    let (status, ctx) = post(
        &app,
        "/v1/users/alice/context",
        json!({
            "session_id": "s1", "query": "what about their total amount?", "route": "nl2sql_query",
        }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ctx}");
    let text = ctx["text"].as_str().unwrap();
    assert!(
        text.contains("East China") && text.contains("October") && text.contains("dw_orders"),
        "{text}"
    );
    assert_eq!(ctx["recent_turns"].as_array().unwrap().len(), 1);
    // A retry of the first turn is a replay.
    let (_, again) = post(&app, "/v1/users/alice/turns", json!({
        "request_id": "t1", "session_id": "s1", "user_text": "Show the orders of East China in October from dw_orders with amount over 1000",
    })).await;
    assert_eq!(
        (again["replayed"].as_bool(), again["seq"].as_u64()),
        (Some(true), Some(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_sessions_conflicts_and_forgetting_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let (status, created) = post(&app, "/v1/users/bob/memories", json!({
        "request_id": "m1", "kind": "correction", "text": "GMV in dw_orders excludes refunds", "status": "active",
    })).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    // Entities are found for lists only.
    assert!(created["memory"].get("entities").is_none(), "{created}");
    let id = created["memory"]["memory_id"].as_str().unwrap().to_owned();
    let (status, listed) = send(
        &app,
        Method::GET,
        "/v1/users/bob/memories?kind=correction",
        None,
    )
    .await;
    assert_eq!(
        (status, listed["memories"].as_array().unwrap().len()),
        (StatusCode::OK, 1)
    );
    let entities = &listed["memories"][0]["entities"];
    assert!(
        entities.as_array().unwrap().contains(&json!("dw_orders")),
        "{entities}"
    );
    let (status, changed) = post(
        &app,
        &format!("/v1/users/bob/memories/{id}/status"),
        json!({"request_id": "m2", "status": "suppressed"}),
    )
    .await;
    assert_eq!(
        (status, changed["memory"]["status"].as_str()),
        (StatusCode::OK, Some("suppressed"))
    );
    let (status, _) = post(
        &app,
        "/v1/users/bob/memories/m404/status",
        json!({"request_id": "m3", "status": "active"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    post(
        &app,
        "/v1/users/bob/turns",
        json!({"request_id": "t1", "session_id": "s9", "user_text": "hello"}),
    )
    .await;
    let (_, sessions) = send(&app, Method::GET, "/chat/sessions?user_id=bob", None).await;
    assert_eq!(sessions["data"][0]["session_id"], "s9");
    let (status, memory) = send(
        &app,
        Method::GET,
        "/chat/sessions/s9/memory?user_id=bob&limit=10",
        None,
    )
    .await;
    assert_eq!(
        (status, memory["data"].as_array().unwrap().len()),
        (StatusCode::OK, 1)
    );
    let (status, _) = send(
        &app,
        Method::GET,
        "/chat/sessions/s9/memory?user_id=bob&limit=501",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, deleted) = send(
        &app,
        Method::DELETE,
        "/chat/sessions/s9/memory?user_id=bob",
        None,
    )
    .await;
    assert_eq!(
        (status, deleted["data"]["deleted"].as_u64()),
        (StatusCode::OK, Some(1))
    );
    let (status, _) = send(
        &app,
        Method::DELETE,
        "/v1/users/bob/sessions/s9/memory",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "an unknown session is a 404");
    let (status, conflicts) = send(&app, Method::GET, "/v1/users/bob/conflicts", None).await;
    assert_eq!(
        (status, conflicts["conflicts"].as_array().unwrap().len()),
        (StatusCode::OK, 0)
    );
    // Intents through the seed endpoints: versions, newest first, the old one inactive.
    for (rid, status) in [("i1", "booked"), ("i2", "cancelled")] {
        let (code, _) = post(&app, "/write", json!({"user_id": "bob", "request_id": rid, "intent_type": "appointment", "fields": {"status": status}})).await;
        assert_eq!(code, StatusCode::OK);
    }
    let (_, recall) = send(
        &app,
        Method::GET,
        "/recall?user_id=bob&intent_type=appointment&all=true",
        None,
    )
    .await;
    let intents = recall["intents"].as_array().unwrap();
    assert_eq!(
        (
            intents.len(),
            intents[0]["fields"]["status"].as_str(),
            intents[0]["active"].as_bool(),
            intents[1]["active"].as_bool()
        ),
        (2, Some("cancelled"), Some(true), Some(false))
    );
    let (status, refused) = send(&app, Method::DELETE, "/v1/users/bob", None).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden")),
        "a gateway key cannot forget"
    );
    let (status, forgotten) = send_as(&app, ROOT_KEY, Method::DELETE, "/v1/users/bob", None).await;
    assert_eq!(
        (status, forgotten["records"].as_u64()),
        (StatusCode::OK, Some(2)),
        "the correction and the episodic memory of the turn"
    );
    let (_, listed) = send(&app, Method::GET, "/v1/users/bob/memories", None).await;
    assert!(listed["memories"].as_array().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_hostile_input_gets_a_clear_400_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let turns = "/v1/users/carol/turns";
    let cases: Vec<(&str, Body, StatusCode, &str, &str)> = vec![
        (
            "missing field",
            Body::from(json!({"request_id": "r"}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "user_text",
        ),
        (
            "wrong type",
            Body::from(json!({"request_id": 5, "user_text": "x"}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "request_id",
        ),
        (
            "unknown field",
            Body::from(json!({"request_id": "r", "user_text": "x", "usr": 1}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "usr",
        ),
        (
            "invalid utf-8",
            Body::from(vec![b'{', b'"', 0xff, 0xfe, b'"', b':', b'1', b'}']),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "",
        ),
        (
            "deep nesting",
            Body::from(format!("{}{}", "[".repeat(100_000), "]".repeat(100_000))),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "",
        ),
        (
            "10 MB body",
            Body::from(vec![b' '; 10 * 1024 * 1024]),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "",
        ),
        (
            "unknown route",
            Body::from(json!({"request_id": "r", "user_text": "x", "route": "sql"}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "unknown route",
        ),
        (
            "sql in an id",
            Body::from(json!({"request_id": "r'; drop table kv;--", "user_text": "x"}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "request_id",
        ),
        (
            "control characters",
            Body::from(json!({"request_id": "r", "user_text": "a\u{0}b"}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "control character",
        ),
        (
            "oversize text",
            Body::from(json!({"request_id": "r", "user_text": "x".repeat(8_001)}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "at most 8000",
        ),
    ];
    for (name, body, status, code, mentions) in cases {
        let (got, error) = send(&app, Method::POST, turns, Some(body)).await;
        assert_eq!(got, status, "{name}: {error}");
        assert_eq!(error["code"], code, "{name}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(mentions),
            "{name}: {error}"
        );
    }
    let (status, error) = send(&app, Method::GET, "/v1/users/a%20b/memories", None).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_input"))
    );
    let bare = Request::post(turns)
        .header("authorization", format!("Bearer {GATEWAY_KEY}"))
        .body(Body::from(
            json!({"request_id": "r", "user_text": "x"}).to_string(),
        ))
        .unwrap();
    let response = app.clone().oneshot(bare).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "a body without a JSON content type"
    );
    let (status, error) = send(&app, Method::GET, "/v2/nothing", None).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    // Nothing was half-written, and the node still serves.
    let (status, sessions) = send(&app, Method::GET, "/v1/users/carol/sessions", None).await;
    assert_eq!(
        (status, sessions["sessions"].as_array().unwrap().len()),
        (StatusCode::OK, 0)
    );
    let (status, ok) = post(&app, turns, json!({"request_id": "r", "user_text": "fine"})).await;
    assert_eq!((status, ok["seq"].as_u64()), (StatusCode::OK, Some(0)));
}

/// Whether an answer says the router has no such route, or authentication no rule for it.
fn unserved(status: StatusCode, body: &Value) -> bool {
    let message = body["message"].as_str().unwrap_or_default();
    status == StatusCode::METHOD_NOT_ALLOWED
        || (status == StatusCode::NOT_FOUND && message.starts_with("no such endpoint"))
        || (status == StatusCode::FORBIDDEN && message == "this endpoint has no access rule")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_the_table_is_served_with_a_rule_and_documented_and_nothing_else_is() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let (status, doc) = send(&app, Method::GET, "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    let mut documented = std::collections::BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for method in operations.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let mut routes = std::collections::BTreeSet::new();
    for route in super::table::table() {
        for (method, path, _) in route.operations() {
            routes.insert((method.to_string(), path.to_owned()));
        }
    }
    assert!(routes.len() >= 31, "{routes:?}");
    assert_eq!(
        documented, routes,
        "the served document and the table differ"
    );
    for (method, path) in &routes {
        let uri = path
            .replace("{user}", "dave")
            .replace("{memory_id}", "m1")
            .replace("{session_id}", "s1")
            .replace("{key_id}", "0123456789abcdef");
        let method: Method = method.parse().unwrap();
        let (status, body) = send(&app, method.clone(), &uri, None).await;
        // Served, and authenticated by its rule: anything but "no such endpoint", "method not
        // allowed" or "no access rule".
        assert!(
            !unserved(status, &body),
            "{method} {path} is in the table but not served: {status} {body}"
        );
    }
    // The check tells an unserved route: a path and a method that are not routes.
    let (status, body) = send(&app, Method::GET, "/v1/users/dave/nothing", None).await;
    assert!(unserved(status, &body), "{status} {body}");
    let (status, body) = send(&app, Method::PATCH, "/v1/users/dave/memories", None).await;
    assert!(unserved(status, &body), "{status} {body}");
    let (status, metrics) = send(&app, Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(metrics, Value::Null, "metrics are text, not JSON");
}
