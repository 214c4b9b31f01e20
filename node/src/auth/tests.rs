//! Unit tests of tokens and the rate limiter.

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
