//! The HTTP/JSON gateway: the versioned API under `/v1`, the seed-compatible endpoints, the
//! OpenAPI document, health, readiness and metrics. Handlers only translate between JSON and
//! the user actors; every rule lives in `engram_actors`.
//!
//! Every request but health, readiness, metrics and the API document is authenticated by an
//! API key ([`crate::auth`]), whose tenant it acts for, and audited ([`crate::audit`]). Bodies are limited (413), requests beyond the in-flight limit are shed (503 with
//! Retry-After), and every response to bad input is a 400 naming what was wrong.

mod admin;
mod error;
#[cfg(test)]
mod fuzz;
pub(crate) mod openapi;
mod operations;
mod routes;
#[cfg(test)]
mod security_tests;
mod seed;
#[cfg(test)]
mod tests;
pub mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequest, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use engram_actors::front::{Ask, Reader, Users};
use engram_actors::placement::UserKey;
use engram_actors::user::check_id;
use serde::de::DeserializeOwned;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

pub use self::error::ApiError;
use crate::audit::AuditLog;
use crate::auth::{Authenticator, Caller};
use crate::metrics::NodeMetrics;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The front door to the user actors (this node's, and through peers every other's).
    pub users: Arc<Users>,
    /// Metrics.
    pub metrics: Arc<NodeMetrics>,
    /// Token budget of contexts that name none.
    pub token_budget: usize,
    /// Heartbeat age after which a member is presumed dead (for the cluster view).
    pub lease_timeout: std::time::Duration,
    /// The cluster transport (for the cluster view and its metrics).
    pub cluster: Option<Arc<crate::cluster::Transport>>,
    /// Largest body, in bytes (the audit trail reads a seed request's body whole).
    pub max_body_bytes: usize,
    /// Checks API keys.
    pub auth: Arc<Authenticator>,
    /// The audit trail.
    pub audit: Arc<AuditLog>,
}

impl AppState {
    /// Asks `request` of `user` through the front door, as `caller`.
    pub async fn ask<R: Ask>(
        &self,
        caller: &Caller,
        user: &UserKey,
        request: R,
    ) -> Result<R::Reply, ApiError> {
        let reader = Reader {
            principal: caller.principal.clone(),
            scope: caller.scope,
            tenant: caller.tenant.clone(),
        };
        Ok(self.users.ask(&reader, user, request).await?)
    }
}

/// Settings of the router.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest body, in bytes.
    pub max_body_bytes: usize,
    /// Requests served at once.
    pub max_in_flight: usize,
}

