//! Property-driven fuzzing of the gateway's request decoding, in process over the real actors
//! and an SQLite file: arbitrary bytes and arbitrary JSON shapes (valid field names among
//! them, deep nesting, huge numbers, control characters) sent to every write and read route,
//! with arbitrary user ids and query strings. Whatever comes in, the answer is a 2xx or a 4xx
//! (or a 503 under load), never a 500 and never a panic; a malformed body writes nothing.
//! Bounded by proptest's case count, so it runs in CI with the other tests.

use std::sync::LazyLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
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

static APP: LazyLock<(Router, tempfile::TempDir)> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("temporary directory");
    let app = RUNTIME.block_on(super::tests::app(&dir));
    (app, dir)
});

const ROUTES: [(&str, &str); 14] = [
    ("POST", "/v1/users/{u}/turns"),
    ("POST", "/v1/users/{u}/feedback"),
    ("POST", "/v1/users/{u}/context"),
    ("POST", "/v1/users/{u}/memories"),
    ("POST", "/v1/users/{u}/memories/search"),
    ("PUT", "/v1/users/{u}/memories/m00000001"),
    ("POST", "/v1/users/{u}/memories/m00000001/status"),
    ("GET", "/v1/users/{u}/memories?kind={q}"),
    ("GET", "/v1/users/{u}/sessions/{q}/memory?limit={q}"),
    ("POST", "/write"),
    ("GET", "/recall?user_id={u}&intent_type={q}"),
    ("GET", "/chat/sessions?user_id={u}"),
    ("POST", "/v1/users/{u}/anchors/match"),
    ("GET", "/v1/admin/audit?user={u}&from={q}"),
];

const FIELDS: [&str; 16] = [
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

fn send(method: &str, uri: &str, body: Vec<u8>) -> StatusCode {
    let Ok(request) = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).expect("method"))
        .uri(uri)
        .header("content-type", "application/json")
        .header(
            "authorization",
            format!("Bearer {}", super::tests::GATEWAY_KEY),
        )
        .body(Body::from(body))
    else {
        return StatusCode::BAD_REQUEST;
    };
    // Built outside the runtime (building it blocks on the runtime).
    let app = APP.0.clone();
    RUNTIME.block_on(async { app.oneshot(request).await.expect("infallible").status() })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_request_gets_an_answer_that_is_not_a_server_error(
        route in prop::sample::select(ROUTES.to_vec()),
        user in "[A-Za-z0-9_.%~-]{0,40}",
        query in "[A-Za-z0-9_.%~=&-]{0,20}",
        body in body(),
    ) {
        let (method, template) = route;
        let uri = template.replace("{u}", &user).replace("{q}", &query);
        let status = send(method, &uri, body);
        prop_assert!(
            status != StatusCode::INTERNAL_SERVER_ERROR && !status.is_informational(),
            "{method} {uri}: {status}"
        );
    }
}
