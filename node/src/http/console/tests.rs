//! In-process tests of the web console without a browser: its files are served without a
//! key, with their types and the security headers, and reference nothing outside the node;
//! the script never puts data through HTML parsing; and the API it needs beyond the user
//! endpoints (the tenant's users, the audit trail filtered by action) answers admins only,
//! pages, and is audited. (The page driven in Chromium: `tests/tests/console.rs`.)

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{CSP, HTML, JS, PATHS};
use crate::http::tests::{GATEWAY_KEY, ROOT_KEY, app, send_as};

/// `GET path` with no key: the status, headers and body.
async fn fetch(app: &Router, path: &str) -> (StatusCode, HeaderMap, String) {
    let request = Request::builder()
        .method(Method::GET)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = to_bytes(body, 1024 * 1024).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_without_a_key_with_strict_security_headers() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    for (path, content_type, marker) in [
        ("/console", "text/html; charset=utf-8", "<!doctype html>"),
        (
            "/console/app.js",
            "text/javascript; charset=utf-8",
            "\"use strict\"",
        ),
        ("/console/app.css", "text/css; charset=utf-8", ":root"),
    ] {
        let (status, headers, body) = fetch(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert!(body.contains(marker), "{path}");
        let header = |name: &str| {
            headers
                .get(name)
                .unwrap_or_else(|| panic!("{path} has no {name}"))
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(header("content-type"), content_type, "{path}");
        assert_eq!(header("content-security-policy"), CSP, "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("cache-control"), "no-store", "{path}");
        assert!(headers.get("set-cookie").is_none(), "{path} sets no cookie");
    }
    // The policy: only this origin's script, styles and API; nothing inline, no framing.
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'none'",
        "base-uri 'none'",
    ] {
        assert!(CSP.contains(directive), "{directive}");
    }
    assert!(!CSP.contains("unsafe"), "no unsafe-inline or unsafe-eval");
    // Other paths under /console are not served, and the page needs no rule but its own.
    let (status, _, _) = fetch(&app, "/console/other.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let rules = crate::http::rules::Rules::of(&crate::http::table::table());
    for path in PATHS {
        let rule = rules.get(&Method::GET, path).unwrap();
        assert_eq!(
            (rule.access, rule.action),
            (crate::auth::Access::Public, None)
        );
        assert_eq!(
            rules.get(&Method::POST, path),
            None,
            "only GET is served: {path}"
        );
    }
}

#[test]
fn the_console_references_nothing_outside_the_node_and_builds_no_html_from_data() {
    let files = [
        ("index.html", HTML),
        ("app.js", JS),
        ("app.css", super::CSS),
    ];
    for (name, text) in files {
        let lower = text.to_lowercase();
        for external in [
            "http:",
            "https:",
            "//cdn",
            "src=\"//",
            "href=\"//",
            "@import",
            "url(",
        ] {
            assert!(!lower.contains(external), "{name} references {external}");
        }
    }
    // The page loads exactly its own two files, and has nothing inline that the policy would
    // block (scripts, handlers, style attributes).
    let html = HTML.to_lowercase();
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("<script src=\"/console/app.js\" defer></script>"));
    assert!(html.contains("<link rel=\"stylesheet\" href=\"/console/app.css\">"));
    assert!(!html.contains("<style"), "no inline style sheet");
    assert!(!html.contains(" style="), "no style attribute");
    let handler = html.split(" on").skip(1).any(|rest| {
        let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
        !name.is_empty() && rest[name.len()..].starts_with('=')
    });
    assert!(!handler, "no inline event handler");
    // The key input has no name, so no form submission could carry it.
    assert!(html.contains("<input id=\"key\" type=\"password\""));
    assert!(
        html.split("<input").skip(1).all(|tag| {
            let tag = tag.split('>').next().unwrap_or_default();
            !tag.contains(" name=")
        }),
        "no named input"
    );
    // The script renders with DOM calls and text nodes only, and keeps the key out of URLs
    // and cookies.
    for sink in [
        "innerhtml",
        "outerhtml",
        "insertadjacenthtml",
        "document.write",
        "eval(",
        "new function",
        "document.cookie",
        "localstorage",
    ] {
        assert!(!JS.to_lowercase().contains(sink), "app.js uses {sink}");
    }
    assert!(JS.contains("sessionStorage.setItem(KEY, key)"));
}

/// The user ids of a page of `GET /v1/admin/users`, and its cursor.
fn users_of(page: &Value) -> (Vec<String>, Option<String>) {
    let users = page["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["user_id"].as_str().unwrap().to_owned())
        .collect();
    (users, page["next_after"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_list_is_for_admins_of_the_tenant_paged_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    for user in ["carol", "alice", "bob"] {
        let body = json!({"request_id": format!("t-{user}"), "session_id": "s1",
                          "user_text": "show the orders", "assistant_text": "ok"});
        let (status, reply) = send_as(
            &app,
            GATEWAY_KEY,
            Method::POST,
            &format!("/v1/users/{user}/turns"),
            Some(Body::from(body.to_string())),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{reply}");
    }
    let get = |key: &'static str, uri: String| {
        let app = app.clone();
        async move { send_as(&app, key, Method::GET, &uri, None).await }
    };

    let (status, page) = get(ROOT_KEY, "/v1/admin/users".into()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        users_of(&page),
        (vec!["alice".into(), "bob".into(), "carol".into()], None)
    );
    let (_, first) = get(ROOT_KEY, "/v1/admin/users?limit=2".into()).await;
    assert_eq!(
        users_of(&first),
        (vec!["alice".into(), "bob".into()], Some("bob".into()))
    );
    let (_, second) = get(ROOT_KEY, "/v1/admin/users?limit=2&after=bob".into()).await;
    assert_eq!(users_of(&second), (vec!["carol".into()], None));
    // Another tenant's admin (the root naming it) sees none of these users.
    let request = Request::builder()
        .method(Method::GET)
        .uri("/v1/admin/users")
        .header("authorization", format!("Bearer {ROOT_KEY}"))
        .header("x-engram-tenant", "someone-else")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = to_bytes(response.into_body(), 1024 * 1024).await.unwrap();
    let page: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(users_of(&page), (vec![], None));

    // Admins only; bad input is named.
    let (status, body) = get(GATEWAY_KEY, "/v1/admin/users".into()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    for bad in ["limit=0", "limit=1001", "after=", "colour=red"] {
        let (status, body) = get(ROOT_KEY, format!("/v1/admin/users?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    // Audited as user.list, the gateway's refusal included; the action filter finds them.
    let (status, trail) = get(ROOT_KEY, "/v1/admin/audit?action=user.list".into()).await;
    assert_eq!(status, StatusCode::OK, "{trail}");
    let entries = trail["entries"].as_array().unwrap();
    assert!(
        entries.iter().all(|e| e["action"] == "user.list"),
        "{trail}"
    );
    let outcomes: Vec<_> = entries
        .iter()
        .map(|e| e["outcome"].as_u64().unwrap())
        .collect();
    assert!(
        outcomes.contains(&200) && outcomes.contains(&403),
        "{outcomes:?}"
    );
    let (_, turns) = get(ROOT_KEY, "/v1/admin/audit?action=turn.append".into()).await;
    assert_eq!(turns["entries"].as_array().unwrap().len(), 3, "{turns}");
}
