//! Tenants, API keys, scopes, the audit trail and the circuit breaker of sensitive reads,
//! through a real node over TCP.
//!
//! - Tenant isolation: a key of tenant A drives every documented endpoint (checked against
//!   the served OpenAPI document) against tenant B's users, sessions, memories, intents and
//!   keys, and gets 403 or 404 (or, for reads of A's own namesake user, nothing of B's);
//!   B's state is unchanged afterwards, in full: memories, session turns, intents, keys
//!   (still listed the same and still valid), its shared sets (cached SQL, few-shot library,
//!   settings) and the breaker's count of B's sensitive reads.
//!   A's admin cannot make an operator key, and no key of A's reaches /v1/cluster.
//! - Keys: unauthenticated, unknown, revoked and rotated keys get 401; scopes open only their
//!   endpoints; keys are listed without secrets; the CLI manages keys in the store.
//! - Audit: reads, writes, refusals, key operations, approvals and forgetting are recorded
//!   with principal, user pseudonym, action, ids, client address and outcome.
//! - The breaker of sensitive reads and identity anchors, end to end with their audit
//!   entries: in `pii_limits.rs`.
//! - Rate limit: a key over its rate gets 429 (`rate_limited`); other keys keep theirs.

use engram_tests::harness::{HttpClient, Sandbox, node_binary};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

#[path = "security/isolation.rs"]
mod isolation;

async fn status(
    client: &HttpClient,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let reply = client.request(method, path, body).await.unwrap();
    (reply.status.as_u16(), reply.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_hashed_scoped_rotated_revoked_and_managed_from_the_cli() {
    let node = Sandbox::new().node("keys").start().await;
    let anonymous = node.client().without_key();
    let (code, _) = status(
        &anonymous,
        Method::POST,
        "/v1/users/u/context",
        Some(&json!({})),
    )
    .await;
    assert_eq!(code, 401, "no key");
    for probe in ["/health", "/ready", "/metrics", "/openapi.json"] {
        assert_eq!(
            anonymous.get(probe).await.unwrap().status,
            StatusCode::OK,
            "{probe}"
        );
    }
    let forged = node.client().with_key("egk_0000000000000000_nothing");
    let (code, _) = status(&forged, Method::GET, "/v1/users/u/memories", None).await;
    assert_eq!(code, 401, "an unknown key");

    let (gateway, gateway_id) = node.must_make_key("acme", "gateway", "acme-gateway").await;
    let (operator, operator_id) = node
        .must_make_key("acme", "operator", "acme-operator")
        .await;
    let (admin, _) = node.must_make_key("acme", "admin", "acme-admin").await;
    let g = node.client().with_key(&gateway);
    let o = node.client().with_key(&operator);
    let adm = node.client().with_key(&admin);
    assert_eq!(
        status(&g, Method::GET, "/v1/users/u/memories", None)
            .await
            .0,
        200
    );
    assert_eq!(
        status(&g, Method::GET, "/v1/cluster/status", None).await.0,
        403
    );
    assert_eq!(status(&g, Method::DELETE, "/v1/users/u", None).await.0, 403);
    assert_eq!(status(&g, Method::GET, "/v1/admin/keys", None).await.0, 403);
    assert_eq!(
        status(&o, Method::GET, "/v1/cluster/status", None).await.0,
        200
    );
    assert_eq!(
        status(&o, Method::GET, "/v1/users/u/memories", None)
            .await
            .0,
        403
    );
    assert_eq!(
        status(&adm, Method::GET, "/v1/cluster/status", None)
            .await
            .0,
        403
    );
    assert_eq!(
        status(&adm, Method::DELETE, "/v1/users/u", None).await.0,
        200
    );
    let trail = adm
        .must_get(&format!("/v1/admin/audit?principal={operator_id}"))
        .await;
    let actions: Vec<(String, u64)> = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["outcome"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("cluster.status".to_owned(), 200),
            ("memory.list".to_owned(), 403)
        ],
        "operations and refusals are audited"
    );

    // Listed without secrets; the store holds no secret either.
    let listed = adm.must_get("/v1/admin/keys").await;
    let text = listed.to_string();
    assert_eq!(listed["keys"].as_array().unwrap().len(), 3);
    for token in [&gateway, &operator, &admin] {
        let secret = token.rsplit('_').next().unwrap();
        assert!(!text.contains(secret), "a listing shows no secret");
        let db = std::fs::read(node.spec().sqlite_path()).unwrap();
        assert!(
            !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the store holds no secret"
        );
    }

    // Rotation: the new key works, the old one stops (no grace).
    let rotated = adm
        .request(
            Method::POST,
            &format!("/v1/admin/keys/{gateway_id}/rotate"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(rotated.status, StatusCode::CREATED, "{}", rotated.text());
    let new = rotated.json()["token"].as_str().unwrap().to_owned();
    assert_eq!(
        status(&g, Method::GET, "/v1/users/u/memories", None)
            .await
            .0,
        401
    );
    let g2 = node.client().with_key(&new);
    assert_eq!(
        status(&g2, Method::GET, "/v1/users/u/memories", None)
            .await
            .0,
        200
    );
    // Revocation.
    let new_id = rotated.json()["key_id"].as_str().unwrap().to_owned();
    adm.must(Method::DELETE, &format!("/v1/admin/keys/{new_id}"), None)
        .await;
    assert_eq!(
        status(&g2, Method::GET, "/v1/users/u/memories", None)
            .await
            .0,
        401
    );

    // The CLI works on the store: create, list (no secret), revoke.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(node_binary().unwrap())
            .arg("keys")
            .arg("--config")
            .arg(node.spec().config_path())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let token = cli(&[
        "create", "--tenant", "acme", "--scope", "gateway", "--name", "cli",
    ]);
    let token = token.trim();
    let c = node.client().with_key(token);
    assert_eq!(
        status(&c, Method::GET, "/v1/users/u/memories", None)
            .await
            .0,
        200
    );
    let id = token.split('_').nth(1).unwrap();
    let list = cli(&["list", "--tenant", "acme"]);
    assert!(list.contains(id) && !list.contains(token.rsplit('_').next().unwrap()));
    cli(&["revoke", id]);
    // Another node's cache may hold the row for 2 s; this node reads it again after that.
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    assert_eq!(
        status(&c, Method::GET, "/v1/users/u/memories", None)
            .await
            .0,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_its_rate_is_refused_with_429_and_others_keep_their_budget() {
    let node = Sandbox::new()
        .node("rate")
        .set("security.rate-limit", 2)
        .set("security.rate-burst", 5)
        .start()
        .await;
    let (gateway, _) = node.must_make_key("acme", "gateway", "acme-gateway").await;
    let g = node.client().with_key(&gateway);
    let mut codes = Vec::new();
    for _ in 0..8 {
        codes.push(g.get("/v1/users/u/sessions").await.unwrap());
    }
    let limited = codes
        .iter()
        .find(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .expect("a request over the rate is refused");
    assert_eq!(limited.json()["code"], "rate_limited");
    assert!(codes[..5].iter().all(|r| r.status == StatusCode::OK));
    // Another key has its own budget.
    let (other, _) = node.must_make_key("acme", "gateway", "acme-gateway").await;
    let o = node.client().with_key(&other);
    assert_eq!(
        o.get("/v1/users/u/sessions").await.unwrap().status,
        StatusCode::OK
    );
}
