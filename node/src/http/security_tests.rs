//! In-process tests of the gateway's security rules over the real actors and an SQLite file:
//! who may make operator keys and reach `/v1/cluster`, what 400 answers say about bad input,
//! which labels requests add to the metrics, what unknown key ids cost, and which user the
//! seed endpoints' audit entries name.

use axum::body::Body;
use axum::http::{Method, StatusCode};
use engram_storage::access::{self, ApiKey, Scope};
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{Member, MemberStatus, Timestamp};
use engram_storage::{Keyspace, Store};
use serde_json::{Value, json};

use super::tests::{GATEWAY_KEY, ROOT_KEY, app, send_as};

/// A second handle on the router's SQLite file, to look at (and seed) what it stores.
fn store_of(dir: &tempfile::TempDir) -> (Store, Keyspace) {
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    (store, Keyspace::new("engram"))
}

async fn stored_keys(store: &Store, keyspace: &Keyspace) -> Vec<ApiKey> {
    let ks = keyspace.clone();
    store
        .read(move |txn| access::api_keys(txn, &ks, None))
        .await
        .unwrap()
}

async fn make_key(app: &axum::Router, as_key: &str, scope: &str) -> (StatusCode, Value) {
    send_as(
        app,
        as_key,
        Method::POST,
        "/v1/admin/keys",
        Some(Body::from(
            json!({"scope": scope, "name": scope}).to_string(),
        )),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_can_neither_make_an_operator_key_nor_reach_the_cluster_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let (store, keyspace) = store_of(&dir);
    // A member row, so that a drain that got through would mark it.
    let member = Member {
        node_id: "n1".into(),
        http_addr: "127.0.0.1:1".into(),
        cluster_addr: "127.0.0.1:2".into(),
        started_at: Timestamp(0),
        heartbeat_at: Timestamp(0),
        status: MemberStatus::Active,
    };
    let ks = keyspace.clone();
    store
        .run(move |txn| engram_storage::cluster::put_member(txn, &ks, &member))
        .await
        .unwrap();

    let (status, made) = make_key(&app, ROOT_KEY, "admin").await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let admin = made["token"].as_str().unwrap().to_owned();
    let admin_id = made["key_id"].as_str().unwrap().to_owned();
    let before = stored_keys(&store, &keyspace).await;

    let (status, refused) = make_key(&app, &admin, "operator").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(
        stored_keys(&store, &keyspace).await,
        before,
        "nothing is stored"
    );

    for key in [admin.as_str(), GATEWAY_KEY] {
        let (status, body) = send_as(&app, key, Method::GET, "/v1/cluster/status", None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let (status, body) = send_as(
            &app,
            key,
            Method::POST,
            "/v1/cluster/drain",
            Some(Body::from(json!({"node_id": "n1"}).to_string())),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }

    // An operator key a tenant's admin made before the rule (written as it was then) does
    // not reach the cluster either.
    let (id, secret, legacy) = crate::auth::fresh_token();
    let row = ApiKey {
        id,
        tenant: "default".into(),
        scope: Scope::Operator,
        name: "legacy".into(),
        secret_hash: crate::auth::hash_secret(&secret),
        created_at: Timestamp(0),
        created_by: admin_id.clone(),
        expires_at: None,
        replaced_by: None,
    };
    let ks = keyspace.clone();
    store
        .run(move |txn| access::put_api_key(txn, &ks, &row))
        .await
        .unwrap();
    let (status, body) = send_as(&app, &legacy, Method::GET, "/v1/cluster/status", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = send_as(
        &app,
        &legacy,
        Method::POST,
        "/v1/cluster/drain",
        Some(Body::from(json!({"node_id": "n1"}).to_string())),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    let ks = keyspace.clone();
    let status_of_n1 = store
        .read(move |txn| engram_storage::cluster::member(txn, &ks, "n1"))
        .await
        .unwrap()
        .unwrap()
        .status;
    assert_eq!(status_of_n1, MemberStatus::Active, "no node drains");

    // The root makes operator keys; they work; a tenant's admin cannot rotate or revoke them.
    let (status, made) = make_key(&app, ROOT_KEY, "operator").await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let operator = made["token"].as_str().unwrap();
    let operator_id = made["key_id"].as_str().unwrap();
    let (status, body) = send_as(&app, operator, Method::GET, "/v1/cluster/status", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = send_as(&app, operator, Method::GET, "/v1/users/u/memories", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let before = stored_keys(&store, &keyspace).await;
    let rotate = format!("/v1/admin/keys/{operator_id}/rotate");
    let (status, body) = send_as(&app, &admin, Method::POST, &rotate, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let revoke = format!("/v1/admin/keys/{operator_id}");
    let (status, body) = send_as(&app, &admin, Method::DELETE, &revoke, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(stored_keys(&store, &keyspace).await, before);
    let (status, body) = send_as(&app, operator, Method::GET, "/v1/cluster/status", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A card number: what a client may put in a wrongly typed field by mistake.
const CARD: &str = "6222020200112233445";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_to_bad_input_name_the_field_and_never_echo_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let card_number: u64 = CARD.parse().unwrap();
    let m = "/v1/users/u/memories/m00000001";
    // (method, path, body, the field the answer must name)
    let cases: Vec<(Method, String, Value, &str)> = vec![
        (
            Method::POST,
            "/v1/users/u/turns".into(),
            json!({"request_id": "r", "user_text": "x", "success": CARD}),
            "success",
        ),
        (
            Method::POST,
            "/v1/users/u/turns".into(),
            json!({"request_id": card_number, "user_text": "x"}),
            "request_id",
        ),
        (
            Method::POST,
            "/v1/users/u/turns".into(),
            json!({"request_id": "r", "user_text": "x", "route": CARD}),
            "route",
        ),
        (
            Method::POST,
            "/v1/users/u/turns".into(),
            json!({"request_id": "r", "user_text": "x", "choices": [{"topic": "t", "value": card_number}]}),
            "choices[0].value",
        ),
        (
            Method::POST,
            "/v1/users/u/feedback".into(),
            json!({"request_id": "r", "turn_seq": CARD, "rating": "like"}),
            "turn_seq",
        ),
        (
            Method::POST,
            "/v1/users/u/feedback".into(),
            json!({"request_id": "r", "turn_seq": 0, "rating": CARD}),
            "rating",
        ),
        (
            Method::POST,
            "/v1/users/u/context".into(),
            json!({"query": "q", "token_budget": CARD}),
            "token_budget",
        ),
        (
            Method::POST,
            "/v1/users/u/context".into(),
            json!({"query": "q", "route": CARD}),
            "route",
        ),
        (
            Method::POST,
            "/v1/users/u/memories".into(),
            json!({"request_id": "r", "kind": CARD, "text": "t"}),
            "kind",
        ),
        (
            Method::POST,
            "/v1/users/u/memories".into(),
            json!({"request_id": "r", "kind": "profile", "text": "t", "confidence": CARD}),
            "confidence",
        ),
        (
            Method::POST,
            "/v1/users/u/memories/search".into(),
            json!({"query": "q", "k": CARD}),
            "k",
        ),
        (
            Method::POST,
            "/v1/users/u/memories/search".into(),
            json!({"query": "q", "mode": CARD}),
            "mode",
        ),
        (
            Method::POST,
            "/v1/users/u/memories/search".into(),
            json!({"query": "q", "kinds": [CARD]}),
            "kind",
        ),
        (
            Method::PUT,
            m.into(),
            json!({"request_id": "r", "kind": "profile", "text": "t", "salience": CARD}),
            "salience",
        ),
        (
            Method::POST,
            format!("{m}/status"),
            json!({"request_id": "r", "status": CARD}),
            "status",
        ),
        (
            Method::POST,
            "/write".into(),
            json!({"user_id": "u", "request_id": "r", "intent_type": card_number, "fields": {}}),
            "intent_type",
        ),
        (
            Method::POST,
            "/v1/users/u/anchors/match".into(),
            json!({"value": card_number}),
            "value",
        ),
        (
            Method::POST,
            "/v1/admin/keys".into(),
            json!({"scope": CARD}),
            "scope",
        ),
        (
            Method::POST,
            "/v1/admin/keys".into(),
            json!({"scope": "gateway", "name": card_number}),
            "name",
        ),
        (
            Method::POST,
            "/v1/admin/keys/0123456789abcdef/rotate".into(),
            json!({"grace_seconds": CARD}),
            "grace_seconds",
        ),
        (
            Method::POST,
            "/v1/cluster/drain".into(),
            json!({"node_id": card_number}),
            "node_id",
        ),
        // An unknown field whose name is the value: refused, and not echoed either.
        (
            Method::POST,
            "/v1/users/u/context".into(),
            json!({CARD: 1}),
            "unknown field",
        ),
    ];
    for (method, path, body, field) in cases {
        let (status, answer) = send_as(
            &app,
            ROOT_KEY,
            method.clone(),
            &path,
            Some(Body::from(body.to_string())),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{method} {path} {body}: {answer}"
        );
        let text = answer.to_string();
        assert!(
            !text.contains(CARD),
            "{method} {path} {body} echoes the value: {text}"
        );
        assert!(
            answer["message"].as_str().unwrap().contains(field),
            "{method} {path} {body} does not name {field}: {text}"
        );
    }
    // Query strings too.
    for (path, field) in [
        (format!("/v1/users/u/memories?kind={CARD}"), "kind"),
        (format!("/v1/users/u/memories?limit={CARD}x"), "limit"),
        (format!("/v1/admin/audit?from={CARD}x"), "from"),
    ] {
        let (status, answer) = send_as(&app, ROOT_KEY, Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        let text = answer.to_string();
        assert!(!text.contains(CARD), "{path} echoes the value: {text}");
        assert!(text.contains(field), "{path} does not name {field}: {text}");
    }
}

/// The series of the request metrics in a scrape (name and labels, without values).
async fn request_series(app: &axum::Router) -> std::collections::BTreeSet<String> {
    use tower::ServiceExt;
    let response = app
        .clone()
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 16 * 1024 * 1024)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("engram_http_request"))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series.to_owned()))
        .collect()
}

async fn send_raw(app: &axum::Router, method: &str, path: &str) -> StatusCode {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path)
        .body(Body::empty())
        .unwrap();
    app.clone().oneshot(request).await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_requests_with_any_method_or_path_add_no_metric_labels() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    // One of each kind first, so that their fixed labels exist.
    send_raw(&app, "BREW", "/no/such/path").await;
    send_raw(&app, "BREW", "/v1/users/u/turns").await;
    send_raw(&app, "GET", "/v1/users/u/memories").await;
    // The scrape is itself a request: the first one adds its own series.
    request_series(&app).await;
    let before = request_series(&app).await;
    for i in 0..50 {
        let method = format!("M{i:x}X{}", i * 7919);
        let path = format!("/random-{i}/{}", i * 104_729);
        assert_ne!(send_raw(&app, &method, &path).await, StatusCode::OK);
        assert_ne!(
            send_raw(&app, &method, "/v1/users/u/turns").await,
            StatusCode::OK
        );
        assert_eq!(
            send_raw(&app, "GET", &format!("/v1/users/user-{i}/memories")).await,
            StatusCode::UNAUTHORIZED
        );
    }
    let after = request_series(&app).await;
    let added: Vec<_> = after.difference(&before).collect();
    assert!(added.is_empty(), "new label values: {added:?}");
    assert!(
        before.iter().any(|s| s.contains("method=\"other\"")),
        "{before:?}"
    );
}

/// The value of the counter or gauge `name` in a scrape.
async fn metric(app: &axum::Router, name: &str) -> u64 {
    use tower::ServiceExt;
    let response = app
        .clone()
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 16 * 1024 * 1024)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in the scrape"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_key_ids_is_rate_limited_and_its_storage_reads_and_cache_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (rate, burst, negative) = (5, 40, 16);
    let app = super::tests::app_with(
        &dir,
        crate::config::LookupLimits {
            negative_entries: negative,
            per_address_rate: rate,
            per_address_burst: burst,
        },
    )
    .await;
    // An unknown id is read once, then answered from the negative cache.
    let unknown = "egk_ffffffffffffffff_secret";
    for _ in 0..3 {
        let (status, body) =
            send_as(&app, unknown, Method::GET, "/v1/users/u/memories", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    assert_eq!(metric(&app, "engram_key_lookups_total").await, 1);
    assert_eq!(
        metric(&app, "engram_key_lookups_negative_cached_total").await,
        2
    );
    let started = std::time::Instant::now();
    let flood = 400;
    let (mut unauthorized, mut limited) = (0, 0);
    for i in 0..flood {
        let token = format!("egk_{i:016x}_secret");
        let (status, body) = send_as(&app, &token, Method::GET, "/v1/users/u/memories", None).await;
        match status {
            StatusCode::UNAUTHORIZED => unauthorized += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(body["code"], "rate_limited", "{body}");
                limited += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let reads = metric(&app, "engram_key_lookups_total").await;
    let bound = f64::from(burst) + f64::from(rate) * elapsed + 1.0;
    assert!(
        (reads as f64) <= bound,
        "{reads} key reads for {flood} unknown ids in {elapsed:.1}s (bound {bound:.0})"
    );
    assert!(limited > 0 && unauthorized > 0, "{limited} {unauthorized}");
    assert_eq!(
        metric(&app, "engram_key_lookups_refused_total").await,
        limited
    );
    let cached = metric(&app, "engram_key_unknown_cached").await;
    assert!(cached <= negative as u64, "{cached} negative answers held");

    // Malformed tokens (an id too long or not hex) cost no read and no cache entry.
    let reads = metric(&app, "engram_key_lookups_total").await;
    for token in [
        format!("egk_{}_secret", "a".repeat(200)),
        "egk_NOT-HEX_secret".to_owned(),
        format!("egk_0123456789abcdef_{}", "s".repeat(10_000)),
    ] {
        let (status, body) = send_as(&app, &token, Method::GET, "/v1/users/u/memories", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    assert_eq!(metric(&app, "engram_key_lookups_total").await, reads);
    assert_eq!(metric(&app, "engram_key_tokens_malformed_total").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_key_is_never_refused_by_the_lookup_limit_of_an_address_flooding_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    // The gateway key is in storage but this node has never read it; every request here comes
    // from the same (unknown) address, as every client of one MCP server does.
    let app = super::tests::app_with(
        &dir,
        crate::config::LookupLimits {
            negative_entries: 1_000,
            per_address_rate: 1,
            per_address_burst: 5,
        },
    )
    .await;
    let started = std::time::Instant::now();
    let mut limited = 0;
    for i in 0..200 {
        let token = format!("egk_{i:016x}_secret");
        let (status, body) = send_as(&app, &token, Method::GET, "/v1/users/u/memories", None).await;
        match status {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => limited += 1,
            other => panic!("{other}: {body}"),
        }
    }
    assert!(
        limited > 100,
        "the guessing was throttled: {limited} of 200 refused"
    );
    // The address is over its budget, and the valid key is served all the same.
    for _ in 0..3 {
        let (status, body) =
            send_as(&app, GATEWAY_KEY, Method::GET, "/v1/users/u/memories", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // Guessing on costs the address's budget of row reads and at most one read of the list
    // of key ids a second.
    for i in 200..400 {
        let token = format!("egk_{i:016x}_secret");
        let (status, body) = send_as(&app, &token, Method::GET, "/v1/users/u/memories", None).await;
        assert_ne!(status, StatusCode::OK, "{body}");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let lists = metric(&app, "engram_key_list_reads_total").await;
    assert!(
        (lists as f64) <= elapsed + 1.0,
        "{lists} reads of the key list in {elapsed:.1}s"
    );
    let reads = metric(&app, "engram_key_lookups_total").await;
    assert!(
        (reads as f64) <= 5.0 + elapsed + 2.0,
        "{reads} key reads in {elapsed:.1}s"
    );
}

/// The (action, outcome, ids) of the trail's entries about `user`, sorted (entries of the same
/// millisecond have no order).
pub(super) async fn trail_of(app: &axum::Router, user: &str) -> Vec<(String, u64, Vec<String>)> {
    let uri = format!("/v1/admin/audit?user={user}");
    let (status, trail) = send_as(app, ROOT_KEY, Method::GET, &uri, None).await;
    assert_eq!(status, StatusCode::OK, "{trail}");
    assert!(
        !trail.to_string().contains(user),
        "users are named by pseudonym: {trail}"
    );
    let mut entries: Vec<_> = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let ids = e["ids"].as_array().unwrap().iter();
            (
                e["action"].as_str().unwrap().to_owned(),
                e["outcome"].as_u64().unwrap(),
                ids.map(|i| i.as_str().unwrap().to_owned()).collect(),
            )
        })
        .collect();
    entries.sort();
    entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_endpoints_audit_the_user_their_query_or_body_names() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let send = |method: Method, uri: &'static str, body: Option<Value>| {
        let app = app.clone();
        async move {
            let body = body.map(|b| Body::from(b.to_string()));
            let (status, answer) = send_as(&app, GATEWAY_KEY, method.clone(), uri, body).await;
            assert_eq!(status, StatusCode::OK, "{method} {uri}: {answer}");
        }
    };
    let turn = json!({"request_id": "t1", "session_id": "s1", "user_text": "hello"});
    send(Method::POST, "/v1/users/erin/turns", Some(turn)).await;
    let intent = json!({"user_id": "erin", "request_id": "w1", "intent_type": "trip",
        "fields": {"city": "Oslo"}});
    send(Method::POST, "/write", Some(intent)).await;
    send(Method::GET, "/chat/sessions?user_id=erin", None).await;
    send(Method::GET, "/chat/sessions/s1/memory?user_id=erin", None).await;
    send(Method::GET, "/recall?user_id=erin&intent_type=trip", None).await;
    send(
        Method::DELETE,
        "/chat/sessions/s1/memory?user_id=erin",
        None,
    )
    .await;
    // Another user's seed read is that user's, not erin's.
    send(Method::GET, "/chat/sessions?user_id=frank", None).await;
    let session = vec!["session_id=s1".to_owned()];
    let expected = vec![
        ("memory.search".to_owned(), 200, vec![]),
        ("memory.write".to_owned(), 200, vec![]),
        ("session.clear".to_owned(), 200, session.clone()),
        ("session.list".to_owned(), 200, vec![]),
        ("session.read".to_owned(), 200, session),
        ("turn.append".to_owned(), 200, vec![]),
    ];
    assert_eq!(trail_of(&app, "erin").await, expected);
    assert_eq!(
        trail_of(&app, "frank").await,
        [("session.list".to_owned(), 200, vec![])]
    );
}
