//! The authentication middleware: finds the route's rule in the route table, checks the
//! bearer token, the tenant and the key's rate, and puts the [`Caller`] on the request (and
//! the extractor that hands it to handlers). What keys and scopes are is [`crate::auth`]'s;
//! this module only reads the request and answers refusals.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::{Access, Checked, DEFAULT_TENANT, Denied, TENANT_HEADER};
use crate::caller::Caller;
use crate::http::rules::Rules;
use crate::http::{ApiError, AppState, ClientAddr};

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this endpoint needs an API key",
            )
        })
    }
}

fn unauthenticated(message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

/// 429 `rate_limited` with Retry-After (whole seconds, at least 1).
fn rate_limited(message: &str, wait: Duration) -> Response {
    let mut response =
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message).into_response();
    let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
        .max(1)
        .to_string();
    if let Ok(value) = header::HeaderValue::from_str(&secs) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// The middleware: finds the route's rule (a route without one is refused), authenticates
/// the bearer token, checks the scope and the tenant, applies the key's rate limit, and puts
/// the [`Caller`] on the request. (No request reaches a router from a peer: peers ask the
/// front door, whose user actor checks the reader's tenant and scope itself.)
pub async fn authenticate(
    State((s, rules)): State<(AppState, Arc<Rules>)>,
    mut request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let Some(rule) = rules.get(request.method(), &route) else {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this endpoint has no access rule",
        )
        .into_response();
    };
    if rule.access == Access::Public {
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = token else {
        s.metrics.auth_refused("missing");
        return unauthenticated("send an API key: Authorization: Bearer <key>");
    };
    let now = s.admin.now();
    let address = request
        .extensions()
        .get::<ConnectInfo<ClientAddr>>()
        .map(|ConnectInfo(addr)| addr.0.ip().to_string());
    let credential = Some(engram_actors::front::Credential::new(token));
    let Checked {
        principal,
        tenant: key_tenant,
        scope,
        operates_cluster,
    } = match s
        .auth
        .check(token, now, address.as_deref().unwrap_or("unknown"))
        .await
    {
        Ok(found) => found,
        Err(Denied::Invalid) => {
            s.metrics.auth_refused("invalid");
            return unauthenticated("the API key is unknown, revoked or expired");
        }
        Err(Denied::Limited(wait)) => {
            s.metrics.auth_refused("lookup_rate");
            return rate_limited(
                "this address looked up too many unknown keys \
                 (security.key-lookup-rate); retry after the delay",
                wait,
            );
        }
    };
    let root = key_tenant.is_none();
    let named = match request.headers().get(TENANT_HEADER).map(|v| v.to_str()) {
        None => None,
        Some(Ok(t)) => Some(t.to_owned()),
        Some(Err(_)) => {
            return ApiError::invalid(format!("invalid {TENANT_HEADER}: not visible ASCII"))
                .into_response();
        }
    };
    let tenant = match (key_tenant, named) {
        (Some(own), Some(named)) if own != named => {
            s.metrics.auth_refused("tenant");
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "wrong_tenant",
                "this key acts for another tenant",
            )
            .into_response();
        }
        (Some(own), Some(_) | None) => own,
        (None, Some(named)) => named,
        (None, None) => DEFAULT_TENANT.to_owned(),
    };
    if let Err(err) = engram_actors::user::check_id("tenant", &tenant) {
        return ApiError::from(err).into_response();
    }
    if let Err(wait) = s.auth.limiter.take(&principal) {
        s.metrics.auth_refused("rate");
        return rate_limited(
            "this key is over its request rate (security.rate-limit); retry after the delay",
            wait,
        );
    }
    let client = request
        .extensions()
        .get::<ConnectInfo<ClientAddr>>()
        .map(|ConnectInfo(addr)| addr.0.to_string());
    let caller = Caller {
        principal,
        scope,
        root,
        tenant,
        client,
        audited: Default::default(),
        credential,
    };
    let refused = if !rule.access.allows(caller.scope, caller.root) {
        Some(format!(
            "a {} key may not use this endpoint",
            caller.scope.as_str()
        ))
    } else if rule.access == Access::Operator && !operates_cluster {
        Some(
            "this operator key was made by a tenant's admin: cluster operations take the root \
             key or an operator key made by it or by `engram-node keys create`"
                .to_owned(),
        )
    } else {
        None
    };
    if let Some(message) = refused {
        s.metrics.auth_refused("scope");
        let refusal = ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response();
        super::audit::record_refusal(&s, &caller, rule.action, refusal.status()).await;
        return refusal;
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}
