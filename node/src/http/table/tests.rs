//! Unit tests of the route table: the OpenAPI document and the access rules it generates
//! hold exactly its routes, only the probes are public, and scopes open exactly their
//! endpoints. (That the router serves every route is checked over HTTP in `http/tests.rs`.)

use std::collections::BTreeSet;

use axum::http::Method;
use engram_storage::access::Scope;

use super::*;

/// The (method, path) pairs of the table.
fn routes_of(table: &[Route]) -> Vec<(Method, String)> {
    table
        .iter()
        .flat_map(Route::operations)
        .map(|(method, path, _)| (method, path.to_owned()))
        .collect()
}

/// The (method, path) pairs the document describes.
fn documented(doc: &OpenApi) -> Vec<(Method, String)> {
    let mut found = Vec::new();
    for (path, item) in &doc.paths.paths {
        let methods = [
            (Method::GET, item.get.is_some()),
            (Method::PUT, item.put.is_some()),
            (Method::POST, item.post.is_some()),
            (Method::DELETE, item.delete.is_some()),
            (Method::OPTIONS, item.options.is_some()),
            (Method::HEAD, item.head.is_some()),
            (Method::PATCH, item.patch.is_some()),
            (Method::TRACE, item.trace.is_some()),
        ];
        for (method, present) in methods {
            if present {
                found.push((method, path.clone()));
            }
        }
    }
    found
}

#[test]
fn the_document_describes_exactly_the_routes_of_the_table_each_with_its_operation() {
    let table = table();
    let doc = document(&table);
    let routes = routes_of(&table);
    let unique: BTreeSet<_> = routes.iter().map(|(m, p)| (m.to_string(), p)).collect();
    assert_eq!(unique.len(), routes.len(), "a route is in the table twice");
    assert!(routes.len() >= 31, "{routes:?}");
    let mut documented = documented(&doc);
    let mut expected = routes.clone();
    let key = |(m, p): &(Method, String)| (p.clone(), m.to_string());
    documented.sort_by_key(key);
    expected.sort_by_key(key);
    assert_eq!(documented, expected, "the document and the table differ");
    // Each operation is the one its handler's annotation documents.
    for route in &table {
        for (method, path, operation) in route.operations() {
            let item = &doc.paths.paths[path];
            let served = match method.as_str() {
                "GET" => &item.get,
                "PUT" => &item.put,
                "POST" => &item.post,
                "DELETE" => &item.delete,
                "PATCH" => &item.patch,
                other => panic!("{other} {path}: a method the gateway does not use"),
            };
            assert!(
                served.as_ref() == Some(operation),
                "{method} {path}: the document holds another operation"
            );
            assert!(
                operation.tags.as_ref().is_some_and(|t| !t.is_empty()),
                "{method} {path} has no tag"
            );
        }
    }
    assert!(
        !doc.paths.paths.contains_key(DOCUMENT),
        "the document does not describe itself"
    );
}

#[test]
fn every_route_has_its_rule_and_only_probes_are_public() {
    let table = table();
    let rules = Rules::of(&table);
    let mut public = Vec::new();
    for route in &table {
        for (method, path, _) in route.operations() {
            let rule = rules
                .get(&method, path)
                .unwrap_or_else(|| panic!("{method} {path} has no rule"));
            assert_eq!(rule, route.rule, "{method} {path}");
            if rule.access == Access::Public {
                assert_eq!(rule.action, None, "{method} {path} is public and audited");
                public.push(path.to_owned());
            } else {
                assert!(rule.action.is_some(), "{method} {path} is not audited");
            }
        }
    }
    public.sort();
    assert_eq!(public, ["/health", "/metrics", "/ready"]);
    // Beside the table: the document and the console's files, public and not audited.
    for path in std::iter::once(DOCUMENT).chain(console::PATHS) {
        let rule = rules.get(&Method::GET, path);
        assert_eq!(
            rule.map(|r| (r.access, r.action)),
            Some((Access::Public, None)),
            "{path}"
        );
    }
    assert_eq!(rules.get(&Method::GET, "/v1/not-a-route"), None);
    assert_eq!(
        rules.get(&Method::PATCH, "/v1/users/{user}/memories"),
        None,
        "a method the route does not serve has no rule"
    );
}

#[test]
fn seed_endpoints_share_the_actions_of_their_v1_twins() {
    let rules = Rules::of(&table());
    let action = |method: Method, path: &str| rules.get(&method, path).and_then(|r| r.action);
    for (method, seed, v1) in [
        (Method::GET, "/chat/sessions", "/v1/users/{user}/sessions"),
        (
            Method::GET,
            "/chat/sessions/{session_id}/memory",
            "/v1/users/{user}/sessions/{session_id}/memory",
        ),
        (
            Method::DELETE,
            "/chat/sessions/{session_id}/memory",
            "/v1/users/{user}/sessions/{session_id}/memory",
        ),
    ] {
        assert!(action(method.clone(), seed).is_some(), "{method} {seed}");
        assert_eq!(action(method.clone(), seed), action(method, v1), "{seed}");
    }
    assert_eq!(action(Method::POST, "/write"), Some("memory.write"));
    assert_eq!(action(Method::GET, "/recall"), Some("memory.search"));
}

#[test]
fn scopes_open_exactly_their_endpoints() {
    let rules = Rules::of(&table());
    let access = |method: Method, path: &str| rules.get(&method, path).unwrap().access;
    let forget = access(Method::DELETE, "/v1/users/{user}");
    let context = access(Method::POST, "/v1/users/{user}/context");
    let drain = access(Method::POST, "/v1/cluster/drain");
    let keys = access(Method::POST, "/v1/admin/keys");
    assert!(context.allows(Scope::Gateway, false));
    assert!(context.allows(Scope::Admin, false));
    assert!(!context.allows(Scope::Operator, false));
    assert!(
        !forget.allows(Scope::Gateway, false),
        "a gateway cannot forget"
    );
    assert!(forget.allows(Scope::Admin, false));
    assert!(drain.allows(Scope::Operator, false));
    assert!(
        !drain.allows(Scope::Admin, false),
        "a tenant's admin cannot drain nodes"
    );
    assert!(drain.allows(Scope::Admin, true), "the root can");
    assert!(!keys.allows(Scope::Gateway, false));
    assert!(!keys.allows(Scope::Operator, false));
}
