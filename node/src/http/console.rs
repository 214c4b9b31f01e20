//! The web console: one HTML page, one script and one style sheet, compiled into the binary
//! and served at `/console` (public: loading the page needs no key). The page signs in with
//! an API key typed into it, kept in the tab's `sessionStorage` (never in a URL or a cookie),
//! and calls the documented JSON API with `Authorization: Bearer <key>`, so scopes, masking
//! of personal data, rate limits and the audit trail apply to it as to any client.
//!
//! Every answer carries a Content-Security-Policy that allows the page's own script, styles
//! and API calls and nothing else (no inline script, no other origin, no framing, no form
//! submission), and headers that forbid framing, referrers and content sniffing.
//!
//! This module serves bytes; it reads no data, and knows nothing of what the page shows.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;

/// The page.
pub const PAGE: &str = "/console";
/// The page's script.
pub const SCRIPT: &str = "/console/app.js";
/// The page's style sheet.
pub const STYLE: &str = "/console/app.css";
/// Every path the console serves (public, not audited, not in the API document).
pub const PATHS: [&str; 3] = [PAGE, SCRIPT, STYLE];

const HTML: &str = include_str!("console/index.html");
const JS: &str = include_str!("console/app.js");
const CSS: &str = include_str!("console/app.css");

/// The Content-Security-Policy of every console answer: the page's own script, styles and
/// API (same origin) only; nothing inline, no plugins, frames, forms or base URL changes.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                       img-src 'self'; connect-src 'self'; form-action 'none'; \
                       frame-ancestors 'none'; base-uri 'none'";

/// The routes of the console.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            PAGE,
            get(|| async { asset("text/html; charset=utf-8", HTML) }),
        )
        .route(
            SCRIPT,
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .route(
            STYLE,
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
}

/// A console file with its type and the security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 7] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ];
    (headers, body).into_response()
}

#[cfg(test)]
mod tests;
