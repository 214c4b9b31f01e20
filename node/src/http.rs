//! The HTTP/JSON gateway: the versioned API under `/v1`, the seed-compatible endpoints, the
//! OpenAPI document, health, readiness and metrics. Handlers only translate between JSON and
//! the user actors; every rule lives in `engram_actors`.
//!
//! The tenant comes from the `x-engram-tenant` header (`default` when absent) until API keys
//! carry it. Bodies are limited (413), requests beyond the in-flight limit are shed (503 with
//! Retry-After), and every response to bad input is a 400 naming what was wrong.

mod error;
mod forward;
#[cfg(test)]
mod fuzz;
mod openapi;
mod routes;
mod seed;
#[cfg(test)]
mod tests;
pub mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use engram_actors::directory::Directory;
use engram_actors::placement::UserKey;
use engram_actors::user::check_id;
use serde::de::DeserializeOwned;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

pub use self::error::ApiError;
use crate::metrics::NodeMetrics;

/// Header naming the tenant of a request.
pub const TENANT_HEADER: &str = "x-engram-tenant";
/// Tenant of requests that name none.
pub const DEFAULT_TENANT: &str = "default";

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The node's user actors.
    pub directory: Arc<Directory>,
    /// Metrics.
    pub metrics: Arc<NodeMetrics>,
    /// Token budget of contexts that name none.
    pub token_budget: usize,
    /// Heartbeat age after which a member is presumed dead (for the cluster view).
    pub lease_timeout: std::time::Duration,
    /// The cluster transport, to forward requests for users this node does not own.
    pub cluster: Option<Arc<crate::cluster::Transport>>,
    /// How long a request for a moving shard waits for an owner before 503.
    pub handoff_wait: Duration,
    /// Largest body, in bytes (forwarded requests are read whole).
    pub max_body_bytes: usize,
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
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            forward::to_owner,
        ))
        .layer(
            ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    |_: tower::BoxError| async { ApiError::overloaded() },
                ))
                .load_shed()
                .layer(GlobalConcurrencyLimitLayer::new(limits.max_in_flight)),
        );
    Router::new()
        .merge(api)
        .route("/health", get(routes::health))
        .route("/ready", get(routes::ready))
        .route("/metrics", get(routes::metrics))
        .route("/v1/cluster/status", get(routes::cluster_status))
        .route("/v1/cluster/drain", post(routes::drain))
        .route("/openapi.json", get(openapi::document))
        .fallback(|| async { ApiError::not_found("no such endpoint; see /openapi.json") })
        .layer(axum::extract::DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// Records count and latency of every request by route template (never by user).
async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let in_flight = state.metrics.started(&method, &route);
    let response = next.run(request).await;
    drop(in_flight);
    state.metrics.request(
        &method,
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
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(ApiJson(value))
    }
}

/// The tenant of a request, from its header.
pub struct Tenant(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let tenant = match parts.headers.get(TENANT_HEADER) {
            None => DEFAULT_TENANT.to_owned(),
            Some(value) => value
                .to_str()
                .map_err(|_| {
                    ApiError::invalid(format!("invalid {TENANT_HEADER}: not visible ASCII"))
                })?
                .to_owned(),
        };
        check_id("tenant", &tenant)?;
        Ok(Tenant(tenant))
    }
}

/// The user addressed by a request, checked.
pub fn user_key(tenant: Tenant, user: &str) -> Result<UserKey, ApiError> {
    check_id("user_id", user)?;
    Ok(UserKey::new(tenant.0, user))
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
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        axum::serve(listener, router)
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

/// 200 with a JSON body.
pub fn ok<T: serde::Serialize>(body: T) -> Response {
    (StatusCode::OK, Json(body)).into_response()
}
