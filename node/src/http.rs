//! The HTTP/JSON gateway: the versioned API under `/v1`, the seed-compatible endpoints, the
//! OpenAPI document, health, readiness and metrics, and the web console's files
//! ([`console`]). Handlers only translate between JSON and the user actors; every rule lives
//! in `engram_actors`.
//!
//! Every route is written once, in the route table ([`table`]), which generates the router,
//! the access rules, the audit actions and the OpenAPI document; the middleware lives in
//! [`middleware`]. Every request but health, readiness, metrics, the API document and the
//! console's files is authenticated by an API key ([`crate::auth`]), whose tenant it acts
//! for, and audited ([`crate::audit`]). Bodies are limited (413), requests beyond the
//! in-flight limit are shed (503 with Retry-After), and every response to bad input is a 400
//! naming what was wrong.

mod admin;
mod console;
mod error;
#[cfg(test)]
mod fidelity_tests;
#[cfg(test)]
mod fuzz;
mod metadata;
pub mod middleware;
mod openapi;
mod operations;
mod routes;
mod rules;
#[cfg(test)]
mod security_tests;
mod seed;
mod server;
mod shared;
pub mod table;
#[cfg(test)]
mod tests;
pub mod wire;

pub use server::serve;

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use engram_actors::admin::Admin;
use engram_actors::front::{Ask, Reader, Users};
use engram_actors::placement::UserKey;
use engram_actors::user::check_id;
use serde::de::DeserializeOwned;

pub use self::error::{ApiError, ErrorBody};
use crate::audit::AuditLog;
use crate::auth::Authenticator;
use crate::caller::Caller;
use crate::metrics::NodeMetrics;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The front door to the user actors (this node's, and through peers every other's).
    pub users: Arc<Users>,
    /// The admin's and operator's handle (keys, users, audit trail, the cluster's state).
    pub admin: Admin,
    /// Metrics.
    pub metrics: Arc<NodeMetrics>,
    /// Token budget of contexts that name none.
    pub token_budget: usize,
    /// Heartbeat age after which a member is presumed dead (for the cluster view).
    pub lease_timeout: std::time::Duration,
    /// The cluster transport (for the cluster view and its metrics).
    pub cluster: Option<Arc<crate::cluster::Transport>>,
    /// Checks API keys.
    pub auth: Arc<Authenticator>,
    /// The audit trail.
    pub audit: Arc<AuditLog>,
    /// Finds the entities a listed memory mentions (the memory actors' own extractor).
    pub extractor: Arc<engram_actors::model::entities::EntityExtractor>,
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
        Ok(self
            .users
            .ask_as(&reader, caller.credential.as_ref(), user, request)
            .await?)
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

/// The gateway's router, generated from the route table ([`table`]).
pub fn router(state: AppState, limits: Limits) -> Router {
    table::router(table::table(), state, limits)
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

/// The user addressed by a request, checked. It is the user the request's audit entry names
/// (every handler that asks about a user names it here, wherever the request carries it: the
/// path, or the seed API's query string or body).
pub fn user_key(caller: &Caller, user: &str) -> Result<UserKey, ApiError> {
    caller.audited.set(user);
    check_id("user_id", user)?;
    Ok(UserKey::new(caller.tenant.as_str(), user))
}

/// The address of a request's client, for any listener of socket addresses (plain TCP or
/// TLS); read by authentication for the audit trail.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);

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
