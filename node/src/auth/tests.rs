//! Unit tests of tokens, the access table and the rate limiter.

use std::str::FromStr;

use utoipa::OpenApi;

use super::*;

#[test]
fn tokens_parse_only_in_their_format_and_fresh_ones_differ() {
    assert_eq!(parse_token("egk_abc_def"), Some(("abc", "def")));
    assert_eq!(parse_token("egk_abc_de_f"), Some(("abc", "de_f")));
    for bad in ["", "egk_", "egk__x", "egk_x_", "abc_def", "Bearer egk_a_b"] {
        assert_eq!(parse_token(bad), None, "{bad:?}");
    }
    let (id, secret, token) = fresh_token();
    assert_eq!(parse_token(&token), Some((id.as_str(), secret.as_str())));
    assert_eq!(secret.len(), 64, "256 bits of secret");
    assert_ne!(fresh_token().2, token);
}

#[test]
fn every_documented_operation_has_an_access_rule_and_only_probes_are_public() {
    let doc = crate::http::openapi::ApiDoc::openapi();
    let mut public = Vec::new();
    for (path, item) in &doc.paths.paths {
        let methods = [
            ("GET", item.get.is_some()),
            ("POST", item.post.is_some()),
            ("PUT", item.put.is_some()),
            ("DELETE", item.delete.is_some()),
        ];
        for (method, present) in methods {
            if !present {
                continue;
            }
            let method = Method::from_str(method).unwrap();
            let (access, action) =
                rule(&method, path).unwrap_or_else(|| panic!("{method} {path} has no rule"));
            if access == Access::Public {
                public.push(path.clone());
            } else {
                assert!(action.is_some(), "{method} {path} is not audited");
            }
        }
    }
    public.sort();
    assert_eq!(public, ["/health", "/metrics", "/ready"]);
    assert_eq!(
        rule(&Method::GET, "/openapi.json").map(|r| r.0),
        Some(Access::Public)
    );
    assert_eq!(rule(&Method::GET, "/v1/not-a-route"), None);
}

#[test]
fn scopes_open_exactly_their_endpoints() {
    let forget = rule(&Method::DELETE, "/v1/users/{user}").unwrap().0;
    let context = rule(&Method::POST, "/v1/users/{user}/context").unwrap().0;
    let drain = rule(&Method::POST, "/v1/cluster/drain").unwrap().0;
    let keys = rule(&Method::POST, "/v1/admin/keys").unwrap().0;
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

#[test]
fn the_rate_limiter_allows_the_burst_then_refuses_with_a_wait() {
    let limiter = RateLimiter::new(10, 20);
    for _ in 0..20 {
        assert!(limiter.take("a").is_ok());
    }
    let wait = limiter.take("a").unwrap_err();
    assert!(wait <= Duration::from_millis(100), "{wait:?}");
    assert!(limiter.take("b").is_ok(), "buckets are per key");
    let unlimited = RateLimiter::new(0, 0);
    assert!((0..10_000).all(|_| unlimited.take("a").is_ok()));
}
