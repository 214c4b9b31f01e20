//! The request metrics middleware: count, latency and in-flight requests by method and route
//! template. It labels by nothing a client chooses and never by user; the metrics themselves
//! live in [`crate::metrics`].

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::http::AppState;

/// The metric label of a request's method: one of the standard methods, else `other` (a
/// client may send any token as a method, and labels are kept forever).
fn method_label(method: &Method) -> &'static str {
    const KNOWN: [(Method, &str); 9] = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::PATCH, "PATCH"),
        (Method::TRACE, "TRACE"),
        (Method::CONNECT, "CONNECT"),
    ];
    KNOWN
        .iter()
        .find(|(known, _)| known == method)
        .map_or("other", |(_, label)| label)
}

/// The route label of a path no route matched.
const UNMATCHED: &str = "unmatched";

/// Records count and latency of every request by method and route template (never by user,
/// and never by a string the client chose: unknown methods are `other`, unmatched paths
/// `unmatched`, so unauthenticated requests cannot grow the label sets).
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, |p| p.as_str())
        .to_owned();
    let in_flight = state.metrics.started(method, &route);
    let response = next.run(request).await;
    drop(in_flight);
    state.metrics.request(
        method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}
