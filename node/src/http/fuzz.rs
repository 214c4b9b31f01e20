//! Property-driven fuzzing of the gateway's request decoding, in process over the real actors
//! and an SQLite file: arbitrary bytes and arbitrary JSON shapes (valid field names among
//! them, deep nesting, huge numbers, control characters) sent to every documented route (the
//! list comes from the OpenAPI document, so a new route is fuzzed without being named here),
//! with a gateway key and with a tenant admin key, arbitrary user ids and query strings.
//! Whatever comes in, the answer is a 2xx or a 4xx (or a 503 under load), never a 500 and
//! never a panic; and an answer of 400, 413 or 415 (malformed input) leaves the store's data
//! exactly as it was (every pair but the audit trail, compared before and after).
//! Bounded by proptest's case count, so it runs in CI with the other tests.

use std::sync::LazyLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use engram_storage::sqlite::SqliteOptions;
use engram_storage::{Keyspace, RangeOptions, Store};
use proptest::prelude::*;
use serde_json::{Map, Value};
use tower::ServiceExt;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
});

/// The router, its directory, a second handle on its store, and a tenant admin key.
struct Fuzzed {
    app: Router,
    _dir: tempfile::TempDir,
    store: Store,
    keyspace: Keyspace,
    admin_key: String,
}

static APP: LazyLock<Fuzzed> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("temporary directory");
    let app = RUNTIME.block_on(super::tests::app(&dir));
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default())
        .expect("the router's store");
    let made = RUNTIME.block_on(super::tests::send_as(
        &app,
        super::tests::ROOT_KEY,
        Method::POST,
        "/v1/admin/keys",
        Some(Body::from(r#"{"scope": "admin", "name": "fuzz"}"#)),
    ));
    assert_eq!(made.0, StatusCode::CREATED, "{}", made.1);
    Fuzzed {
        app,
        _dir: dir,
        store,
        keyspace: Keyspace::new("engram"),
        admin_key: made.1["token"].as_str().expect("token").to_owned(),
    }
});

/// Extra query strings for routes that read one, `{q}` standing for fuzzed text.
const QUERIES: [(&str, &str); 10] = [
    ("/v1/users/{user}/memories", "?kind={q}&limit={q}"),
    (
        "/v1/users/{user}/sessions/{session_id}/memory",
        "?limit={q}",
    ),
    ("/recall", "?user_id={u}&intent_type={q}"),
    ("/chat/sessions", "?user_id={u}&limit={q}"),
    (
        "/chat/sessions/{session_id}/memory",
        "?user_id={u}&limit={q}",
    ),
    ("/v1/admin/audit", "?user={u}&from={q}"),
    (
        "/v1/admin/users/{user}/archive",
        "?after_session={q}&after_seq={q}",
    ),
    (
        "/v1/admin/few-shot/examples",
        "?status={q}&route={q}&limit={q}",
    ),
    ("/v1/admin/few-shot/export", "?status={q}"),
    ("/v1/admin/few-shot/import", "?request_id={q}"),
];

/// Every route of the table, as (method, path with `{u}` for the user and `{q}` for fuzzed
/// text in the other parameters and the query).
static ROUTES: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
    let mut routes = Vec::new();
    for route in super::table::table() {
        for (method, path, _) in route.operations() {
            let query = QUERIES
                .iter()
                .find(|(p, _)| *p == path)
                .map_or("", |(_, q)| q);
            let uri = format!("{path}{query}")
                .replace("{user}", "{u}")
                .replace("{memory_id}", "{q}")
                .replace("{session_id}", "{q}")
                .replace("{flag_id}", "{q}")
                .replace("{name}", "{q}")
                .replace("{key_id}", "{q}")
                .replace("{example_id}", "{q}");
            routes.push((method.as_str().to_owned(), uri));
        }
    }
    routes
});

const FIELDS: [&str; 27] = [
    "request_id",
    "session_id",
    "user_text",
    "assistant_text",
    "route",
    "success",
    "choices",
    "turn_seq",
    "rating",
    "comment",
    "kind",
    "text",
    "query",
    "k",
    "mode",
    "user_id",
    "resolution",
    "clarification",
    "content",
    "ttl_seconds",
    "question",
    "sql",
    "domain",
    "confidence",
    "table",
    "settings",
    "examples",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,40}".prop_map(Value::String),
        "[\\x00-\\x1f]{0,5}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS.to_vec()), inner), 0..8).prop_map(
                |pairs| {
                    let mut map = Map::new();
                    for (k, v) in pairs {
                        map.insert(k.to_owned(), v);
                    }
                    Value::Object(map)
                }
            ),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        json_value().prop_map(|v| v.to_string().into_bytes()),
    ]
}

/// Every pair of the store but the audit trail (which records refusals too).
fn data() -> Vec<(Vec<u8>, Vec<u8>)> {
    let (ks, audit) = (APP.keyspace.clone(), APP.keyspace.audit_all());
    RUNTIME
        .block_on(APP.store.read(move |txn| {
            let all = ks.all();
            txn.get_range(&all.begin, &all.end, RangeOptions::default())
        }))
        .expect("the store reads")
        .into_iter()
        .filter(|(key, _)| !audit.contains(key))
        .collect()
}

fn send(method: &str, uri: &str, key: &str, body: Vec<u8>) -> StatusCode {
    let Ok(request) = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).expect("method"))
        .uri(uri)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(Body::from(body))
    else {
        return StatusCode::BAD_REQUEST;
    };
    // Built outside the runtime (building it blocks on the runtime).
    let app = APP.app.clone();
    RUNTIME.block_on(async { app.oneshot(request).await.expect("infallible").status() })
}

#[test]
fn every_documented_operation_is_fuzzed() {
    assert!(ROUTES.len() >= 30, "{:?}", *ROUTES);
    for (method, path) in ROUTES.iter() {
        assert!(
            !path.contains("{user}") && !path.contains("_id}"),
            "{method} {path}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn any_request_gets_an_answer_that_is_not_a_server_error_and_bad_input_writes_nothing(
        route in prop::sample::select(ROUTES.clone()),
        admin in any::<bool>(),
        user in "[A-Za-z0-9_.%~-]{0,40}",
        query in "[A-Za-z0-9_.%~=&-]{0,20}",
        body in body(),
    ) {
        let (method, template) = route;
        let uri = template.replace("{u}", &user).replace("{q}", &query);
        let key = if admin { APP.admin_key.as_str() } else { super::tests::GATEWAY_KEY };
        let before = data();
        let status = send(&method, &uri, key, body);
        prop_assert!(
            status != StatusCode::INTERNAL_SERVER_ERROR && !status.is_informational(),
            "{method} {uri} (admin: {admin}): {status}"
        );
        if matches!(status.as_u16(), 400 | 413 | 415) {
            prop_assert!(
                data() == before,
                "{method} {uri} (admin: {admin}) answered {status} but wrote"
            );
        }
    }
}