/// The gateway's router.
pub fn router(state: AppState, limits: Limits) -> Router {
    let api = Router::new()
        .route("/v1/users/{user}/turns", post(routes::append_turn))
        .route("/v1/users/{user}/feedback", post(routes::feedback))
        .route("/v1/users/{user}/context", post(routes::context))
        .route(
            "/v1/users/{user}/memories",
            post(routes::create_memory).get(routes::list_memories),
        )
        .route("/v1/users/{user}/memories/search", post(routes::search))
        .route(
            "/v1/users/{user}/memories/{memory_id}",
            put(routes::upsert_memory),
        )
        .route(
            "/v1/users/{user}/memories/{memory_id}/status",
            post(routes::set_status),
        )
        .route("/v1/users/{user}/sessions", get(routes::list_sessions))
        .route(
            "/v1/users/{user}/sessions/{session_id}/memory",
            get(routes::session_memory).delete(routes::clear_session),
        )
        .route("/v1/users/{user}/conflicts", get(routes::conflicts))
        .route("/v1/users/{user}", delete(routes::forget))
        .route("/chat/sessions", get(seed::sessions))
        .route(
            "/chat/sessions/{session_id}/memory",
            get(seed::session_memory).delete(seed::clear_session),
        )
        .route("/write", post(seed::write))
        .route("/recall", get(seed::recall))
        .route(
            "/v1/admin/users/{user}/approvals",
            post(admin::approve_sensitive_reads),
        )
        .route("/v1/admin/users/{user}/archive", get(admin::archive))
        .route("/v1/users/{user}/anchors/match", post(admin::match_anchor))
        .route(
            "/v1/admin/keys",
            post(admin::create_key).get(admin::list_keys),
        )
        .route("/v1/admin/keys/{key_id}/rotate", post(admin::rotate_key))
        .route("/v1/admin/keys/{key_id}", delete(admin::revoke_key))
        .route("/v1/admin/audit", get(admin::audit))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::audit::record,
        ))
        .layer(
            ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    |_: tower::BoxError| async { ApiError::overloaded() },
                ))
                .load_shed()
                .layer(GlobalConcurrencyLimitLayer::new(limits.max_in_flight)),
        );
    // Cluster operations are served by whichever node is asked (never forwarded), audited.
    let operations = Router::new()
        .route("/v1/cluster/status", get(operations::cluster_status))
        .route("/v1/cluster/drain", post(operations::drain))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::audit::record,
        ));
    Router::new()
        .merge(api)
        .merge(operations)
        .route("/health", get(operations::health))
        .route("/ready", get(operations::ready))
        .route("/metrics", get(operations::metrics))
        .route("/openapi.json", get(openapi::document))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::auth::authenticate,
        ))
        .fallback(|| async { ApiError::not_found("no such endpoint; see /openapi.json") })
        .layer(axum::extract::DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// The metric label of a request's method: one of the standard methods, else `other` (a
/// client may send any token as a method, and labels are kept forever).
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
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
async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
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

/// A JSON body whose rejections are 400s with a code.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "expected a request with `Content-Type: application/json`",
            ));
        }
        let body = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        rejection.body_text(),
                    )
                } else {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_json",
                        rejection.body_text(),
                    )
                }
            })?;
        error::decode_json(&body, "body").map(ApiJson)
    }
}

/// Whether the request says its body is JSON (`application/json`, or `application/*+json`).
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The user addressed by a request, checked.
pub fn user_key(caller: &Caller, user: &str) -> Result<UserKey, ApiError> {
    check_id("user_id", user)?;
    Ok(UserKey::new(caller.tenant.as_str(), user))
}

/// The address of a request's client, for any listener of socket addresses (plain TCP or
/// TLS); read by authentication for the audit trail.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);

impl
    axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>>
    for ClientAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        ClientAddr(*stream.remote_addr())
    }
}

impl
    axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, crate::tls::TlsListener>>
    for ClientAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, crate::tls::TlsListener>) -> Self {
        ClientAddr(*stream.remote_addr())
    }
}

/// Serves `router` on `listener` (plain TCP, or [`crate::tls::TlsListener`] for HTTPS) until
/// `shutdown` resolves, then lets in-flight requests finish (bounded by `grace`).
pub async fn serve<L>(
    listener: L,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
    ClientAddr: for<'a> axum::extract::connect_info::Connected<axum::serve::IncomingStream<'a, L>>,
{
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<ClientAddr>(),
        )
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stopped_tx.send(());
        })
        .await
    });
    tokio::select! {
        finished = &mut server => return finished.map_err(std::io::Error::other)?,
        _ = stopped_rx => {}
    }
    match tokio::time::timeout(grace, server).await {
        Ok(finished) => finished.map_err(std::io::Error::other)?,
        Err(_) => {
            tracing::warn!(
                ?grace,
                "in-flight requests did not finish within the grace period"
            );
            Ok(())
        }
    }
}

/// A page size: `limit`, or `default` when absent; 400 when it is 0 or above `max`.
pub fn page_limit(limit: Option<usize>, default: usize, max: usize) -> Result<usize, ApiError> {
    match limit.unwrap_or(default) {
        0 => Err(ApiError::invalid("invalid limit: must be at least 1")),
        n if n > max => Err(ApiError::invalid(format!("invalid limit: more than {max}"))),
        n => Ok(n),
    }
}

/// An optional JSON body: its default when empty, else decoded (400 naming `what` when it
/// does not decode).
pub fn optional_json<T: DeserializeOwned + Default>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    if body.is_empty() {
        return Ok(T::default());
    }
    error::decode_json(body, &format!("{what} body"))
}

/// 200 with a JSON body.
pub fn ok<T: serde::Serialize>(body: T) -> Response {
    (StatusCode::OK, Json(body)).into_response()
}
